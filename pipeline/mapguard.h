/*
 * pipeline/mapguard.h - reads from a mapped shard that survive the file
 * being truncated under them (SIGBUS becomes an error, not a crash).
 *
 * A page of a MAP_SHARED mapping that lies past the end of its file (the
 * file was truncated, or rewritten through O_TRUNC, after mmap) raises
 * SIGBUS on the next touch (mmap(2)). LMDB documents the same hazard and
 * leaves it to the user; the pipeline reads shards that other programs may
 * still be writing or replacing, so it catches it:
 *
 *     sl_mapguard g;
 *     if (sigsetjmp(g.jb, 1) == 0) {
 *         sl_mapguard_enter(&g, base, len);
 *         ... read bytes of [base, base + len) ...
 *         sl_mapguard_leave(&g);
 *     } else {
 *         ... g.fault is the faulting address; the guard is already left ...
 *     }
 *
 * How: one process-wide SIGBUS handler (installed once, by
 * sl_mapguard_install, with SA_SIGINFO | SA_NODEFER | SA_ONSTACK) looks at
 * the calling thread's innermost guard (a thread-local pointer). When the
 * fault address lies inside that guard's range it siglongjmps back to the
 * guard's sigsetjmp; otherwise it hands the signal to the handler that was
 * installed before it (ASan's, a Python runtime's), or restores the default
 * action and re-raises, so a SIGBUS that is not ours ends the process as it
 * would have without us. The jump must restore the signal mask
 * (sigsetjmp(jb, 1): one rt_sigprocmask per guard, ~0.1 us): SA_NODEFER
 * keeps SIGBUS unblocked in our handler, but a wrapper around it may block
 * signals while it runs (ThreadSanitizer's does: without the restore the
 * second fault on a thread is fatal, SIGBUS being blocked), and a jump out
 * of the wrapper never unblocks them.
 *
 * What a jump may interrupt: only loads from the guarded range, i.e. the
 * CRC loop, the Example decoder and libjpeg reading its source buffer; none
 * of them holds a lock or is inside malloc at that moment. A libjpeg object
 * interrupted this way is not reused: the caller makes the error fatal and
 * the object is only destroyed (jpeg_destroy_* frees every pool in any
 * state, as after libjpeg's own error longjmp).
 *
 * Locals of the function that calls sigsetjmp and are changed after it must
 * be volatile if read after the jump (C11 7.13.2.1); keep the guarded work
 * in a callee.
 *
 * Threading: the guard is per thread (the pointer is thread-local, in the
 * default TLS model: mapguard.c says why not initial-exec, and why the
 * handler's read of it cannot allocate where it matters); guards nest.
 */
#ifndef SL_MAPGUARD_H
#define SL_MAPGUARD_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_mapguard {
    sigjmp_buf jb;
    const uint8_t *base;           /* guarded range [base, base + len) */
    size_t len;
    struct sl_mapguard *prev;      /* the enclosing guard of this thread */
    void *volatile fault;          /* the faulting address after a jump */
} sl_mapguard;

/* Install the SIGBUS handler once per process (pthread_once; idempotent,
 * thread safe). SL_EIO when sigaction fails (then nothing is installed and
 * guards do nothing: a fault stays a SIGBUS). */
int sl_mapguard_install(void);

/* Make g (whose jb was just set by sigsetjmp(g->jb, 1)) the calling
 * thread's innermost guard over [base, base + len). */
void sl_mapguard_enter(sl_mapguard *g, const void *base, size_t len);
/* Pop g (the innermost guard). Not needed after a jump: the handler pops. */
void sl_mapguard_leave(sl_mapguard *g);

#endif /* SL_MAPGUARD_H */
