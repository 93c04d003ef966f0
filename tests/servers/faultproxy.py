#!/usr/bin/env python3
"""tests/servers/faultproxy.py - a fault-injecting HTTP/1.1 proxy for the
remote byte source's tests (tests/servers.c starts it; stdlib only).

  faultproxy.py --port PORT --upstream HOST:PORT [--mode MODE] [--control FILE]

The client talks to the proxy as if it were the server (the endpoint URL
names the proxy); each request is forwarded byte for byte, its Host,
Range and Authorization headers unchanged, so a SigV4 signature made for
the proxy's address still verifies upstream. MODE is a comma-separated list:

  pass          forward (the default)
  delay=MS      sleep MS before forwarding each request
  503=K         answer the first K requests 503 with S3's SlowDown body
  503every=N    answer every Nth request (N, 2N, ...) 503
  reset=K       the first K requests: send half the body, then reset (RST)
  short=K       the first K requests: send half the body, then close (FIN)
  503path=TEXT  answer 503 (SlowDown) to every request whose path ends with TEXT
                (an object that stays unreachable)
  redirect      answer each request (after its delay) with a 307 to the same
                path on the upstream: the body then flows from the upstream
                to the client without passing through this process, so
                delay=MS,redirect adds MS of latency per request at almost no
                CPU (perf/remote-read; not for signed S3 requests)
  503get=TEXT   the same for GET requests only (HEAD answers: reachable at open,
                its reads fail)

Requests are counted from 1 across connections. --control FILE: when the
file exists its content replaces MODE (checked at each request; the counter
restarts when it changes). One thread per client connection; one upstream
connection per client connection, kept alive while both sides allow it.
"""
import argparse
import os
import socket
import socketserver
import struct
import sys
import threading
import time

BUF = 1 << 20
SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


class Faults:
    def __init__(self, mode, control):
        self.lock = threading.Lock()
        self.control = control
        self.text = None
        self.count = 0
        self.set(mode)

    def set(self, text):
        self.text = text
        self.count = 0
        self.opts = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            k, _, v = part.partition("=")
            self.opts[k] = v if k in ("503path", "503get") else int(v) if v else 1

    def next(self, path=b"", method=b"GET"):
        """The faults for the next request (to path): (delay_ms, action) with
        action one of pass, 503, reset, short."""
        with self.lock:
            if self.control and os.path.exists(self.control):
                with open(self.control) as f:
                    t = f.read().strip()
                if t != self.text:
                    self.set(t)
            self.count += 1
            n, o = self.count, self.opts
            act = "pass"
            dead = o.get("503path") or (o.get("503get") if method == b"GET" else None)
            if (n <= o.get("503", 0) or (o.get("503every") and n % o["503every"] == 0) or
                    (dead and path.endswith(dead.encode()))):
                act = "503"
            elif n <= o.get("reset", 0):
                act = "reset"
            elif n <= o.get("short", 0):
                act = "short"
            return o.get("delay", 0), act


def read_head(sock, buf):
    """(head bytes, rest) from sock, buf holding what was already read;
    (None, buf) at EOF before a complete head."""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(BUF)
        if not d:
            return None, buf
        buf += d
    i = buf.index(b"\r\n\r\n") + 4
    return buf[:i], buf[i:]


def header(head, name):
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name:
            return v.strip()
    return None


class Handler(socketserver.BaseRequestHandler):
    pipe = None

    def handle(self):
        c = self.request
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up = None
        cbuf = b""
        try:
            while True:
                head, cbuf = read_head(c, cbuf)
                if head is None:
                    return
                method = head.split(b" ", 1)[0].upper()
                blen = int(header(head, b"content-length") or 0)
                while len(cbuf) < blen:
                    d = c.recv(BUF)
                    if not d:
                        return
                    cbuf += d
                body, cbuf = cbuf[:blen], cbuf[blen:]
                parts = head.split(b" ", 2)
                delay, act = self.server.faults.next(parts[1] if len(parts) > 1 else b"", method)
                if delay:
                    time.sleep(delay / 1000.0)
                if act == "pass" and self.server.faults.opts.get("redirect"):
                    loc = b"http://%s:%d" % (self.server.upstream[0].encode(),
                                             self.server.upstream[1]) + parts[1]
                    c.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: " + loc +
                              b"\r\nContent-Length: 0\r\n\r\n")
                    continue
                if act == "503":
                    c.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(SLOWDOWN) + SLOWDOWN)
                    continue
                if up is None:
                    up = socket.create_connection(self.server.upstream)
                    up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                up.sendall(head + body)
                if not self.relay(c, up, method, act):
                    return
                if act != "pass":
                    return
        except (ConnectionError, OSError):
            return
        finally:
            if up is not None:
                up.close()
            if self.pipe is not None:
                os.close(self.pipe[0])
                os.close(self.pipe[1])

    def relay(self, c, up, method, act):
        """Forward one response; False when the connection must close."""
        rhead, ubuf = read_head(up, b"")
        if rhead is None:
            return False
        status = int(rhead.split(b" ", 2)[1])
        while 100 <= status < 200:
            # an interim answer (100 Continue to a PUT's Expect): the body
            # was sent with the head already; the final answer follows
            rhead, ubuf = read_head(up, ubuf)
            if rhead is None:
                return False
            status = int(rhead.split(b" ", 2)[1])
        clen = header(rhead, b"content-length")
        close = (header(rhead, b"connection") or b"").lower() == b"close"
        if method == b"HEAD" or status in (204, 304) or 100 <= status < 200:
            total = 0
        elif clen is not None:
            total = int(clen)
        else:
            total = -1  # until upstream closes
            close = True
        if act in ("reset", "short") and total > 0:
            half = total // 2
            while len(ubuf) < half:
                d = up.recv(BUF)
                if not d:
                    break
                ubuf += d
            c.sendall(rhead + ubuf[:half])
            if act == "reset":
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            return False
        c.sendall(rhead)
        sent = 0
        if ubuf:
            chunk = ubuf if total < 0 else ubuf[:total]
            c.sendall(chunk)
            sent = len(chunk)
        if total > 0 and hasattr(os, "splice"):
            return self.splice(c, up, total - sent) and not close
        while total < 0 or sent < total:
            d = up.recv(BUF if total < 0 else min(BUF, total - sent))
            if not d:
                return False
            c.sendall(d)
            sent += len(d)
        return not close

    def splice(self, c, up, left):
        """Move left body bytes from up to c through a pipe (os.splice: the
        kernel moves pages, the proxy copies nothing), so that the proxy's
        own CPU does not take the measured pipeline's (perf/remote-read)."""
        if self.pipe is None:
            self.pipe = os.pipe()
        r, w = self.pipe
        while left > 0:
            n = os.splice(up.fileno(), w, min(left, BUF))
            if n == 0:
                return False
            left -= n
            while n > 0:
                m = os.splice(r, c.fileno(), n)
                if m == 0:
                    return False
                n -= m
        return True


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="HOST:PORT")
    ap.add_argument("--mode", default="pass")
    ap.add_argument("--control", default=None)
    a = ap.parse_args()
    host, _, port = a.upstream.rpartition(":")
    srv = Server(("127.0.0.1", a.port), Handler)
    srv.upstream = (host, int(port))
    srv.faults = Faults(a.mode, a.control)
    print("faultproxy: 127.0.0.1:%d -> %s (%s)" % (a.port, a.upstream, a.mode), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
