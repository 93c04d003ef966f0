/*
 * python/src/helpers.c - the small pieces the extension's object files
 * share: buffers of the binding's own that keep a tensor's memory alive
 * (host malloc or device memory through device.c), path arguments as
 * bytes (os.fsencode's), a str's UTF-8 copy, and the stable-ABI dealloc
 * tail of a heap-type instance.
 *
 * Threading: called with the GIL held; a buffer's last reference may drop
 * on any thread (ext.h's holders) and its free touches no Python.
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

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
/* A malloc'd copy of bytes object b, which it releases (NULL passes
 * through, with its exception). */
static char *bytes_strdup(PyObject *b)
{
    if (!b)
        return NULL;
    char *out = strdup(PyBytes_AsString(b));
    Py_DECREF(b);
    if (!out)
        PyErr_NoMemory();
    return out;
}

char *pysl_strdup_utf8(PyObject *s) { return bytes_strdup(PyUnicode_AsUTF8String(s)); }

char *pysl_path_strdup(PyObject *v, const char *what) { return bytes_strdup(pysl_bytes(v, what)); }

void pysl_free_self(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* ------------------------------------------------------------ paths */
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
