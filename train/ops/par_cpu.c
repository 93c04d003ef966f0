/*
 * train/ops/par_cpu.c - sl_par_for: the cpu backend's memory-bound passes
 * (batch norm, ReLU, add, pooling) split over the exec's threads.
 *
 * DESIGN. Fork-join on the calling thread's OpenMP team (libgomp): a
 * parallel region of t = min(e->threads, n / grain) threads, thread i runs
 * fn on the i-th of t contiguous ranges of [0, n), and the region's end is
 * the join. No queue, no lock, no state between calls. Why OpenMP rather
 * than a pool of our own: oneDNN (conv_dnnl.c) runs its kernels on the same
 * team, so the convolutions and these passes hand work to the same worker
 * threads; a second pool would sit spinning beside libgomp's on the same two
 * cores. A replica thread's team is its own (sized by its exec), so replicas
 * do not share workers. Built without OpenMP (a compiler without it, or
 * -DSLUICE_WITH_DNNL=OFF with no OpenMP found) the loop runs serially.
 *
 * Ordering and determinism: the ranges depend on n, grain and e->threads
 * only, each range is done by one thread in index order, and callers merge
 * per-range partial results in range order after the join, so a result
 * never depends on thread timing. Callers whose passes reduce (BN's sums)
 * cut their rows into fixed blocks independent of t, so the bits do not
 * depend on the thread count either.
 *
 * TSan: libgomp is not instrumented, so ThreadSanitizer cannot see the
 * happens-before of a region's fork and join. Under -fsanitize=thread the
 * fork and join are annotated (__tsan_release / __tsan_acquire on a
 * per-call token), which makes TSan check exactly what matters here: that
 * the ranges' writes are disjoint and that nothing is read before the join.
 */
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "train/ops/cpu_int.h"

#if defined(__SANITIZE_THREAD__)
#define SL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SL_TSAN 1
#endif
#endif
#ifdef SL_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define TSAN_RELEASE(a) __tsan_release(a)
#define TSAN_ACQUIRE(a) __tsan_acquire(a)
#else
#define TSAN_RELEASE(a) ((void)(a))
#define TSAN_ACQUIRE(a) ((void)(a))
#endif

void sl_par_for(const sl_exec *e, int64_t n, int64_t grain, sl_par_fn fn, void *arg)
{
    if (n <= 0)
        return;
    int64_t t = grain > 0 ? n / grain : n;
    if (t > e->threads)
        t = e->threads;
    if (t < 2) {
        fn(arg, 0, n);
        return;
    }
#ifdef _OPENMP
    char token; /* the fork's and the join's address for TSan */
    TSAN_RELEASE(&token);
#pragma omp parallel num_threads((int)t)
    {
        TSAN_ACQUIRE(&token);
        int64_t nt = omp_get_num_threads(), i = omp_get_thread_num();
        /* libgomp may give fewer threads than asked: the ranges follow
         * the team, and each still covers its share in order. */
        int64_t lo = n * i / nt, hi = n * (i + 1) / nt;
        if (lo < hi)
            fn(arg, lo, hi);
        TSAN_RELEASE(&token);
    }
    TSAN_ACQUIRE(&token);
#else
    fn(arg, 0, n);
#endif
}
