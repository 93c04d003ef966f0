/*
 * records/fetcher.c - the fetcher of bytesrc.h: many reads in flight on one
 * thread.
 *
 * DESIGN
 *   Each request's path is opened as a byte-source handle (bytesrc.c), which
 *   says whether it is remote: remote requests go to an sl_remote_multi
 *   opened at the first remote add, with the options resolved at open;
 *   local ones are read at add time through the handle (pread) and queued
 *   as completed. wait hands back completed local requests first. The
 *   fetcher keeps the last handle open (readers add many ranges of one
 *   shard in a row).
 *
 * Threading: an sl_fetcher belongs to one thread at a time (bytesrc.h).
 */
#include "records/bytesrc_int.h"

#include <stdlib.h>
#include <string.h>

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
    sl_io_opts o;   /* resolved at open */
    sl_bytesrc *src; /* the last request's path, or NULL */
    const int *stop; /* sl_fetcher_set_stop */
};

void sl_fetcher_set_stop(sl_fetcher *f, const int *stop)
{
    if (f)
        f->stop = stop;
}

int sl_fetcher_open(const sl_io_opts *opts, sl_fetcher **out)
{
    sl_fetcher *f;
    int rc;

    if (!out)
        return sl_fail(SL_EINVAL, "sl_fetcher_open: NULL argument");
    if (!(f = calloc(1, sizeof *f)))
        return sl_fail(SL_ENOMEM, "sl_fetcher_open: out of memory");
    if ((rc = sl_io_resolve(opts, &f->o))) {
        free(f);
        return rc;
    }
    *out = f;
    return SL_OK;
}

/* f->src for path: the last one kept, else path opened under f's options
 * (a local file's open error is the request's). */
static int fetch_src(sl_fetcher *f, const char *path)
{
    if (f->src && !strcmp(sl_bytesrc_path(f->src), path))
        return SL_OK;
    sl_bytesrc_close(f->src);
    f->src = NULL;
    return sl_bytesrc_open_as("sl_fetcher_wait", path, &f->o, &f->src);
}

int sl_fetcher_add(sl_fetcher *f, const char *path, uint64_t off, void *buf, size_t n, void *tag)
{
    local_done *d;

    if (!f || !path || (!buf && n))
        return sl_fail(SL_EINVAL, "sl_fetcher_add: NULL argument");
    int rc = fetch_src(f, path);
    if (!rc && sl_bytesrc_is_remote(f->src)) {
        if (!f->rm) { /* stays NULL without libcurl: the add then says so */
            if ((rc = sl_remote_multi_open(&f->o, &f->rm)))
                return rc;
        }
        return sl_remote_multi_add(f->rm, path, off, buf, n, tag);
    }
    if (!(d = calloc(1, sizeof *d)))
        return sl_fail(SL_ENOMEM, "sl_fetcher_add: out of memory");
    d->tag = tag;
    d->rc = rc ? rc : sl_bytesrc_read_as("sl_fetcher_wait", f->src, buf, n, off);
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
    sl_bytesrc_close(f->src);
    free(f);
}
