/*
 * records/bytesrc.c - the byte source's front: path classification, the
 * handle (sl_bytesrc) with its local implementations (open/pread/fstat/
 * mmap/readdir) and its dispatch of remote paths to the backend
 * (remote_curl.c & co, or remote_nocurl.c). The fetcher is fetcher.c; the
 * options, the retry policy and the counters, which the backend uses too,
 * are bytesrc_base.c, below both (the backend calls nothing here).
 *
 * DESIGN
 *   A handle resolves its sl_io_opts at open (bytesrc_base.c); the
 *   sl_bytes_* calls open a handle for one request with NULL (the
 *   process-wide settings, or the thread's: sl_io_thread_use). Whether a
 *   path is remote is decided here, once per handle or listing: readers ask
 *   the handle (sl_bytesrc_is_remote, sl_bytesrc_map's SL_ENOTSUP), or take
 *   the answer from where the path entered (sl_dataset.remote), rather than
 *   test the path's scheme again.
 *
 * Threading: all sl_bytes_* are reentrant; an sl_bytesrc may be read from
 * many threads at once (pread; remote requests keep no state on it), its
 * map made by one thread before others read it (bytesrc.h).
 */
#include "records/bytesrc_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

static int pread_all(const char *fn, const char *path, int fd, void *buf, size_t n, uint64_t off)
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

int sl_bytesrc_open_as(const char *fn, const char *path, const sl_io_opts *opts,
                       sl_bytesrc **out)
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
        rc = open_fail(fn, path);
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
    return sl_bytesrc_open_as("sl_bytesrc_open", path, opts, out);
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

int sl_bytesrc_read_as(const char *fn, sl_bytesrc *s, void *buf, size_t n, uint64_t off)
{
    if (!s || (!buf && n))
        return sl_fail(SL_EINVAL, "%s: NULL argument", fn);
    if (n == 0)
        return SL_OK;
    if (s->remote)
        return sl_remote_read(fn, s->path, &s->o, buf, n, off);
    return pread_all(fn, s->path, s->fd, buf, n, off);
}

int sl_bytesrc_read(sl_bytesrc *s, void *buf, size_t n, uint64_t off)
{
    return sl_bytesrc_read_as("sl_bytesrc_read", s, buf, n, off);
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
    if ((rc = pread_all(fn, s->path, s->fd, buf, (size_t)st.st_size, 0))) {
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
    int rc = sl_bytesrc_open_as("sl_bytes_get", path, NULL, &s);

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
    if ((rc = sl_bytesrc_open_as("sl_bytes_read", path, NULL, &s)))
        return rc;
    rc = sl_bytesrc_read_as("sl_bytes_read", s, buf, n, off);
    sl_bytesrc_close(s);
    return rc;
}
