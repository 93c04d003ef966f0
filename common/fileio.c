/*
 * common/fileio.c - the file-system steps of common/fileio.h: write a whole
 * buffer, make a rename durable, replace a file atomically, mkdir -p, build
 * a path. Plain POSIX calls; the contracts and the durability argument are
 * in the header.
 *
 * Threading: all functions are reentrant.
 */
#include "common/fileio.h"

#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/status.h"

int sl_write_all(int fd, const void *p, size_t n, const char *fn, const char *path)
{
    const char *c = p;
    while (n) {
        ssize_t got = write(fd, c, n);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return sl_fail(SL_EIO, "%s: %s: write: %s", fn, path, strerror(errno));
        }
        if (got == 0) /* not for regular files; never spin on it */
            return sl_fail(SL_EIO, "%s: %s: write: no progress", fn, path);
        c += got;
        n -= (size_t)got;
    }
    return SL_OK;
}

int sl_fsync_dir(const char *dir, const char *fn)
{
    int rc = SL_OK;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return sl_fail(SL_EIO, "%s: %s: open directory: %s", fn, dir, strerror(errno));
    if (fsync(dfd) != 0 && errno != EINVAL)
        rc = sl_fail(SL_EIO, "%s: %s: fsync directory: %s", fn, dir, strerror(errno));
    close(dfd);
    return rc;
}

int sl_fsync_parent(const char *path, const char *fn)
{
    const char *slash = strrchr(path, '/');
    /* "a/b" -> "a", "/b" -> "/", "b" -> "." */
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    int rc = sl_fsync_dir(dir, fn);
    free(dir);
    return rc;
}
int sl_mkdir_p(const char *path, const char *fn)
{
    char *p = strdup(path);
    int rc = SL_OK;
    if (!p)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    if (!*p) {
        free(p);
        return sl_fail(SL_EINVAL, "%s: empty directory name", fn);
    }
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c != '\0')
            continue;
        char saved = *c;
        *c = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            rc = sl_fail(SL_EIO, "%s: %s: mkdir: %s", fn, p, strerror(errno));
            break;
        }
        *c = saved;
        if (!saved)
            break;
    }
    struct stat st;
    if (!rc && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)))
        rc = sl_fail(SL_EIO, "%s: %s: not a directory", fn, path);
    free(p);
    return rc;
}


int sl_atomic_open(sl_atomic_file *af, const char *path, const char *fn)
{
    af->fd = -1;
    af->path = path;
    af->fn = fn;
    if (!(af->tmp = sl_str_cat(path, ".tmp")))
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    /* O_TRUNC: a temp file left by a killed run is garbage by definition. */
    af->fd = open(af->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (af->fd < 0) {
        int rc = sl_fail(SL_EIO, "%s: %s: create: %s", fn, af->tmp, strerror(errno));
        free(af->tmp);
        af->tmp = NULL;
        return rc;
    }
    return SL_OK;
}

int sl_atomic_write(sl_atomic_file *af, const void *p, size_t n)
{
    return sl_write_all(af->fd, p, n, af->fn, af->tmp);
}

void sl_atomic_abort(sl_atomic_file *af)
{
    if (af->fd >= 0)
        close(af->fd);
    af->fd = -1;
    if (af->tmp)
        unlink(af->tmp);
    free(af->tmp);
    af->tmp = NULL;
}

int sl_atomic_commit(sl_atomic_file *af, int do_sync)
{
    const char *fn = af->fn;
    int rc;

    if (do_sync && fsync(af->fd) != 0) {
        rc = sl_fail(SL_EIO, "%s: %s: fsync: %s", fn, af->tmp, strerror(errno));
        goto fail_abort;
    }
    rc = close(af->fd);
    af->fd = -1; /* closed even when close reports an error */
    if (rc != 0) {
        rc = sl_fail(SL_EIO, "%s: %s: close: %s", fn, af->tmp, strerror(errno));
        goto fail_abort;
    }
    if (rename(af->tmp, af->path) != 0) {
        rc = sl_fail(SL_EIO, "%s: %s: rename to %s: %s", fn, af->tmp, af->path,
                     strerror(errno));
        goto fail_abort;
    }
    free(af->tmp);
    af->tmp = NULL;
    /* The new file is in place; only the rename's durability is left. */
    return do_sync ? sl_fsync_parent(af->path, fn) : SL_OK;

fail_abort:
    sl_atomic_abort(af);
    return rc;
}

int sl_write_file_atomic(const char *path, const void *data, size_t len, int do_sync,
                         const char *fn)
{
    sl_atomic_file af;
    int rc = sl_atomic_open(&af, path, fn);
    if (rc)
        return rc;
    if ((rc = sl_atomic_write(&af, data, len))) {
        sl_atomic_abort(&af);
        return rc;
    }
    return sl_atomic_commit(&af, do_sync);
}

/* a + sep + b in one malloc'd string. */
static char *cat3(const char *a, const char *sep, const char *b)
{
    size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
    char *s = malloc(la + ls + lb + 1);
    if (!s)
        return NULL;
    memcpy(s, a, la);
    memcpy(s + la, sep, ls);
    memcpy(s + la + ls, b, lb + 1);
    return s;
}

char *sl_str_cat(const char *a, const char *b)
{
    return cat3(a, "", b);
}

char *sl_path_join(const char *a, const char *b)
{
    size_t la = strlen(a);
    return cat3(a, la && a[la - 1] != '/' ? "/" : "", b);
}
