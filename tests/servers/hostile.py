#!/usr/bin/env python3
"""tests/servers/hostile.py - a misbehaving HTTP/1.1 server for the remote
byte source's tests (tests/servers.c starts it; stdlib only): the servers
issue 39 met, each behaviour a MODE, on one port.

  hostile.py --port PORT --root DIR [--mode MODE] [--control FILE]

Files under DIR are served for GET (Range honoured unless a mode says
otherwise) and HEAD. MODE is a comma-separated list:

  pass          an ordinary server (the default)
  norange       ignore Range: 200 with the whole file (Python's http.server)
  long206       answer a Range with 206 and Content-Range from its first byte
                to the end of the file, and then 64 MiB more of zeros after it
                (a 206 longer than asked)
  huge          whole GETs (no Range) of any path: 200 with Content-Length
                1 GiB, zeros streamed until the client stops
  hugeclose     the same without Content-Length (the body ends when the
                connection closes)
  stall         send the status line and headers, then nothing (the
                connection stays open)
  stallrange    the same for requests with a Range header only (a dataset
                opens, then its reads stall)
  slow=BPS      send bodies at BPS bytes per second (healthy, but slow)
  looptoken=K   S3 ListObjectsV2 (GET /BUCKET?list-type=2...): one key per
                page, IsTruncated true, and NextContinuationToken cycling
                through K tokens ("t0", "t1", ... "t0" again) forever
  peer          GET /peer answers the client's port (the connection's
                identity: tests/records/test_bytesrc.c's fork test)

GET /__stats answers "connections C requests R bytes B" (counted since
start, /__stats itself excluded) and never misbehaves. --control FILE: when
the file exists its content replaces MODE (read at each request).
"""
import argparse
import os
import socket
import socketserver
import sys
import threading
import time
import urllib.parse

from faultproxy import header as raw_header, read_head  # the same HTTP/1.1 parsing

CHUNK = 1 << 16


def header(head, name):
    """A header's value as text, or None."""
    v = raw_header(head, name)
    return None if v is None else v.decode("latin-1")


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.connections = self.requests = self.bytes = 0

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def parse_mode(text):
    opts = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, _, v = part.partition("=")
        opts[k] = int(v) if v else 1
    return opts


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        srv = self.server
        c = self.request
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        srv.stats.add(connections=1)
        buf = b""
        try:
            while True:
                head, buf = read_head(c, buf)
                if head is None:
                    return
                line = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
                method, target = line[0], line[1] if len(line) > 1 else "/"
                if target == "/__stats":
                    st = srv.stats
                    body = ("connections %d requests %d bytes %d\n" %
                            (st.connections, st.requests, st.bytes)).encode()
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                              % len(body) + body)
                    return
                srv.stats.add(requests=1)
                if not self.answer(c, method, target, head, srv.mode()):
                    return
        except (ConnectionError, OSError):
            return

    def send(self, c, data):
        c.sendall(data)
        self.server.stats.add(bytes=len(data))

    def body(self, c, data, opts):
        """Send data, at opts['slow'] bytes/s when set."""
        bps = opts.get("slow")
        if not bps:
            self.send(c, data)
            return
        step = max(1, bps // 20)
        for i in range(0, len(data), step):
            self.send(c, data[i:i + step])
            time.sleep(step / bps)

    def zeros(self, c, n):
        """n zero bytes (n < 0: until the client goes away)."""
        z = bytes(CHUNK)
        while n != 0:
            k = CHUNK if n < 0 else min(CHUNK, n)
            self.send(c, z[:k])
            if n > 0:
                n -= k

    def answer(self, c, method, target, head, opts):
        """One response; False when the connection must close."""
        url = urllib.parse.urlsplit(target)
        q = urllib.parse.parse_qs(url.query)
        if "looptoken" in opts and "list-type" in q:
            k = opts["looptoken"]
            tok = q.get("continuation-token", ["t%d" % (k - 1)])[0]
            n = (int(tok[1:]) + 1) % k if tok[1:].isdigit() else 0
            body = ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult>'
                    '<Name>b</Name><Prefix>%s</Prefix><KeyCount>1</KeyCount>'
                    '<IsTruncated>true</IsTruncated><Contents><Key>%sk-%s-%d</Key></Contents>'
                    '<NextContinuationToken>t%d</NextContinuationToken></ListBucketResult>' %
                    (q.get("prefix", [""])[0], q.get("prefix", [""])[0], tok,
                     time.monotonic_ns(), n)).encode()
            self.send(c, b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            return True
        if "peer" in opts and url.path == "/peer":
            body = b"%d\n" % c.getpeername()[1]
            self.send(c, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            return True
        rng = header(head, b"range")
        if ("huge" in opts or "hugeclose" in opts) and not rng and method == "GET":
            if "huge" in opts:
                self.send(c, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (1 << 30))
            else:
                self.send(c, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            self.zeros(c, 1 << 30)
            return False
        path = os.path.join(self.server.root, urllib.parse.unquote(url.path).lstrip("/"))
        if not os.path.isfile(path):
            self.send(c, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return True
        with open(path, "rb") as f:
            data = f.read()
        size = len(data)
        if "stall" in opts or ("stallrange" in opts and rng):
            self.send(c, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
            while c.recv(CHUNK):  # until the client gives up
                pass
            return False
        if rng and rng.startswith("bytes=") and "norange" not in opts:
            a, _, b = rng[6:].partition("-")
            a = int(a)
            b = min(int(b) if b else size - 1, size - 1)
            if a >= size:
                self.send(c, b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%d"
                             b"\r\nContent-Length: 0\r\n\r\n" % size)
                return True
            if "long206" in opts:  # from a to the end, and 64 MiB more
                extra = 64 << 20
                self.send(c, b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n"
                             b"Content-Length: %d\r\n\r\n" % (a, size - 1, size, size - a + extra))
                if method != "HEAD":
                    self.send(c, data[a:])
                    self.zeros(c, extra)
                return True
            part = data[a:b + 1]
            self.send(c, b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n"
                         b"Content-Length: %d\r\n\r\n" % (a, b, size, len(part)))
            if method != "HEAD":
                self.body(c, part, opts)
            return True
        self.send(c, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        if method != "HEAD":
            self.body(c, data, opts)
        return True


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def mode(self):
        if self.control and os.path.exists(self.control):
            with open(self.control) as f:
                return parse_mode(f.read().strip())
        return self.opts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--mode", default="pass")
    ap.add_argument("--control", default=None)
    a = ap.parse_args()
    srv = Server(("127.0.0.1", a.port), Handler)
    srv.root = a.root
    srv.opts = parse_mode(a.mode)
    srv.control = a.control
    srv.stats = Stats()
    print("hostile: 127.0.0.1:%d %s (%s)" % (a.port, a.root, a.mode), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
