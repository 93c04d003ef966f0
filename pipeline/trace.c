/*
 * pipeline/trace.c - Chrome trace-event JSON of a running pipeline
 * (the "Trace Event Format" that chrome://tracing and Perfetto open:
 * https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
 *
 * Recording: sl_pipeline_trace_start allocates a bounded array of events
 * and publishes it (atomic pointer). Every pipeline thread then appends one
 * complete event ("ph":"X") per span it finishes: a reader per unit read
 * ("read"), a worker per sample ("decode") and per batch it submits
 * ("submit"), the consumer per wait in next() ("next"). A slot is taken
 * with an atomic fetch-add; events past the bound are dropped and counted.
 * Each event's `done` flag is stored last (release), so the writer, which
 * may run while threads still record, emits only finished events.
 *
 * Output (written to "<path>.tmp", fsync'ed, then renamed over path):
 *   {"traceEvents":[{"name":"decode","cat":"map","ph":"X","ts":12.345,
 *     "dur":2100.5,"pid":1,"tid":3,"args":{"n":17}}, ...,
 *     {"name":"thread_name","ph":"M","pid":1,"tid":3,"args":{"name":"worker 0"}}],
 *    "displayTimeUnit":"ms","otherData":{"dropped":0}}
 * ts and dur are microseconds since trace_start. Thread ids: 0 the
 * consumer, 1..R readers, R+1..R+W workers.
 *
 * Threading: start and write on the consumer thread; sl_trace_span from
 * any thread. The array lives until sl_pipeline_destroy.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "pipeline/graph_int.h"

typedef struct sl_trace_event {
    const char *name;   /* static string */
    uint64_t ts, dur;   /* ns since trace start */
    uint64_t arg;       /* unit seq, sample number or batch index */
    uint32_t tid;
    int done;           /* atomic: written last */
} sl_trace_event;

struct sl_trace {
    sl_trace_event *ev;
    size_t max;
    uint64_t next;      /* atomic: slots taken (may pass max: dropped) */
    uint64_t t0;
};

int sl_pipeline_trace_start(sl_pipeline *p, size_t max_events)
{
    static const char fn[] = "sl_pipeline_trace_start";
    if (!p || max_events == 0)
        return sl_fail(SL_EINVAL, "%s: need a pipeline and max_events >= 1", fn);
    if (__atomic_load_n(&p->trace, __ATOMIC_ACQUIRE))
        return sl_fail(SL_EINVAL, "%s: already recording", fn);
    if (max_events > SIZE_MAX / sizeof(sl_trace_event))
        return sl_fail(SL_EINVAL, "%s: %zu events: too many", fn, max_events);
    sl_trace *t = calloc(1, sizeof *t);
    if (!t || !(t->ev = calloc(max_events, sizeof *t->ev))) {
        free(t);
        return sl_fail(SL_ENOMEM, "%s: %zu events: out of memory", fn, max_events);
    }
    t->max = max_events;
    t->t0 = sl_now_ns();
    __atomic_store_n(&p->trace, t, __ATOMIC_RELEASE);
    return SL_OK;
}

void sl_trace_span(sl_pipeline *p, uint32_t tid, const char *name, uint64_t t_start_ns,
                   uint64_t t_end_ns, uint64_t arg)
{
    sl_trace *t = __atomic_load_n(&p->trace, __ATOMIC_ACQUIRE);
    if (!t)
        return;
    uint64_t i = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED);
    if (i >= t->max)
        return;
    sl_trace_event *e = &t->ev[i];
    e->name = name;
    e->ts = t_start_ns > t->t0 ? t_start_ns - t->t0 : 0;
    e->dur = t_end_ns > t_start_ns ? t_end_ns - t_start_ns : 0;
    e->arg = arg;
    e->tid = tid;
    __atomic_store_n(&e->done, 1, __ATOMIC_RELEASE);
}

void sl_trace_free(sl_pipeline *p)
{
    sl_trace *t = p->trace;
    if (!t)
        return;
    free(t->ev);
    free(t);
    p->trace = NULL;
}

static const char *category(const char *name)
{
    if (!strcmp(name, "read"))
        return "read";
    if (!strcmp(name, "decode"))
        return "map";
    if (!strcmp(name, "submit"))
        return "load";
    return "consumer";
}

static void thread_meta(FILE *f, uint32_t tid, const char *what, unsigned i)
{
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,"
               "\"args\":{\"name\":\"%s %u\"}}",
            tid, what, i);
    fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,"
               "\"args\":{\"sort_index\":%u}}",
            tid, tid);
}

/* Write everything to f; 0 or errno-ish failure reported by ferror. */
static void write_json(sl_pipeline *p, sl_trace *t, FILE *f)
{
    uint64_t taken = __atomic_load_n(&t->next, __ATOMIC_RELAXED);
    size_t n = taken < t->max ? (size_t)taken : t->max;
    fputs("{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
          "\"args\":{\"name\":\"sluice pipeline\"}}",
          f);
    for (size_t i = 0; i < n; i++) {
        const sl_trace_event *e = &t->ev[i];
        if (!__atomic_load_n(&e->done, __ATOMIC_ACQUIRE))
            continue;
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                   "\"pid\":1,\"tid\":%u,\"args\":{\"n\":%llu}}",
                e->name, category(e->name), (double)e->ts / 1e3, (double)e->dur / 1e3, e->tid,
                (unsigned long long)e->arg);
    }
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
               "\"args\":{\"name\":\"consumer\"}}");
    for (unsigned i = 0; i < p->readers; i++)
        thread_meta(f, 1 + i, "reader", i);
    for (unsigned i = 0; i < p->workers; i++)
        thread_meta(f, 1 + p->readers + i, "worker", i);
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped\":%llu}}\n",
            (unsigned long long)(taken > n ? taken - n : 0));
}

int sl_pipeline_trace_write(sl_pipeline *p, const char *path)
{
    static const char fn[] = "sl_pipeline_trace_write";
    if (!p || !path || !*path)
        return sl_fail(SL_EINVAL, "%s: need a pipeline and a path", fn);
    sl_trace *t = __atomic_load_n(&p->trace, __ATOMIC_ACQUIRE);
    if (!t)
        return sl_fail(SL_EINVAL, "%s: %s: not recording (call sl_pipeline_trace_start)", fn,
                       path);
    /* "path.tmp", fsync'ed and renamed over path (common/fileio.h); stdio
     * on a duplicate of its descriptor for the formatting. */
    sl_atomic_file af;
    int rc = sl_atomic_open(&af, path, fn);
    if (rc)
        return rc;
    int fd = dup(af.fd);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        rc = sl_fail(SL_EIO, "%s: %s: %s", fn, af.tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        sl_atomic_abort(&af);
        return rc;
    }
    write_json(p, t, f);
    int bad = ferror(f) || fflush(f) != 0;
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        rc = sl_fail(SL_EIO, "%s: %s: write: %s", fn, af.tmp, strerror(e));
        sl_atomic_abort(&af);
        return rc;
    }
    return sl_atomic_commit(&af, 1);
}
