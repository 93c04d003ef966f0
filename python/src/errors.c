/*
 * python/src/errors.c - the sluice.Error hierarchy of sluice._sluice: one
 * class per library status (ConfigError is also a ValueError, ...), the
 * status -> exception mapping that every object file raises through
 * (pysl_raise, pysl_config_error), each message the library's "function:
 * file: record N @ offset: what" without its C function names and with the
 * CLI's option names turned into the Python keywords; and _error and
 * _strerror for the Python layer.
 *
 * Threading: everything here runs with the GIL held. The classes are made
 * once at module init and live as long as the process.
 */
#include "ext.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/status.h"

static PyObject *err_base;              /* sluice.Error */
static PyObject *err_class[SL_STATUS_COUNT];

typedef struct err_def {
    int code;
    const char *name;                   /* sluice.<name> */
    PyObject **builtin;                 /* a builtin it also derives from, or NULL */
    const char *doc;
} err_def;

static int classes_init(PyObject *m)
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
    {"instead: SL_SPLIT_RECORDS", "instead: rank_split='records'"},
    {"(sluice convert)", "(sluice.convert)"},
};

/* The length of a C function's name and its ": " at p ("sl_pipeline_create:
 * "), 0 when p holds none. The library's messages open with the functions
 * they passed through (STYLE.md's "function: object: what"), which name
 * nothing a Python caller wrote (issue 38 item 7): those are left out. */
static size_t c_function_at(const char *p)
{
    if (strncmp(p, "sl_", 3))
        return 0;
    size_t n = 3;
    while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= '0' && p[n] <= '9') || p[n] == '_')
        n++;
    return p[n] == ':' && p[n + 1] == ' ' ? n + 2 : 0;
}

PyObject *pysl_text(const char *msg)
{
    char out[2 * SL_ERRMSG_MAX];
    size_t o = 0;
    for (const char *p = msg; *p && o + 1 < sizeof out;) {
        /* a function's name, where a part of the message starts */
        if ((p == msg || (p - msg >= 2 && p[-2] == ':' && p[-1] == ' ')) && c_function_at(p)) {
            p += c_function_at(p);
            continue;
        }
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

static PyObject *py_strerror(PyObject *mod, PyObject *arg)
{
    (void)mod;
    long rc = PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(sl_strerror((int)rc));
}

static PyMethodDef methods[] = {
    {"_strerror", py_strerror, METH_O, "_strerror(code) -> str: sl_strerror."},
    {"_error", py_error, METH_VARARGS,
     "_error(code, message) -> the sluice.Error subclass's instance for a status."},
    {NULL, NULL, 0, NULL},
};

int pysl_errors_init(PyObject *m)
{
    if (classes_init(m) || PyModule_AddFunctions(m, methods))
        return -1;
    return 0;
}
