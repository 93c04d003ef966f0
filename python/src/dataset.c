/*
 * python/src/dataset.c - verify() and inspect() of sluice._sluice over
 * records.h's sl_verify_path and sl_dataset_inspect (what `sluice verify`
 * and `sluice inspect` print); the Python layer (python/sluice/__init__.py)
 * adds the keyword API, the report's shape and the exceptions.
 *
 * Threading: both release the GIL for the whole read; their callbacks run on
 * the calling thread (records.h) and take the GIL back for Python work.
 * Ctrl-C (or an exception from the progress callable) stops the walk at its
 * next progress call (about 8 a second) and is raised once it has stopped.
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "records/records.h"

typedef struct walk_py {
    PyObject *progress;  /* callable(records, files_done, files_total, bytes) or None */
    PyObject *problems;  /* verify: list of dicts */
    int failed;          /* a callback raised: the exception is kept */
    PyObject *exc_type, *exc_value, *exc_tb;
} walk_py;

static void keep_exception(walk_py *w)
{
    if (!w->failed) {
        w->failed = 1;
        PyErr_Fetch(&w->exc_type, &w->exc_value, &w->exc_tb);
    } else {
        PyErr_Clear();
    }
}

static int on_progress(void *arg, const sl_walk_progress *p)
{
    walk_py *w = arg;
    int rc = 0;
    PyGILState_STATE g = PyGILState_Ensure();
    if (PyErr_CheckSignals()) {
        keep_exception(w);
    } else if (w->progress != Py_None) {
        PyObject *r = PyObject_CallFunction(w->progress, "KnnK", (unsigned long long)p->records,
                                            (Py_ssize_t)p->files_done, (Py_ssize_t)p->files_total,
                                            (unsigned long long)p->bytes);
        if (r)
            Py_DECREF(r);
        else
            keep_exception(w);
    }
    if (w->failed)
        rc = sl_fail(SL_ECANCELED, "stopped by Python (KeyboardInterrupt or progress)");
    PyGILState_Release(g);
    return rc;
}

/* An int, or None for the "no record / no offset" marker. */
static PyObject *u64_or_none(uint64_t v)
{
    if (v == SL_WALK_NO_RECORD)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(v);
}

static int dict_put(PyObject *d, const char *key, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *str_or_none(const char *s)
{
    if (!s)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static void on_problem(void *arg, const sl_verify_problem *p)
{
    walk_py *w = arg;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *d = PyDict_New();
    if (!d || dict_put(d, "file", p->file ? PyUnicode_DecodeFSDefault(p->file) : str_or_none(NULL)) ||
        dict_put(d, "record", u64_or_none(p->recno)) ||
        dict_put(d, "offset", p->recno == SL_WALK_NO_RECORD ? str_or_none(NULL)
                                                            : u64_or_none(p->offset)) ||
        dict_put(d, "split", str_or_none(p->split)) ||
        dict_put(d, "code", PyLong_FromLong(p->status)) ||
        dict_put(d, "status", PyUnicode_FromString(pysl_status_name(p->status))) ||
        dict_put(d, "what", str_or_none(p->what)) ||
        dict_put(d, "message", p->message ? pysl_text(p->message) : str_or_none(NULL)) ||
        PyList_Append(w->problems, d))
        keep_exception(w);
    Py_XDECREF(d);
    PyGILState_Release(g);
}

/* _verify(path, split, all, label_range, progress) -> dict: records, files,
 * shards_without_index, restart_records (records whose JPEG has restart
 * markers), problems (list of dicts: file, record, offset,
 * split, code, status, what, message). label_range: None or (lo, hi). */
static PyObject *py_verify(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *path_obj, *split_obj, *range, *progress, *result = NULL;
    int all;
    if (!PyArg_ParseTuple(args, "OOpOO:_verify", &path_obj, &split_obj, &all, &range, &progress))
        return NULL;
    sl_verify_options o = {.all = all, .problem = on_problem, .progress = on_progress};
    walk_py w = {.progress = progress};
    char *path = pysl_path_strdup(path_obj, "sluice.verify: data"), *split = NULL;
    if (!path)
        return NULL;
    if (split_obj != Py_None && !(split = pysl_strdup_utf8(split_obj)))
        goto done;
    if (range != Py_None) {
        long long lo, hi;
        if (!PyArg_ParseTuple(range, "LL:label_range", &lo, &hi))
            goto done;
        if (lo > hi) {
            pysl_config_error("sluice.verify: label_range=(%lld, %lld): want lo <= hi", lo, hi);
            goto done;
        }
        o.label_range = 1;
        o.label_lo = lo;
        o.label_hi = hi;
    }
    if (!(w.problems = PyList_New(0)))
        goto done;
    o.split = split;
    o.arg = &w;
    sl_verify_result res;
    memset(&res, 0, sizeof res);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_verify_path(path, &o, &res);
    Py_END_ALLOW_THREADS
    if (w.failed) {
        PyErr_Restore(w.exc_type, w.exc_value, w.exc_tb);
        goto done;
    }
    if (rc) {
        pysl_raise(rc);
        goto done;
    }
    result = Py_BuildValue("{sKsKsKsKsO}", "records", (unsigned long long)res.records, "files",
                           (unsigned long long)res.files, "shards_without_index",
                           (unsigned long long)res.unindexed, "restart_records",
                           (unsigned long long)res.restart_records, "problems", w.problems);
done:
    Py_XDECREF(w.problems);
    free(path);
    free(split);
    return result;
}

/* _inspect(path, split, progress) -> str: sl_inspect_json's document. */
static PyObject *py_inspect(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *path_obj, *split_obj, *progress, *result = NULL;
    if (!PyArg_ParseTuple(args, "OOO:_inspect", &path_obj, &split_obj, &progress))
        return NULL;
    walk_py w = {.progress = progress};
    sl_dataset ds;
    sl_inspect_result res;
    char *path = pysl_path_strdup(path_obj, "sluice.inspect: data"), *split = NULL, *json = NULL;
    int rc;
    memset(&ds, 0, sizeof ds);
    memset(&res, 0, sizeof res);
    if (!path)
        return NULL;
    if (split_obj != Py_None && !(split = pysl_strdup_utf8(split_obj)))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_dataset_resolve(path, split, &ds);
    if (!rc)
        rc = sl_dataset_inspect(&ds, on_progress, &w, &res);
    if (!rc && !(json = sl_inspect_json(&ds, &res)))
        rc = sl_fail(SL_ENOMEM, "sl_inspect_json: out of memory");
    Py_END_ALLOW_THREADS
    if (w.failed) {
        PyErr_Restore(w.exc_type, w.exc_value, w.exc_tb);
        goto done;
    }
    if (rc) {
        pysl_raise(rc);
        goto done;
    }
    /* file names that are not UTF-8 come back as os.fsdecode gives them */
    result = PyUnicode_DecodeUTF8(json, (Py_ssize_t)strlen(json), "surrogateescape");
done:
    free(json);
    sl_inspect_result_fini(&res);
    sl_dataset_fini(&ds);
    free(path);
    free(split);
    return result;
}

static PyMethodDef methods[] = {
    {"_verify", py_verify, METH_VARARGS,
     "_verify(path, split, all, label_range, progress) -> dict: sl_verify_path (use "
     "sluice.verify)."},
    {"_inspect", py_inspect, METH_VARARGS,
     "_inspect(path, split, progress) -> str: sl_dataset_inspect's JSON (use sluice.inspect)."},
    {NULL, NULL, 0, NULL},
};

int pysl_dataset_init(PyObject *module)
{
    return PyModule_AddFunctions(module, methods);
}
