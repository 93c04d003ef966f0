/*
 * python/src/ext.h - the pieces of the extension sluice._sluice shared by
 * its files: module.c (init, remote I/O settings), errors.c (the
 * sluice.Error hierarchy), helpers.c (own buffers, small helpers),
 * convert.c (convert), tensor.c (DLPack tensors), pipeline_obj.c (the
 * pipeline iterator), device.c (the CUDA calls), dataset.c (verify,
 * inspect).
 * Python never enters the library: these files only call the public
 * headers (pipeline/pipeline.h, records/records.h).
 *
 * Threading: everything here runs with the GIL held, except sl_holder
 * reference drops, which DLPack deleters may make from any thread (torch
 * frees tensors where it likes): holders count atomically and free without
 * touching Python.
 */
#ifndef SL_PY_EXT_H
#define SL_PY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlpack_abi.h"

/* ------------------------------------------------------------ holders */
/* Whatever keeps a tensor's memory alive: a pipeline (its ring: lent
 * batches) or a buffer of the binding's own (copies, labels). Each Tensor
 * object and each DLPack export holds one reference; the last drop frees. */
typedef struct sl_holder {
    atomic_long refs;
    void (*free)(struct sl_holder *h);
} sl_holder;

static inline void sl_holder_ref(sl_holder *h)
{
    atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
}
static inline void sl_holder_unref(sl_holder *h)
{
    if (h && atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1)
        h->free(h);
}

/* A malloc'd (or, device >= 0, cudaMalloc'd) buffer of n bytes with one
 * reference; NULL with a Python MemoryError (or sluice error) set
 * (helpers.c). */
sl_holder *pysl_buffer_new(size_t n, int device, void **data);

/* ------------------------------------------------------------ errors.c */
/* Raise the sluice.Error subclass for status rc with the thread's library
 * message (sl_errmsg(), "function: file: record N @ offset: what"), or
 * sl_strerror(rc) when there is none. Returns NULL. */
PyObject *pysl_raise(int rc);
/* Raise sluice.ConfigError (also a ValueError) with a formatted message
 * (PyUnicode_FromFormat's format: %R, %S take objects). */
PyObject *pysl_config_error(const char *fmt, ...);
/* A library message as Python's str: the C function names that open its
 * parts ("sl_pipeline_create: ") are left out, the CLI's option names in it
 * become the Python keywords (--resume: resume=True), bytes that are not
 * UTF-8 show as \xNN. New reference, NULL with an exception. */
PyObject *pysl_text(const char *msg);
/* The classes, _error and _strerror. */
int pysl_errors_init(PyObject *module);
/* "SL_ECORRUPT" for SL_ECORRUPT ("SL_UNKNOWN" out of range). */
const char *pysl_status_name(int rc);

/* ------------------------------------------------------------ module.c */
/* The tuple (retries, timeout_ms, inflight, retry_ms) into *o over the
 * process-wide settings (None: as they are); -1 with ConfigError set. */
struct sl_io_opts;
int pysl_io_opts(PyObject *args, struct sl_io_opts *o);

/* ------------------------------------------------------------ convert.c */
/* _convert (records.h's sl_convert_run). */
int pysl_convert_init(PyObject *module);

/* ------------------------------------------------------------ dataset.c */
/* _verify and _inspect (records.h's sl_verify_path, sl_dataset_inspect). */
int pysl_dataset_init(PyObject *module);

/* ------------------------------------------------------------ tensors */
/* A lease: one lent batch's images, shared by the binding (while it holds
 * the batch) and the Tensor over them. Device batches: the consumer streams
 * that took the tensor (recorded by __dlpack__(stream=...)), which must be
 * done with it before its batch slot is given back. Every lent batch:
 * whether its slot was given back to be refilled (released; the tensor then
 * refuses new exports, since its memory holds another batch by now: issue
 * 38 item 4). Counted under the GIL (pipeline + its tensors). */
typedef struct sl_lease {
    long refs;
    int nstreams;
    uintptr_t streams[8];
    int released;           /* the slot went back to the pipeline (not by close) */
    uint64_t index;         /* the batch's index */
    uint64_t released_by;   /* the index of the batch whose taking released it */
    unsigned hold;          /* batches lent at once (for the message) */
} sl_lease;
void pysl_lease_unref(sl_lease *l);
/* 0 when t's memory is still its batch's; else -1 with BufferError set
 * naming the batch, what released it and copy=True (tensor.c). */
int pysl_lease_check(const sl_lease *l, const char *what);

typedef struct pysl_tensor_desc {
    void *data;
    int ndim;
    int64_t shape[4];
    sldl_dtype dtype;
    int device;           /* -1 host, else the CUDA device */
    void *ready_event;    /* device: cudaEvent_t of the copy; consumers wait on it */
    sl_holder *holder;    /* a new reference is taken */
    sl_lease *lease;      /* images of lent batches; a reference is taken; or NULL */
} pysl_tensor_desc;

PyObject *pysl_tensor_new(const pysl_tensor_desc *d);
int pysl_tensor_init(PyObject *module);

/* ------------------------------------------------------------ pipeline */
int pysl_pipeline_init(PyObject *module);

/* ------------------------------------------------------------ device.c */
/* The CUDA runtime calls of the binding (#if SLUICE_WITH_CUDA lives only in
 * device.c). Each returns an sl_status with sl_fail's message set;
 * SL_ENOTSUP in a build without CUDA. stream: a cudaStream_t value as the
 * DLPack protocol passes it (1 = legacy default, 2 = per-thread default). */
int pysl_dev_stream_wait(int device, uintptr_t stream, void *event);
/* Wait on the host until the work queued so far on each stream is done. */
int pysl_dev_streams_sync(int device, const uintptr_t *streams, int n);
int pysl_dev_alloc(int device, size_t n, void **out);
void pysl_dev_free(int device, void *p);
/* src (device, n bytes) to dst (device) once event (may be NULL) is done;
 * returns after the copy. */
int pysl_dev_copy(int device, void *dst, const void *src, size_t n, void *event);
/* Whether CUDA device `device` is there: SL_ECUDA "no CUDA GPU on this
 * machine" / "no CUDA device N (M found)" in words a user acts on, not the
 * runtime's (cudaErrorInsufficientDriver reads "CUDA driver version is
 * insufficient" on a machine with no driver at all); SL_ENOTSUP without CUDA. */
int pysl_dev_check(int device);

/* ------------------------------------------------------------ helpers.c */
/* A path argument (str or bytes) as bytes, as os.fsencode gives them (a
 * new reference); else ConfigError "what: a str or bytes, not T". */
PyObject *pysl_bytes(PyObject *v, const char *what);
/* The UTF-8 of a str into a malloc'd string (NULL + exception on error). */
char *pysl_strdup_utf8(PyObject *s);
/* A path argument (pysl_bytes') into a malloc'd string (NULL + exception). */
char *pysl_path_strdup(PyObject *v, const char *what);
/* Free a heap-type instance and drop its type (stable-ABI dealloc tail). */
void pysl_free_self(PyObject *self);

#endif
