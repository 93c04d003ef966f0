/*
 * records/bytesrc_base.c - what the byte source's parts share, below them
 * all: the I/O options (process-wide, per thread, resolved per handle),
 * the retry policy (tries, backoff, budget), the counters of
 * sl_io_stats_get, and the names list's free. bytesrc.c (the handle),
 * fetcher.c and the remote backend (remote_curl.c & co, remote_put.c) call
 * down into it; it calls none of them, so the backend needs nothing of the
 * front that dispatches to it.
 *
 * DESIGN
 *   Options: a handle (and a fetcher) resolves its sl_io_opts at open; NULL
 *   there is the process-wide sl_io_opts (behind a mutex), copied at the
 *   open, so sl_io_configure affects handles opened after it.
 *   SLUICE_IO_RETRIES, SLUICE_IO_TIMEOUT_MS, SLUICE_IO_BACKOFF_MS,
 *   SLUICE_IO_INFLIGHT and SLUICE_IO_RETRY_MS (read once, at the first use)
 *   stand in for fields that sl_io_configure never set.
 *   Retries: a request is tried again while its budget (retry_ms since its
 *   first try) lasts and, with retries set, at most that many times; the
 *   backoff before the last try is cut to the budget's end, so a server
 *   back within the budget is always asked once more.
 *   Counters: relaxed atomics, except the in-flight count and the busy time,
 *   which move together under a mutex (busy_ns is the wall time with at
 *   least one request in flight: the clock starts when the count leaves 0 and
 *   stops when it returns to 0).
 *
 * Threading: reentrant; the process-wide options behind a mutex, the
 * thread's (sl_io_thread_use) thread-local, the counters atomics.
 */
#include "records/bytesrc_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

#define IO_TIMEOUT_DEFAULT 30000
#define IO_BACKOFF_DEFAULT 100
#define IO_BACKOFF_CAP 5000
#define IO_INFLIGHT_DEFAULT 8
#define IO_RETRY_MS_DEFAULT 60000

/* ---------------------------------------------------------------- options */

static pthread_mutex_t opts_mu = PTHREAD_MUTEX_INITIALIZER;
static sl_io_opts opts_set;   /* what sl_io_configure said (zeros: unset) */
static sl_io_opts opts_env;   /* SLUICE_IO_* */
static int opts_env_read;

/* Strings an sl_io_opts points to (ca_bundle): copied once and kept for
 * the process's life, so that a request's copy of the options never points
 * to freed memory whatever sl_io_configure does meanwhile (a handful of
 * bytes per distinct value). opts_mu held. */
typedef struct kept_str {
    struct kept_str *next;
    char s[];
} kept_str;
static kept_str *kept;

static const char *keep_str(const char *s)
{
    kept_str *k;
    for (k = kept; k; k = k->next)
        if (!strcmp(k->s, s))
            return k->s;
    size_t n = strlen(s) + 1;
    if (!(k = malloc(sizeof *k + n)))
        return NULL;
    memcpy(k->s, s, n);
    k->next = kept;
    kept = k;
    return k->s;
}

/* SLUICE_IO_*: 0 when unset or not a number (the default), else its value;
 * zero_means for a value of 0 (SLUICE_IO_RETRIES=0: SL_IO_NO_RETRY). */
static unsigned env_uint(const char *name, unsigned zero_means)
{
    const char *s = getenv(name);
    char *end;
    unsigned long v;

    if (!s || !*s)
        return 0;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end || v > 0xfffffffful || *s == '-')
        return 0; /* not a number: the default */
    return v ? (unsigned)v : zero_means;
}

int sl_io_configure(const sl_io_opts *o)
{
    int rc = SL_OK;
    pthread_mutex_lock(&opts_mu);
    if (o)
        opts_set = *o;
    else
        memset(&opts_set, 0, sizeof opts_set);
    if (opts_set.ca_bundle && !*opts_set.ca_bundle)
        opts_set.ca_bundle = NULL;
    if (opts_set.ca_bundle && !(opts_set.ca_bundle = keep_str(opts_set.ca_bundle)))
        rc = sl_fail(SL_ENOMEM, "sl_io_configure: out of memory");
    pthread_mutex_unlock(&opts_mu);
    return rc;
}

/* SLUICE_IO_* read once (opts_mu held). */
static void read_env_locked(void)
{
    if (opts_env_read)
        return;
    opts_env.retries = env_uint("SLUICE_IO_RETRIES", SL_IO_NO_RETRY);
    opts_env.timeout_ms = env_uint("SLUICE_IO_TIMEOUT_MS", 0);
    opts_env.backoff_ms = env_uint("SLUICE_IO_BACKOFF_MS", 0);
    opts_env.inflight = env_uint("SLUICE_IO_INFLIGHT", 0);
    opts_env.retry_ms = env_uint("SLUICE_IO_RETRY_MS", 0);
    opts_env_read = 1;
}

/* Fields of o left at zero: SLUICE_IO_*, else the defaults (a resolved o
 * is left as it is). */
static void fill_defaults(sl_io_opts *o)
{
    o->retries = o->retries ? o->retries : opts_env.retries; /* 0: no count, the budget alone */
    o->timeout_ms = o->timeout_ms ? o->timeout_ms
                    : opts_env.timeout_ms ? opts_env.timeout_ms : IO_TIMEOUT_DEFAULT;
    o->backoff_ms = o->backoff_ms ? o->backoff_ms
                    : opts_env.backoff_ms ? opts_env.backoff_ms : IO_BACKOFF_DEFAULT;
    o->inflight = o->inflight ? o->inflight
                  : opts_env.inflight ? opts_env.inflight : IO_INFLIGHT_DEFAULT;
    o->retry_ms = o->retry_ms ? o->retry_ms
                  : opts_env.retry_ms ? opts_env.retry_ms : IO_RETRY_MS_DEFAULT;
}

void sl_io_get_opts(sl_io_opts *o)
{
    pthread_mutex_lock(&opts_mu);
    read_env_locked();
    *o = opts_set;
    pthread_mutex_unlock(&opts_mu);
    fill_defaults(o);
}

static _Thread_local const sl_io_opts *thread_opts; /* sl_io_thread_use */

const sl_io_opts *sl_io_thread_use(const sl_io_opts *o)
{
    const sl_io_opts *was = thread_opts;
    thread_opts = o;
    return was;
}

const sl_io_opts *sl_io_thread_opts(void) { return thread_opts; }

int sl_io_resolve(const sl_io_opts *in, sl_io_opts *out)
{
    int rc = SL_OK;
    if (!in && !(in = thread_opts)) {
        sl_io_get_opts(out);
        return SL_OK;
    }
    *out = *in;
    pthread_mutex_lock(&opts_mu);
    read_env_locked();
    if (out->ca_bundle && !*out->ca_bundle)
        out->ca_bundle = NULL;
    if (out->ca_bundle && !(out->ca_bundle = keep_str(out->ca_bundle)))
        rc = sl_fail(SL_ENOMEM, "sl_io_resolve: out of memory");
    pthread_mutex_unlock(&opts_mu);
    fill_defaults(out);
    return rc;
}

unsigned sl_io_tries(const sl_io_opts *o)
{
    if (o->retries == SL_IO_NO_RETRY)
        return 1;
    return o->retries ? 1 + o->retries : UINT32_MAX;
}

uint64_t sl_io_backoff_ns(const sl_io_opts *o, unsigned tries)
{
    static _Thread_local uint64_t seed;
    uint64_t cap = (uint64_t)o->backoff_ms * 1000000ull, z;
    unsigned shift = tries > 1 ? tries - 1 : 0;

    for (unsigned i = 0; i < shift && cap < (uint64_t)IO_BACKOFF_CAP * 1000000ull; i++)
        cap *= 2;
    if (cap > (uint64_t)IO_BACKOFF_CAP * 1000000ull)
        cap = (uint64_t)IO_BACKOFF_CAP * 1000000ull;
    if (!seed)
        seed = sl_now_ns() ^ ((uint64_t)(uintptr_t)&seed << 17) ^ (uint64_t)getpid();
    /* splitmix64 */
    z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return cap ? z % (cap + 1) : 0;
}

int sl_io_retry_next(const sl_io_opts *o, unsigned tries, uint64_t first_ns, uint64_t *wait_ns)
{
    uint64_t now = sl_now_ns(), budget = (uint64_t)o->retry_ms * 1000000ull;
    uint64_t spent = now > first_ns ? now - first_ns : 0;

    if (tries >= sl_io_tries(o) || spent >= budget)
        return 0;
    uint64_t w = sl_io_backoff_ns(o, tries);
    *wait_ns = w < budget - spent ? w : budget - spent; /* the last try at the budget's end */
    return 1;
}

/* ---------------------------------------------------------------- counters */

static _Atomic uint64_t st_requests, st_bytes, st_retries, st_failures;
static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t st_inflight, st_peak;
static uint64_t st_busy_ns, st_busy_since;

void sl_io_note_start(int is_retry)
{
    atomic_fetch_add_explicit(&st_requests, 1, memory_order_relaxed);
    if (is_retry)
        atomic_fetch_add_explicit(&st_retries, 1, memory_order_relaxed);
    pthread_mutex_lock(&st_mu);
    if (st_inflight++ == 0)
        st_busy_since = sl_now_ns();
    if (st_inflight > st_peak)
        st_peak = st_inflight;
    pthread_mutex_unlock(&st_mu);
}

void sl_io_note_end(uint64_t body_bytes)
{
    atomic_fetch_add_explicit(&st_bytes, body_bytes, memory_order_relaxed);
    pthread_mutex_lock(&st_mu);
    if (st_inflight && --st_inflight == 0)
        st_busy_ns += sl_now_ns() - st_busy_since;
    pthread_mutex_unlock(&st_mu);
}

void sl_io_note_failure(void) { atomic_fetch_add_explicit(&st_failures, 1, memory_order_relaxed); }

void sl_io_stats_get(sl_io_stats *s)
{
    memset(s, 0, sizeof *s);
    s->requests = atomic_load_explicit(&st_requests, memory_order_relaxed);
    s->bytes = atomic_load_explicit(&st_bytes, memory_order_relaxed);
    s->retries = atomic_load_explicit(&st_retries, memory_order_relaxed);
    s->failures = atomic_load_explicit(&st_failures, memory_order_relaxed);
    pthread_mutex_lock(&st_mu);
    s->inflight = st_inflight;
    s->inflight_peak = st_peak;
    s->busy_ns = st_busy_ns + (st_inflight ? sl_now_ns() - st_busy_since : 0);
    pthread_mutex_unlock(&st_mu);
}

void sl_io_stats_reset(void)
{
    atomic_store(&st_requests, 0);
    atomic_store(&st_bytes, 0);
    atomic_store(&st_retries, 0);
    atomic_store(&st_failures, 0);
    pthread_mutex_lock(&st_mu);
    st_peak = st_inflight;
    st_busy_ns = 0;
    st_busy_since = sl_now_ns();
    pthread_mutex_unlock(&st_mu);
}

/* ---------------------------------------------------------------- names */

void sl_bytes_names_free(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}
