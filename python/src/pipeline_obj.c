/*
 * python/src/pipeline_obj.c - sluice._sluice._Pipeline: one sl_pipeline
 * behind a Python object (sluice.Pipeline in python/sluice/ is the keyword
 * API over it).
 *
 * Batches. next() takes a batch with sl_pipeline_next_wait and hands out its
 * images as a Tensor over the batch slot itself (host data, or d_data with a
 * device), and its labels (as int64, torch's class-index type), record ids
 * (int64) and epochs (int32) as small copies of their own. The slot stays
 * lent while the binding holds it: at most `hold` batches are held, and the
 * oldest is released when next() would hold one more. So an image tensor is
 * valid until `hold` more batches have been taken (then its slot is
 * refilled; its memory stays mapped, so a late read sees another batch,
 * never freed memory, and the Tensor itself refuses new exports: see
 * leases below). With copy=True the images are copied into a buffer of
 * their own and the slot is released at once.
 *
 * Memory. A core (a holder, ext.h) owns the sl_pipeline (and its copy of
 * label_key, which the pipeline borrows until destroy): one reference for
 * the object, one per Tensor and per DLPack export over a slot. close()
 * stops the threads (sl_pipeline_stop), then releases what it holds (the
 * held batches keep their bytes: no worker is left to refill them) and
 * drops the object's reference; the ring is freed (sl_pipeline_destroy) when the
 * last tensor over it dies, whichever comes first. The position and the
 * figures at close are kept, for state() and stats() after it.
 *
 * Waiting. next() releases the GIL and waits in slices of 100 ms
 * (sl_pipeline_next_wait); between slices it runs PyErr_CheckSignals, so
 * Ctrl-C raises KeyboardInterrupt within 0.1 s and leaves the pipeline
 * usable, and it sees a close() made by another thread.
 *
 * Device batches. Before a device batch's slot is released, the consumer
 * streams that took its images (the lease, tensor.c) are synchronized on
 * the host, since the slot's next copy is ordered after nothing on them
 * (pipeline/load_cuda.cu); with hold 2 (the device default) that is the
 * step before the last, normally long done.
 *
 * Lent batches are leased (ext.h's sl_lease, shared with the image
 * Tensor): when a slot goes back to be refilled, its lease is marked, and
 * the Tensor then refuses to export (tensor.c), so a kept lent batch fails
 * loudly instead of showing a later batch. close() does not mark: no worker
 * is left to refill those slots, so their tensors stay right.
 *
 * Threading: one thread at a time may call next (a second gets
 * RuntimeError); close() from another thread waits for a next() in
 * progress to notice it (at most one slice). All under the GIL, which
 * next() and close() release while they wait; so each claims what it works
 * on before it does: next() sets busy before its first wait (the stream
 * sync of a device batch it gives back, then the batch wait), and close()
 * takes the core out of the object (core = NULL, closing = 1) before it
 * joins the threads, so a second close() waits for the first instead of
 * joining the same threads again (it hung), and nothing uses a core that
 * another thread is freeing.
 */
#include "ext.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/pipeline.h"
#include "records/bytesrc.h"

#define MAX_HOLD 64
#define WAIT_SLICE_MS 100

typedef struct core {
    sl_holder h;
    sl_pipeline *p;
    pid_t pid;              /* the process whose threads p runs on */
    char *label_key;        /* p's cfg.label_key (borrowed by p until destroy), or NULL */
} core;

/* In a child of fork() the pipeline's threads do not exist (only the
 * forking thread is copied) and its mutexes may be held by them forever:
 * nothing of it may be touched there, not even to free it (its memory is
 * the child's copy and goes with the child). */
static void core_free(sl_holder *h)
{
    core *c = (core *)h;
    if (c->pid == getpid())
        sl_pipeline_destroy(c->p);
    free(c->label_key);
    free(c);
}

typedef struct held {
    sl_batch *b;
    sl_lease *lease; /* device batches; NULL for host ones */
} held;

typedef struct {
    PyObject_HEAD
    core *core;             /* NULL once closed */
    int device;             /* cfg.device */
    int copy;               /* images copied, slots released at once */
    unsigned hold;          /* batches held at most */
    held q[MAX_HOLD];       /* lent batches, oldest first */
    unsigned nq;
    int busy;               /* a next() is waiting with the GIL released */
    int close_requested;    /* by close() from another thread while busy */
    int closing;            /* a close() is joining the threads (core already NULL) */
    char state[SL_PIPELINE_STATE_MAX]; /* the position when closed (state() after close) */
    size_t state_len;       /* 0: none kept */
    sl_pipeline_stats last; /* the figures when closed (stats() after close) */
    int has_last;
    uint64_t mem_budget;    /* memory_budget (0: none) and its fit (memory.c) */
    sl_pipeline_memory mem;
    char mem_what[160];
} pipe_obj;

/* Made in another process (this one is a child of fork()): its threads
 * are not here. */
static int forked(const pipe_obj *self)
{
    return self->core && self->core->pid != getpid();
}

static PyObject *forked_error(const pipe_obj *self)
{
    sl_fail(SL_ENOTSUP, "sluice.Pipeline: made in process %ld, used in process %ld (a child of "
            "fork(), e.g. a multiprocessing or DataLoader worker): its threads are not here; "
            "make the Pipeline in this process (a pickled one, as spawn passes it, continues "
            "from its state_dict())", (long)self->core->pid, (long)getpid());
    return pysl_raise(SL_ENOTSUP);
}

static PyTypeObject *pipe_type;

/* ------------------------------------------------------------ config */
enum field_kind { F_UNSIGNED, F_INT, F_I64, F_U64, F_FLOAT, F_STR };

typedef struct field {
    const char *key;
    enum field_kind kind;
    size_t off;
} field;

#define FLD(key, kind, member) {key, kind, offsetof(sl_pipeline_config, member)}
static const field fields[] = {
    FLD("data", F_STR, data),
    FLD("split", F_STR, split),
    FLD("rank", F_UNSIGNED, rank),
    FLD("world", F_UNSIGNED, world),
    FLD("rank_split", F_INT, rank_split),
    FLD("readers", F_UNSIGNED, readers),
    FLD("cycle", F_UNSIGNED, cycle),
    FLD("block", F_UNSIGNED, block),
    FLD("read_window_bytes", F_U64, read_window_bytes),
    FLD("shuffle", F_INT, shuffle),
    FLD("shuffle_buffer", F_U64, shuffle_buffer),
    FLD("shuffle_bytes", F_U64, shuffle_bytes),
    FLD("shuffle_files", F_INT, shuffle_files),
    FLD("epochs", F_I64, epochs),
    FLD("transform", F_INT, transform),
    FLD("height", F_INT, height),
    FLD("width", F_INT, width),
    FLD("scale_min", F_FLOAT, scale_min),
    FLD("scale_max", F_FLOAT, scale_max),
    FLD("ratio_min", F_FLOAT, ratio_min),
    FLD("ratio_max", F_FLOAT, ratio_max),
    FLD("flip", F_INT, flip),
    FLD("crop_fraction", F_FLOAT, crop_fraction),
    FLD("mean0", F_FLOAT, mean[0]),
    FLD("mean1", F_FLOAT, mean[1]),
    FLD("mean2", F_FLOAT, mean[2]),
    FLD("std0", F_FLOAT, std[0]),
    FLD("std1", F_FLOAT, std[1]),
    FLD("std2", F_FLOAT, std[2]),
    FLD("layout", F_INT, layout),
    FLD("batch", F_UNSIGNED, batch),
    FLD("drop_remainder", F_INT, drop_remainder),
    FLD("workers", F_UNSIGNED, workers),
    FLD("prefetch", F_UNSIGNED, prefetch),
    FLD("seed", F_U64, seed),
    FLD("on_error", F_INT, on_error),
    FLD("max_bad", F_U64, max_bad),
    FLD("max_pixels", F_U64, max_pixels),
    FLD("label_offset", F_I64, label_offset),
    FLD("device", F_INT, device),
    FLD("label_key", F_STR, label_key),
    FLD("tune", F_UNSIGNED, tune),
};
#undef FLD

/* The field that key (a str) names; NULL with an exception set (ConfigError
 * for a name that is no field). The UTF-8 copy of key dies here: callers
 * name the setting by f->key, which is static. */
static const field *find_field(PyObject *key)
{
    PyObject *kb = PyUnicode_AsUTF8String(key);
    if (!kb)
        return NULL;
    const char *k = PyBytes_AsString(kb);
    const field *f = NULL;
    for (size_t i = 0; k && !f && i < sizeof fields / sizeof fields[0]; i++)
        if (!strcmp(fields[i].key, k))
            f = &fields[i];
    if (k && !f)
        pysl_config_error("sluice: unknown pipeline setting '%s'", k);
    Py_DECREF(kb);
    return f;
}

/* cfg from d: every key must be a field (the Python layer names them);
 * integers must fit their field (no silent truncation); strings are kept
 * alive in keep. */
static int parse_config(PyObject *d, sl_pipeline_config *cfg, PyObject *keep)
{
    sl_pipeline_config init = SL_PIPELINE_CONFIG_INIT;
    *cfg = init;
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &val)) {
        const field *f = find_field(key);
        if (!f)
            return -1;
        char *at = (char *)cfg + f->off;
        if (f->kind == F_STR) {
            char what[64];
            snprintf(what, sizeof what, "sluice.Pipeline: %s", f->key);
            PyObject *b = pysl_bytes(val, what);
            if (!b || PyList_Append(keep, b)) {
                Py_XDECREF(b);
                return -1;
            }
            *(const char **)at = PyBytes_AsString(b); /* alive in keep */
            Py_DECREF(b);
            continue;
        }
        if (f->kind == F_FLOAT) {
            double x = PyFloat_AsDouble(val);
            if (x == -1.0 && PyErr_Occurred())
                return -1;
            *(float *)at = (float)x;
            continue;
        }
        int over = 0;
        long long x = PyLong_Check(val) ? PyLong_AsLongLongAndOverflow(val, &over) : -1;
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (f->kind == F_U64 && over > 0) { /* 2^63 .. 2^64-1 */
            unsigned long long u = PyLong_AsUnsignedLongLong(val);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
            } else {
                *(uint64_t *)at = (uint64_t)u;
                continue;
            }
        }
        if (!PyLong_Check(val) || over) {
            pysl_config_error("sluice.Pipeline: %s=%R: an integer of its C field's range",
                              f->key, val);
            return -1;
        }
        if ((f->kind == F_UNSIGNED || f->kind == F_U64) && x < 0) {
            pysl_config_error("sluice: %s: %lld is negative", f->key, x);
            return -1;
        }
        if ((f->kind == F_UNSIGNED && (unsigned long long)x > UINT_MAX) ||
            (f->kind == F_INT && (x < INT_MIN || x > INT_MAX))) {
            pysl_config_error("sluice: %s: %lld is out of range (%lld to %lld)", f->key, x,
                              f->kind == F_INT ? (long long)INT_MIN : 0LL,
                              f->kind == F_INT ? (long long)INT_MAX : (long long)UINT_MAX);
            return -1;
        }
        switch (f->kind) {
        case F_UNSIGNED: *(unsigned *)at = (unsigned)x; break;
        case F_INT: *(int *)at = (int)x; break;
        case F_I64: *(int64_t *)at = (int64_t)x; break;
        default: *(uint64_t *)at = (uint64_t)x; break;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ lifecycle */
static PyObject *pipe_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"config", "state", "hold", "copy", "io", "memory", NULL};
    PyObject *d, *state = Py_None, *io_args = Py_None, *mem_args = Py_None;
    unsigned hold = 1;
    int copy = 0;
    sl_io_opts io, io_fit; /* this pipeline's (cfg.io: read at create); a fit's */
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|OIpOO:_Pipeline", kwlist, &PyDict_Type, &d,
                                     &state, &hold, &copy, &io_args, &mem_args))
        return NULL;
    /* memory=(budget, fixed, min_prefetch): sl_pipeline_memory_fit before create */
    unsigned long long budget = 0;
    unsigned fixed = 0, min_prefetch = 0;
    if (mem_args != Py_None &&
        (!PyTuple_Check(mem_args) ||
         !PyArg_ParseTuple(mem_args, "KII", &budget, &fixed, &min_prefetch) || !budget)) {
        if (!PyErr_Occurred())
            pysl_config_error("sluice.Pipeline: memory=%R: a tuple (budget > 0, fixed, "
                              "min_prefetch)", mem_args);
        return NULL;
    }
    if (io_args != Py_None && (!PyTuple_Check(io_args) || pysl_io_opts(io_args, &io))) {
        if (!PyErr_Occurred())
            pysl_config_error("sluice.Pipeline: io=%R: a tuple (retries, timeout_ms, inflight, "
                              "retry_ms)", io_args);
        return NULL;
    }
    if (hold < 1 || hold > MAX_HOLD)
        return pysl_config_error("sluice.Pipeline: hold=%u: 1 to %d batches", hold, MAX_HOLD);
    sl_pipeline_config cfg;
    PyObject *keep = PyList_New(0);
    if (!keep)
        return NULL;
    if (parse_config(d, &cfg, keep)) {
        Py_DECREF(keep);
        return NULL;
    }
    cfg.io = io_args != Py_None ? &io : NULL; /* NULL: the process-wide settings */
    char *st = NULL;
    if (state != Py_None && !(st = pysl_strdup_utf8(state))) {
        Py_DECREF(keep);
        return NULL;
    }
    int rc;
    if (cfg.device >= 0 && (rc = pysl_dev_check(cfg.device))) {
        free(st);
        Py_DECREF(keep);
        return pysl_raise(rc);
    }
    core *c = calloc(1, sizeof *c);
    if (!c || (cfg.label_key && !(c->label_key = strdup(cfg.label_key)))) {
        free(c);
        free(st);
        Py_DECREF(keep);
        return PyErr_NoMemory();
    }
    cfg.label_key = c->label_key; /* the other strings are copied by create; this one lives in c */
    sl_pipeline *p = NULL;
    sl_pipeline_memory mem;
    char what[160] = "";
    sl_memory_fit fit = {.budget = budget, .fixed = fixed, .min_prefetch = min_prefetch,
                         .cmd = "sluice.Pipeline: memory_budget", .io = &io_fit};
    Py_BEGIN_ALLOW_THREADS
    rc = budget ? sl_pipeline_memory_fit(&cfg, &fit, &mem, what, sizeof what) : SL_OK;
    if (!rc)
        rc = st ? sl_pipeline_create_from_state(&cfg, st, strlen(st), &p)
                : sl_pipeline_create(&cfg, &p);
    Py_END_ALLOW_THREADS
    free(st);
    Py_DECREF(keep);
    if (rc) {
        free(c->label_key);
        free(c);
        return pysl_raise(rc);
    }
    atomic_init(&c->h.refs, 1);
    c->h.free = core_free;
    c->p = p;
    c->pid = getpid();
    pipe_obj *self = (pipe_obj *)PyType_GenericAlloc(type, 0);
    if (!self) {
        sl_holder_unref(&c->h);
        return NULL;
    }
    self->core = c;
    self->mem_budget = budget;
    if (budget) {
        self->mem = mem;
        memcpy(self->mem_what, what, sizeof what);
    }
    self->device = cfg.device;
    self->copy = copy;
    self->hold = hold;
    return (PyObject *)self;
}

/* Give back the oldest held batch to p; device batches after the streams
 * that took them are done. refill: the slot will be refilled (next() makes
 * room for batch `by`), so its tensor's lease is marked; close() gives back
 * with refill 0. -1 (with an exception) when the sync failed; the slot is
 * released all the same. The caller has claimed p (busy, or p out of the
 * object): the GIL is released during the sync. */
static int release_oldest(pipe_obj *self, sl_pipeline *p, int refill, uint64_t by)
{
    held h = self->q[0];
    memmove(self->q, self->q + 1, --self->nq * sizeof self->q[0]);
    int rc = 0;
    if (h.lease && h.lease->nstreams) {
        Py_BEGIN_ALLOW_THREADS
        rc = pysl_dev_streams_sync(self->device, h.lease->streams, h.lease->nstreams);
        Py_END_ALLOW_THREADS
        h.lease->nstreams = 0;
    }
    if (h.lease && refill) {
        h.lease->released = 1;
        h.lease->released_by = by;
    }
    sl_pipeline_release(p, h.b);
    pysl_lease_unref(h.lease);
    if (rc) {
        pysl_raise(rc);
        return -1;
    }
    return 0;
}

/* Let other threads run for a moment (a close or a next finishing). */
static void yield_gil(void)
{
    Py_BEGIN_ALLOW_THREADS
    usleep(2000);
    Py_END_ALLOW_THREADS
}

/* Stop the threads, then release what is held (so no worker refills those
 * slots: tensors over them keep their batch), drop the object's reference.
 * The core is taken out of the object first (the claim): the GIL is
 * released while the threads are joined. */
static int do_close(pipe_obj *self)
{
    int err = 0;
    core *c = self->core;
    if (!c)
        return 0;
    self->core = NULL;
    if (c->pid != getpid()) {
        /* a child of fork(): forget the batches and the pipeline without
         * touching them (core_free leaves a forked pipeline alone) */
        while (self->nq)
            pysl_lease_unref(self->q[--self->nq].lease);
        sl_holder_unref(&c->h);
        return 0;
    }
    self->closing = 1;
    /* the position reached and the figures, for state() and stats() after
     * close (stop keeps both valid) */
    if (sl_pipeline_state_save(c->p, self->state, sizeof self->state, &self->state_len))
        self->state_len = 0;
    self->has_last = sl_pipeline_stats_get(c->p, &self->last) == SL_OK;
    Py_BEGIN_ALLOW_THREADS
    sl_pipeline_stop(c->p);
    Py_END_ALLOW_THREADS
    while (self->nq)
        err |= release_oldest(self, c->p, 0, 0);
    sl_holder_unref(&c->h);
    self->closing = 0;
    return err ? -1 : 0;
}

static PyObject *pipe_close(PyObject *obj, PyObject *unused)
{
    (void)unused;
    pipe_obj *self = (pipe_obj *)obj;
    if (self->busy && !forked(self)) {
        /* another thread waits in next(): it closes at its next slice */
        self->close_requested = 1;
        while (self->busy)
            yield_gil();
    }
    int err = do_close(self);
    while (self->closing) /* another thread's close() is joining the threads */
        yield_gil();
    if (err)
        return NULL;
    Py_RETURN_NONE;
}

static void pipe_dealloc(PyObject *obj)
{
    pipe_obj *self = (pipe_obj *)obj;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (do_close(self))
        PyErr_WriteUnraisable(obj);
    PyErr_Restore(et, ev, tb);
    pysl_free_self(obj);
}

/* ------------------------------------------------------------ next */
static PyObject *small_tensor(const void *src, unsigned n, size_t elem, int widen32,
                              sldl_dtype dtype)
{
    void *data;
    sl_holder *h = pysl_buffer_new((size_t)n * dtype.bits / 8, -1, &data);
    if (!h)
        return NULL;
    if (widen32) { /* int32 labels as int64 */
        const int32_t *s = src;
        int64_t *o = data;
        for (unsigned i = 0; i < n; i++)
            o[i] = s[i];
    } else if (n) {
        memcpy(data, src, (size_t)n * elem);
    }
    pysl_tensor_desc d = {.data = data, .ndim = 1, .shape = {n}, .dtype = dtype, .device = -1,
                          .holder = h};
    PyObject *t = pysl_tensor_new(&d);
    sl_holder_unref(h);
    return t;
}

static PyObject *image_tensor(pipe_obj *self, const sl_batch *b, sl_lease *lease)
{
    pysl_tensor_desc d = {.ndim = 4, .device = self->device, .holder = &self->core->h,
                          .lease = lease};
    int64_t n = b->n, h = b->height, w = b->width;
    if (b->layout == SL_LAYOUT_NCHW_F32) {
        int64_t s[4] = {n, 3, h, w};
        memcpy(d.shape, s, sizeof s);
    } else {
        int64_t s[4] = {n, h, w, 3};
        memcpy(d.shape, s, sizeof s);
    }
    d.dtype = b->layout == SL_LAYOUT_NHWC_U8 ? (sldl_dtype){SLDL_UINT, 8, 1}
                                             : (sldl_dtype){SLDL_FLOAT, 32, 1};
    d.data = self->device >= 0 ? b->d_data : b->data;
    d.ready_event = self->device >= 0 ? b->ready_event : NULL;
    if (!self->copy)
        return pysl_tensor_new(&d);
    /* copy=True: a buffer of its own (same device), filled now */
    size_t bytes = (size_t)b->n * b->sample_bytes;
    void *data;
    sl_holder *own = pysl_buffer_new(bytes, self->device, &data);
    if (!own)
        return NULL;
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    if (self->device < 0)
        memcpy(data, d.data, bytes);
    else
        rc = pysl_dev_copy(self->device, data, d.data, bytes, d.ready_event);
    Py_END_ALLOW_THREADS
    if (rc) {
        sl_holder_unref(own);
        return pysl_raise(rc);
    }
    d.data = data;
    d.ready_event = NULL;
    d.holder = own;
    d.lease = NULL;
    PyObject *t = pysl_tensor_new(&d);
    sl_holder_unref(own);
    return t;
}

/* (index, images, labels, record_ids, epochs, skipped) of b. */
static PyObject *batch_tuple(pipe_obj *self, const sl_batch *b, sl_lease *lease)
{
    PyObject *img = image_tensor(self, b, lease);
    PyObject *lab = small_tensor(b->labels, b->n, 4, 1, (sldl_dtype){SLDL_INT, 64, 1});
    PyObject *ids = small_tensor(b->record_ids, b->n, 8, 0, (sldl_dtype){SLDL_INT, 64, 1});
    PyObject *ep = small_tensor(b->epochs, b->n, 4, 0, (sldl_dtype){SLDL_INT, 32, 1});
    PyObject *t = img && lab && ids && ep
                      ? Py_BuildValue("(KOOOOI)", (unsigned long long)b->index, img, lab, ids, ep,
                                      b->skipped)
                      : NULL;
    Py_XDECREF(img);
    Py_XDECREF(lab);
    Py_XDECREF(ids);
    Py_XDECREF(ep);
    return t;
}

static PyObject *closed_error(void)
{
    sl_fail(SL_ECANCELED, "sluice.Pipeline: the pipeline is closed");
    return pysl_raise(SL_ECANCELED);
}

/* next() saw a close() from another thread: close here, still busy (do_close
 * releases the GIL to join the threads, and the close() waiting for busy to
 * drop would otherwise join them a second time: undefined, it hung). */
static int close_for_other(pipe_obj *self)
{
    self->close_requested = 0;
    int err = do_close(self);
    self->busy = 0;
    return err;
}

/* next() -> (index, images, labels, record_ids, epochs, skipped), or None at
 * the end. Under the eval transform a batch may hold fewer samples than
 * `batch`, none at all when every record of it was bad (the Python layer
 * does not hand such a one out). */
static PyObject *pipe_next(PyObject *obj, PyObject *unused)
{
    (void)unused;
    pipe_obj *self = (pipe_obj *)obj;
    if (!self->core)
        return closed_error();
    if (forked(self))
        return forked_error(self);
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "sluice.Pipeline: next() called from two threads at once");
        return NULL;
    }
    sl_pipeline *p = self->core->p;
    sl_batch *b = NULL;
    int rc = SL_OK;
    self->busy = 1; /* from here the GIL may be released: close() waits for busy to drop */
    while (self->nq >= self->hold && !self->close_requested) {
        const held *newest = &self->q[self->nq - 1];
        if (release_oldest(self, p, 1, newest->b->index + 1)) {
            if (self->close_requested) { /* the sync's error is the one raised */
                PyObject *et, *ev, *tb;
                PyErr_Fetch(&et, &ev, &tb);
                if (close_for_other(self))
                    PyErr_Clear();
                PyErr_Restore(et, ev, tb);
            }
            self->busy = 0;
            return NULL;
        }
    }
    for (;;) {
        if (self->close_requested) {
            rc = SL_ECANCELED; /* nothing taken */
            break;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = sl_pipeline_next_wait(p, WAIT_SLICE_MS, &b);
        Py_END_ALLOW_THREADS
        if (rc != SL_ETIMEDOUT || self->close_requested)
            break;
        if (PyErr_CheckSignals()) {
            self->busy = 0;
            return NULL;
        }
    }
    if (self->close_requested) {
        if (rc == SL_OK)
            sl_pipeline_release(p, b); /* before the stop: a refill no one sees */
        return close_for_other(self) ? NULL : closed_error();
    }
    self->busy = 0;
    if (rc == SL_EOF)
        Py_RETURN_NONE;
    if (rc)
        return pysl_raise(rc);
    sl_lease *lease = NULL;
    if (!self->copy) {
        if (!(lease = calloc(1, sizeof *lease))) {
            sl_pipeline_release(p, b);
            return PyErr_NoMemory();
        }
        lease->refs = 1;
        lease->index = b->index;
        lease->hold = self->hold;
    }
    PyObject *t = batch_tuple(self, b, lease);
    /* A batch without samples (evaluation: its records all bad) is not
     * handed out by the Python layer: given back at once, it takes none
     * of the `hold` places, so the batches before it stay lent as long as
     * the contract says (counted in batches the loop sees). */
    if (!t || self->copy || b->n == 0) {
        if (lease) {
            lease->released = 1;
            lease->released_by = b->index;
        }
        pysl_lease_unref(lease);
        sl_pipeline_release(p, b);
        return t;
    }
    self->q[self->nq++] = (held){b, lease};
    return t;
}

/* ------------------------------------------------------------ state, stats */
static PyObject *pipe_state(PyObject *obj, PyObject *unused)
{
    (void)unused;
    pipe_obj *self = (pipe_obj *)obj;
    if (!self->core && self->state_len)
        return PyUnicode_FromStringAndSize(self->state, (Py_ssize_t)self->state_len);
    if (!self->core)
        return closed_error();
    if (forked(self))
        return forked_error(self);
    char buf[SL_PIPELINE_STATE_MAX];
    size_t len = 0;
    int rc = sl_pipeline_state_save(self->core->p, buf, sizeof buf, &len);
    if (rc)
        return pysl_raise(rc);
    return PyUnicode_FromStringAndSize(buf, (Py_ssize_t)len);
}

static int set_item(PyObject *d, const char *k, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *stage_dict(const sl_stage_stats *s)
{
    return Py_BuildValue("{sIsKsKsdsdsdsd}", "threads", s->threads, "items",
                         (unsigned long long)s->items, "bytes", (unsigned long long)s->bytes,
                         "busy_s", s->busy_s, "wait_in_s", s->wait_in_s, "wait_out_s",
                         s->wait_out_s, "queue_fill", s->queue_fill);
}

/* The figures now, or those kept at close; NULL with an exception. */
static const sl_pipeline_stats *get_stats(pipe_obj *self, sl_pipeline_stats *now)
{
    if (!self->core && self->has_last)
        return &self->last;
    if (!self->core) {
        closed_error();
        return NULL;
    }
    if (forked(self)) {
        forked_error(self);
        return NULL;
    }
    int rc = sl_pipeline_stats_get(self->core->p, now);
    if (rc) {
        pysl_raise(rc);
        return NULL;
    }
    return now;
}

static PyObject *pipe_stats(PyObject *obj, PyObject *unused)
{
    (void)unused;
    sl_pipeline_stats now;
    const sl_pipeline_stats *s = get_stats((pipe_obj *)obj, &now);
    if (!s)
        return NULL;
    PyObject *d = PyDict_New(), *stages = PyDict_New(), *bad = PyList_New(0);
    if (!d || !stages || !bad)
        goto fail;
    for (unsigned i = 0; i < s->nstages; i++)
        if (set_item(stages, s->stages[i].name, stage_dict(&s->stages[i])))
            goto fail;
    for (uint64_t i = 0; i < s->bad_records && i < SL_PIPELINE_MAX_BAD_REPORT; i++) {
        PyObject *m = pysl_text(s->bad[i]); /* as an error's message reads */
        if (!m || PyList_Append(bad, m)) {
            Py_XDECREF(m);
            goto fail;
        }
        Py_DECREF(m);
    }
    if (set_item(d, "elapsed_s", PyFloat_FromDouble(s->elapsed_s)) ||
        set_item(d, "batches", PyLong_FromUnsignedLongLong(s->batches)) ||
        set_item(d, "samples", PyLong_FromUnsignedLongLong(s->samples)) ||
        set_item(d, "bad_records", PyLong_FromUnsignedLongLong(s->bad_records)) ||
        set_item(d, "bad_records_out", PyLong_FromUnsignedLongLong(s->bad_records_out)) ||
        set_item(d, "shuffle_buffer", PyLong_FromUnsignedLongLong(s->shuffle_buffer)) ||
        set_item(d, "records_per_epoch", PyLong_FromUnsignedLongLong(s->records_per_epoch)) ||
        set_item(d, "records_per_epoch_world",
                 PyLong_FromUnsignedLongLong(s->records_per_epoch_world)) ||
        PyDict_SetItemString(d, "stages", stages) || PyDict_SetItemString(d, "bad", bad))
        goto fail;
    Py_DECREF(stages);
    Py_DECREF(bad);
    return d;
fail:
    Py_XDECREF(d);
    Py_XDECREF(stages);
    Py_XDECREF(bad);
    return NULL;
}

/* bad_records() -> int: bad records the consumer has skipped so far: in the
 * batches handed out (their sl_batch.skipped), not those the workers met
 * decoding ahead (stats' bad_records_out; a cheap look for the Python
 * layer's warning: no dict). */
static PyObject *pipe_bad_records(PyObject *obj, PyObject *unused)
{
    (void)unused;
    sl_pipeline_stats now;
    const sl_pipeline_stats *sp = get_stats((pipe_obj *)obj, &now);
    return sp ? PyLong_FromUnsignedLongLong(sp->bad_records_out) : NULL;
}

static PyObject *pipe_get_closed(PyObject *obj, void *unused)
{
    (void)unused;
    return PyBool_FromLong(((pipe_obj *)obj)->core == NULL);
}

static PyObject *pipe_get_held(PyObject *obj, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(((pipe_obj *)obj)->nq);
}

/* memory_budget's fit: a dict, or None without a budget. */
static PyObject *pipe_memory(PyObject *obj, PyObject *unused)
{
    (void)unused;
    pipe_obj *self = (pipe_obj *)obj;
    if (!self->mem_budget)
        Py_RETURN_NONE;
    const sl_pipeline_memory *m = &self->mem;
    PyObject *parts = PyDict_New();
    for (int i = 0; parts && i < SL_MEM_NPARTS; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(m->part[i]);
        if (!v || PyDict_SetItemString(parts, sl_mem_part_key((sl_mem_part)i), v)) {
            Py_XDECREF(v);
            Py_CLEAR(parts);
        } else {
            Py_DECREF(v);
        }
    }
    if (!parts)
        return NULL;
    return Py_BuildValue("{s:K,s:K,s:N,s:I,s:I,s:K,s:s}", "budget",
                         (unsigned long long)self->mem_budget, "total",
                         (unsigned long long)m->total, "parts", parts, "workers", m->workers,
                         "prefetch", m->prefetch, "read_window",
                         (unsigned long long)m->read_window, "shrunk", self->mem_what);
}

static PyMethodDef pipe_methods[] = {
    {"memory", pipe_memory, METH_NOARGS,
     "memory_budget's fit: {budget, total, parts (bytes by part), workers, prefetch, "
     "read_window, shrunk}, or None without a budget."},
    {"next", pipe_next, METH_NOARGS,
     "next() -> (index, images, labels, record_ids, epochs, skipped) or None after the last "
     "batch."},
    {"state", pipe_state, METH_NOARGS, "The resume state (JSON text) after the last batch taken."},
    {"stats", pipe_stats, METH_NOARGS,
     "Per-stage figures since create (a dict); after close, those when it was closed."},
    {"bad_records", pipe_bad_records, METH_NOARGS,
     "Bad records in the batches handed out so far (stats()'s bad_records_out)."},
    {"close", pipe_close, METH_NOARGS, "Release held batches and stop the threads."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pipe_getset[] = {
    {"closed", pipe_get_closed, NULL, "True after close()", NULL},
    {"held", pipe_get_held, NULL, "batches lent and not yet given back", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pipe_slots[] = {
    {Py_tp_doc, "_Pipeline(config: dict, state=None, hold=1, copy=False): one sl_pipeline "
                "(use sluice.Pipeline)."},
    {Py_tp_new, pipe_new},
    {Py_tp_dealloc, pipe_dealloc},
    {Py_tp_methods, pipe_methods},
    {Py_tp_getset, pipe_getset},
    {0, NULL},
};

static PyType_Spec pipe_spec = {
    .name = "sluice._sluice._Pipeline",
    .basicsize = sizeof(pipe_obj),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = pipe_slots,
};

int pysl_pipeline_init(PyObject *module)
{
    pipe_type = (PyTypeObject *)PyType_FromSpec(&pipe_spec);
    if (!pipe_type)
        return -1;
    Py_INCREF(pipe_type);
    if (PyModule_AddObject(module, "_Pipeline", (PyObject *)pipe_type)) {
        Py_DECREF(pipe_type);
        return -1;
    }
    return 0;
}
