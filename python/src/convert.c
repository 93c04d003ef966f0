/*
 * python/src/convert.c - convert() of sluice._sluice over records.h's
 * sl_convert_run (what `sluice convert` does): the config dict's keys are
 * sl_convert_config's fields, each int checked against its C field's
 * range; the Python layer (python/sluice/__init__.py) adds the keyword
 * API, checks what each setting means, and the docs.
 *
 * Threading: convert() releases the GIL for the whole conversion; its
 * progress and skipped callbacks run on the calling thread (records.h) and
 * take the GIL back for the Python callable and the skipped list.
 */
#include "ext.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "records/records.h"

typedef struct convert_ctx {
    PyObject *progress;  /* callable(done, total, bytes) or None */
    PyObject *skipped;   /* list of (input, reason) */
    int failed;          /* a callback raised: the exception is kept in exc */
    volatile int cancel; /* sl_convert_config.cancel: set with failed */
    PyObject *exc_type, *exc_value, *exc_tb;
} convert_ctx;

/* Both callbacks run on the thread that called convert, which released the
 * GIL: take it back for the Python work. The first exception (Ctrl-C's
 * KeyboardInterrupt, or one from progress) is kept and stops the
 * conversion before its next chunk (sl_convert_config.cancel): the shard
 * being written is dropped, those written are whole, and resume=True
 * finishes the job. The exception is raised when sl_convert_run returns. */
static void keep_exception(convert_ctx *c)
{
    c->cancel = 1;
    if (!c->failed) {
        c->failed = 1;
        PyErr_Fetch(&c->exc_type, &c->exc_value, &c->exc_tb);
    } else {
        PyErr_Clear();
    }
}

static void on_progress(void *arg, uint64_t done, uint64_t total, uint64_t bytes)
{
    convert_ctx *c = arg;
    PyGILState_STATE g = PyGILState_Ensure();
    if (PyErr_CheckSignals())
        keep_exception(c);
    else if (c->progress != Py_None && !c->failed) {
        PyObject *r = PyObject_CallFunction(c->progress, "KKK", (unsigned long long)done,
                                            (unsigned long long)total, (unsigned long long)bytes);
        if (r)
            Py_DECREF(r);
        else
            keep_exception(c);
    }
    PyGILState_Release(g);
}

static void on_skipped(void *arg, const char *input, const char *reason)
{
    convert_ctx *c = arg;
    PyGILState_STATE g = PyGILState_Ensure();
    /* input: a path, as os.fsdecode gives it; reason: a message */
    PyObject *in = PyUnicode_DecodeFSDefault(input), *why = in ? pysl_text(reason) : NULL;
    PyObject *t = why ? PyTuple_Pack(2, in, why) : NULL;
    if (!t || PyList_Append(c->skipped, t))
        keep_exception(c);
    Py_XDECREF(in);
    Py_XDECREF(why);
    Py_XDECREF(t);
    PyGILState_Release(g);
}

/* A str or bytes item of a dict (a path: os.fsencode's bytes) as a borrowed
 * pointer kept alive in keep (a list); NULL when absent or None. -1 on
 * error. */
static int dict_str(PyObject *d, const char *key, PyObject *keep, const char **out)
{
    *out = NULL;
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None)
        return 0;
    char what[64];
    snprintf(what, sizeof what, "sluice.convert: %s", key);
    PyObject *b = pysl_bytes(v, what);
    if (!b)
        return -1;
    int rc = PyList_Append(keep, b);
    if (!rc)
        *out = PyBytes_AsString(b); /* alive in keep, not in b (released next) */
    Py_DECREF(b);
    return rc;
}

/* An int item of a dict that must lie in [lo, hi] (its C field's range:
 * nothing is cut to fewer bits). */
static int dict_ll(PyObject *d, const char *key, long long lo, long long hi, long long *out)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v)
        return 0;
    int over = 0;
    long long x = PyLong_Check(v) ? PyLong_AsLongLongAndOverflow(v, &over) : -1;
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (!PyLong_Check(v) || over || x < lo || x > hi) {
        pysl_config_error("sluice.convert: %s=%R: an integer from %lld to %lld", key, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static PyObject *result_dict(const sl_convert_result *r, PyObject *skipped)
{
    typedef unsigned long long ull;
    return Py_BuildValue("{sKsKsKsKsKsKsIsIsKsKsKsKsKsO}", "inputs", (ull)r->inputs, "records",
                         (ull)r->records, "skipped", (ull)r->skipped, "bytes", (ull)r->bytes,
                         "passthrough", (ull)r->passthrough, "reencoded", (ull)r->reencoded,
                         "shards", r->shards, "shards_kept", r->shards_kept, "restarted",
                         (ull)r->restarted, "restart_kept", (ull)r->restart_kept,
                         "restart_markers", (ull)r->restart_markers, "restart_bytes_in",
                         (ull)r->restart_bytes_in, "restart_bytes_out", (ull)r->restart_bytes_out,
                         "skipped_inputs", skipped);
}

/* _convert(cfg: dict, progress: callable | None) -> dict. The keys are
 * sl_convert_config's fields (the Python layer checks and names them). */
static PyObject *py_convert(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *d, *progress;
    if (!PyArg_ParseTuple(args, "O!O:_convert", &PyDict_Type, &d, &progress))
        return NULL;
    sl_convert_config cfg = SL_CONVERT_CONFIG_INIT;
    convert_ctx ctx = {.progress = progress};
    PyObject *keep = PyList_New(0), *result = NULL;
    const char **names = NULL;
    ctx.skipped = PyList_New(0);
    if (!keep || !ctx.skipped)
        goto done;
    const char *source = NULL, *format = NULL;
    long long v;
    if (dict_str(d, "source", keep, &source) || dict_str(d, "input", keep, &cfg.input) ||
        dict_str(d, "idx_images", keep, &cfg.idx_images) ||
        dict_str(d, "idx_labels", keep, &cfg.idx_labels) ||
        dict_str(d, "input_split", keep, &cfg.input_split) ||
        dict_str(d, "out_dir", keep, &cfg.out_dir) || dict_str(d, "name", keep, &cfg.name) ||
        dict_str(d, "format", keep, &format))
        goto done;
    cfg.source = !source || !strcmp(source, "folder") ? SL_SOURCE_FOLDER
                 : !strcmp(source, "list")            ? SL_SOURCE_LIST
                 : !strcmp(source, "tfrecord")        ? SL_SOURCE_TFRECORD
                                                      : SL_SOURCE_IDX;
    if (!format || !strcmp(format, "tfrecord")) {
        cfg.format = SL_FORMAT_TFRECORD;
    } else if (!strcmp(format, "lmdb")) {
        cfg.format = SL_FORMAT_LMDB;
    } else if (!strcmp(format, "wds")) {
        cfg.format = SL_FORMAT_WDS; /* WebDataset tar shards (records/wds.h) */
    } else {
        pysl_config_error("sluice.convert: format='%s': 'tfrecord', 'lmdb' or 'wds'", format);
        goto done;
    }
    /* the range of the field's C type (int, unsigned, uint64_t); the
     * Python layer checks what each setting means */
#define LL_FIELD(key, field)                                                                       \
    do {                                                                                           \
        __typeof__(cfg.field) max_ = (__typeof__(cfg.field))-1;                                    \
        long long hi_ = max_ > 0 ? (sizeof max_ >= sizeof(long long) ? LLONG_MAX : (long long)max_) \
                                 : INT_MAX;                                                        \
        long long lo_ = max_ > 0 ? 0 : INT_MIN;                                                    \
        v = (long long)cfg.field;                                                                  \
        if (dict_ll(d, key, lo_, hi_, &v))                                                         \
            goto done;                                                                             \
        cfg.field = (__typeof__(cfg.field))v;                                                      \
    } while (0)
    LL_FIELD("shards", shards);
    LL_FIELD("threads", threads);
    LL_FIELD("quality", quality);
    LL_FIELD("resize_short", resize_short);
    LL_FIELD("seed", shuffle_seed);
    LL_FIELD("shuffle", shuffle);
    LL_FIELD("resume", resume);
    LL_FIELD("strict", strict);
    LL_FIELD("label_offset", label_offset);
    LL_FIELD("fsync", fsync);
    LL_FIELD("max_pixels", max_pixels);
    LL_FIELD("restart_mcus", restart_mcus);
    LL_FIELD("restart_rows", restart_rows);
#undef LL_FIELD
    long long automatic = 0;
    if (dict_ll(d, "restart_auto", 0, 1, &automatic))
        goto done;
    if (automatic) /* restart='auto': the measured default interval */
        cfg.restart_mcus = SL_RESTART_AUTO;
    PyObject *cn = PyDict_GetItemString(d, "class_names");
    if (cn && cn != Py_None) {
        Py_ssize_t n = PyList_Size(cn);
        if (n < 0)
            goto done;
        if (!(names = calloc((size_t)n + 1, sizeof *names))) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *b = pysl_bytes(PyList_GetItem(cn, i), "sluice.convert: class_names");
            if (!b || PyList_Append(keep, b)) {
                Py_XDECREF(b);
                goto done;
            }
            names[i] = PyBytes_AsString(b);
            Py_DECREF(b);
        }
        cfg.class_names = names;
        cfg.num_class_names = (uint32_t)n;
    }
    cfg.progress = on_progress;
    cfg.progress_arg = &ctx;
    cfg.skipped = on_skipped;
    cfg.skipped_arg = &ctx;
    cfg.cancel = &ctx.cancel;
    sl_convert_result res;
    memset(&res, 0, sizeof res);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_convert_run(&cfg, &res);
    Py_END_ALLOW_THREADS
    if (ctx.failed) {
        PyErr_Restore(ctx.exc_type, ctx.exc_value, ctx.exc_tb);
        goto done;
    }
    if (rc) {
        pysl_raise(rc);
        goto done;
    }
    result = result_dict(&res, ctx.skipped);
done:
    free(names);
    Py_XDECREF(keep);
    Py_XDECREF(ctx.skipped);
    return result;
}

static PyMethodDef methods[] = {
    {"_convert", py_convert, METH_VARARGS,
     "_convert(cfg, progress) -> dict: sl_convert_run (use sluice.convert)."},
    {NULL, NULL, 0, NULL},
};

int pysl_convert_init(PyObject *module)
{
    return PyModule_AddFunctions(module, methods);
}
