/*
 * python/src/dlpack_abi.h - the DLPack 1.0 structures the binding hands to
 * torch / numpy / jax (github.com/dmlc/dlpack, include/dlpack/dlpack.h;
 * the Python protocol: data-apis.org/array-api, __dlpack__).
 *
 * Written out here rather than included: the package must build with
 * nothing but Python and the library's own dependencies, and Debian 12's
 * libdlpack-dev is 0.6, without DLManagedTensorVersioned. These are the
 * ABI's fixed layouts (the header's ABI is stable by design); only the
 * members the binding uses are named beyond the structs themselves.
 */
#ifndef SL_PY_DLPACK_ABI_H
#define SL_PY_DLPACK_ABI_H

#include <stdint.h>

enum { SLDL_CPU = 1, SLDL_CUDA = 2 };             /* DLDeviceType kDLCPU, kDLCUDA */
enum { SLDL_INT = 0, SLDL_UINT = 1, SLDL_FLOAT = 2 }; /* DLDataTypeCode */

typedef struct sldl_device {
    int32_t device_type; /* DLDeviceType, an int-sized enum */
    int32_t device_id;
} sldl_device;

typedef struct sldl_dtype {
    uint8_t code, bits;
    uint16_t lanes;
} sldl_dtype;

typedef struct sldl_tensor { /* DLTensor */
    void *data;
    sldl_device device;
    int32_t ndim;
    sldl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} sldl_tensor;

typedef struct sldl_managed { /* DLManagedTensor (the pre-1.0 "dltensor" capsule) */
    sldl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct sldl_managed *self);
} sldl_managed;

typedef struct sldl_managed_v { /* DLManagedTensorVersioned ("dltensor_versioned") */
    struct { uint32_t major, minor; } version;
    void *manager_ctx;
    void (*deleter)(struct sldl_managed_v *self);
    uint64_t flags;
    sldl_tensor dl_tensor;
} sldl_managed_v;

#define SLDL_MAJOR 1u
#define SLDL_MINOR 0u
#define SLDL_FLAG_READ_ONLY 1ull /* DLPACK_FLAG_BITMASK_READ_ONLY */

#endif
