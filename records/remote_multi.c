/*
 * records/remote_multi.c - the fetcher's remote half: many ranged GETs in
 * flight on one thread through one curl_multi.
 *
 * DESIGN
 *   Requests live on two lists: `waiting` (FIFO: not started, or backing
 *   off until `due`) and `done` (completed, success or error). At most
 *   opts.inflight (read at open) are running; their easy handles come from
 *   a pool kept for the fetcher's life, and the multi's connection cache
 *   keeps their connections open between requests (HTTP/1.1 keep-alive: a
 *   host sees at most `inflight` connections).
 *   wait(): hand back the first done request; otherwise start what is due,
 *   drive the multi (curl_multi_perform, then curl_multi_info_read for the
 *   finished), and sleep in curl_multi_poll until a socket is ready or the
 *   next backoff is due. A finished try gets the verdict of remote_curl.c:
 *   done, requeued with a jittered backoff, or done with its error message
 *   (kept on the request, set as the thread's sl_errmsg when handed back).
 *   Retries: as bytesrc.h says (sl_io_retry_next: the time budget from the
 *   request's first try, and the count when one is set); a request backing
 *   off waits on the list while the others run, and comes back when due.
 *   An object whose server ignores Range and which is held whole
 *   (remote_norange.c) is read from that copy when its request comes due,
 *   without a transfer; one being fetched whole by another request waits
 *   20 ms at a time on the list.
 *   fork(): a fetcher is its opener's process's (its connections are); in
 *   a child add and wait refuse it and close frees its memory without
 *   touching a handle (remote_curl.c's abandon).
 *
 * Threading: one thread at a time (the fetcher's owner).
 */
#include "records/remote_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

typedef struct mreq {
    struct mreq *next;
    sl_rurl u;
    sl_xfer x;
    void *tag;
    unsigned tries;
    uint64_t due_ns;
    int rc;
    char *msg;
} mreq;

struct sl_remote_multi {
    CURLM *m;
    sl_io_opts o;
    mreq *wait_head, *wait_tail;
    mreq *done_head, *done_tail;
    mreq *run_head;   /* running, in no order */
    unsigned pending; /* added, not yet handed back */
    unsigned running;
    CURL **idle;      /* pooled easy handles, up to o.inflight */
    unsigned nidle;
    unsigned fork_gen; /* sl_curl_fork_gen at open */
};

/* SL_OK in the process that opened m; SL_EINVAL in a child of it. */
static int same_process(const sl_remote_multi *m, const char *fn)
{
    if (m->fork_gen == sl_curl_fork_gen())
        return SL_OK;
    return sl_fail(SL_EINVAL, "%s: this fetcher was opened before a fork(): its connections "
                   "are the parent's; open a new one in the child", fn);
}

static void push(mreq **head, mreq **tail, mreq *r)
{
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

static void req_free(mreq *r)
{
    sl_xfer_fini(&r->x);
    sl_rurl_fini(&r->u);
    free(r->msg);
    free(r);
}

int sl_remote_multi_open(const sl_io_opts *o, sl_remote_multi **out)
{
    sl_remote_multi *m;
    int rc = sl_curl_global("sl_fetcher_add");

    if (rc)
        return rc;
    if (!(m = calloc(1, sizeof *m)))
        return sl_fail(SL_ENOMEM, "sl_fetcher_add: out of memory");
    m->o = *o;
    m->fork_gen = sl_curl_fork_gen();
    if (!(m->idle = calloc(m->o.inflight, sizeof *m->idle)) || !(m->m = curl_multi_init())) {
        free(m->idle);
        free(m);
        return sl_fail(SL_ENOMEM, "sl_fetcher_add: curl_multi_init failed");
    }
    *out = m;
    return SL_OK;
}

int sl_remote_multi_add(sl_remote_multi *m, const char *path, uint64_t off, void *buf, size_t n,
                        void *tag)
{
    mreq *r;
    int rc = same_process(m, "sl_fetcher_add");

    if (rc)
        return rc;
    if (!(r = calloc(1, sizeof *r)))
        return sl_fail(SL_ENOMEM, "sl_fetcher_add: out of memory");
    if ((rc = sl_rurl_object("sl_fetcher_add", path, &r->u))) {
        free(r);
        return rc;
    }
    r->x.kind = SL_XF_RANGE;
    r->x.u = &r->u;
    r->x.dst = buf;
    r->x.n = n;
    r->x.off = off;
    r->tag = tag;
    if (n == 0) /* nothing to fetch: complete at once */
        push(&m->done_head, &m->done_tail, r);
    else
        push(&m->wait_head, &m->wait_tail, r);
    m->pending++;
    return SL_OK;
}

unsigned sl_remote_multi_pending(const sl_remote_multi *m) { return m ? m->pending : 0; }

static void finish(sl_remote_multi *m, mreq *r, int rc)
{
    r->rc = rc;
    if (rc) {
        char msg[SL_ERRMSG_MAX];
        sl_io_note_failure();
        sl_xfer_message(&r->x, "sl_fetcher_wait", rc, r->tries, msg, sizeof msg);
        r->msg = strdup(msg); /* NULL: the code alone comes back */
    }
    push(&m->done_head, &m->done_tail, r);
}

/* Unlink r (whose predecessor is prev) from the waiting list. */
static void unwait(sl_remote_multi *m, mreq *prev, mreq *r)
{
    if (prev)
        prev->next = r->next;
    else
        m->wait_head = r->next;
    if (m->wait_tail == r)
        m->wait_tail = prev;
}

/* Start the due requests while fewer than inflight run. */
static void start_due(sl_remote_multi *m)
{
    mreq *prev = NULL, *r = m->wait_head, *next;
    uint64_t now = sl_now_ns();

    for (; r && m->running < m->o.inflight; r = next) {
        next = r->next;
        if (r->due_ns > now) {
            prev = r;
            continue;
        }
        /* its object held whole (a server that ignores Range): no transfer */
        int hrc = SL_OK, held = sl_norange_read(r->u.url, r->u.name, r->x.dst, r->x.n, r->x.off,
                                                &hrc);
        if (held == 2) { /* another request fetches it whole: wait for that */
            r->due_ns = now + 20ull * 1000000ull;
            prev = r;
            continue;
        }
        unwait(m, prev, r);
        if (held) {
            r->rc = hrc;
            if (hrc) {
                char msg[SL_ERRMSG_MAX];
                snprintf(msg, sizeof msg, "sl_fetcher_wait: %s", sl_errmsg());
                r->msg = strdup(msg);
            }
            push(&m->done_head, &m->done_tail, r);
            continue;
        }
        CURL *e = m->nidle ? m->idle[--m->nidle] : curl_easy_init();
        int rc = e ? SL_OK : sl_fail(SL_ENOMEM, "%s: curl_easy_init failed", r->u.name);
        if (!rc) {
            curl_easy_reset(e);
            rc = sl_xfer_setup(&r->x, e, &m->o);
        }
        if (!rc && curl_multi_add_handle(m->m, e) != CURLM_OK)
            rc = sl_fail(SL_EIO, "%s: curl_multi_add_handle failed", r->u.name);
        if (r->tries++ == 0)
            r->x.first_ns = now;
        if (rc) {
            char msg[SL_ERRMSG_MAX];
            snprintf(msg, sizeof msg, "sl_fetcher_wait: %s", sl_errmsg());
            if (e)
                curl_easy_cleanup(e);
            r->rc = rc;
            r->msg = strdup(msg);
            push(&m->done_head, &m->done_tail, r);
            continue;
        }
        sl_io_note_start(r->tries > 1);
        r->next = m->run_head;
        m->run_head = r;
        m->running++;
    }
}

static void release_easy(sl_remote_multi *m, CURL *e)
{
    curl_multi_remove_handle(m->m, e);
    curl_easy_reset(e);
    if (m->nidle < m->o.inflight)
        m->idle[m->nidle++] = e;
    else
        curl_easy_cleanup(e);
}

/* Collect finished transfers: done, or back on the waiting list. */
static void reap(sl_remote_multi *m)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(m->m, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *e = msg->easy_handle;
        CURLcode cc = msg->data.result;
        sl_xfer *x = NULL;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&x);
        mreq *r = (mreq *)((char *)x - offsetof(mreq, x));
        sl_io_note_end(x->seen);
        int rc = sl_xfer_verdict(x, cc);
        release_easy(m, e);
        for (mreq **pp = &m->run_head; *pp; pp = &(*pp)->next)
            if (*pp == r) {
                *pp = r->next;
                break;
            }
        m->running--;
        uint64_t wait;
        if (rc && x->retry && sl_io_retry_next(&m->o, r->tries, x->first_ns, &wait)) {
            r->due_ns = sl_now_ns() + wait;
            push(&m->wait_head, &m->wait_tail, r);
        } else {
            finish(m, r, rc);
        }
    }
}

/* ms until the first waiting request is due (only when a slot is free). */
static int poll_ms(const sl_remote_multi *m)
{
    uint64_t now = sl_now_ns(), first = UINT64_MAX;

    if (m->running >= m->o.inflight)
        return 1000;
    for (const mreq *r = m->wait_head; r; r = r->next)
        if (r->due_ns < first)
            first = r->due_ns;
    if (first == UINT64_MAX)
        return 1000;
    if (first <= now)
        return 0;
    uint64_t ms = (first - now + 999999) / 1000000;
    return ms > 1000 ? 1000 : (int)ms;
}

int sl_remote_multi_wait(sl_remote_multi *m, void **tag, const int *stop)
{
    if (!m || !m->pending)
        return SL_EOF;
    int rc0 = same_process(m, "sl_fetcher_wait");
    if (rc0)
        return rc0;
    for (;;) {
        mreq *r = m->done_head;
        if (r) {
            int rc = r->rc;
            if (!(m->done_head = r->next))
                m->done_tail = NULL;
            m->pending--;
            *tag = r->tag;
            if (rc)
                sl_fail(rc, "%s", r->msg ? r->msg : "sl_fetcher_wait: request failed");
            req_free(r);
            return rc;
        }
        start_due(m);
        if (m->done_head)
            continue;
        int still = 0;
        CURLMcode mc = curl_multi_perform(m->m, &still);
        if (mc != CURLM_OK)
            return sl_fail(SL_EIO, "sl_fetcher_wait: curl_multi_perform: %s",
                           curl_multi_strerror(mc));
        reap(m);
        if (m->done_head)
            continue;
        if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE))
            return sl_fail(SL_ECANCELED, "sl_fetcher_wait: stopped");
        int ms = poll_ms(m);
        mc = curl_multi_poll(m->m, NULL, 0, stop && ms > 100 ? 100 : ms, NULL);
        if (mc != CURLM_OK)
            return sl_fail(SL_EIO, "sl_fetcher_wait: curl_multi_poll: %s", curl_multi_strerror(mc));
    }
}

void sl_remote_multi_close(sl_remote_multi *m)
{
    if (!m)
        return;
    if (same_process(m, "sl_fetcher_close")) { /* a child: free memory, touch no handle */
        sl_clear_error();
        while (m->run_head) {
            mreq *r = m->run_head;
            m->run_head = r->next;
            sl_curl_abandon(r->x.e);
            req_free(r);
        }
        for (unsigned i = 0; i < m->nidle; i++)
            sl_curl_abandon(m->idle[i]);
        m->nidle = 0;
        sl_curl_abandon(m->m);
        m->m = NULL;
    }
    while (m->run_head) { /* cancel what is in flight */
        mreq *r = m->run_head;
        m->run_head = r->next;
        curl_multi_remove_handle(m->m, r->x.e);
        curl_easy_cleanup(r->x.e);
        sl_io_note_end(0);
        req_free(r);
    }
    while (m->wait_head) {
        mreq *r = m->wait_head;
        m->wait_head = r->next;
        req_free(r);
    }
    while (m->done_head) {
        mreq *r = m->done_head;
        m->done_head = r->next;
        req_free(r);
    }
    for (unsigned i = 0; i < m->nidle; i++)
        curl_easy_cleanup(m->idle[i]);
    if (m->m)
        curl_multi_cleanup(m->m);
    free(m->idle);
    free(m);
}
