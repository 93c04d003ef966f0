// emu_nccl.cpp - NCCL on the host emulator: the calls collectives/nccl.c
// makes, against the real nccl.h, for ranks that are separate processes
// (mpirun -np N, one emulated device each) on this machine.
//
// Rendezvous. ncclGetUniqueId names a POSIX shared-memory segment
// (/dev/shm/sl-emu-nccl-PID-N-RANDOM); every rank of ncclCommInitRank*
// opens (or creates) it, the first one sets up the header, each writes its
// pid, host and CUDA device into its slot and posts phase 1; once all have
// (a duplicate device on one host is refused, as NCCL does), the name is
// unlinked: the mapping lives until destroy / abort.
//
// Segment: a header page (nranks, chunk bytes, who aborted), then one Slot
// per rank (its phase counter and the descriptor of the collective it is
// in), then one staging area of `chunk` bytes per rank (EMU_NCCL_CHUNK_KB,
// default 1024; big buffers go through in chunks).
//
// Barrier: each rank's phase counter only grows; "all at phase g" is
// min(posted) >= g. A collective of n chunks is 2n phases: post my chunk
// (and my descriptor), wait for all, compute my output from every rank's
// staging area IN RANK ORDER (so every rank computes the same bits), post
// "read", wait for all (nobody overwrites a staging area a peer still
// reads). Descriptors (collective number, kind, dtype, op, count, root)
// are compared at the first chunk: a mismatch is reported on every rank.
//
// Streams. A collective is queued on its stream as a step
// (emu::enqueue_step): it runs in stream order after the kernels that
// wrote its input, and while peers have not arrived it stays in progress
// at the head of the stream: cudaEventQuery / cudaStreamQuery say not
// ready (nccl.c's polling loop keeps calling them, each call retries), a
// synchronize waits. With EMU_LAZY=1 a rank's collective starts only when
// its host waits on the stream; nccl.c always does (an event query right
// after a blocking call, sl_comm_wait for async ones), so lazy ranks meet.
// A host that would block on something else (an MPI call) with an NCCL
// collective queued but never waited for deadlocks here where a GPU would
// not: the wait deadline below turns that into a report.
//
// Deadlines. Every wait gives up after EMU_NCCL_TIMEOUT_S (default 120):
// "EMU: error: nccl: rank R waited S s at collective #K (ALLREDUCE ...)",
// the comm's asynchronous error becomes ncclSystemError and the
// collective stays stuck at the head of its stream (a GPU's kernel would
// spin) until ncclCommAbort, which is what nccl.c's poll does next. A peer
// that called ncclCommAbort, or whose process is gone, gives
// ncclRemoteError (a warning, not a misuse report). nccl.c's own deadline
// (cfg.timeout_ms) works as on a GPU: its polls see "not ready" until then.
//
// Non-blocking communicators (config.blocking = 0): init returns
// ncclInProgress and ncclCommGetAsyncError completes it (ncclInProgress
// until every rank has joined); every collective returns ncclInProgress
// once enqueued (ncclCommGetAsyncError then says ncclSuccess); finalize
// returns ncclInProgress until every rank has finalized.
//
// avg is NCCL's: each contribution times 1/nranks rounded to the dtype,
// then summed (f16 / bf16: each product and sum rounded to the dtype, as
// __hmul / __hadd do); sum, prod, max, min likewise in rank order.
//
// Misuse reports ("EMU: error"): buffers not device memory or beyond their
// allocation, overlapping send / receive buffers other than NCCL's in-place
// forms, counts / dtypes / ops / roots that differ between ranks, a call on
// a destroyed or aborted communicator, collectives of one communicator run
// out of call order (two streams), a config not made by
// NCCL_CONFIG_INITIALIZER, an id not made by ncclGetUniqueId.
//
// CUDA graphs. A collective called while its stream captures (NCCL >= 2.9
// allows it) runs nothing and takes no number then: the graph holds it
// (emu::enqueue_step_made), and every launch of the graph queues a fresh
// collective, numbered #K in the order the launches queue them, as the
// ranks' call-order check expects of a replayed step. The argument checks
// are made at the capture; a capture that is invalidated leaves no trace.
//
// Not emulated: NCCL's algorithms (ring / tree / NVLS) and their summation
// orders, groups (ncclGroupStart/End), reduce / reduce-scatter / send /
// recv, comm split, user buffer registration, several hosts, speed.
#include "emu_core.h"
#include <nccl.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>

namespace {

const char ID_TAG[] = "sluice-emu-nccl:";
const uint32_t SEG_MAGIC = 0x4e43454d;
const size_t HDR_BYTES = 4096;

enum Kind { INIT, ALLREDUCE, BROADCAST, ALLGATHER, FINALIZE };

struct Header {
    uint32_t magic;
    std::atomic<int32_t> state;      // 0 fresh, 1 being set up, 2 ready
    int32_t nranks;
    uint64_t chunk;                  // bytes of each rank's staging area
    std::atomic<int32_t> aborted_by; // rank + 1 of an ncclCommAbort, or 0
};

// One rank's slot (in the segment): written by that rank only.
struct alignas(64) Slot {
    std::atomic<uint64_t> posted;    // phases passed (only grows)
    std::atomic<int32_t> joined;
    int32_t pid, device;
    char host[64];
    // the operation this rank is in, written before it posts
    uint64_t seq, count;
    int32_t kind, dtype, op, root;
};

struct Wait {
    double t0 = 0, pid_check = 0;
    int spins = 0;
};

struct Comm {
    int rank, nranks, device, blocking;
    char name[NCCL_UNIQUE_ID_BYTES];
    unsigned char *base;
    size_t bytes, chunk;
    uint64_t gen;                 // phases this rank has posted
    uint64_t issued, completed;   // collectives: #K is the K-th issued
    bool joined, init_done, fin_posted, finalizing, finalized, dead;
    std::atomic<int> aborting;    // ncclCommAbort (any thread) sets it first
    ncclResult_t async;           // sticky error, or ncclInProgress (init / finalize)
    std::string last;             // ncclGetLastError
    Wait w;                       // the init / finalize wait
    std::set<cudaStream_t> streams;
};

std::set<Comm *> comms; // every comm ever made: a dead one is still recognized
std::string global_last;
unsigned id_counter;

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double timeout_s()
{
    const char *v = getenv("EMU_NCCL_TIMEOUT_S");
    double t = v && *v ? atof(v) : 120.0;
    return t > 0 ? t : 120.0;
}

Header *hdr(Comm *c) { return (Header *)c->base; }
Slot *slot(Comm *c, int r) { return (Slot *)(c->base + HDR_BYTES) + r; }
size_t slots_bytes(int nranks) { return (sizeof(Slot) * (size_t)nranks + 4095) / 4096 * 4096; }
unsigned char *stage(Comm *c, int r) { return c->base + HDR_BYTES + slots_bytes(c->nranks) + (size_t)r * c->chunk; }

bool is_error(ncclResult_t r) { return r != ncclSuccess && r != ncclInProgress; }

// The comm's sticky asynchronous error (the first one wins) and its text.
void fail(Comm *c, ncclResult_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void fail(Comm *c, ncclResult_t code, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!is_error(c->async)) {
        c->async = code;
        c->last = buf;
    }
}

// ------------------------------------------------------------ dtypes
size_t esize(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

const char *dtype_name(int t)
{
    static const char *n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                              "f16", "f32", "f64", "bf16", "fp8e4m3", "fp8e5m2"};
    return t >= 0 && t < ncclNumTypes ? n[t] : "?";
}

const char *op_name(int o)
{
    static const char *n[] = {"sum", "prod", "max", "min", "avg"};
    return o >= 0 && o < ncclNumOps ? n[o] : "?";
}

// One element type: load as the compute type, round a result to the dtype.
template <class S, class C> struct Elem;
template <> struct Elem<float, float> {
    static float ld(const void *p, size_t i) { return ((const float *)p)[i]; }
    static float rnd(float v) { return v; }
    static void st(void *p, size_t i, float v) { ((float *)p)[i] = v; }
};
template <> struct Elem<double, double> {
    static double ld(const void *p, size_t i) { return ((const double *)p)[i]; }
    static double rnd(double v) { return v; }
    static void st(void *p, size_t i, double v) { ((double *)p)[i] = v; }
};
struct Half {};
struct BF16 {};
template <> struct Elem<Half, float> {
    static float ld(const void *p, size_t i) { return emu::h_to_f(((const uint16_t *)p)[i]); }
    static float rnd(float v) { return emu::h_to_f(emu::f_to_h(v)); }
    static void st(void *p, size_t i, float v) { ((uint16_t *)p)[i] = emu::f_to_h(v); }
};
template <> struct Elem<BF16, float> {
    static float ld(const void *p, size_t i) { return emu::bf16_to_f(((const uint16_t *)p)[i]); }
    static float rnd(float v) { return emu::bf16_to_f(emu::f_to_bf16(v)); }
    static void st(void *p, size_t i, float v) { ((uint16_t *)p)[i] = emu::f_to_bf16(v); }
};

// out[i] = op over ranks 0..n-1 of in[r][i], in rank order, each step
// rounded to the dtype (avg: each input times 1/n in the dtype, then sum).
template <class S, class C>
void reduce_t(void *out, unsigned char *const *in, int n, size_t cnt, ncclRedOp_t op)
{
    typedef Elem<S, C> E;
    C scale = E::rnd((C)1 / (C)n);
    for (size_t i = 0; i < cnt; i++) {
        C acc = E::ld(in[0], i);
        if (op == ncclAvg) acc = E::rnd(acc * scale);
        for (int r = 1; r < n; r++) {
            C x = E::ld(in[r], i);
            switch (op) {
            case ncclAvg: acc = E::rnd(acc + E::rnd(x * scale)); break;
            case ncclProd: acc = E::rnd(acc * x); break;
            case ncclMax: acc = x > acc || x != x ? x : acc; break;
            case ncclMin: acc = x < acc || x != x ? x : acc; break;
            default: acc = E::rnd(acc + x);
            }
        }
        E::st(out, i, acc);
    }
}

void reduce(ncclDataType_t t, void *out, unsigned char *const *in, int n, size_t cnt, ncclRedOp_t op)
{
    switch (t) {
    case ncclFloat32: reduce_t<float, float>(out, in, n, cnt, op); break;
    case ncclFloat64: reduce_t<double, double>(out, in, n, cnt, op); break;
    case ncclFloat16: reduce_t<Half, float>(out, in, n, cnt, op); break;
    case ncclBfloat16: reduce_t<BF16, float>(out, in, n, cnt, op); break;
    default: break; // refused at the call
    }
}

// ------------------------------------------------------------ waiting
enum { READY, PENDING, FAILED };

// pid still runs (a zombie no longer does: its parent has not reaped it yet)
bool alive(int pid)
{
    if (kill(pid, 0) && errno == ESRCH) return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); // "pid (comm) S ..."
    return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

// Wait until every rank has posted phase g. block: sleep between polls
// until then (or the deadline), else look once. what: for the messages.
int wait_all(Comm *c, uint64_t g, Wait &w, bool block, const std::string &what)
{
    double t = now_s();
    if (w.t0 == 0) w.t0 = w.pid_check = t;
    for (;;) {
        if (c->aborting.load()) return FAILED;
        if (is_error(c->async)) return FAILED;
        int late = -1;
        for (int r = 0; r < c->nranks && late < 0; r++)
            if (slot(c, r)->posted.load(std::memory_order_acquire) < g) late = r;
        if (late < 0) return READY;
        int ab = hdr(c)->aborted_by.load();
        if (ab) {
            emu::warn("nccl: rank %d: rank %d aborted the communicator (ncclCommAbort) while this "
                      "rank was at %s", c->rank, ab - 1, what.c_str());
            fail(c, ncclRemoteError, "rank %d aborted the communicator while rank %d was at %s",
                 ab - 1, c->rank, what.c_str());
            return FAILED;
        }
        t = now_s();
        if (t - w.pid_check > 0.2) {
            w.pid_check = t;
            Slot *s = slot(c, late);
            if (s->joined.load() && s->pid > 0 && !alive(s->pid)) {
                emu::warn("nccl: rank %d: rank %d (pid %d) exited while this rank was at %s",
                          c->rank, late, s->pid, what.c_str());
                fail(c, ncclRemoteError, "rank %d (pid %d) exited while rank %d was at %s", late,
                     s->pid, c->rank, what.c_str());
                return FAILED;
            }
        }
        double lim = timeout_s();
        if (t - w.t0 >= lim) {
            Slot *s = slot(c, late);
            emu::report("nccl: rank %d waited %.0f s at %s: rank %d%s%s has not reached it "
                        "(EMU_NCCL_TIMEOUT_S=%g)", c->rank, t - w.t0, what.c_str(), late,
                        s->joined.load() ? " pid " : "",
                        s->joined.load() ? std::to_string(s->pid).c_str() : "", lim);
            fail(c, ncclSystemError, "rank %d waited %.0f s at %s for rank %d (emulator deadline)",
                 c->rank, t - w.t0, what.c_str(), late);
            return FAILED;
        }
        if (!block) return PENDING;
        if (++w.spins < 200) {
            sched_yield();
        } else {
            struct timespec ts = {0, (w.spins < 1000 ? 50 : 1000) * 1000L};
            nanosleep(&ts, NULL);
        }
    }
}

// ------------------------------------------------------------ collectives
struct Coll {
    Comm *c;
    Kind kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root;
    uint64_t seq, g0;
    size_t ci;        // chunk in progress
    int phase;        // 0: post my chunk, 1: wait for all, 2: wait until all have read
    bool started;
    Wait w;
    std::string what; // describe(): made once, for the messages of every poll
};

std::string describe(int kind, uint64_t seq, int dt, int op, uint64_t count, int root)
{
    char b[160];
    if (kind == INIT)
        snprintf(b, sizeof b, "ncclCommInitRank");
    else if (kind == FINALIZE)
        snprintf(b, sizeof b, "ncclCommFinalize (after collective #%llu)", (unsigned long long)seq);
    else if (kind == ALLREDUCE)
        snprintf(b, sizeof b, "collective #%llu (ALLREDUCE %s %s, %llu elements)",
                 (unsigned long long)seq, op_name(op), dtype_name(dt), (unsigned long long)count);
    else if (kind == BROADCAST)
        snprintf(b, sizeof b, "collective #%llu (BROADCAST root %d %s, %llu elements)",
                 (unsigned long long)seq, root, dtype_name(dt), (unsigned long long)count);
    else
        snprintf(b, sizeof b, "collective #%llu (ALLGATHER %s, %llu elements per rank)",
                 (unsigned long long)seq, dtype_name(dt), (unsigned long long)count);
    return b;
}

std::string describe(const Slot *s) { return describe(s->kind, s->seq, s->dtype, s->op, s->count, s->root); }

void post_desc(Comm *c, int kind, uint64_t seq, int dt, int op, uint64_t count, int root)
{
    Slot *me = slot(c, c->rank);
    me->kind = kind, me->seq = seq, me->dtype = dt, me->op = op, me->count = count, me->root = root;
}

// After the first phase of an operation: every rank must be in the same one.
bool same_op(Comm *c)
{
    Slot *me = slot(c, c->rank);
    for (int r = 0; r < c->nranks; r++) {
        Slot *o = slot(c, r);
        if (o->kind == me->kind && o->seq == me->seq && o->dtype == me->dtype && o->op == me->op &&
            o->count == me->count && o->root == me->root)
            continue;
        std::string mine = describe(me), theirs = describe(o);
        emu::report("nccl: rank %d is at %s but rank %d at %s: every rank must make the same "
                    "calls in the same order with the same counts, types, ops and roots",
                    c->rank, mine.c_str(), r, theirs.c_str());
        fail(c, ncclInvalidUsage, "rank %d is at %s but rank %d at %s", c->rank, mine.c_str(), r,
             theirs.c_str());
        return false;
    }
    return true;
}

// The stream step of one collective (emu::enqueue_step).
bool coll_step(Coll &k, bool block)
{
    Comm *c = k.c;
    if (c->aborting.load() || c->dead) return true; // aborted: its kernels stop
    if (is_error(c->async)) return false;           // stuck until ncclCommAbort
    const std::string &what = k.what;
    if (!k.started) {
        if (c->completed + 1 != k.seq) {
            emu::report("nccl: rank %d: %s runs before collective #%llu has finished: one "
                        "communicator's collectives must run in call order (one stream, or "
                        "streams ordered by events)", c->rank, what.c_str(),
                        (unsigned long long)(c->completed + 1));
            fail(c, ncclInvalidUsage, "%s ran out of call order", what.c_str());
            return false;
        }
        k.started = true;
        k.g0 = c->gen;
    }
    size_t es = esize(k.dt), per = c->chunk / es, nch = (k.count + per - 1) / per;
    unsigned char *in[64], **inp = in;
    std::unique_ptr<unsigned char *[]> big;
    if (c->nranks > 64) { big.reset(new unsigned char *[c->nranks]); inp = big.get(); }
    Slot *me = slot(c, c->rank);
    while (k.ci < nch) {
        size_t off = k.ci * per, n = k.count - off < per ? k.count - off : per;
        uint64_t g = k.g0 + 2 * k.ci + 1;
        if (k.phase == 0) {
            post_desc(c, k.kind, k.seq, k.dt, k.op, k.count, k.root);
            if (k.kind != BROADCAST || c->rank == k.root)
                memcpy(stage(c, c->rank), (const unsigned char *)k.send + off * es, n * es);
            me->posted.store(g, std::memory_order_release);
            c->gen = g;
            k.phase = 1;
            k.w = Wait();
        }
        if (k.phase == 1) {
            int st = wait_all(c, g, k.w, block, what);
            if (st != READY) return c->aborting.load() != 0;
            if (k.ci == 0 && !same_op(c)) return false;
            for (int r = 0; r < c->nranks; r++) inp[r] = stage(c, r);
            if (k.kind == ALLREDUCE)
                reduce(k.dt, (unsigned char *)k.recv + off * es, inp, c->nranks, n, k.op);
            else if (k.kind == BROADCAST)
                memcpy((unsigned char *)k.recv + off * es, inp[k.root], n * es);
            else
                for (int r = 0; r < c->nranks; r++)
                    memcpy((unsigned char *)k.recv + ((size_t)r * k.count + off) * es, inp[r], n * es);
            me->posted.store(g + 1, std::memory_order_release);
            c->gen = g + 1;
            k.phase = 2;
            k.w = Wait();
        }
        if (k.phase == 2) {
            int st = wait_all(c, g + 1, k.w, block, what);
            if (st != READY) return c->aborting.load() != 0;
            k.phase = 0;
            k.ci++;
        }
    }
    c->completed = k.seq;
    return true;
}

// ------------------------------------------------------------ comms
Comm *comm_of(ncclComm_t h, const char *api)
{
    Comm *c = (Comm *)h;
    if (!h || !comms.count(c)) {
        emu::report("%s: %p is not a communicator from ncclCommInitRank*", api, (void *)h);
        return NULL;
    }
    if (c->dead) {
        emu::report("%s: communicator (rank %d of %d) used after ncclCommDestroy / ncclCommAbort",
                    api, c->rank, c->nranks);
        return NULL;
    }
    return c;
}

void unmap(Comm *c)
{
    if (c->base) munmap(c->base, c->bytes);
    c->base = NULL;
}

// Open (or create) the segment and join it: SL_OK-like ncclSuccess, or an
// error with c->last set.
ncclResult_t join(Comm *c)
{
    const char *v = getenv("EMU_NCCL_CHUNK_KB");
    size_t kb = v && atol(v) > 0 ? (size_t)atol(v) : 1024;
    c->chunk = kb * 1024;
    c->bytes = HDR_BYTES + slots_bytes(c->nranks) + (size_t)c->nranks * c->chunk;
    int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || ((size_t)st.st_size < c->bytes && ftruncate(fd, (off_t)c->bytes))) {
        c->last = std::string("shm_open / ftruncate /dev/shm") + c->name + ": " + strerror(errno);
        if (fd >= 0) close(fd);
        return ncclSystemError;
    }
    void *m = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        c->last = std::string("mmap /dev/shm") + c->name + ": " + strerror(errno);
        return ncclSystemError;
    }
    c->base = (unsigned char *)m;
    Header *h = hdr(c);
    int32_t fresh = 0;
    if (h->state.compare_exchange_strong(fresh, 1)) {
        h->nranks = c->nranks;
        h->chunk = c->chunk;
        h->magic = SEG_MAGIC;
        h->state.store(2);
    }
    for (double t0 = now_s(); h->state.load() != 2;) {
        if (now_s() - t0 > 10) { c->last = "segment never set up by its creator"; return ncclSystemError; }
        sched_yield();
    }
    if (h->nranks != c->nranks || h->chunk != c->chunk) {
        emu::report("nccl: rank %d: ncclCommInitRank with %d ranks (chunk %zu) but the id's "
                    "communicator has %d (chunk %llu): every rank must pass the same nranks",
                    c->rank, c->nranks, c->chunk, h->nranks, (unsigned long long)h->chunk);
        c->last = "nranks differs between ranks";
        return ncclInvalidUsage;
    }
    Slot *me = slot(c, c->rank);
    int32_t no = 0;
    if (!me->joined.compare_exchange_strong(no, 1)) {
        emu::report("nccl: rank %d of %d joined twice (pid %d and pid %d)", c->rank, c->nranks,
                    me->pid, (int)getpid());
        c->last = "rank joined twice";
        return ncclInvalidUsage;
    }
    me->pid = (int32_t)getpid();
    me->device = c->device;
    gethostname(me->host, sizeof me->host - 1);
    post_desc(c, INIT, 0, 0, 0, 0, 0);
    me->posted.store(1, std::memory_order_release);
    c->gen = 1;
    c->joined = true;
    return ncclSuccess;
}

// Drive the init: READY once every rank has joined (then the name goes).
int init_poll(Comm *c, bool block)
{
    int st = wait_all(c, 1, c->w, block, describe(INIT, 0, 0, 0, 0, 0) + " with " +
                      std::to_string(c->nranks) + " ranks");
    if (st == PENDING) return st;
    shm_unlink(c->name); // every rank has it open (or gave up)
    if (st == FAILED) return st;
    for (int a = 0; a < c->nranks; a++)
        for (int b = a + 1; b < c->nranks; b++) {
            Slot *x = slot(c, a), *y = slot(c, b);
            if (x->device == y->device && !strcmp(x->host, y->host)) {
                emu::report("nccl: Duplicate GPU detected: rank %d and rank %d both on CUDA device "
                            "%d of host %s (one device per rank: cudaSetDevice before init)",
                            a, b, x->device, x->host);
                fail(c, ncclInvalidUsage, "Duplicate GPU detected: rank %d and rank %d both on "
                     "CUDA device %d", a, b, x->device);
                return FAILED;
            }
        }
    c->init_done = true;
    c->async = ncclSuccess;
    c->w = Wait();
    return READY;
}

// Drive a finalize: this comm's queued collectives first, then a phase
// that every rank posts from its own finalize.
int fin_poll(Comm *c, bool block)
{
    if (is_error(c->async)) return FAILED;
    if (c->completed < c->issued) {
        for (cudaStream_t s : c->streams) // NCCL flushes what was issued
            if (c->completed < c->issued) emu::progress(s, block);
        if (c->completed < c->issued) return is_error(c->async) ? FAILED : PENDING;
    }
    if (!c->fin_posted) {
        post_desc(c, FINALIZE, c->issued, 0, 0, 0, 0);
        slot(c, c->rank)->posted.store(c->gen + 1, std::memory_order_release);
        c->gen++;
        c->fin_posted = true;
        c->w = Wait();
    }
    int st = wait_all(c, c->gen, c->w, block, describe(FINALIZE, c->issued, 0, 0, 0, 0));
    if (st != READY) return st;
    if (!same_op(c)) return FAILED;
    c->finalized = true;
    c->async = ncclSuccess;
    return READY;
}

ncclResult_t coll(const char *api, Kind kind, const void *send, void *recv, size_t count,
                  ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    EMU_LOCK;
    emu::init();
    Comm *c = comm_of(comm, api);
    if (!c) return ncclInvalidArgument;
    if (!c->init_done) {
        emu::report("%s: rank %d: the communicator's init has not completed (poll "
                    "ncclCommGetAsyncError until ncclSuccess first)", api, c->rank);
        return ncclInvalidUsage;
    }
    if (c->finalizing) {
        emu::report("%s: rank %d: called after ncclCommFinalize", api, c->rank);
        return ncclInvalidUsage;
    }
    if (is_error(c->async)) return c->async;
    size_t es = esize(dt);
    if (!es || (kind == ALLREDUCE && dt != ncclFloat32 && dt != ncclFloat16 && dt != ncclBfloat16 &&
                dt != ncclFloat64)) {
        emu::report("%s: rank %d: data type %d (%s) not emulated", api, c->rank, (int)dt, dtype_name(dt));
        return ncclInvalidArgument;
    }
    if (kind == ALLREDUCE && ((int)op < 0 || (int)op >= ncclNumOps)) {
        emu::report("%s: rank %d: reduction op %d not emulated (built-in ops only)", api, c->rank, (int)op);
        return ncclInvalidArgument;
    }
    if (kind == BROADCAST && (root < 0 || root >= c->nranks)) {
        emu::report("%s: rank %d: root %d outside [0, %d)", api, c->rank, root, c->nranks);
        return ncclInvalidArgument;
    }
    if (count == 0) return c->blocking ? ncclSuccess : ncclInProgress;
    size_t in_bytes = count * es, out_bytes = (kind == ALLGATHER ? (size_t)c->nranks : 1) * count * es;
    bool need_send = kind != BROADCAST || c->rank == root;
    if ((need_send && !emu::check_range(api, "sendbuff", send, in_bytes, emu::DEVICE)) ||
        !emu::check_range(api, "recvbuff", recv, out_bytes, emu::DEVICE))
        return ncclInvalidArgument;
    // in place: send == recv (all-reduce, broadcast), send == recv + rank*count (all-gather)
    uintptr_t s0 = (uintptr_t)send, r0 = (uintptr_t)recv;
    uintptr_t in_place = kind == ALLGATHER ? r0 + (uintptr_t)c->rank * in_bytes : r0;
    if (need_send && s0 != in_place && s0 < r0 + out_bytes && r0 < s0 + in_bytes) {
        emu::report("%s: rank %d: sendbuff %p (%zu bytes) overlaps recvbuff %p (%zu bytes) and is "
                    "not the in-place position %p", api, c->rank, send, in_bytes, recv, out_bytes,
                    (void *)in_place);
        return ncclInvalidArgument;
    }
    // Numbered when queued: now, or (captured into a CUDA graph) at each
    // launch of the graph, which runs the collective once a launch.
    auto make = [=]() -> std::function<bool(bool)> {
        uint64_t seq = ++c->issued;
        std::shared_ptr<Coll> k(new Coll{c, kind, send, recv, count, dt, op, root, seq, 0, 0, 0,
                                         false, Wait(), describe(kind, seq, dt, op, count, root)});
        return [k](bool block) { return coll_step(*k, block); };
    };
    c->streams.insert(stream);
    if (!emu::enqueue_step_made(stream, api, make, api)) {
        c->last = std::string(api) + ": bad stream";
        return ncclUnhandledCudaError;
    }
    return c->blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t set_global(ncclResult_t r, const char *msg)
{
    global_last = msg;
    return r;
}
} // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    EMU_LOCK;
    Comm *c = (Comm *)comm;
    if (comm && comms.count(c)) return c->last.c_str();
    return global_last.c_str();
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    EMU_LOCK;
    emu::init();
    if (!id) return set_global(ncclInvalidArgument, "ncclGetUniqueId: NULL id");
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long rnd = (unsigned long long)ts.tv_nsec * 2654435761ull ^ (unsigned long long)ts.tv_sec;
    snprintf(id->internal, sizeof id->internal, "%s/sl-emu-nccl-%d-%u-%llx", ID_TAG, (int)getpid(),
             ++id_counter, rnd & 0xffffffffffull);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    EMU_LOCK;
    emu::init();
    const char *api = "ncclCommInitRankConfig";
    if (!comm) return set_global(ncclInvalidArgument, "ncclCommInitRankConfig: NULL comm");
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        emu::report("%s: rank %d of %d ranks: out of range", api, rank, nranks);
        return set_global(ncclInvalidArgument, "rank outside [0, nranks)");
    }
    if (strncmp(id.internal, ID_TAG, sizeof ID_TAG - 1) || !memchr(id.internal, 0, sizeof id.internal)) {
        emu::report("%s: rank %d: the id was not made by ncclGetUniqueId (not sent intact from "
                    "the rank that made it?)", api, rank);
        return set_global(ncclInvalidArgument, "bad ncclUniqueId");
    }
    int blocking = 1;
    if (config) {
        if (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t)) {
            emu::report("%s: rank %d: config not initialized with NCCL_CONFIG_INITIALIZER "
                        "(magic %#x, size %zu)", api, rank, config->magic, config->size);
            return set_global(ncclInvalidArgument, "config not from NCCL_CONFIG_INITIALIZER");
        }
        if (config->blocking != NCCL_CONFIG_UNDEF_INT) blocking = config->blocking != 0;
    }
    Comm *c = new Comm();
    c->rank = rank, c->nranks = nranks, c->blocking = blocking;
    cudaGetDevice(&c->device);
    snprintf(c->name, sizeof c->name, "%s", id.internal + sizeof ID_TAG - 1);
    c->async = ncclInProgress;
    comms.insert(c);
    *comm = (ncclComm_t)c;
    ncclResult_t r = join(c);
    if (r != ncclSuccess) {
        c->async = r;
        return r;
    }
    if (!blocking) return ncclInProgress; // ncclCommGetAsyncError completes it
    if (init_poll(c, true) != READY) return c->async;
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
    EMU_LOCK;
    emu::init();
    Comm *c = comm_of(comm, "ncclCommGetAsyncError");
    if (!c || !err) return ncclInvalidArgument;
    if (c->joined && !c->init_done && c->async == ncclInProgress)
        init_poll(c, false);
    else if (c->finalizing && !c->finalized && c->async == ncclInProgress)
        fin_poll(c, false);
    *err = c->async;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    EMU_LOCK;
    Comm *c = comm_of(comm, "ncclCommCount");
    if (!c || !count) return ncclInvalidArgument;
    *count = c->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    EMU_LOCK;
    Comm *c = comm_of(comm, "ncclCommUserRank");
    if (!c || !rank) return ncclInvalidArgument;
    *rank = c->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    EMU_LOCK;
    Comm *c = comm_of(comm, "ncclCommCuDevice");
    if (!c || !device) return ncclInvalidArgument;
    *device = c->device;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    EMU_LOCK;
    emu::init();
    Comm *c = comm_of(comm, "ncclCommFinalize");
    if (!c) return ncclInvalidArgument;
    if (!c->init_done || c->finalizing) {
        emu::report("ncclCommFinalize: rank %d: %s", c->rank, c->finalizing ? "finalized twice" :
                    "init has not completed");
        return ncclInvalidUsage;
    }
    c->finalizing = true;
    if (is_error(c->async)) return c->async;
    c->async = ncclInProgress;
    if (!c->blocking) return ncclInProgress;
    return fin_poll(c, true) == READY ? ncclSuccess : c->async;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    EMU_LOCK;
    emu::init();
    Comm *c = comm_of(comm, "ncclCommDestroy");
    if (!c) return ncclInvalidArgument;
    // NCCL finalizes a comm destroyed without ncclCommFinalize (blocking)
    if (c->init_done && !c->finalized && !is_error(c->async)) {
        c->finalizing = true;
        c->async = ncclInProgress;
        fin_poll(c, true);
    }
    c->dead = true;
    unmap(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    Comm *c = (Comm *)comm;
    {
        EMU_LOCK; // a comm from this process? (a blocked wait checks aborting without the lock)
        if (!comms.count(c)) { emu::report("ncclCommAbort: %p is not a communicator", (void *)comm); return ncclInvalidArgument; }
    }
    c->aborting.store(1); // a wait in progress on another thread gives up
    EMU_LOCK;
    if (c->dead) {
        emu::report("ncclCommAbort: communicator (rank %d of %d) used after ncclCommDestroy / "
                    "ncclCommAbort", c->rank, c->nranks);
        return ncclInvalidArgument;
    }
    if (c->base && !c->finalized) {
        int32_t none = 0;
        hdr(c)->aborted_by.compare_exchange_strong(none, c->rank + 1);
    }
    if (c->joined && !c->init_done) shm_unlink(c->name);
    // its collectives still queued complete at once (they check aborting)
    for (cudaStream_t s : c->streams)
        if (c->completed < c->issued) emu::progress(s, false);
    c->dead = true;
    unmap(c);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return coll("ncclAllReduce", ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    return coll("ncclBroadcast", BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    return coll("ncclBcast", BROADCAST, buff, buff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return coll("ncclAllGather", ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}

} // extern "C"
