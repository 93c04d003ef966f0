// emu_rt.cpp - the CUDA runtime on the host: memory, streams, events,
// copies, graphs, errors, device queries (emu_core.h has the model).
#include "emu.h"
#include "emu_core.h"
#include <cuda_runtime.h>
#include <cblas.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

void emu_run_grid(const char *name, dim3 g, dim3 b, const std::function<void()> &f);

namespace emu {
std::recursive_mutex mu;
static int inited, lazy_mode = 1, abort_on = 0, guard_on = 1;
static unsigned char poison = 0xff;
static long nreports;
static const size_t REGION = (size_t)64 << 30, PAGE = 4096;
static uintptr_t region, top;
static thread_local cudaError_t last_err = cudaSuccess;

struct Alloc { uintptr_t page, base; size_t size, cap; Kind kind; bool live; long id; };
static std::map<uintptr_t, Alloc> allocs; // by base (device: live and dead; pinned: live)
static long next_id;
static size_t live_bytes, peak_bytes;
static int open_depth;

bool lazy() { return lazy_mode; }
void set_error(cudaError_t e) { last_err = e; }

static void bt()
{
    void *f[32];
    int n = backtrace(f, 32);
    backtrace_symbols_fd(f + 1, n - 1, 2);
}

void report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "EMU: error: %s\n", buf);
    bt();
    nreports++;
    if (abort_on) abort();
}

void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "EMU: warning: %s\n", buf);
    if (getenv("EMU_WARN_BT")) bt();
}

static const Alloc *find(uintptr_t p)
{
    auto it = allocs.upper_bound(p);
    if (it == allocs.begin()) return NULL;
    --it;
    const Alloc &a = it->second;
    uintptr_t end = a.kind == DEVICE ? a.page + a.cap : a.base + a.size;
    return p >= (a.kind == DEVICE ? a.page : a.base) && p < end ? &a : NULL;
}

static void segv(int sig, siginfo_t *si, void *)
{
    uintptr_t p = (uintptr_t)si->si_addr;
    if (p >= region && p < region + REGION) {
        const Alloc *a = find(p);
        char what[200];
        if (a)
            snprintf(what, sizeof what, "%s allocation #%ld of %zu bytes at %p, offset %ld",
                     a->live ? "live" : "FREED", a->id, a->size, (void *)a->base,
                     (long)(p - a->base));
        else
            snprintf(what, sizeof what, "no allocation");
        fprintf(stderr, "EMU: error: %s touched device memory at %p (%s)%s\n",
                open_depth ? "device work (a kernel / copy / library call)" : "HOST code",
                (void *)p, what,
                open_depth ? ": past the end of an allocation, or freed" : "");
    } else {
        fprintf(stderr, "EMU: SIGSEGV at %p (not device memory)\n", (void *)p);
    }
    bt();
    signal(sig, SIG_DFL);
}

void init()
{
    if (inited) return;
    inited = 1;
    const char *v;
    if ((v = getenv("EMU_LAZY"))) lazy_mode = atoi(v);
    if ((v = getenv("EMU_ABORT"))) abort_on = atoi(v);
    if ((v = getenv("EMU_GUARD"))) guard_on = atoi(v);
    if ((v = getenv("EMU_POISON"))) poison = (unsigned char)strtol(v, NULL, 0);
    void *r = mmap(NULL, REGION, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) { perror("EMU: mmap"); abort(); }
    region = top = (uintptr_t)r;
    // OpenBLAS's threads spin in sched_yield between the emulator's small
    // GEMMs: one thread is faster here (EMU_BLAS_THREADS to change)
    openblas_set_num_threads((v = getenv("EMU_BLAS_THREADS")) ? atoi(v) : 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

static void protect(const Alloc &a, int prot)
{
    if (mprotect((void *)a.page, a.cap, prot)) { perror("EMU: mprotect"); abort(); }
}

void dev_open()
{
    if (open_depth++ == 0)
        for (auto &kv : allocs)
            if (kv.second.kind == DEVICE && kv.second.live) protect(kv.second, PROT_READ | PROT_WRITE);
}

void dev_close()
{
    if (--open_depth == 0)
        for (auto &kv : allocs)
            if (kv.second.kind == DEVICE && kv.second.live) protect(kv.second, PROT_NONE);
}

Kind kind_of(const void *p)
{
    const Alloc *a = find((uintptr_t)p);
    return a && a->live ? a->kind : HOST;
}

static const char *kind_name(Kind k) { return k == DEVICE ? "device" : k == PINNED ? "pinned host" : "pageable host"; }

bool check_range(const char *api, const char *what, const void *p, size_t n, Kind want)
{
    uintptr_t u = (uintptr_t)p;
    const Alloc *a = find(u);
    if (want == HOST) {
        if (a && a->kind == DEVICE) {
            report("%s: %s %p is device memory (allocation #%ld), a host pointer was expected",
                   api, what, p, a->id);
            return false;
        }
        return true;
    }
    if (!p) { report("%s: %s is NULL (%s memory expected)", api, what, kind_name(want)); return false; }
    if (!a || !a->live || a->kind != want) {
        if (a && !a->live)
            report("%s: %s %p is in FREED device allocation #%ld (%zu bytes)", api, what, p, a->id, a->size);
        else
            report("%s: %s %p is %s memory, %s memory expected", api, what, p,
                   a ? kind_name(a->kind) : "pageable host", kind_name(want));
        return false;
    }
    if (u < a->base || u + n > a->base + a->size) {
        report("%s: %s %p + %zu bytes leaves %s allocation #%ld (%p, %zu bytes)", api, what, p, n,
               kind_name(want), a->id, (void *)a->base, a->size);
        return false;
    }
    return true;
}

// ------------------------------------------------------------ streams
// An op is a plain function (a kernel, a copy: done when it returns) or a
// step (host work that may wait on something outside this process, NCCL):
// step(block) returns true once the work is done; false leaves it at the
// head of its stream, later ops waiting behind it (work in progress).
struct Op { std::function<void()> fn; const char *what; std::function<bool(bool)> step; };
// A node of a captured graph: a plain op (fn), or a step made afresh at each
// launch (make: an NCCL collective's progress and sequence number belong to
// one run of it, and it takes its number when the launch queues it).
struct GNode { std::function<void()> fn; std::function<std::function<bool(bool)>()> make; const char *what; };
struct Stream {
    unsigned magic;
    int id, nonblocking, destroyed, capturing; // capturing: 0 no, 1 yes, 2 invalidated
    cudaStreamCaptureMode capmode;             // of the capture in progress
    pthread_t capthread;                       // the thread that began it
    std::deque<std::pair<uint64_t, Op>> q; // (seq, op)
    uint64_t queued, done;                  // ops queued / run so far
    std::vector<GNode> *graph;
};
struct Event { unsigned magic; int destroyed; Stream *s; uint64_t seq; int recorded; };
static const unsigned SMAGIC = 0x57e4a3, EMAGIC = 0xe7e47;
static Stream legacy_stream = {SMAGIC, 0, 0, 0, 0, cudaStreamCaptureModeGlobal, 0, {}, 0, 0, NULL};
static std::set<Stream *> streams;  // every stream ever made (destroyed ones kept)
static std::set<Event *> events;
static int nstreams;

Stream *stream_of(cudaStream_t s, const char *api, bool *ok)
{
    *ok = true;
    if (!s || s == cudaStreamLegacy) return &legacy_stream;
    if (s == cudaStreamPerThread) return &legacy_stream;
    Stream *st = (Stream *)s;
    if (!streams.count(st)) {
        report("%s: %p is not a stream this process created", api, (void *)s);
        *ok = false;
        return NULL;
    }
    if (st->destroyed) {
        report("%s: stream #%d used after cudaStreamDestroy", api, st->id);
        *ok = false;
        return NULL;
    }
    return st;
}

static bool run_until(Stream *s, uint64_t upto, int depth, bool block);
static Stream *legacy() { return &legacy_stream; }

// A wait on (t, seq): t runs its ops up to seq first (a step: t may have
// work in progress at its head).
static std::function<bool(bool)> wait_op(Stream *t, uint64_t seq)
{
    return [t, seq](bool block) { return run_until(t, seq, 1, block); };
}

// Run s's ops up to seq upto; false when a step is still in progress (s
// stays there). block: the host waits (a synchronize), else a query.
static bool run_until(Stream *s, uint64_t upto, int depth, bool block)
{
    if (depth > 64) { report("stream dependency cycle (streams wait on each other's events)"); return false; }
    if (s->done >= upto || s->q.empty()) return true;
    bool reached = true;
    dev_open(); // once for the whole batch of ops (mprotect is not cheap)
    while (s->done < upto && !s->q.empty()) {
        if (s->q.front().second.step) {
            std::function<bool(bool)> step = s->q.front().second.step; // may re-enter
            if (!step(block)) { reached = false; break; }
            s->q.pop_front();
        } else {
            Op op = std::move(s->q.front().second);
            s->q.pop_front();
            op.fn();
        }
        s->done++;
    }
    dev_close();
    return reached;
}

static void push_op(Stream *s, Op op)
{
    // the legacy stream and blocking streams order with each other
    if (s == &legacy_stream) {
        for (Stream *o : streams)
            if (!o->destroyed && !o->nonblocking && o->queued > o->done)
                s->q.push_back({s->queued++, Op{nullptr, "legacy-wait", wait_op(o, o->queued)}});
    } else if (!s->nonblocking && legacy_stream.queued > legacy_stream.done) {
        s->q.push_back({s->queued++, Op{nullptr, "legacy-wait", wait_op(&legacy_stream, legacy_stream.queued)}});
    }
    s->q.push_back({s->queued++, std::move(op)});
    if (!lazy_mode) run_until(s, s->queued, 0, false); // eager: what can run now
}

void enqueue(Stream *s, std::function<void()> fn, const char *what)
{
    if (s->capturing) { s->graph->push_back(GNode{std::move(fn), nullptr, what}); return; }
    push_op(s, Op{std::move(fn), what, nullptr});
}

// A graph node that is a step: into the graph being captured, or (a launch
// on a stream that is not capturing) made and queued.
static void enqueue_made(Stream *s, const GNode &n)
{
    if (s->capturing) { s->graph->push_back(n); return; }
    push_op(s, Op{nullptr, n.what, n.make()});
}

bool enqueue_step_made(cudaStream_t h, const char *api, std::function<std::function<bool(bool)>()> make,
                       const char *what)
{
    EMU_LOCK;
    init();
    bool ok;
    Stream *s = stream_of(h, api, &ok);
    if (!ok) return false;
    enqueue_made(s, GNode{nullptr, std::move(make), what});
    return true;
}

bool enqueue_step(cudaStream_t h, const char *api, std::function<bool(bool)> step, const char *what)
{
    EMU_LOCK;
    init();
    bool ok;
    Stream *s = stream_of(h, api, &ok);
    if (!ok) return false;
    if (s->capturing) {
        report("%s during stream capture: not emulated (a graph holds kernels and copies only)", api);
        s->capturing = 2;
        return false;
    }
    push_op(s, Op{nullptr, what, std::move(step)});
    return true;
}

bool flush(Stream *s, bool block) { return run_until(s, s->queued, 0, block); }

bool progress(cudaStream_t h, bool block)
{
    EMU_LOCK;
    bool ok;
    Stream *s = stream_of(h, "progress", &ok);
    return ok && flush(s, block);
}

bool flush_all()
{
    bool ok = flush(&legacy_stream);
    for (Stream *o : streams) if (!o->destroyed) ok &= flush(o);
    return ok;
}

// A potentially unsafe call (a host sync, cudaMalloc / cudaFree, a
// synchronous copy or memset) while a stream captures, as the driver
// rules it: prohibited from any thread during a cudaStreamCaptureModeGlobal
// capture, from the capturing thread during a ThreadLocal one, never during
// a Relaxed one. A prohibited call fails (the caller returns
// cudaErrorStreamCaptureUnsupported) and invalidates the capture (its
// cudaStreamEndCapture returns cudaErrorStreamCaptureInvalidated): a
// runtime error the program may recover from, so a warning, not a report.
static bool nocap(const char *api)
{
    bool any = false;
    pthread_t me = pthread_self();
    for (Stream *o : streams)
        if (o->capturing && !o->destroyed &&
            (o->capmode == cudaStreamCaptureModeGlobal ||
             (o->capmode == cudaStreamCaptureModeThreadLocal && pthread_equal(o->capthread, me)))) {
            o->capturing = 2;
            any = true;
        }
    if (any) warn("%s during stream capture: not permitted, the capture is invalidated", api);
    return any;
}

// An operation queued on a capturing stream that a graph cannot hold (a
// copy to or from pageable memory): fails and invalidates that capture.
static bool cap_refuse(Stream *s, const char *api, const char *why)
{
    if (!s->capturing) return false;
    s->capturing = 2;
    warn("%s on a capturing stream: %s: not permitted, the capture is invalidated", api, why);
    return true;
}

static Event *event_of(cudaEvent_t e, const char *api)
{
    Event *ev = (Event *)e;
    if (!e || !events.count(ev)) { report("%s: %p is not an event this process created", api, (void *)e); return NULL; }
    if (ev->destroyed) { report("%s: event used after cudaEventDestroy", api); return NULL; }
    return ev;
}
} // namespace emu

using namespace emu;

#define API_BEGIN EMU_LOCK; emu::init()
// a synchronize that cannot finish: a step (an NCCL collective) gave up
// waiting (EMU_NCCL_TIMEOUT_S, reported); on a GPU it would hang
#define STUCK cudaErrorLaunchTimeout
#define FAIL(err) do { last_err = (err); return (err); } while (0)
#define STREAM(var, h, api) bool ok_##var; Stream *var = stream_of((h), (api), &ok_##var); if (!ok_##var) FAIL(cudaErrorInvalidResourceHandle)

void emu_check_kernel_ptr(const char *kernel, int arg, const void *p)
{
    EMU_LOCK;
    emu::init();
    if (!p) return;
    const Alloc *a = find((uintptr_t)p);
    if (!a || a->kind == HOST)
        report("kernel %s: argument %d = %p is pageable host memory", kernel, arg, p);
    else if (!a->live)
        report("kernel %s: argument %d = %p is in FREED device allocation #%ld", kernel, arg, p, a->id);
}

void emu_launch(const char *name, dim3 g, dim3 b, size_t shm, cudaStream_t s, std::function<void()> f)
{
    API_BEGIN;
    (void)shm;
    bool sok;
    Stream *st = stream_of(s, name, &sok);
    if (!sok) { last_err = cudaErrorInvalidResourceHandle; return; }
    unsigned long nt = (unsigned long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || g.y > 65535 || g.z > 65535 || g.x > 0x7fffffffu || !nt || nt > 1024 ||
        b.z > 64) {
        warn("kernel %s: launch grid (%u,%u,%u) block (%u,%u,%u): invalid configuration", name,
             g.x, g.y, g.z, b.x, b.y, b.z);
        last_err = cudaErrorInvalidConfiguration;
        return;
    }
    enqueue(st, [name, g, b, f]() { emu_run_grid(name, g, b, f); }, name);
}

extern "C" {
cudaError_t cudaGetLastError(void) { cudaError_t e = last_err; last_err = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return last_err; }
const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorLaunchTimeout: return "cudaErrorLaunchTimeout";
    default: return "cudaErrorUnknown(emu)";
    }
}
const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated (emulator: a "
                                        "stream stuck on an NCCL collective, see EMU: error)";
    default: return "emulator error";
    }
}

static thread_local int cur_dev;
static int emu_ndev(void) { const char *v = getenv("EMU_DEVICES"); return v ? atoi(v) : 1; }
cudaError_t cudaGetDeviceCount(int *n)
{
    API_BEGIN;
    *n = emu_ndev();
    if (*n <= 0) { *n = 0; FAIL(cudaErrorNoDevice); }
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d)
{
    API_BEGIN;
    if (d < 0 || d >= emu_ndev()) FAIL(cudaErrorInvalidDevice);
    cur_dev = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) { *d = cur_dev; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp *p, int d)
{
    API_BEGIN;
    if (d < 0 || d >= emu_ndev()) FAIL(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    strcpy(p->name, "sluice host emulator");
    p->totalGlobalMem = REGION;
    p->major = 9, p->minor = 0;
    p->multiProcessorCount = 132;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    p->sharedMemPerBlock = 48 << 10;
    p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    return cudaSuccess;
}
// CUDA 13's name (the _v2 above is CUDA 12's, where the header maps to it)
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) { return cudaGetDeviceProperties_v2(p, d); }
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    API_BEGIN;
    if (d < 0 || d >= emu_ndev()) FAIL(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    default: *v = 0;
    }
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot)
{
    API_BEGIN;
    *tot = (size_t)80 << 30;
    *fr = *tot - live_bytes;
    return cudaSuccess;
}

// ------------------------------------------------------------ memory
cudaError_t cudaMalloc(void **p, size_t n)
{
    API_BEGIN;
    *p = NULL;
    if (nocap("cudaMalloc")) FAIL(cudaErrorStreamCaptureUnsupported);
    if (n > ((size_t)60 << 30)) FAIL(cudaErrorMemoryAllocation);
    size_t sz = n ? n : 1, cap = (sz + 255) / 256 * 256;
    size_t pages = (cap + PAGE - 1) / PAGE * PAGE;
    if (top + pages + PAGE > region + REGION) FAIL(cudaErrorMemoryAllocation);
    Alloc a;
    a.page = top;
    a.cap = pages;
    a.base = guard_on ? a.page + pages - cap : a.page; // overruns hit the guard page
    a.size = sz, a.kind = DEVICE, a.live = true, a.id = ++next_id;
    top += pages + PAGE;
    protect(a, PROT_READ | PROT_WRITE);
    memset((void *)a.page, poison, pages);
    if (!open_depth) protect(a, PROT_NONE);
    allocs[a.base] = a;
    live_bytes += sz;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    *p = (void *)a.base;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    API_BEGIN;
    if (!p) return cudaSuccess;
    if (nocap("cudaFree")) FAIL(cudaErrorStreamCaptureUnsupported);
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.kind != DEVICE) {
        report("cudaFree(%p): not the start of a device allocation (%s memory)", p,
               kind_name(kind_of(p)));
        FAIL(cudaErrorInvalidValue);
    }
    if (!it->second.live) { report("cudaFree(%p): double free of allocation #%ld", p, it->second.id); FAIL(cudaErrorInvalidValue); }
    flush_all(); // cudaFree synchronizes the device
    Alloc &a = it->second;
    a.live = false;
    live_bytes -= a.size;
    protect(a, PROT_NONE);
    madvise((void *)a.page, a.cap, MADV_DONTNEED);
    return cudaSuccess;
}

// What a pointer is (collectives/nccl.c checks buffers with it): device or
// pinned memory of a live allocation; anything else, pageable memory
// included, is "unregistered" with cudaSuccess (CUDA 11+). A freed device
// allocation counts as unregistered too (CUDA: cudaErrorInvalidValue).
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *at, const void *p)
{
    API_BEGIN;
    if (!at) FAIL(cudaErrorInvalidValue);
    memset(at, 0, sizeof *at);
    const Alloc *a = find((uintptr_t)p);
    if (a && !a->live) FAIL(cudaErrorInvalidValue);
    at->type = !a ? cudaMemoryTypeUnregistered : a->kind == DEVICE ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    at->device = a ? cur_dev : -2;
    at->devicePointer = a && a->kind == DEVICE ? (void *)p : NULL;
    at->hostPointer = a && a->kind == PINNED ? (void *)p : NULL;
    if (!a) at->hostPointer = (void *)p;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    API_BEGIN;
    (void)flags;
    *p = NULL;
    size_t sz = n ? n : 1;
    void *m = NULL;
    if (posix_memalign(&m, 4096, sz)) FAIL(cudaErrorMemoryAllocation);
    memset(m, poison, sz);
    Alloc a{(uintptr_t)m, (uintptr_t)m, sz, sz, PINNED, true, ++next_id};
    allocs[a.base] = a;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

cudaError_t cudaFreeHost(void *p)
{
    API_BEGIN;
    if (!p) return cudaSuccess;
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.kind != PINNED) {
        report("cudaFreeHost(%p): not a cudaHostAlloc pointer (%s memory)", p, kind_name(kind_of(p)));
        FAIL(cudaErrorInvalidValue);
    }
    flush_all();
    allocs.erase(it);
    free(p);
    return cudaSuccess;
}

// kind checks: the two sides against the direction
static bool copy_check(const char *api, void *d, const void *s, size_t n, cudaMemcpyKind k,
                       Kind *dk, Kind *sk)
{
    *dk = kind_of(d), *sk = kind_of(s);
    if (k == cudaMemcpyDefault) {
        if (*dk == HOST && *sk == HOST) { report("%s: cudaMemcpyDefault between two pageable host buffers", api); return false; }
    } else {
        bool dd = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
        bool sd = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
        if (k == cudaMemcpyHostToHost) dd = sd = false;
        if (dd != (*dk == DEVICE) || sd != (*sk == DEVICE)) {
            static const char *kn[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice"};
            report("%s: cudaMemcpy%s but dst %p is %s memory and src %p is %s memory", api,
                   kn[(int)k & 3], d, kind_name(*dk), s, kind_name(*sk));
            return false;
        }
    }
    bool ok = true;
    if (*dk != HOST) ok &= check_range(api, "dst", d, n, *dk);
    if (*sk != HOST) ok &= check_range(api, "src", s, n, *sk);
    return ok;
}

cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k)
{
    API_BEGIN;
    if (nocap("cudaMemcpy")) FAIL(cudaErrorStreamCaptureUnsupported);
    if (!n) return cudaSuccess;
    Kind dk, sk;
    if (!copy_check("cudaMemcpy", d, s, n, k, &dk, &sk)) FAIL(cudaErrorInvalidValue);
    Stream *ls = legacy();
    // legacy stream: after its queued work and the blocking streams', NOT
    // after non-blocking streams' work
    enqueue(ls, [d, s, n]() { memmove(d, s, n); }, "cudaMemcpy");
    if (!flush(ls)) FAIL(STUCK);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t h)
{
    API_BEGIN;
    STREAM(st, h, "cudaMemcpyAsync");
    if (!n) return cudaSuccess;
    Kind dk, sk;
    if (!copy_check("cudaMemcpyAsync", d, s, n, k, &dk, &sk)) FAIL(cudaErrorInvalidValue);
    if ((sk == HOST || dk == HOST) && cap_refuse(st, "cudaMemcpyAsync", "pageable host memory"))
        FAIL(cudaErrorStreamCaptureUnsupported);
    if (sk == HOST) {
        // pageable source: staged at the call (CUDA returns after staging)
        std::shared_ptr<std::vector<char>> buf(new std::vector<char>((const char *)s, (const char *)s + n));
        enqueue(st, [d, buf, n]() { memmove(d, buf->data(), n); }, "cudaMemcpyAsync(pageable src)");
    } else {
        enqueue(st, [d, s, n]() { memmove(d, s, n); }, "cudaMemcpyAsync");
    }
    if (dk == HOST && !st->capturing && !flush(st)) FAIL(STUCK); // to pageable memory: returns when done
    return cudaSuccess;
}

cudaError_t cudaMemset(void *d, int v, size_t n)
{
    API_BEGIN;
    if (!n) return cudaSuccess;
    if (nocap("cudaMemset")) FAIL(cudaErrorStreamCaptureUnsupported);
    if (!check_range("cudaMemset", "dst", d, n, DEVICE)) FAIL(cudaErrorInvalidValue);
    Stream *ls = legacy();
    enqueue(ls, [d, v, n]() { memset(d, v, n); }, "cudaMemset");
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t h)
{
    API_BEGIN;
    STREAM(st, h, "cudaMemsetAsync");
    if (!n) return cudaSuccess;
    if (!check_range("cudaMemsetAsync", "dst", d, n, DEVICE)) FAIL(cudaErrorInvalidValue);
    enqueue(st, [d, v, n]() { memset(d, v, n); }, "cudaMemsetAsync");
    return cudaSuccess;
}

// ------------------------------------------------------------ streams
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags)
{
    API_BEGIN;
    Stream *s = new Stream{SMAGIC, ++nstreams, (flags & cudaStreamNonBlocking) != 0, 0, 0,
                           cudaStreamCaptureModeGlobal, 0, {}, 0, 0, NULL};
    streams.insert(s);
    *out = (cudaStream_t)s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    API_BEGIN;
    if (!h) { report("cudaStreamDestroy(NULL)"); FAIL(cudaErrorInvalidResourceHandle); }
    STREAM(st, h, "cudaStreamDestroy");
    flush(st); // its work still completes
    st->destroyed = 1;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    API_BEGIN;
    STREAM(st, h, "cudaStreamSynchronize");
    if (st->capturing) { cap_refuse(st, "cudaStreamSynchronize", "a host sync of the capturing stream"); FAIL(cudaErrorStreamCaptureUnsupported); }
    if (nocap("cudaStreamSynchronize")) FAIL(cudaErrorStreamCaptureUnsupported);
    if (!flush(st)) FAIL(STUCK);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t h)
{
    API_BEGIN;
    STREAM(st, h, "cudaStreamQuery");
    if (st->capturing) { cap_refuse(st, "cudaStreamQuery", "a query of the capturing stream"); FAIL(cudaErrorStreamCaptureUnsupported); }
    // work makes progress on its own on a GPU: run it, then report done
    // (or not ready: host work in progress, an NCCL collective waiting)
    return flush(st, false) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaDeviceSynchronize(void)
{
    API_BEGIN;
    if (nocap("cudaDeviceSynchronize")) FAIL(cudaErrorStreamCaptureUnsupported);
    if (!flush_all()) FAIL(STUCK);
    return cudaSuccess;
}

// ------------------------------------------------------------ events
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags)
{
    API_BEGIN;
    (void)flags;
    Event *e = new Event{EMAGIC, 0, NULL, 0, 0};
    events.insert(e);
    *out = (cudaEvent_t)e;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t h)
{
    API_BEGIN;
    Event *e = event_of(h, "cudaEventDestroy");
    if (!e) FAIL(cudaErrorInvalidResourceHandle);
    e->destroyed = 1;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t sh)
{
    API_BEGIN;
    Event *e = event_of(h, "cudaEventRecord");
    if (!e) FAIL(cudaErrorInvalidResourceHandle);
    STREAM(st, sh, "cudaEventRecord");
    if (st->capturing) { report("cudaEventRecord during capture: not emulated"); FAIL(cudaErrorStreamCaptureUnsupported); }
    e->s = st;
    e->seq = st->queued; // complete once every op queued so far has run
    e->recorded = 1;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t h)
{
    API_BEGIN;
    Event *e = event_of(h, "cudaEventSynchronize");
    if (!e) FAIL(cudaErrorInvalidResourceHandle);
    if (!e->recorded) return cudaSuccess; // CUDA: a never-recorded event is complete
    if (!run_until(e->s, e->seq, 0, true)) FAIL(STUCK);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t h)
{
    API_BEGIN;
    Event *e = event_of(h, "cudaEventQuery");
    if (!e) FAIL(cudaErrorInvalidResourceHandle);
    if (e->recorded && !run_until(e->s, e->seq, 0, false)) return cudaErrorNotReady;
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t sh, cudaEvent_t h, unsigned flags)
{
    API_BEGIN;
    (void)flags;
    Event *e = event_of(h, "cudaStreamWaitEvent");
    if (!e) FAIL(cudaErrorInvalidResourceHandle);
    STREAM(st, sh, "cudaStreamWaitEvent");
    if (!e->recorded) {
        warn("cudaStreamWaitEvent: the event was never recorded (no-op in CUDA)");
        return cudaSuccess;
    }
    Stream *t = e->s;
    uint64_t q = e->seq; // the record as of now: a later re-record does not move this wait
    if (st->capturing) { st->graph->push_back(GNode{[t, q]() { run_until(t, q, 1, true); }, nullptr, "cudaStreamWaitEvent"}); return cudaSuccess; }
    push_op(st, Op{nullptr, "cudaStreamWaitEvent", wait_op(t, q)});
    return cudaSuccess;
}

// ------------------------------------------------------------ graphs
typedef std::vector<GNode> Graph;
cudaError_t cudaStreamBeginCapture(cudaStream_t h, cudaStreamCaptureMode mode)
{
    API_BEGIN;
    STREAM(st, h, "cudaStreamBeginCapture");
    if (st == legacy()) FAIL(cudaErrorStreamCaptureUnsupported);
    if (st->capturing) { report("cudaStreamBeginCapture: stream #%d is capturing already", st->id); FAIL(cudaErrorIllegalState); }
    st->capturing = 1;
    st->capmode = mode;
    st->capthread = pthread_self();
    st->graph = new Graph();
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t h, cudaStreamCaptureStatus *status)
{
    API_BEGIN;
    STREAM(st, h, "cudaStreamIsCapturing");
    *status = !st->capturing ? cudaStreamCaptureStatusNone
              : st->capturing == 1 ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusInvalidated;
    return cudaSuccess;
}
// EMU_CAPTURE_FAIL=1: every capture ends invalidated (fault injection: the
// program's fallback when a driver refuses to capture).
cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *g)
{
    API_BEGIN;
    STREAM(st, h, "cudaStreamEndCapture");
    if (!st->capturing) FAIL(cudaErrorInvalidValue);
    if (!pthread_equal(st->capthread, pthread_self()) && st->capmode != cudaStreamCaptureModeRelaxed) {
        report("cudaStreamEndCapture: stream #%d's capture was begun by another thread", st->id);
        st->capturing = 2;
    }
    const char *f = getenv("EMU_CAPTURE_FAIL");
    if (f && atoi(f) && st->capturing == 1) {
        warn("EMU_CAPTURE_FAIL: capture of stream #%d invalidated", st->id);
        st->capturing = 2;
    }
    int bad = st->capturing == 2;
    st->capturing = 0;
    *g = bad ? NULL : (cudaGraph_t)st->graph;
    if (bad) delete st->graph;
    st->graph = NULL;
    return bad ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long)
{
    API_BEGIN;
    *e = (cudaGraphExec_t) new Graph(*(Graph *)g);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t h)
{
    API_BEGIN;
    STREAM(st, h, "cudaGraphLaunch");
    for (auto &n : *(Graph *)e) {
        if (n.make) enqueue_made(st, n);
        else enqueue(st, n.fn, n.what ? n.what : "graph node");
    }
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { EMU_LOCK; delete (Graph *)e; return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { EMU_LOCK; delete (Graph *)g; return cudaSuccess; }
} // extern "C"

static struct AtExit {
    ~AtExit() {
        if (emu::nreports) fprintf(stderr, "EMU: %ld misuse report(s) in process %d\n", emu::nreports, (int)getpid());
        if (getenv("EMU_MEM_REPORT"))
            fprintf(stderr, "EMU: peak device memory %zu bytes (cudaMalloc, live at once) in process %d\n",
                    emu::peak_bytes, (int)getpid());
    }
} at_exit_;
