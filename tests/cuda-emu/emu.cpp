// emu.cpp - kernel execution: every block of a grid in turn; its threads as
// fibers that switch only at barriers (__syncthreads, shuffles). A block
// whose threads never reach a barrier is run again without fibers for the
// rest of the grid (plain calls, much cheaper); a barrier reached there
// aborts with a message instead of running wrongly.
// Switching: a small x86-64 stack switch (emu_ctx_switch below); fibers
// are made once and reused by every block and launch.
#include "emu.h"
#include "emu_core.h"
#include <cstdio>
#include <cstdlib>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

static const size_t STACK = 128 * 1024;
static std::vector<char *> stacks;
static void *fib_sp[1024], *sched_sp;
static int cur, nthreads;
static int waiting[1024], done_[1024];
static bool in_fiber, saw_sync;
static std::function<void()> *body;
static const char *kernel_name;

// x86-64 context switch: callee-saved registers on the old stack, its sp
// into *save, then the new stack's registers and return address.
extern "C" void emu_ctx_switch(void **save, void *to);
asm(R"(
.text
.globl emu_ctx_switch
.type emu_ctx_switch,@function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size emu_ctx_switch, .-emu_ctx_switch
)");

static void set_tid(int t)
{
    if (blockDim.y == 1 && blockDim.z == 1) { threadIdx.x = t; threadIdx.y = threadIdx.z = 0; return; }
    threadIdx.x = t % blockDim.x;
    threadIdx.y = (t / blockDim.x) % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

static void fiber_main()
{
    for (;;) {
        (*body)();
        done_[cur] = 1;
        emu_ctx_switch(&fib_sp[cur], sched_sp);
    }
}

static void ensure_fibers(int n)
{
    while ((int)stacks.size() < n) {
        int t = (int)stacks.size();
        char *st = (char *)malloc(STACK);
        if (!st) { fprintf(stderr, "EMU: out of memory for fiber stacks\n"); abort(); }
        stacks.push_back(st);
        // stagger the tops: stacks at the same offset mod 4 KiB would share cache sets
        uintptr_t top = ((uintptr_t)st + STACK - (size_t)(t * 208) % 4096) & ~(uintptr_t)15;
        void **sp = (void **)top;
        *--sp = NULL;                  // fake return address of fiber_main
        *--sp = (void *)fiber_main;    // popped by emu_ctx_switch's ret
        for (int r = 0; r < 6; r++) *--sp = NULL; // rbp rbx r12-r15
        fib_sp[t] = sp;
    }
}

static void resume(int t)
{
    cur = t;
    set_tid(t);
    emu_ctx_switch(&sched_sp, fib_sp[t]);
}

static void wait_kind(int kind)
{
    if (!in_fiber) {
        fprintf(stderr, "EMU: kernel %s reached a barrier in block (%u,%u,%u) after block 0 had "
                "none: the emulator cannot run it\n", kernel_name, blockIdx.x, blockIdx.y, blockIdx.z);
        abort();
    }
    saw_sync = true;
    waiting[cur] = kind; // 1: __syncthreads (block), 2: a warp-level exchange
    emu_ctx_switch(&fib_sp[cur], sched_sp);
}
void emu_sync() { wait_kind(1); }
static void warp_sync() { wait_kind(2); }

static double slots[1024];
double emu_shfl_down(double v, int o)
{
    int t = cur, lane = t & 31;
    slots[t] = v;
    warp_sync();
    double r = lane + o < 32 && t + o < nthreads ? slots[t + o] : v;
    warp_sync();
    return r;
}

static int islots[1024];
int emu_sync_or(int v)
{
    int t = cur;
    islots[t] = v;
    emu_sync();
    int r = 0;
    for (int i = 0; i < nthreads; i++) r |= islots[i];
    emu_sync();
    return r;
}

// Run until every thread is done. A warp's threads waiting at a warp
// exchange go on when all its live threads are there; __syncthreads
// releases when every live thread of the block waits at it.
static void run_block_fibers(int nt)
{
    in_fiber = true;
    for (int t = 0; t < nt; t++) waiting[t] = done_[t] = 0;
    for (;;) {
        for (int t = 0; t < nt; t++) {
            if (done_[t] || waiting[t]) continue;
            resume(t);
        }
        int ndone = 0, nblock = 0, nwarp = 0;
        for (int t = 0; t < nt; t++) { ndone += done_[t]; nblock += waiting[t] == 1; nwarp += waiting[t] == 2; }
        if (ndone == nt) break;
        bool progress = false;
        for (int w = 0; w * 32 < nt; w++) {
            int lo = w * 32, hi = lo + 32 < nt ? lo + 32 : nt, live = 0, ww = 0;
            for (int t = lo; t < hi; t++) { live += !done_[t]; ww += waiting[t] == 2; }
            if (ww && ww == live) {
                for (int t = lo; t < hi; t++) if (waiting[t] == 2) waiting[t] = 0;
                progress = true;
            }
        }
        if (progress) continue;
        if (nwarp)
            emu::report("kernel %s: block (%u,%u,%u): %d threads wait at a warp exchange that the "
                        "rest of their warp never reaches", kernel_name, blockIdx.x, blockIdx.y,
                        blockIdx.z, nwarp);
        else if (ndone && nblock)
            emu::report("kernel %s: block (%u,%u,%u): %d threads wait at a barrier that %d "
                        "exited threads never reach (divergent __syncthreads)", kernel_name,
                        blockIdx.x, blockIdx.y, blockIdx.z, nblock, ndone);
        for (int t = 0; t < nt; t++) waiting[t] = 0;
    }
    in_fiber = false;
}

void emu_run_grid(const char *name, dim3 g, dim3 b, const std::function<void()> &f)
{
    int nt = (int)(b.x * b.y * b.z);
    ensure_fibers(nt);
    std::function<void()> fcopy = f;
    body = &fcopy;
    kernel_name = name;
    nthreads = nt;
    gridDim = g; blockDim = b;
    saw_sync = false;
    bool first = true, fibers = true;
    for (unsigned bz = 0; bz < g.z; bz++)
    for (unsigned by = 0; by < g.y; by++)
    for (unsigned bx = 0; bx < g.x; bx++) {
        blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
        if (fibers) {
            run_block_fibers(nt);
            if (first && !saw_sync) fibers = false;
            first = false;
        } else {
            for (int t = 0; t < nt; t++) { cur = t; set_tid(t); fcopy(); }
        }
    }
}
