/*
 * records/fileio.c - the file-system steps every writer of records/ needs:
 * write a whole buffer, make a rename durable, replace a small file
 * atomically, format a DALI index line, build a path.
 *
 * Durability (POSIX, and Linux fsync(2)): a renamed file survives a crash
 * only once both the file and the directory holding the new name are
 * fsync'ed. Some file systems answer fsync on a directory with EINVAL (there
 * is nothing to sync); that is not an error.
 *
 * Threading: all functions are reentrant.
 */
#include "records_int.h"

#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
/* mkdir -p path (records_int.h). */
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


int sl_write_file_atomic(const char *path, const void *data, size_t len, int do_sync,
                         const char *fn)
{
    char *tmp = sl_str_cat(path, ".tmp");
    int fd = -1, rc;

    if (!tmp)
        return sl_fail(SL_ENOMEM, "%s: %s: out of memory", fn, path);
    /* O_TRUNC: a temp file left by a killed run is garbage by definition. */
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = sl_fail(SL_EIO, "%s: %s: create: %s", fn, tmp, strerror(errno));
        goto out;
    }
    rc = sl_write_all(fd, data, len, fn, tmp);
    if (rc)
        goto fail_unlink;
    if (do_sync && fsync(fd) != 0) {
        rc = sl_fail(SL_EIO, "%s: %s: fsync: %s", fn, tmp, strerror(errno));
        goto fail_unlink;
    }
    if (close(fd) != 0) {
        fd = -1; /* closed even when close reports an error */
        rc = sl_fail(SL_EIO, "%s: %s: close: %s", fn, tmp, strerror(errno));
        goto fail_unlink;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        rc = sl_fail(SL_EIO, "%s: %s: rename to %s: %s", fn, tmp, path, strerror(errno));
        goto fail_unlink;
    }
    /* The new file is in place; only the rename's durability is left. */
    rc = do_sync ? sl_fsync_parent(path, fn) : SL_OK;
    goto out;

fail_unlink:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
out:
    free(tmp);
    return rc;
}

/* Decimal digits of v at p (no NUL); returns their count (1..20). snprintf
 * costs more than the rest of a small record's framing. */
static size_t put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

size_t sl_put_index_line(char *p, uint64_t offset, uint64_t size)
{
    size_t k = put_u64(p, offset);
    p[k++] = ' ';
    k += put_u64(p + k, size);
    p[k++] = '\n';
    return k;
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
