/*
 * python/src/tensor.c - sluice.Tensor: a view of a batch's images (or its
 * labels, record ids, epochs) that torch.from_dlpack, numpy.from_dlpack and
 * jax.dlpack.from_dlpack take without a copy, through the DLPack protocol
 * (data-apis.org/array-api/latest/API_specification/generated/
 * array_api.array.__dlpack__.html).
 *
 * Each __dlpack__ call makes one export (a DLManagedTensor, or the
 * versioned struct when the consumer passes max_version >= (1, 0)) in a
 * capsule. The export holds a reference to the memory's holder (pipeline.c
 * of the binding: the pipeline itself for lent images; an own buffer for
 * copies and labels), so memory outlives close() and garbage collection for
 * as long as any consumer's tensor lives; whether its bytes are still this
 * batch's is the lifetime contract of sluice.Pipeline (valid until the slot
 * is reused, unless copy=True).
 *
 * Lent images: once the binding has given their batch's slot back to be
 * refilled (lease->released), __dlpack__ and __array__ raise BufferError
 * naming the batch and copy=True: a kept lent batch (list(pipe)) can no
 * longer be read as another batch's pixels without a word. Tensors a
 * consumer took before the release see the refill (the documented lifetime).
 *
 * Device tensors: __dlpack__(stream=S) makes stream S wait for the batch's
 * host-to-device copy (cudaStreamWaitEvent on the batch's ready event, no
 * host sync; S None = the legacy default stream, as the protocol says;
 * -1 = no synchronization) and records S in the batch's lease, so the
 * binding waits for the work queued on S before it gives the slot back.
 *
 * Threading: Python calls hold the GIL; export deleters run on any thread
 * and touch only the holder (atomic) and the export's own malloc.
 */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

typedef struct {
    PyObject_HEAD
    pysl_tensor_desc d; /* holder and lease: references owned */
} tensor_obj;

static PyTypeObject *tensor_type;

/* ------------------------------------------------------------ exports */
typedef struct export {
    union {
        sldl_managed legacy;
        sldl_managed_v v;
    } m;
    int64_t shape[4], strides[4];
    sl_holder *holder;
} export;

static void export_free(export *e)
{
    sl_holder_unref(e->holder);
    free(e);
}
static void deleter_legacy(sldl_managed *m) { export_free(m->manager_ctx); }
static void deleter_versioned(sldl_managed_v *m) { export_free(m->manager_ctx); }

static const char CAP_LEGACY[] = "dltensor", CAP_VERSIONED[] = "dltensor_versioned";

/* An export never consumed (the capsule dies with its name unchanged) is
 * ours to delete; a consumer renames it "used_..." and calls the deleter. */
static void capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, CAP_LEGACY)) {
        sldl_managed *m = PyCapsule_GetPointer(cap, CAP_LEGACY);
        m->deleter(m);
    } else if (PyCapsule_IsValid(cap, CAP_VERSIONED)) {
        sldl_managed_v *m = PyCapsule_GetPointer(cap, CAP_VERSIONED);
        m->deleter(m);
    }
}

static size_t dtype_size(sldl_dtype t) { return t.bits / 8u; }

static size_t tensor_bytes(const pysl_tensor_desc *d)
{
    size_t n = dtype_size(d->dtype);
    for (int i = 0; i < d->ndim; i++)
        n *= (size_t)d->shape[i];
    return n;
}

/* A copy of d's memory in a new buffer of its own (same device). */
static sl_holder *copy_memory(const pysl_tensor_desc *d, void **data)
{
    size_t n = tensor_bytes(d);
    sl_holder *h = pysl_buffer_new(n, d->device, data);
    if (!h)
        return NULL;
    if (d->device < 0) {
        if (n)
            memcpy(*data, d->data, n);
        return h;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pysl_dev_copy(d->device, *data, d->data, n, d->ready_event);
    Py_END_ALLOW_THREADS
    if (rc) {
        sl_holder_unref(h);
        pysl_raise(rc);
        return NULL;
    }
    return h;
}

static PyObject *make_capsule(tensor_obj *t, int versioned, int copy)
{
    export *e = calloc(1, sizeof *e);
    if (!e)
        return PyErr_NoMemory();
    void *data = t->d.data;
    if (copy) {
        if (!(e->holder = copy_memory(&t->d, &data))) {
            free(e);
            return NULL;
        }
    } else {
        e->holder = t->d.holder;
        sl_holder_ref(e->holder);
    }
    int64_t stride = 1;
    for (int i = t->d.ndim - 1; i >= 0; i--) {
        e->shape[i] = t->d.shape[i];
        e->strides[i] = stride; /* C order: torch and numpy take NULL too, older jax does not */
        stride *= t->d.shape[i];
    }
    sldl_tensor dl = {
        .data = data,
        .device = {t->d.device < 0 ? SLDL_CPU : SLDL_CUDA, t->d.device < 0 ? 0 : t->d.device},
        .ndim = t->d.ndim, .dtype = t->d.dtype, .shape = e->shape, .strides = e->strides,
    };
    PyObject *cap;
    if (versioned) {
        e->m.v.version.major = SLDL_MAJOR;
        e->m.v.version.minor = SLDL_MINOR;
        e->m.v.manager_ctx = e;
        e->m.v.deleter = deleter_versioned;
        e->m.v.flags = copy ? 2ull /* DLPACK_FLAG_BITMASK_IS_COPIED */ : 0;
        e->m.v.dl_tensor = dl;
        cap = PyCapsule_New(&e->m.v, CAP_VERSIONED, capsule_destructor);
    } else {
        e->m.legacy.dl_tensor = dl;
        e->m.legacy.manager_ctx = e;
        e->m.legacy.deleter = deleter_legacy;
        cap = PyCapsule_New(&e->m.legacy, CAP_LEGACY, capsule_destructor);
    }
    if (!cap)
        export_free(e);
    return cap;
}

/* stream: None, -1 or an int (a cudaStream_t value). Device tensors: make
 * it wait for the batch's copy and remember it in the lease. */
static int take_stream(tensor_obj *t, PyObject *stream)
{
    if (t->d.device < 0) {
        if (stream == Py_None)
            return 0;
        long long s = PyLong_AsLongLong(stream);
        if (s == -1 && PyErr_Occurred())
            return -1;
        if (s != -1) {
            PyErr_SetString(PyExc_BufferError, "sluice.Tensor.__dlpack__: a CPU tensor takes "
                                               "stream=None");
            return -1;
        }
        return 0;
    }
    uintptr_t s = 1; /* None: the legacy default stream (the protocol's rule for CUDA) */
    if (stream != Py_None) {
        long long v = PyLong_AsLongLong(stream);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v == -1)
            return 0; /* the consumer synchronizes itself */
        if (v == 0) {
            PyErr_SetString(PyExc_ValueError, "sluice.Tensor.__dlpack__: stream=0 is ambiguous "
                                              "in the DLPack protocol: pass 1 or 2");
            return -1;
        }
        s = (uintptr_t)v;
    }
    if (t->d.ready_event) {
        int rc = pysl_dev_stream_wait(t->d.device, s, t->d.ready_event);
        if (rc) {
            pysl_raise(rc);
            return -1;
        }
    }
    sl_lease *l = t->d.lease;
    if (l) {
        for (int i = 0; i < l->nstreams; i++)
            if (l->streams[i] == s)
                return 0;
        if (l->nstreams == (int)(sizeof l->streams / sizeof l->streams[0])) {
            PyErr_SetString(PyExc_BufferError, "sluice.Tensor.__dlpack__: one batch taken on "
                                               "more than 8 streams");
            return -1;
        }
        l->streams[l->nstreams++] = s;
    }
    return 0;
}

static PyObject *tensor_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    tensor_obj *t = (tensor_obj *)self;
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO:__dlpack__", kwlist, &stream,
                                     &max_version, &dl_device, &copy))
        return NULL;
    int versioned = 0;
    if (max_version != Py_None) {
        PyObject *major = PySequence_GetItem(max_version, 0);
        if (!major)
            return NULL;
        long m = PyLong_AsLong(major);
        Py_DECREF(major);
        if (m == -1 && PyErr_Occurred())
            return NULL;
        versioned = m >= (long)SLDL_MAJOR;
    }
    if (dl_device != Py_None) {
        long type, id;
        if (!PyArg_ParseTuple(dl_device, "ll", &type, &id))
            return NULL;
        long my_type = t->d.device < 0 ? SLDL_CPU : SLDL_CUDA, my_id = t->d.device < 0 ? 0 : t->d.device;
        if (type != my_type || id != my_id) {
            PyErr_Format(PyExc_BufferError, "sluice.Tensor.__dlpack__: dl_device (%ld, %ld): the "
                         "tensor is on (%ld, %ld) and is not moved", type, id, my_type, my_id);
            return NULL;
        }
    }
    int want_copy = copy != Py_None && PyObject_IsTrue(copy);
    if (want_copy && !versioned) {
        PyErr_SetString(PyExc_BufferError, "sluice.Tensor.__dlpack__: copy=True needs "
                                           "max_version >= (1, 0)");
        return NULL;
    }
    if (pysl_lease_check(t->d.lease, "__dlpack__") || take_stream(t, stream))
        return NULL;
    return make_capsule(t, versioned, want_copy);
}

static PyObject *tensor_dlpack_device(PyObject *self, PyObject *unused)
{
    (void)unused;
    tensor_obj *t = (tensor_obj *)self;
    return Py_BuildValue("(ii)", t->d.device < 0 ? SLDL_CPU : SLDL_CUDA,
                         t->d.device < 0 ? 0 : t->d.device);
}

/* __array__(dtype=None, copy=None): numpy.asarray(t) and np.array(t) (host
 * tensors), through numpy.from_dlpack: no copy unless dtype or copy ask. */
static PyObject *tensor_array(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:__array__", kwlist, &dtype, &copy))
        return NULL;
    tensor_obj *t = (tensor_obj *)self;
    if (pysl_lease_check(t->d.lease, "__array__"))
        return NULL;
    if (t->d.device >= 0) {
        PyErr_Format(PyExc_TypeError, "sluice.Tensor.__array__: the tensor is on cuda:%d; "
                     "take it with torch.from_dlpack (or copy it to the host first)", t->d.device);
        return NULL;
    }
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return NULL;
    PyObject *arr = PyObject_CallMethod(np, "from_dlpack", "O", self);
    Py_DECREF(np);
    if (arr && dtype != Py_None) {
        PyObject *a = PyObject_CallMethod(arr, "astype", "O", dtype);
        Py_DECREF(arr);
        arr = a;
    } else if (arr && copy != Py_None && PyObject_IsTrue(copy)) {
        PyObject *a = PyObject_CallMethod(arr, "copy", NULL);
        Py_DECREF(arr);
        arr = a;
    }
    return arr;
}

static const char *dtype_name(sldl_dtype t)
{
    if (t.code == SLDL_UINT && t.bits == 8)
        return "uint8";
    if (t.code == SLDL_FLOAT && t.bits == 32)
        return "float32";
    if (t.code == SLDL_INT && t.bits == 32)
        return "int32";
    if (t.code == SLDL_INT && t.bits == 64)
        return "int64";
    return "?";
}

static PyObject *tensor_get_shape(PyObject *self, void *unused)
{
    (void)unused;
    tensor_obj *t = (tensor_obj *)self;
    PyObject *tup = PyTuple_New(t->d.ndim);
    if (!tup)
        return NULL;
    for (int i = 0; i < t->d.ndim; i++) {
        PyObject *v = PyLong_FromLongLong(t->d.shape[i]);
        if (!v || PyTuple_SetItem(tup, i, v)) {
            Py_DECREF(tup);
            return NULL;
        }
    }
    return tup;
}

static PyObject *tensor_get_dtype(PyObject *self, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(dtype_name(((tensor_obj *)self)->d.dtype));
}

static PyObject *tensor_get_device(PyObject *self, void *unused)
{
    (void)unused;
    int dev = ((tensor_obj *)self)->d.device;
    return dev < 0 ? PyUnicode_FromString("cpu") : PyUnicode_FromFormat("cuda:%d", dev);
}

static PyObject *tensor_get_nbytes(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(tensor_bytes(&((tensor_obj *)self)->d));
}

static PyObject *tensor_repr(PyObject *self)
{
    tensor_obj *t = (tensor_obj *)self;
    PyObject *shape = tensor_get_shape(self, NULL);
    if (!shape)
        return NULL;
    PyObject *r = t->d.device < 0
                      ? PyUnicode_FromFormat("sluice.Tensor(shape=%R, dtype=%s, device=cpu)", shape,
                                             dtype_name(t->d.dtype))
                      : PyUnicode_FromFormat("sluice.Tensor(shape=%R, dtype=%s, device=cuda:%d)",
                                             shape, dtype_name(t->d.dtype), t->d.device);
    Py_DECREF(shape);
    return r;
}

static void tensor_dealloc(PyObject *self)
{
    tensor_obj *t = (tensor_obj *)self;
    sl_holder_unref(t->d.holder);
    pysl_lease_unref(t->d.lease);
    pysl_free_self(self);
}

PyObject *pysl_tensor_new(const pysl_tensor_desc *d)
{
    PyObject *self = PyType_GenericAlloc(tensor_type, 0);
    if (!self)
        return NULL;
    tensor_obj *t = (tensor_obj *)self;
    t->d = *d;
    sl_holder_ref(d->holder);
    if (d->lease)
        d->lease->refs++;
    return self;
}

void pysl_lease_unref(sl_lease *l)
{
    if (l && --l->refs == 0)
        free(l);
}

/* A lent batch's images after their slot went back: the memory is mapped
 * (no crash) but holds a later batch, so an export now would hand out the
 * wrong pixels without a word. One int compare per export. */
int pysl_lease_check(const sl_lease *l, const char *what)
{
    if (!l || !l->released)
        return 0;
    PyErr_Format(PyExc_BufferError,
                 "sluice.Tensor.%s: the images of batch %llu were lent until %u more batch%s "
                 "had been taken (hold=%u); batch %llu's taking gave their slot back, and it "
                 "holds a later batch now: pass copy=True to keep batches (or copy them, e.g. "
                 "torch.from_dlpack(images).clone(), within the step)",
                 what, (unsigned long long)l->index, l->hold, l->hold == 1 ? "" : "es", l->hold,
                 (unsigned long long)l->released_by);
    return -1;
}

static PyMethodDef tensor_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None)\n"
     "A DLPack capsule of this tensor (the array API's protocol)."},
    {"__array__", (PyCFunction)(void (*)(void))tensor_array, METH_VARARGS | METH_KEYWORDS,
     "__array__(dtype=None, copy=None)\nnumpy.asarray(tensor): a NumPy array over the same "
     "memory (host tensors; numpy.from_dlpack), a copy when dtype or copy=True ask."},
    {"__dlpack_device__", tensor_dlpack_device, METH_NOARGS,
     "(device_type, device_id): (1, 0) for the CPU, (2, N) for CUDA device N."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tensor_getset[] = {
    {"shape", tensor_get_shape, NULL, "dimensions, a tuple", NULL},
    {"dtype", tensor_get_dtype, NULL, "element type: uint8, float32, int32 or int64", NULL},
    {"device", tensor_get_device, NULL, "'cpu' or 'cuda:N'", NULL},
    {"nbytes", tensor_get_nbytes, NULL, "bytes of data", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *tensor_new_refused(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)type, (void)args, (void)kw;
    PyErr_SetString(PyExc_TypeError, "sluice.Tensor is made by sluice.Pipeline, not by hand");
    return NULL;
}

static PyType_Slot tensor_slots[] = {
    {Py_tp_new, tensor_new_refused},
    {Py_tp_doc, "A batch's images, labels, record ids or epochs, lent through the DLPack protocol:\n"
                "torch.from_dlpack(t), numpy.from_dlpack(t) and jax.dlpack.from_dlpack(t) take it\n"
                "without a copy. Made by sluice.Pipeline, not by hand."},
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_repr, tensor_repr},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {0, NULL},
};

static PyType_Spec tensor_spec = {
    .name = "sluice.Tensor",
    .basicsize = sizeof(tensor_obj),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = tensor_slots,
};

int pysl_tensor_init(PyObject *module)
{
    tensor_type = (PyTypeObject *)PyType_FromSpec(&tensor_spec);
    if (!tensor_type)
        return -1;
    Py_INCREF(tensor_type);
    if (PyModule_AddObject(module, "Tensor", (PyObject *)tensor_type)) {
        Py_DECREF(tensor_type);
        return -1;
    }
    return 0;
}
