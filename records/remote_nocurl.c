/*
 * records/remote_nocurl.c - the remote backend of a build without libcurl
 * (SLUICE_WITH_CURL off): every remote path is SL_ENOTSUP, local paths work
 * as ever (bytesrc.c). CMake builds this file instead of remote_curl.c,
 * remote_multi.c, remote_s3list.c and remote_url.c.
 *
 * Threading: reentrant (no state).
 */
#include "records/bytesrc_int.h"

static int nocurl(const char *fn, const char *path)
{
    return sl_fail(SL_ENOTSUP, "%s: %s: this sluice was built without libcurl", fn, path);
}

int sl_remote_get(const char *fn, const char *path, const sl_io_opts *o, uint8_t **buf,
                  size_t *len)
{
    (void)o;
    (void)buf;
    (void)len;
    return nocurl(fn, path);
}

int sl_remote_size(const char *fn, const char *path, const sl_io_opts *o, uint64_t *size)
{
    (void)o;
    (void)size;
    return nocurl(fn, path);
}

int sl_remote_list(const char *fn, const char *dir, const sl_io_opts *o, char ***names,
                   size_t *n)
{
    (void)o;
    (void)names;
    (void)n;
    return nocurl(fn, dir);
}

int sl_remote_read(const char *fn, const char *path, const sl_io_opts *o, void *buf, size_t n,
                   uint64_t off)
{
    (void)o;
    (void)buf;
    (void)n;
    (void)off;
    return nocurl(fn, path);
}

/* Succeeds with no multi, so that sl_remote_multi_add names the path. */
int sl_remote_multi_open(const sl_io_opts *o, sl_remote_multi **out)
{
    (void)o;
    *out = NULL;
    return SL_OK;
}

int sl_remote_multi_add(sl_remote_multi *m, const char *path, uint64_t off, void *buf, size_t n,
                        void *tag)
{
    (void)m;
    (void)off;
    (void)buf;
    (void)n;
    (void)tag;
    return nocurl("sl_fetcher_add", path);
}

unsigned sl_remote_multi_pending(const sl_remote_multi *m)
{
    (void)m;
    return 0;
}

int sl_remote_multi_wait(sl_remote_multi *m, void **tag, const int *stop)
{
    (void)m;
    (void)tag;
    (void)stop;
    return SL_EOF;
}

void sl_remote_multi_close(sl_remote_multi *m) { (void)m; }

void sl_remote_set_list_page(unsigned max_keys) { (void)max_keys; }

/* records/remote_put.h without libcurl */
#include "records/remote_put.h"

#include <string.h>

uint64_t sl_put_part_bytes(void) { return (uint64_t)64 << 20; }
int sl_put_bytes(const char *url, const void *data, size_t len)
{
    (void)data, (void)len;
    return nocurl("sl_put_bytes", url);
}
int sl_put_file(const char *url, const char *local_path)
{
    (void)local_path;
    return nocurl("sl_put_file", url);
}
int sl_put_delete(const char *url) { return nocurl("sl_put_delete", url); }
void sl_put_stats_get(sl_put_stats *s) { memset(s, 0, sizeof *s); }

void sl_norange_drop_all(void) {}
