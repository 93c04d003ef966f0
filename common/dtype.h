/*
 * common/dtype.h - element types shared by the pipeline (GPU-side
 * normalization output) and the collectives (all-reduce buffers).
 *
 * Threading: a plain enum.
 */
#ifndef SL_DTYPE_H
#define SL_DTYPE_H

typedef enum sl_dtype {
    SL_DTYPE_F32 = 0,
    SL_DTYPE_BF16,   /* bfloat16: the top half of an f32 */
    SL_DTYPE_F16,    /* IEEE binary16 */
} sl_dtype;

#define SL_DTYPE_LAST SL_DTYPE_F16

#endif /* SL_DTYPE_H */
