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
 * --io-retries; pysl_io_opts turns sluice.Pipeline's io_retries,
 * io_timeout, io_inflight and io_retry_budget into the sl_io_opts its
 * config carries (that pipeline's alone).
 *
 * Threading: _io_configure's read-modify-write of the process-wide
 * settings is atomic only under the GIL (nothing else in the process calls
 * sl_io_configure).
 */
#include "ext.h"

#include "common/cpus.h"
#include "common/status.h"
#include "records/bytesrc.h"

/* ------------------------------------------------------------ remote I/O */
/* The remote I/O settings (retries, timeout_ms, inflight, retry_ms) of
 * args into *o: the given ones over the process-wide settings in force
 * (None: leave that one as it is: the default, SLUICE_IO_*, or what
 * _io_configure set). retries: 0 means no retry (SL_IO_NO_RETRY), -1 no
 * count, the retry budget alone (the default), N at most N tries after the
 * first. retry_ms: the budget, how long a failing request is retried from
 * its first try. The Python layer checks and names them; the ranges are
 * checked again here (the CLI's: 0..100 tries after the first, 1 s..1 h per
 * request, 1..64 in flight, a budget of 1 ms..1 day). -1 with ConfigError
 * set when one is out of range. */
int pysl_io_opts(PyObject *args, sl_io_opts *o)
{
    enum { N = 4 };
    static const char *const what[N] = {"io_retries", "io_timeout_ms", "io_inflight",
                                        "io_retry_budget_ms"};
    static const long long lo[N] = {-1, 1000, 1, 1}, hi[N] = {100, 3600000, 64, 86400000};
    PyObject *v[N] = {Py_None, Py_None, Py_None, Py_None};
    long long x[N] = {0, 0, 0, 0};
    if (!PyArg_ParseTuple(args, "OOO|O:io settings", &v[0], &v[1], &v[2], &v[3]))
        return -1;
    for (int i = 0; i < N; i++) {
        if (v[i] == Py_None)
            continue;
        int over = 0;
        x[i] = PyLong_Check(v[i]) ? PyLong_AsLongLongAndOverflow(v[i], &over) : -2;
        if (x[i] == -1 && PyErr_Occurred())
            return -1;
        if (!PyLong_Check(v[i]) || over || x[i] < lo[i] || x[i] > hi[i]) {
            pysl_config_error("sluice.Pipeline: %s=%R: an integer from %lld to %lld", what[i],
                              v[i], lo[i], hi[i]);
            return -1;
        }
    }
    sl_io_get_opts(o); /* in force, defaults filled in: setting them again changes nothing */
    if (v[0] != Py_None)
        o->retries = x[0] < 0 ? 0u : x[0] ? (unsigned)x[0] : SL_IO_NO_RETRY;
    if (v[1] != Py_None)
        o->timeout_ms = (unsigned)x[1];
    if (v[2] != Py_None)
        o->inflight = (unsigned)x[2];
    if (v[3] != Py_None)
        o->retry_ms = (unsigned)x[3];
    return 0;
}

/* _io_configure(retries, timeout_ms, inflight, retry_ms): set the given
 * ones of the process-wide remote I/O settings (pysl_io_opts). A Pipeline
 * does not call it: its own settings travel in its config. */
static PyObject *py_io_configure(PyObject *mod, PyObject *args)
{
    (void)mod;
    sl_io_opts o;
    if (pysl_io_opts(args, &o))
        return NULL;
    if (sl_io_configure(&o))
        return pysl_raise(SL_ENOMEM);
    Py_RETURN_NONE;
}

/* _io_opts() -> dict: the remote I/O settings in force: retries None (no
 * count: the retry budget alone, the default), 0 (no retry) or N (at most
 * N tries after the first); retry_ms the budget; timeout_ms, backoff_ms,
 * inflight. _io_configure takes retries -1 for None. */
static PyObject *py_io_opts(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    sl_io_opts o;
    sl_io_get_opts(&o);
    PyObject *retries = o.retries == 0                ? (Py_INCREF(Py_None), Py_None)
                        : o.retries == SL_IO_NO_RETRY ? PyLong_FromLong(0)
                                                      : PyLong_FromUnsignedLong(o.retries);
    if (!retries)
        return NULL;
    return Py_BuildValue("{sNsIsIsIsI}", "retries", retries, "timeout_ms", o.timeout_ms,
                         "backoff_ms", o.backoff_ms, "inflight", o.inflight, "retry_ms",
                         o.retry_ms);
}

/* _cpus() -> (usable, why): the cores this process may use (common/cpus.h:
 * affinity mask and cgroup quota), the budget Pipeline(cpus=None) starts
 * from. */
static PyObject *py_cpus(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    sl_cpus c;
    sl_cpus_get(&c);
    return Py_BuildValue("(is)", c.usable, c.why);
}

static PyMethodDef methods[] = {
    {"_io_configure", py_io_configure, METH_VARARGS,
     "_io_configure(retries, timeout_ms, inflight, retry_ms=None): sl_io_configure, "
     "process-wide; None leaves a setting as it is, retries -1 is no count (the budget alone)."},
    {"_io_opts", py_io_opts, METH_NOARGS, "_io_opts() -> dict: sl_io_get_opts."},
    {"_cpus", py_cpus, METH_NOARGS,
     "_cpus() -> (usable, why): the cores this process may use (affinity and cgroup quota)."},
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
