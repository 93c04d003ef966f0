/*
 * python/src/module.c - the extension module sluice._sluice: its init,
 * which has each file add its part (errors.c: the sluice.Error hierarchy;
 * convert.c, dataset.c: convert, verify, inspect; tensor.c,
 * pipeline_obj.c: the Tensor and Pipeline types), and the module-level
 * remote I/O settings. Built on the stable ABI (Py_LIMITED_API, one wheel
 * for every CPython >= 3.8); the Python layer (python/sluice/__init__.py)
 * adds the keyword API and the docs.
 *
 * Remote I/O settings: _io_configure and _io_opts over sl_io_configure and
 * sl_io_get_opts (records/bytesrc.h), process-wide like the CLI's
 * --io-retries; sluice.Pipeline's io_retries, io_timeout and io_inflight.
 *
 * Threading: _io_configure's read-modify-write of the process-wide
 * settings is atomic only under the GIL (nothing else in the process calls
 * sl_io_configure).
 */
#include "ext.h"

#include "records/bytesrc.h"

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

static PyMethodDef methods[] = {
    {"_io_configure", py_io_configure, METH_VARARGS,
     "_io_configure(retries, timeout_ms, inflight): sl_io_configure, process-wide; None leaves "
     "a setting as it is."},
    {"_io_opts", py_io_opts, METH_NOARGS, "_io_opts() -> dict: sl_io_get_opts."},
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
        pysl_convert_init(m) || pysl_dataset_init(m) ||
        PyModule_AddStringConstant(m, "__version__", SLUICE_VERSION)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
