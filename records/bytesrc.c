/*
 * records/bytesrc.c - the byte source's front: path classification, the
 * local implementations (open/pread/fstat/readdir), dispatch of remote paths
 * to the backend (remote_curl.c & co, or remote_nocurl.c), the process-wide
 * options and the counters of bytesrc.h.
 *
 * DESIGN
 *   Options: one process-wide sl_io_opts behind a mutex; every request reads
 *   a copy at its start, so sl_io_configure affects requests begun after it.
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
 *   Fetcher: local requests are read at add time and queued as completed;
 *   remote ones go to an sl_remote_multi opened at the first remote add.
 *   wait hands back completed local requests first. The fetcher keeps the
 *   last local file open (readers add many ranges of one shard in a row).
 *
 * Threading: all sl_bytes_* are reentrant; an sl_fetcher belongs to one
 * thread at a time (bytesrc.h).
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

void sl_io_get_opts(sl_io_opts *o)
{
    pthread_mutex_lock(&opts_mu);
    if (!opts_env_read) {
        opts_env.retries = env_uint("SLUICE_IO_RETRIES", SL_IO_NO_RETRY);
        opts_env.timeout_ms = env_uint("SLUICE_IO_TIMEOUT_MS", 0);
        opts_env.backoff_ms = env_uint("SLUICE_IO_BACKOFF_MS", 0);
        opts_env.inflight = env_uint("SLUICE_IO_INFLIGHT", 0);
        opts_env.retry_ms = env_uint("SLUICE_IO_RETRY_MS", 0);
        opts_env_read = 1;
    }
    *o = opts_set;
    pthread_mutex_unlock(&opts_mu);
#define PICK(f, def) o->f = o->f ? o->f : opts_env.f ? opts_env.f : (def)
    PICK(retries, 0); /* 0: no count, the budget alone */
    PICK(timeout_ms, IO_TIMEOUT_DEFAULT);
    PICK(backoff_ms, IO_BACKOFF_DEFAULT);
    PICK(inflight, IO_INFLIGHT_DEFAULT);
    PICK(retry_ms, IO_RETRY_MS_DEFAULT);
#undef PICK
}

unsigned sl_io_tries(const sl_io_opts *o)
{
    if (o->retries == SL_IO_NO_RETRY)
        return 1;
    return o->retries ? 1 + o->retries : UINT32_MAX;
}

uint64_t sl_io_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
        seed = sl_io_now_ns() ^ ((uint64_t)(uintptr_t)&seed << 17) ^ (uint64_t)getpid();
    /* splitmix64 */
    z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return cap ? z % (cap + 1) : 0;
}

int sl_io_retry_next(const sl_io_opts *o, unsigned tries, uint64_t first_ns, uint64_t *wait_ns)
{
    uint64_t now = sl_io_now_ns(), budget = (uint64_t)o->retry_ms * 1000000ull;
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
        st_busy_since = sl_io_now_ns();
    if (st_inflight > st_peak)
        st_peak = st_inflight;
    pthread_mutex_unlock(&st_mu);
}

void sl_io_note_end(uint64_t body_bytes)
{
    atomic_fetch_add_explicit(&st_bytes, body_bytes, memory_order_relaxed);
    pthread_mutex_lock(&st_mu);
    if (st_inflight && --st_inflight == 0)
        st_busy_ns += sl_io_now_ns() - st_busy_since;
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
    s->busy_ns = st_busy_ns + (st_inflight ? sl_io_now_ns() - st_busy_since : 0);
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
    st_busy_since = sl_io_now_ns();
    pthread_mutex_unlock(&st_mu);
}

/* ---------------------------------------------------------------- local */

int sl_path_is_remote(const char *path)
{
    return path && (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8) ||
                    !strncmp(path, "s3://", 5));
}

static int open_fail(const char *fn, const char *path)
{
    return sl_fail(errno == ENOENT || errno == ENOTDIR ? SL_ENOENT : SL_EIO, "%s: %s: open: %s",
                   fn, path, strerror(errno));
}

/* n bytes at off of the open fd into buf; a file that ends first is
 * SL_ECORRUPT. */
static int pread_all(const char *fn, const char *path, int fd, void *buf, size_t n,
                     uint64_t off)
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

static int local_get(const char *fn, const char *path, uint8_t **out, size_t *len)
{
    struct stat st;
    uint8_t *buf = NULL;
    int rc, fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return open_fail(fn, path);
    if (fstat(fd, &st) != 0) {
        rc = sl_fail(SL_EIO, "%s: %s: fstat: %s", fn, path, strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sl_fail(SL_EIO, "%s: %s: not a regular file", fn, path);
        goto close_fd;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        rc = sl_fail(SL_ENOMEM, "%s: %s: out of memory (%lld bytes)", fn, path,
                     (long long)st.st_size);
        goto close_fd;
    }
    rc = pread_all(fn, path, fd, buf, (size_t)st.st_size, 0);
    if (rc) {
        free(buf);
        goto close_fd;
    }
    buf[st.st_size] = 0;
    *out = buf;
    *len = (size_t)st.st_size;
close_fd:
    close(fd);
    return rc;
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
        return open_fail(fn, dir);
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

/* ---------------------------------------------------------------- sl_bytes_* */

int sl_bytes_get(const char *path, uint8_t **buf, size_t *len)
{
    if (!path || !buf || !len)
        return sl_fail(SL_EINVAL, "sl_bytes_get: NULL argument");
    if (sl_path_is_remote(path))
        return sl_remote_get("sl_bytes_get", path, buf, len);
    return local_get("sl_bytes_get", path, buf, len);
}

int sl_bytes_size(const char *path, uint64_t *size)
{
    struct stat st;

    if (!path || !size)
        return sl_fail(SL_EINVAL, "sl_bytes_size: NULL argument");
    if (sl_path_is_remote(path))
        return sl_remote_size("sl_bytes_size", path, size);
    if (stat(path, &st) != 0)
        return sl_fail(errno == ENOENT || errno == ENOTDIR ? SL_ENOENT : SL_EIO,
                       "sl_bytes_size: %s: stat: %s", path, strerror(errno));
    *size = (uint64_t)st.st_size;
    return SL_OK;
}

int sl_bytes_list(const char *dir, char ***names, size_t *n)
{
    if (!dir || !names || !n)
        return sl_fail(SL_EINVAL, "sl_bytes_list: NULL argument");
    if (sl_path_is_remote(dir))
        return sl_remote_list("sl_bytes_list", dir, names, n);
    return local_list("sl_bytes_list", dir, names, n);
}

int sl_bytes_read(const char *path, void *buf, size_t n, uint64_t off)
{
    int rc, fd;

    if (!path || (!buf && n))
        return sl_fail(SL_EINVAL, "sl_bytes_read: NULL argument");
    if (n == 0)
        return SL_OK;
    if (sl_path_is_remote(path))
        return sl_remote_read("sl_bytes_read", path, buf, n, off);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return open_fail("sl_bytes_read", path);
    rc = pread_all("sl_bytes_read", path, fd, buf, n, off);
    close(fd);
    return rc;
}

/* ---------------------------------------------------------------- fetcher */

typedef struct local_done {
    struct local_done *next;
    void *tag;
    int rc;
    char *msg; /* the error's message, or NULL */
} local_done;

struct sl_fetcher {
    local_done *head, *tail;
    unsigned nlocal;
    sl_remote_multi *rm;
    int fd;     /* the last local file, or -1 */
    char *fd_path;
    const int *stop; /* sl_fetcher_set_stop */
};

void sl_fetcher_set_stop(sl_fetcher *f, const int *stop)
{
    if (f)
        f->stop = stop;
}

int sl_fetcher_open(sl_fetcher **out)
{
    sl_fetcher *f = calloc(1, sizeof *f);

    if (!out)
        return sl_fail(SL_EINVAL, "sl_fetcher_open: NULL argument");
    if (!f)
        return sl_fail(SL_ENOMEM, "sl_fetcher_open: out of memory");
    f->fd = -1;
    *out = f;
    return SL_OK;
}

static int local_fetch(sl_fetcher *f, const char *path, uint64_t off, void *buf, size_t n)
{
    if (n == 0)
        return SL_OK;
    if (f->fd < 0 || strcmp(f->fd_path, path)) {
        char *p = strdup(path);
        if (!p)
            return sl_fail(SL_ENOMEM, "sl_fetcher_add: out of memory");
        if (f->fd >= 0)
            close(f->fd);
        free(f->fd_path);
        f->fd_path = p;
        if ((f->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            return open_fail("sl_fetcher_wait", path);
    }
    return pread_all("sl_fetcher_wait", path, f->fd, buf, n, off);
}

int sl_fetcher_add(sl_fetcher *f, const char *path, uint64_t off, void *buf, size_t n, void *tag)
{
    local_done *d;

    if (!f || !path || (!buf && n))
        return sl_fail(SL_EINVAL, "sl_fetcher_add: NULL argument");
    if (sl_path_is_remote(path)) {
        if (!f->rm) { /* stays NULL without libcurl: the add then says so */
            int rc = sl_remote_multi_open(&f->rm);
            if (rc)
                return rc;
        }
        return sl_remote_multi_add(f->rm, path, off, buf, n, tag);
    }
    if (!(d = calloc(1, sizeof *d)))
        return sl_fail(SL_ENOMEM, "sl_fetcher_add: out of memory");
    d->tag = tag;
    d->rc = local_fetch(f, path, off, buf, n);
    if (d->rc && !(d->msg = strdup(sl_errmsg()))) {
        free(d);
        return sl_fail(SL_ENOMEM, "sl_fetcher_add: out of memory");
    }
    if (f->tail)
        f->tail->next = d;
    else
        f->head = d;
    f->tail = d;
    f->nlocal++;
    return SL_OK;
}

unsigned sl_fetcher_pending(const sl_fetcher *f)
{
    if (!f)
        return 0;
    return f->nlocal + (f->rm ? sl_remote_multi_pending(f->rm) : 0);
}

int sl_fetcher_wait(sl_fetcher *f, void **tag)
{
    local_done *d;
    int rc;

    if (!f || !tag)
        return sl_fail(SL_EINVAL, "sl_fetcher_wait: NULL argument");
    if (!(d = f->head)) {
        if (f->rm && sl_remote_multi_pending(f->rm))
            return sl_remote_multi_wait(f->rm, tag, f->stop);
        return SL_EOF;
    }
    if (!(f->head = d->next))
        f->tail = NULL;
    f->nlocal--;
    *tag = d->tag;
    rc = d->rc;
    if (rc)
        sl_fail(rc, "%s", d->msg);
    free(d->msg);
    free(d);
    return rc;
}

void sl_fetcher_close(sl_fetcher *f)
{
    if (!f)
        return;
    while (f->head) {
        local_done *d = f->head;
        f->head = d->next;
        free(d->msg);
        free(d);
    }
    sl_remote_multi_close(f->rm);
    if (f->fd >= 0)
        close(f->fd);
    free(f->fd_path);
    free(f);
}
