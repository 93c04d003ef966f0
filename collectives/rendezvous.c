/*
 * collectives/rendezvous.c - sl_rendezvous_tcp: rank 0 hands a blob (the
 * NCCL unique id) to the other ranks of a job over TCP, the bootstrap that
 * torchrun-style launches (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)
 * need when there is no MPI.
 *
 * Protocol (every integer little-endian), one connection per rank r > 0:
 *
 *   rank r -> rank 0   hello  {magic "SLRV", version, r,  world, len, 0, 0}
 *   rank 0 -> rank r   answer {magic "SLRV", version, 0,  world, len, status, 0}
 *                      then len bytes of blob when status is OK
 *
 *   header = u32 magic | u32 version | u32 rank | u32 world | u64 len |
 *            u32 status | u32 reserved                          (32 bytes)
 *
 * Rank 0 listens (SO_REUSEADDR, every address: IPv6 dual-stack or else
 * IPv4) and answers only when all world-1 ranks have said hello, so a rank
 * that never comes makes rank 0 fail with the list of missing ranks, and
 * rank 0 closing its sockets ends the others' waits at once. A hello with
 * another world or length, a rank out of range or twice, or a stranger's
 * bytes make rank 0 fail (the job is misconfigured) after answering the
 * offender with status REFUSED and its own world and length. A connection
 * that closes before saying anything (a port probe) is ignored.
 *
 * Deadlines: every wait is a poll() against one deadline, timeout_ms after
 * the call (< 0: none). The other ranks connect with retries (10 ms, then
 * doubling up to 200 ms) until the deadline: they may start first.
 *
 * Threading: no global state; any number of calls may run concurrently
 * (the tests run every rank of a world as a thread).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "collectives/collectives_int.h"
#include "common/clock.h"

#define RDV_MAGIC 0x56524c53u /* "SLRV" */
#define RDV_VERSION 1u
#define RDV_HDR 32
#define RDV_OK 0u
#define RDV_REFUSED 1u
#define EXTRA_CONNS 16        /* probes and strays tolerated at once besides the ranks */

typedef struct rdv_hdr {
    uint32_t magic, version, rank, world;
    uint64_t len;
    uint32_t status;
} rdv_hdr;

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void hdr_pack(unsigned char *b, const rdv_hdr *h)
{
    put32(b, h->magic);
    put32(b + 4, h->version);
    put32(b + 8, h->rank);
    put32(b + 12, h->world);
    put64(b + 16, h->len);
    put32(b + 24, h->status);
    put32(b + 28, 0);
}

static rdv_hdr hdr_unpack(const unsigned char *b)
{
    return (rdv_hdr){get32(b), get32(b + 4), get32(b + 8), get32(b + 12), get64(b + 16),
                     get32(b + 24)};
}

/* ------------------------------------------------------------- deadlines */

/* poll()'s timeout until deadline (< 0 deadline: -1, forever); 0 when past. */
static int left_ms(double deadline)
{
    if (deadline < 0)
        return -1;
    double left = deadline - sl_now_ms();
    if (left <= 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left + 1;
}

static int past(double deadline) { return deadline >= 0 && sl_now_ms() >= deadline; }

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

typedef enum { IO_OK, IO_EOF, IO_TIMEOUT, IO_ERR } io_result;

/* Write or read exactly n bytes of a non-blocking socket before deadline
 * (IO_ERR: errno set). */
static io_result io_full(int fd, void *buf, size_t n, int writing, double deadline)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0 && !writing)
            return IO_EOF;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return IO_ERR;
        struct pollfd pf = {fd, writing ? POLLOUT : POLLIN, 0};
        int ms = left_ms(deadline);
        if (ms == 0)
            return IO_TIMEOUT;
        int r = poll(&pf, 1, ms);
        if (r < 0 && errno != EINTR)
            return IO_ERR;
        if (r == 0 && past(deadline))
            return IO_TIMEOUT;
    }
    return IO_OK;
}

static void peer_name(const struct sockaddr_storage *ss, char *s, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?", port[16] = "?";
    if (getnameinfo((const struct sockaddr *)ss, sizeof *ss, host, sizeof host, port,
                    sizeof port, NI_NUMERICHOST | NI_NUMERICSERV))
        snprintf(host, sizeof host, "?");
    snprintf(s, cap, "%s:%s", host, port);
}

/* ---------------------------------------------------------------- rank 0 */

/* A listening socket on every address: IPv6 with IPv4 mapped when the
 * host has IPv6, else IPv4. -1 with errno. */
static int listen_any(int port, int backlog)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        int one = 1, zero = 0;
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                                  .sin6_addr = in6addr_any};
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) == 0 &&
            bind(fd, (struct sockaddr *)&a6, sizeof a6) == 0 && listen(fd, backlog) == 0 &&
            set_nonblock(fd) == 0)
            return fd;
        int e = errno;
        close(fd);
        errno = e;
        if (e == EADDRINUSE || e == EACCES)
            return -1; /* the IPv4 attempt would fail the same way */
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(fd, (struct sockaddr *)&a4, sizeof a4) == 0 && listen(fd, backlog) == 0 &&
        set_nonblock(fd) == 0)
        return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

typedef struct conn {
    int fd;
    size_t got;                   /* hello bytes so far */
    unsigned char hello[RDV_HDR];
    char peer[64];                /* "host:port" */
} conn;

/* Answer a refused hello (best effort: 100 ms) and close nothing. */
static void refuse(int fd, int world, size_t len)
{
    unsigned char b[RDV_HDR];
    hdr_pack(b, &(rdv_hdr){RDV_MAGIC, RDV_VERSION, 0, (uint32_t)world, len, RDV_REFUSED});
    io_full(fd, b, sizeof b, 1, sl_now_ms() + 100);
}

/* "2, 3, 7" (the first 16) into s. */
static void missing_list(const int *fds, int world, char *s, size_t cap)
{
    size_t k = 0;
    int shown = 0;
    s[0] = '\0';
    for (int r = 1; r < world && k + 16 < cap; r++)
        if (fds[r] < 0) {
            if (shown++ == 16) {
                snprintf(s + k, cap - k, ", ...");
                break;
            }
            k += (size_t)snprintf(s + k, cap - k, "%s%d", k ? ", " : "", r);
        }
}

/* Check a whole hello of c; SL_OK and *rank_out, or the failure (after
 * answering the peer). */
static int check_hello(conn *c, int world, size_t len, const int *fds, int port, int *rank_out)
{
    const char *fn = "sl_rendezvous_tcp";
    rdv_hdr h = hdr_unpack(c->hello);
    if (h.magic != RDV_MAGIC)
        return sl_fail(SL_EIO, "%s: rank 0 of %d on port %d: connection from %s is not a sluice "
                       "rendezvous (first bytes 0x%08x): another program uses this port?", fn,
                       world, port, c->peer, (unsigned)h.magic);
    if (h.version != RDV_VERSION) {
        refuse(c->fd, world, len);
        return sl_fail(SL_EINVAL, "%s: rank 0 of %d on port %d: %s speaks rendezvous version %u,"
                       " this is version %u", fn, world, port, c->peer, (unsigned)h.version,
                       RDV_VERSION);
    }
    if (h.world != (uint32_t)world || h.len != (uint64_t)len) {
        refuse(c->fd, world, len);
        return sl_fail(SL_EINVAL, "%s: rank 0 of %d on port %d: rank %u at %s says world %u and "
                       "%llu bytes, this job has world %d and %zu bytes", fn, world, port,
                       (unsigned)h.rank, c->peer, (unsigned)h.world,
                       (unsigned long long)h.len, world, len);
    }
    if (h.rank == 0 || h.rank >= (uint32_t)world) {
        refuse(c->fd, world, len);
        return sl_fail(SL_EINVAL, "%s: rank 0 of %d on port %d: %s says it is rank %u, outside "
                       "[1, %d)", fn, world, port, c->peer, (unsigned)h.rank, world);
    }
    if (fds[h.rank] >= 0) {
        refuse(c->fd, world, len);
        return sl_fail(SL_EINVAL, "%s: rank 0 of %d on port %d: rank %u connected twice (again "
                       "from %s): two ranks were given the same RANK?", fn, world, port,
                       (unsigned)h.rank, c->peer);
    }
    *rank_out = (int)h.rank;
    return SL_OK;
}

/* Accept and read hellos until every rank is in (fds[1..world-1]). */
static int gather_ranks(int lfd, int port, int world, size_t len, int *fds, conn *pend,
                        int npend_max, int timeout_ms, double deadline)
{
    const char *fn = "sl_rendezvous_tcp";
    int npend = 0, have = 0, rc = SL_OK;
    struct pollfd *pf = calloc((size_t)npend_max + 1, sizeof *pf);
    if (!pf)
        return sl_fail(SL_ENOMEM, "%s: rank 0: out of memory", fn);
    while (!rc && have < world - 1) {
        pf[0] = (struct pollfd){lfd, POLLIN, 0};
        for (int i = 0; i < npend; i++)
            pf[i + 1] = (struct pollfd){pend[i].fd, POLLIN, 0};
        int ms = left_ms(deadline);
        int r = ms == 0 ? 0 : poll(pf, (nfds_t)npend + 1, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = sl_fail(SL_EIO, "%s: rank 0 of %d on port %d: poll: %s", fn, world, port,
                         strerror(errno));
            break;
        }
        if (r == 0 && past(deadline)) {
            char miss[160];
            missing_list(fds, world, miss, sizeof miss);
            rc = sl_fail(SL_ETIMEDOUT, "%s: rank 0 of %d on port %d: timed out after %d ms: %d "
                         "of %d ranks connected; missing rank(s) %s", fn, world, port,
                         timeout_ms, have, world - 1, miss);
            break;
        }
        /* hellos first (pf indices match pend before any removal) */
        for (int i = npend - 1; i >= 0 && !rc; i--) {
            if (!(pf[i + 1].revents & (POLLIN | POLLERR | POLLHUP)))
                continue;
            conn *c = &pend[i];
            ssize_t k = recv(c->fd, c->hello + c->got, RDV_HDR - c->got, 0);
            if (k < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            int drop = k <= 0 && c->got == 0; /* closed before a word: a probe */
            if (k <= 0 && !drop) {
                rc = sl_fail(SL_EIO, "%s: rank 0 of %d on port %d: %s closed after %zu bytes of "
                             "its hello%s%s", fn, world, port, c->peer, c->got, k < 0 ? ": " : "",
                             k < 0 ? strerror(errno) : "");
                break;
            }
            if (!drop) {
                c->got += (size_t)k;
                if (c->got < RDV_HDR)
                    continue;
                int rank = 0;
                if ((rc = check_hello(c, world, len, fds, port, &rank)))
                    break;
                fds[rank] = c->fd;
                have++;
            } else {
                close(c->fd);
            }
            pend[i] = pend[--npend]; /* taken out: ranked or dropped */
        }
        if (rc || !(pf[0].revents & POLLIN))
            continue;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept(lfd, (struct sockaddr *)&ss, &sl);
        if (fd < 0)
            continue; /* EAGAIN, ECONNABORTED, ...: the peer retries */
        if (npend == npend_max || set_nonblock(fd)) {
            char who[64];
            peer_name(&ss, who, sizeof who);
            close(fd);
            rc = sl_fail(SL_EIO, "%s: rank 0 of %d on port %d: connection from %s: %s", fn, world,
                         port, who, npend == npend_max ? "too many connections at once"
                         : strerror(errno));
            break;
        }
        pend[npend] = (conn){.fd = fd};
        peer_name(&ss, pend[npend].peer, sizeof pend[npend].peer);
        npend++;
    }
    for (int i = 0; i < npend; i++)
        close(pend[i].fd);
    free(pf);
    return rc;
}

static int serve(int port, int world, const void *blob, size_t len, int timeout_ms,
                 double deadline)
{
    const char *fn = "sl_rendezvous_tcp";
    int rc = SL_OK;
    int npend_max = world - 1 + EXTRA_CONNS;
    int *fds = malloc((size_t)world * sizeof *fds);
    conn *pend = calloc((size_t)npend_max, sizeof *pend);
    if (!fds || !pend) {
        rc = sl_fail(SL_ENOMEM, "%s: rank 0: out of memory", fn);
        goto out_free;
    }
    for (int r = 0; r < world; r++)
        fds[r] = -1;
    int lfd = listen_any(port, world < 128 ? world : 128);
    if (lfd < 0) {
        rc = sl_fail(SL_EIO, "%s: rank 0 of %d: cannot listen on port %d: %s", fn, world, port,
                     strerror(errno));
        goto out_free;
    }
    rc = gather_ranks(lfd, port, world, len, fds, pend, npend_max, timeout_ms, deadline);
    close(lfd);
    if (rc)
        goto out_close;
    unsigned char b[RDV_HDR];
    hdr_pack(b, &(rdv_hdr){RDV_MAGIC, RDV_VERSION, 0, (uint32_t)world, len, RDV_OK});
    for (int r = 1; r < world; r++) {
        io_result io = io_full(fds[r], b, sizeof b, 1, deadline);
        if (io == IO_OK && len)
            io = io_full(fds[r], (void *)blob, len, 1, deadline);
        if (io != IO_OK) {
            rc = sl_fail(io == IO_TIMEOUT ? SL_ETIMEDOUT : SL_EIO, "%s: rank 0 of %d on port %d: "
                         "sending %zu bytes to rank %d: %s", fn, world, port, len, r,
                         io == IO_TIMEOUT ? "timed out" : strerror(errno));
            break;
        }
    }
out_close:
    for (int r = 1; r < world; r++)
        if (fds[r] >= 0)
            close(fds[r]);
out_free:
    free(pend);
    free(fds);
    return rc;
}

/* ----------------------------------------------------------- other ranks */

/* Connect to one address before deadline; fd or -1 with errno. */
static int connect_one(const struct addrinfo *ai, double deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -1;
    if (set_nonblock(fd))
        goto fail;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS)
        goto fail;
    for (;;) {
        struct pollfd pf = {fd, POLLOUT, 0};
        int r = poll(&pf, 1, left_ms(deadline)); /* past the deadline: one look */
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            goto fail;
        if (r == 0) {
            errno = ETIMEDOUT;
            goto fail;
        }
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
            goto fail;
        if (err) {
            errno = err;
            goto fail;
        }
        return fd;
    }
fail:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

static int join(const char *addr, int port, int rank, int world, void *blob, size_t len,
                int timeout_ms, double deadline)
{
    const char *fn = "sl_rendezvous_tcp";
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int fd = -1, rc = SL_OK, last_errno = 0;
    long nap = 10;
    for (;;) {
        if (!res) {
            int g = getaddrinfo(addr, ports, &hints, &res);
            if (g && g != EAI_AGAIN)
                return sl_fail(SL_EIO, "%s: rank %d of %d: cannot resolve %s: %s", fn, rank,
                               world, addr, gai_strerror(g));
            if (g)
                res = NULL;
            last_errno = g ? EAGAIN : last_errno;
        }
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            fd = connect_one(ai, deadline);
            /* keep the peer's answer (refused, unreachable) over our deadline */
            if (fd < 0 && (errno != ETIMEDOUT || !last_errno))
                last_errno = errno;
        }
        if (fd >= 0)
            break;
        if (past(deadline)) {
            freeaddrinfo(res);
            return sl_fail(SL_ETIMEDOUT, "%s: rank %d of %d: cannot reach rank 0 at %s:%d within "
                           "%d ms: %s", fn, rank, world, addr, port, timeout_ms,
                           strerror(last_errno));
        }
        int ms = left_ms(deadline);
        struct timespec ts = {0, (ms >= 0 && ms < nap ? ms : nap) * 1000000L};
        nanosleep(&ts, NULL);
        nap = nap * 2 > 200 ? 200 : nap * 2;
    }
    freeaddrinfo(res);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    unsigned char b[RDV_HDR];
    hdr_pack(b, &(rdv_hdr){RDV_MAGIC, RDV_VERSION, (uint32_t)rank, (uint32_t)world, len, 0});
    io_result io = io_full(fd, b, sizeof b, 1, deadline);
    if (io == IO_OK)
        io = io_full(fd, b, sizeof b, 0, deadline);
    if (io != IO_OK) {
        rc = sl_fail(io == IO_TIMEOUT ? SL_ETIMEDOUT : SL_EIO, "%s: rank %d of %d: rank 0 at %s:%d"
                     ": %s", fn, rank, world, addr, port,
                     io == IO_TIMEOUT ? "connected, but no answer in time (are all ranks "
                     "started, with the same WORLD_SIZE?)" : io == IO_EOF ? "closed the "
                     "connection without an answer (rank 0 failed: see its message)"
                     : strerror(errno));
        goto out;
    }
    rdv_hdr h = hdr_unpack(b);
    if (h.magic != RDV_MAGIC || h.version != RDV_VERSION) {
        rc = sl_fail(SL_EIO, "%s: rank %d of %d: %s:%d answered with something that is not a "
                     "sluice rendezvous (magic 0x%08x, version %u)", fn, rank, world, addr, port,
                     (unsigned)h.magic, (unsigned)h.version);
        goto out;
    }
    if (h.status != RDV_OK || h.world != (uint32_t)world || h.len != (uint64_t)len) {
        rc = sl_fail(SL_EINVAL, "%s: rank %d of %d: rank 0 at %s:%d refused this rank: it has "
                     "world %u and %llu bytes, this rank world %d and %zu bytes", fn, rank, world,
                     addr, port, (unsigned)h.world, (unsigned long long)h.len, world, len);
        goto out;
    }
    io = len ? io_full(fd, blob, len, 0, deadline) : IO_OK;
    if (io != IO_OK)
        rc = sl_fail(io == IO_TIMEOUT ? SL_ETIMEDOUT : SL_EIO, "%s: rank %d of %d: rank 0 at "
                     "%s:%d: receiving %zu bytes: %s", fn, rank, world, addr, port, len,
                     io == IO_TIMEOUT ? "timed out" : io == IO_EOF ? "connection closed early"
                     : strerror(errno));
out:
    close(fd);
    return rc;
}

/* ------------------------------------------------------------------ entry */

int sl_rendezvous_tcp(const char *addr, int port, int rank, int world, void *blob, size_t len,
                      int timeout_ms)
{
    const char *fn = "sl_rendezvous_tcp";
    if (world < 1 || rank < 0 || rank >= world)
        return sl_fail(SL_EINVAL, "%s: rank %d outside world %d", fn, rank, world);
    if (port < 1 || port > 65535)
        return sl_fail(SL_EINVAL, "%s: rank %d of %d: port %d outside [1, 65535]", fn, rank,
                       world, port);
    if (len > 0 && !blob)
        return sl_fail(SL_EINVAL, "%s: rank %d of %d: NULL blob of %zu bytes", fn, rank, world,
                       len);
    if (rank > 0 && (!addr || !*addr))
        return sl_fail(SL_EINVAL, "%s: rank %d of %d: no address for rank 0", fn, rank, world);
    if (world == 1)
        return SL_OK;
    double deadline = timeout_ms < 0 ? -1 : sl_now_ms() + timeout_ms;
    if (rank == 0)
        return serve(port, world, blob, len, timeout_ms, deadline);
    return join(addr, port, rank, world, blob, len, timeout_ms, deadline);
}
