/*
 * pipeline/mapguard.c - the SIGBUS guard of reads from mapped shards
 * (mapguard.h says why and how).
 *
 * Hand-written: no library offers this. libsigsegv (GNU) catches SIGSEGV for
 * stack overflow and memory managers, not SIGBUS of file mappings, and it
 * would be a dependency for 100 lines.
 *
 * Threading: the handler reads only the faulting thread's own guard
 * pointer and the previous action, which is written once before the
 * handler is installed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "common/status.h"
#include "pipeline/mapguard.h"

/* The default TLS model, not initial-exec: initial-exec marks the whole
 * library STATIC_TLS, and a dlopen'd copy (the Python extension) then fails
 * to load ("cannot allocate memory in static TLS block": status.c's error
 * buffer is in the same block). The handler's read cannot allocate where it
 * matters: a guarded thread wrote tls_guard in sl_mapguard_enter before any
 * fault it can catch; a fault on another thread is chained anyway. */
static __thread sl_mapguard *tls_guard;
static struct sigaction prev_action;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int install_errno;

/* Not ours: what would have happened without this handler. */
static void chain(int sig, siginfo_t *si, void *uc)
{
    const struct sigaction *pa = &prev_action;
    if (pa->sa_flags & SA_SIGINFO) {
        if (pa->sa_sigaction) {
            pa->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (pa->sa_handler != SIG_DFL && pa->sa_handler != SIG_IGN) {
        pa->sa_handler(sig);
        return;
    }
    /* Default (or ignored, which the kernel does not honour for a fault):
     * restore it and raise; SA_NODEFER means SIGBUS is not blocked here, so
     * the process ends now. A fault would also end it on return, by
     * re-executing the load; raise also covers a SIGBUS sent by kill. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    sl_mapguard *g = tls_guard;
    if (g && si && (uintptr_t)si->si_addr - (uintptr_t)g->base < g->len) {
        g->fault = si->si_addr;
        tls_guard = g->prev;
        siglongjmp(g->jb, 1);
    }
    chain(sig, si, uc);
}

static void install_once(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    /* prev_action first, then ours: the handler may run the moment the
     * second call returns. */
    if (sigaction(SIGBUS, NULL, &prev_action) != 0 || sigaction(SIGBUS, &sa, NULL) != 0)
        install_errno = errno ? errno : EINVAL;
}

int sl_mapguard_install(void)
{
    pthread_once(&once, install_once);
    if (install_errno)
        return sl_fail(SL_EIO, "sl_mapguard_install: sigaction(SIGBUS): %s",
                       strerror(install_errno));
    return SL_OK;
}

void sl_mapguard_enter(sl_mapguard *g, const void *base, size_t len)
{
    g->base = base;
    g->len = len;
    g->fault = NULL;
    g->prev = tls_guard;
    tls_guard = g;
    /* The handler runs on this thread: the stores above must be done before
     * the guarded loads, as the compiler sees them. */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

void sl_mapguard_leave(sl_mapguard *g)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    tls_guard = g->prev;
}
