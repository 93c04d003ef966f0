/*
 * records/bytesrc.c - the byte source's front: path classification, the
 * handle (sl_bytesrc) with its local implementations (open/pread/fstat/
 * mmap/readdir) and its dispatch of remote paths to the backend
 * (remote_curl.c & co, or remote_nocurl.c), the options (process-wide and
 * per handle) and the counters of bytesrc.h. The fetcher is fetcher.c.
 *
 * DESIGN
 *   Options: a handle (and a fetcher) resolves its sl_io_opts at open; NULL
 *   there is the process-wide sl_io_opts (behind a mutex), copied at the
 *   open, so sl_io_configure affects handles opened after it. The
 *   sl_bytes_* calls open a handle for one request with NULL.
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
 * Threading: all sl_bytes_* are reentrant; an sl_bytesrc may be read from
 * many threads at once (pread; remote requests keep no state on it), its
 * map made by one thread before others read it (bytesrc.h).
 */
#include "records/bytesrc_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
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

/* ---------------------------------------------------------------- local */

int sl_path_is_remote(const char *path)
{
    return path && (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8) ||
                    !strncmp(path, "s3://", 5));
}

int sl_open_fail(const char *fn, const char *path)
{
    return sl_fail(errno == ENOENT || errno == ENOTDIR ? SL_ENOENT : SL_EIO, "%s: %s: open: %s",
                   fn, path, strerror(errno));
}

int sl_pread_all(const char *fn, const char *path, int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sl_fail(SL_EIO, "%s: %s: bytes %llu-%llu: read: %s", fn, path,
                           (unsigned long long)off, (unsigned long long)(off + n - 1),
                           strerror(errno));
        if (r == 0)
            return sl_fail(SL_ECORRUPT, "%s: %s: bytes %llu-%llu: the file ends before byte %llu "
                           "(size %llu)", fn, path, (unsigned long long)off,
                           (unsigned long long)(off + n - 1), (unsigned long long)(off + n - 1),
                           (unsigned long long)(off + got));
        got += (size_t)r;
    }
    return SL_OK;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void sl_bytes_names_free(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

static int local_list(const char *fn, const char *dir, char ***out, size_t *nout)
{
    DIR *d = opendir(dir);
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = SL_OK;

    if (!d)
        return sl_open_fail(fn, dir);
    while ((errno = 0, e = readdir(d))) {
        int isdir = e->d_type == DT_DIR;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
            struct stat st;
            isdir = fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
        }
        if (n == cap) {
            char **nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
            if (!nv)
                goto oom;
            v = nv;
        }
        size_t l = strlen(e->d_name);
        if (!(v[n] = malloc(l + 2)))
            goto oom;
        memcpy(v[n], e->d_name, l);
        v[n][l] = '/';
        v[n][l + isdir] = 0;
        n++;
    }
    if (errno) {
        rc = sl_fail(SL_EIO, "%s: %s: readdir: %s", fn, dir, strerror(errno));
        goto fail;
    }
    closedir(d);
    if (n) /* qsort wants a non-NULL array even for none */
        qsort(v, n, sizeof *v, name_cmp);
    *out = v;
    *nout = n;
    return SL_OK;
oom:
    rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, dir);
fail:
    closedir(d);
    sl_bytes_names_free(v, n);
    return rc;
}

/* ---------------------------------------------------------------- handle */

struct sl_bytesrc {
    char *path;
    sl_io_opts o;         /* resolved at open */
    int remote;
    int fd;               /* local: the open file; remote: -1 */
    const uint8_t *map;   /* sl_bytesrc_map's mapping, or NULL */
    size_t map_len;
};

/* fn names the public function in messages. */
static int src_open(const char *fn, const char *path, const sl_io_opts *opts, sl_bytesrc **out)
{
    sl_bytesrc *s = NULL;
    int rc;

    if (!path || !out)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (!(s = calloc(1, sizeof *s)) || !(s->path = strdup(path))) {
        free(s);
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    }
    s->fd = -1;
    s->remote = sl_path_is_remote(path);
    if ((rc = sl_io_resolve(opts, &s->o)))
        goto fail;
    if (!s->remote && (s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = sl_open_fail(fn, path);
        goto fail;
    }
    *out = s;
    return SL_OK;
fail:
    free(s->path);
    free(s);
    return rc;
}

int sl_bytesrc_open(const char *path, const sl_io_opts *opts, sl_bytesrc **out)
{
    return src_open("sl_bytesrc_open", path, opts, out);
}

void sl_bytesrc_close(sl_bytesrc *s)
{
    if (!s)
        return;
    if (s->map)
        munmap((void *)s->map, s->map_len);
    if (s->fd >= 0)
        close(s->fd);
    free(s->path);
    free(s);
}

const char *sl_bytesrc_path(const sl_bytesrc *s) { return s->path; }

int sl_bytesrc_is_remote(const sl_bytesrc *s) { return s->remote; }

static int src_read(const char *fn, sl_bytesrc *s, void *buf, size_t n, uint64_t off)
{
    if (!s || (!buf && n))
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (n == 0)
        return SL_OK;
    if (s->remote)
        return sl_remote_read(fn, s->path, &s->o, buf, n, off);
    return sl_pread_all(fn, s->path, s->fd, buf, n, off);
}

int sl_bytesrc_read(sl_bytesrc *s, void *buf, size_t n, uint64_t off)
{
    return src_read("sl_bytesrc_read", s, buf, n, off);
}

static int src_size(const char *fn, sl_bytesrc *s, uint64_t *size)
{
    struct stat st;

    if (!s || !size)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (s->remote)
        return sl_remote_size(fn, s->path, &s->o, size);
    if (fstat(s->fd, &st) != 0)
        return sl_fail(SL_EIO, "%s: %s: fstat: %s", fn, s->path, strerror(errno));
    *size = (uint64_t)st.st_size;
    return SL_OK;
}

int sl_bytesrc_size(sl_bytesrc *s, uint64_t *size)
{
    return src_size("sl_bytesrc_size", s, size);
}

static int src_get(const char *fn, sl_bytesrc *s, size_t max, uint8_t **out, size_t *len)
{
    struct stat st;
    uint8_t *buf;
    int rc;

    if (!s || !out || !len)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (!max || max > SL_BYTES_GET_MAX)
        max = s->remote ? SL_BYTES_GET_MAX : SIZE_MAX - 1;
    if (s->remote) {
        if ((rc = sl_remote_get(fn, s->path, &s->o, &buf, len)))
            return rc;
        if (*len > max) {
            free(buf);
            return sl_fail(SL_ECORRUPT, "%s: %s: larger than %zu bytes", fn, s->path, max);
        }
        *out = buf;
        return SL_OK;
    }
    if (fstat(s->fd, &st) != 0)
        return sl_fail(SL_EIO, "%s: %s: fstat: %s", fn, s->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return sl_fail(SL_EIO, "%s: %s: not a regular file", fn, s->path);
    if ((uint64_t)st.st_size > max)
        return sl_fail(SL_ECORRUPT, "%s: %s: larger than %zu bytes", fn, s->path, max);
    if (!(buf = malloc((size_t)st.st_size + 1)))
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory (%lld bytes)", fn, s->path,
                       (long long)st.st_size);
    if ((rc = sl_pread_all(fn, s->path, s->fd, buf, (size_t)st.st_size, 0))) {
        free(buf);
        return rc;
    }
    buf[st.st_size] = 0;
    *out = buf;
    *len = (size_t)st.st_size;
    return SL_OK;
}

int sl_bytesrc_get(sl_bytesrc *s, size_t max, uint8_t **buf, size_t *len)
{
    return src_get("sl_bytesrc_get", s, max, buf, len);
}

int sl_bytesrc_identity(sl_bytesrc *s, sl_bytesrc_id *id)
{
    struct stat st;

    if (!s || !id)
        return sl_fail(SL_EINVAL, "sl_bytesrc_identity: NULL argument");
    if (s->remote)
        return sl_fail(SL_ENOTSUP, "sl_bytesrc_identity: %s: a remote object", s->path);
    if (fstat(s->fd, &st) != 0)
        return sl_fail(SL_EIO, "sl_bytesrc_identity: %s: fstat: %s", s->path, strerror(errno));
    id->dev = (uint64_t)st.st_dev;
    id->ino = (uint64_t)st.st_ino;
    id->size = (uint64_t)st.st_size;
    id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    id->regular = S_ISREG(st.st_mode);
    return SL_OK;
}

int sl_bytesrc_map(sl_bytesrc *s, const uint8_t **base, size_t *len)
{
    struct stat st;

    if (!s || !base || !len)
        return sl_fail(SL_EINVAL, "sl_bytesrc_map: NULL argument");
    if (!s->map) {
        if (s->remote)
            return sl_fail(SL_ENOTSUP, "sl_bytesrc_map: %s: a remote object is not mapped",
                           s->path);
        if (fstat(s->fd, &st) != 0)
            return sl_fail(SL_EIO, "sl_bytesrc_map: %s: fstat: %s", s->path, strerror(errno));
        if (!S_ISREG(st.st_mode) || st.st_size <= 0 || (uint64_t)st.st_size > SIZE_MAX)
            return sl_fail(SL_ENOTSUP, "sl_bytesrc_map: %s: not a non-empty regular file",
                           s->path);
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, s->fd, 0);
        if (m == MAP_FAILED)
            return sl_fail(SL_ENOTSUP, "sl_bytesrc_map: %s: mmap: %s", s->path, strerror(errno));
        s->map = m;
        s->map_len = (size_t)st.st_size;
    }
    *base = s->map;
    *len = s->map_len;
    return SL_OK;
}

static int src_list(const char *fn, const char *dir, const sl_io_opts *opts, char ***names,
                    size_t *n)
{
    sl_io_opts o;
    int rc;

    if (!dir || !names || !n)
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (!sl_path_is_remote(dir))
        return local_list(fn, dir, names, n);
    if ((rc = sl_io_resolve(opts, &o)))
        return rc;
    return sl_remote_list(fn, dir, &o, names, n);
}

int sl_bytesrc_list(const char *dir, const sl_io_opts *opts, char ***names, size_t *n)
{
    return src_list("sl_bytesrc_list", dir, opts, names, n);
}

/* ---------------------------------------------------------------- sl_bytes_*
 * One call on a handle opened for it, with the process-wide options. */

int sl_bytes_get(const char *path, uint8_t **buf, size_t *len)
{
    sl_bytesrc *s = NULL;
    int rc = src_open("sl_bytes_get", path, NULL, &s);

    if (rc)
        return rc;
    rc = src_get("sl_bytes_get", s, 0, buf, len);
    sl_bytesrc_close(s);
    return rc;
}

int sl_bytes_size(const char *path, uint64_t *size)
{
    struct stat st;
    sl_io_opts o;

    if (!path || !size)
        return sl_fail(SL_EINVAL, "sl_bytes_size: NULL argument");
    if (sl_path_is_remote(path)) {
        int rc = sl_io_resolve(NULL, &o);
        return rc ? rc : sl_remote_size("sl_bytes_size", path, &o, size);
    }
    /* stat, not open: a size needs no read permission */
    if (stat(path, &st) != 0)
        return sl_fail(errno == ENOENT || errno == ENOTDIR ? SL_ENOENT : SL_EIO,
                       "sl_bytes_size: %s: stat: %s", path, strerror(errno));
    *size = (uint64_t)st.st_size;
    return SL_OK;
}

int sl_bytes_list(const char *dir, char ***names, size_t *n)
{
    return src_list("sl_bytes_list", dir, NULL, names, n);
}

int sl_bytes_read(const char *path, void *buf, size_t n, uint64_t off)
{
    sl_bytesrc *s = NULL;
    int rc;

    if (!path || (!buf && n))
        return sl_fail(SL_EINVAL, "sl_bytes_read: NULL argument");
    if (n == 0)
        return SL_OK;
    if ((rc = src_open("sl_bytes_read", path, NULL, &s)))
        return rc;
    rc = src_read("sl_bytes_read", s, buf, n, off);
    sl_bytesrc_close(s);
    return rc;
}
