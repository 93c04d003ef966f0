/*
 * python/src/module.c - the extension module sluice._sluice: the sluice.Error
 * hierarchy (one class per library status, each message the library's
 * "function: file: record N @ offset: what"), own buffers for tensors,
 * convert() over sl_convert_run, and module init. Built on the stable ABI
 * (Py_LIMITED_API, one wheel for every CPython >= 3.8); the Python layer
 * (python/sluice/__init__.py) adds the keyword API and the docs.
 *
 * Remote I/O settings: _io_configure and _io_opts over sl_io_configure and
 * sl_io_get_opts (records/bytesrc.h), process-wide like the CLI's
 * --io-retries; sluice.Pipeline's io_retries, io_timeout and io_inflight.
 *
 * Threading: convert() releases the GIL for the whole conversion; its
 * progress and skipped callbacks run on the calling thread (records.h) and
 * take the GIL back for the Python callable and the skipped list.
 * _io_configure's read-modify-write of the process-wide settings is atomic
 * only under the GIL (nothing else in the process calls sl_io_configure).
 */
#include "ext.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "records/bytesrc.h"
#include "records/records.h"

/* ------------------------------------------------------------ errors */
static PyObject *err_base;              /* sluice.Error */
static PyObject *err_class[SL_STATUS_COUNT];

typedef struct err_def {
    int code;
    const char *name;                   /* sluice.<name> */
    PyObject **builtin;                 /* a builtin it also derives from, or NULL */
    const char *doc;
} err_def;

int pysl_errors_init(PyObject *m)
{
    err_def defs[] = {
        {SL_EINVAL, "ConfigError", &PyExc_ValueError, "A bad argument or configuration."},
        {SL_ENOMEM, "OutOfMemoryError", &PyExc_MemoryError, "An allocation failed."},
        {SL_EIO, "SystemIOError", &PyExc_OSError, "The operating system refused a read or write."},
        {SL_ECORRUPT, "CorruptError", NULL,
         "Data on disk breaks its format; the message names file, record and byte offset."},
        {SL_ENOENT, "NotFoundError", &PyExc_FileNotFoundError, "A file, feature or key is missing."},
        {SL_EEXIST, "ExistsError", &PyExc_FileExistsError, "The target exists."},
        {SL_EIMAGE, "ImageError", NULL, "An image cannot be decoded or encoded."},
        {SL_ECUDA, "DeviceError", NULL, "A CUDA runtime error."},
        {SL_ENOTSUP, "NotSupportedError", &PyExc_NotImplementedError,
         "Not supported by this build (e.g. a device without CUDA)."},
        {SL_ECANCELED, "CanceledError", NULL, "Stopped on request (the pipeline was closed)."},
        {SL_EPERM, "PermissionDeniedError", &PyExc_PermissionError,
         "A remote store refused the request (HTTP 401/403): credentials or permissions;\n"
         "the message names the URL."},
    };
    err_base = PyErr_NewExceptionWithDoc(
        "sluice.Error",
        "Base of sluice's errors. str(e) is the library's message (\"function: file: record N @\n"
        "offset: what\"); e.code is the library's status number and e.status its name.",
        NULL, NULL);
    if (!err_base)
        return -1;
    Py_INCREF(err_base);
    if (PyModule_AddObject(m, "Error", err_base))
        return -1;
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        char full[64];
        snprintf(full, sizeof full, "sluice.%s", defs[i].name);
        PyObject *bases = defs[i].builtin ? PyTuple_Pack(2, err_base, *defs[i].builtin)
                                          : PyTuple_Pack(1, err_base);
        if (!bases)
            return -1;
        PyObject *cls = PyErr_NewExceptionWithDoc(full, defs[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!cls)
            return -1;
        err_class[defs[i].code] = cls;
        Py_INCREF(cls);
        if (PyModule_AddObject(m, defs[i].name, cls))
            return -1;
    }
    return 0;
}

const char *pysl_status_name(int rc)
{
    static const char *const names[] = {
        "SL_OK", "SL_EOF", "SL_EINVAL", "SL_ENOMEM", "SL_EIO", "SL_ECORRUPT", "SL_ENOENT",
        "SL_EEXIST", "SL_EIMAGE", "SL_ECUDA", "SL_ENCCL", "SL_EMPI", "SL_ENOTSUP", "SL_ECANCELED",
        "SL_ETIMEDOUT", "SL_EPERM",
    };
    _Static_assert(sizeof names / sizeof names[0] == SL_STATUS_COUNT, "a name per sl_status");
    return rc >= 0 && rc < SL_STATUS_COUNT ? names[rc] : "SL_UNKNOWN";
}

/* The library's messages name the CLI's options where a Python caller
 * passed a keyword: say the keyword (issue 28: `resume=True`, not
 * `--resume`). */
static const char *const py_words[][2] = {
    {"use --resume to finish", "use resume=True to finish"},
    {"--resume", "resume=True"},
    {"more than --max-pixels ", "more than max_pixels="},
    {"(convert with --format tfrecord)", "(convert with format='tfrecord')"},
    {"(--label-range)", "(label_range=)"},
    {"(for --label-key ", "(for label_key="},
    {"(and no --label-key)", "(and no label_key=)"},
    {"resume finishes the job", "resume=True finishes the job"},
};

PyObject *pysl_text(const char *msg)
{
    char out[2 * SL_ERRMSG_MAX];
    size_t o = 0;
    for (const char *p = msg; *p && o + 1 < sizeof out;) {
        size_t i, n = sizeof py_words / sizeof py_words[0];
        for (i = 0; i < n; i++) {
            size_t l = strlen(py_words[i][0]), r = strlen(py_words[i][1]);
            if (!strncmp(p, py_words[i][0], l) && o + r + 1 < sizeof out) {
                memcpy(out + o, py_words[i][1], r);
                o += r;
                p += l;
                break;
            }
        }
        if (i == n)
            out[o++] = *p++;
    }
    out[o] = 0;
    /* a file name that is not UTF-8 shows as \xNN, never as a decode error */
    return PyUnicode_DecodeUTF8(out, (Py_ssize_t)o, "backslashreplace");
}

/* The exception object for status rc (a new reference; NULL with an
 * exception set when it cannot be made). */
static PyObject *error_new_text(int rc, PyObject *text)
{
    PyObject *cls = rc >= 0 && rc < SL_STATUS_COUNT && err_class[rc] ? err_class[rc] : err_base;
    PyObject *exc = PyObject_CallFunctionObjArgs(cls, text, NULL);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc), *name = PyUnicode_FromString(pysl_status_name(rc));
    if (!code || !name || PyObject_SetAttrString(exc, "code", code) ||
        PyObject_SetAttrString(exc, "status", name))
        Py_CLEAR(exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    return exc;
}

static PyObject *error_new(int rc, const char *msg)
{
    PyObject *text = pysl_text(msg);
    if (!text)
        return NULL;
    PyObject *exc = error_new_text(rc, text);
    Py_DECREF(text);
    return exc;
}

static PyObject *raise_exc(PyObject *exc)
{
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PyObject *raise_msg(int rc, const char *msg)
{
    PyObject *exc = error_new(rc, msg);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* _error(code, message) -> the sluice.Error subclass's instance for code
 * (for the Python layer's exceptions built from a report). */
static PyObject *py_error(PyObject *mod, PyObject *args)
{
    (void)mod;
    int rc;
    const char *msg;
    if (!PyArg_ParseTuple(args, "is:_error", &rc, &msg))
        return NULL;
    return error_new(rc, msg);
}

PyObject *pysl_raise(int rc)
{
    const char *msg = sl_errmsg();
    return raise_msg(rc, msg && *msg ? msg : sl_strerror(rc));
}

PyObject *pysl_config_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *text = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (!text)
        return NULL;
    PyObject *exc = error_new_text(SL_EINVAL, text);
    Py_DECREF(text);
    return raise_exc(exc);
}

/* ------------------------------------------------------------ buffers */
typedef struct own_buffer {
    sl_holder h;
    void *data;
    int device;
} own_buffer;

static void own_buffer_free(sl_holder *h)
{
    own_buffer *b = (own_buffer *)h;
    if (b->device >= 0)
        pysl_dev_free(b->device, b->data);
    else
        free(b->data);
    free(b);
}

sl_holder *pysl_buffer_new(size_t n, int device, void **data)
{
    own_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        PyErr_NoMemory();
        return NULL;
    }
    b->device = device;
    if (device >= 0) {
        int rc = pysl_dev_alloc(device, n ? n : 1, &b->data);
        if (rc) {
            free(b);
            pysl_raise(rc);
            return NULL;
        }
    } else if (!(b->data = malloc(n ? n : 1))) {
        free(b);
        PyErr_NoMemory();
        return NULL;
    }
    atomic_init(&b->h.refs, 1);
    b->h.free = own_buffer_free;
    *data = b->data;
    return &b->h;
}

/* ------------------------------------------------------------ small */
char *pysl_strdup_utf8(PyObject *s)
{
    PyObject *b = PyUnicode_AsUTF8String(s);
    if (!b)
        return NULL;
    char *out = strdup(PyBytes_AsString(b));
    Py_DECREF(b);
    if (!out)
        PyErr_NoMemory();
    return out;
}

void pysl_free_self(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* ------------------------------------------------------------ convert */
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

PyObject *pysl_bytes(PyObject *v, const char *what)
{
    PyObject *b = NULL;
    if (PyBytes_Check(v)) {
        Py_INCREF(v);
        b = v;
    } else if (PyUnicode_Check(v)) {
        b = PyUnicode_EncodeFSDefault(v); /* os.fsencode: surrogate escapes back to bytes */
    } else {
        return pysl_config_error("%s=%R: a path (str or bytes)", what, v);
    }
    if (b && (Py_ssize_t)strlen(PyBytes_AsString(b)) != PyBytes_Size(b)) {
        Py_DECREF(b);
        return pysl_config_error("%s=%R: a path with a NUL character", what, v);
    }
    return b;
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
    return Py_BuildValue("{sKsKsKsKsKsKsIsIsO}", "inputs", (unsigned long long)r->inputs,
                         "records", (unsigned long long)r->records, "skipped",
                         (unsigned long long)r->skipped, "bytes", (unsigned long long)r->bytes,
                         "passthrough", (unsigned long long)r->passthrough, "reencoded",
                         (unsigned long long)r->reencoded, "shards", r->shards, "shards_kept",
                         r->shards_kept, "skipped_inputs", skipped);
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
        dict_str(d, "out_dir", keep, &cfg.out_dir) || dict_str(d, "name", keep, &cfg.name) ||
        dict_str(d, "format", keep, &format))
        goto done;
    cfg.source = !source || !strcmp(source, "folder") ? SL_SOURCE_FOLDER
                 : !strcmp(source, "list")            ? SL_SOURCE_LIST
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
#undef LL_FIELD
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

/* ------------------------------------------------------------ remote I/O */
/* _io_configure(retries, timeout_ms, inflight): set the given ones of the
 * process-wide remote I/O settings (None: leave that one as it is: the
 * default, SLUICE_IO_*, or what an earlier call set). retries 0 means no
 * retry (SL_IO_NO_RETRY). The Python layer checks and names them; the
 * ranges are checked again here (the CLI's: 0..100 tries after the first,
 * 1 s..1 h per request, 1..64 in flight). */
static PyObject *py_io_configure(PyObject *mod, PyObject *args)
{
    (void)mod;
    static const char *const what[3] = {"io_retries", "io_timeout_ms", "io_inflight"};
    static const long long lo[3] = {0, 1000, 1}, hi[3] = {100, 3600000, 64};
    PyObject *v[3];
    long long x[3] = {0, 0, 0};
    if (!PyArg_ParseTuple(args, "OOO:_io_configure", &v[0], &v[1], &v[2]))
        return NULL;
    for (int i = 0; i < 3; i++) {
        if (v[i] == Py_None)
            continue;
        int over = 0;
        x[i] = PyLong_Check(v[i]) ? PyLong_AsLongLongAndOverflow(v[i], &over) : -1;
        if (x[i] == -1 && PyErr_Occurred())
            return NULL;
        if (!PyLong_Check(v[i]) || over || x[i] < lo[i] || x[i] > hi[i])
            return pysl_config_error("sluice.Pipeline: %s=%R: an integer from %lld to %lld",
                                     what[i], v[i], lo[i], hi[i]);
    }
    sl_io_opts o;
    sl_io_get_opts(&o); /* in force, defaults filled in: setting them again changes nothing */
    if (v[0] != Py_None)
        o.retries = x[0] ? (unsigned)x[0] : SL_IO_NO_RETRY;
    if (v[1] != Py_None)
        o.timeout_ms = (unsigned)x[1];
    if (v[2] != Py_None)
        o.inflight = (unsigned)x[2];
    sl_io_configure(&o);
    Py_RETURN_NONE;
}

/* _io_opts() -> dict: the remote I/O settings in force (retries 0: none). */
static PyObject *py_io_opts(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    sl_io_opts o;
    sl_io_get_opts(&o);
    return Py_BuildValue("{sIsIsIsI}", "retries", o.retries == SL_IO_NO_RETRY ? 0u : o.retries,
                         "timeout_ms", o.timeout_ms, "backoff_ms", o.backoff_ms, "inflight",
                         o.inflight);
}

static PyObject *py_strerror(PyObject *mod, PyObject *arg)
{
    (void)mod;
    long rc = PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(sl_strerror((int)rc));
}

static PyMethodDef methods[] = {
    {"_convert", py_convert, METH_VARARGS,
     "_convert(cfg, progress) -> dict: sl_convert_run (use sluice.convert)."},
    {"_strerror", py_strerror, METH_O, "_strerror(code) -> str: sl_strerror."},
    {"_io_configure", py_io_configure, METH_VARARGS,
     "_io_configure(retries, timeout_ms, inflight): sl_io_configure, process-wide; None leaves "
     "a setting as it is."},
    {"_io_opts", py_io_opts, METH_NOARGS, "_io_opts() -> dict: sl_io_get_opts."},
    {"_error", py_error, METH_VARARGS,
     "_error(code, message) -> the sluice.Error subclass's instance for a status."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "sluice._sluice",
    "sluice's C extension (stable ABI) over the library's public headers; use the sluice package.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sluice(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (pysl_errors_init(m) || pysl_tensor_init(m) || pysl_pipeline_init(m) ||
        pysl_dataset_init(m) ||
        PyModule_AddStringConstant(m, "__version__", SLUICE_VERSION)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
