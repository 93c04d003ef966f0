/*
 * common/dtype.h - the element types shared by the pipeline (GPU-side
 * normalization output), the collectives (all-reduce buffers) and train/
 * (activation types): one vocabulary of sizes, names and parsing.
 *
 * Threading: pure functions and a plain enum.
 */
#ifndef SL_DTYPE_H
#define SL_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_dtype {
    SL_DTYPE_F32 = 0,
    SL_DTYPE_BF16,   /* bfloat16: the top half of an f32 */
    SL_DTYPE_F16,    /* IEEE binary16 */
} sl_dtype;

#define SL_DTYPE_LAST SL_DTYPE_F16

/* Bytes of one element: 4, 2, 2; 0 for a value that is no sl_dtype. */
size_t sl_dtype_size(sl_dtype t);
/* "f32", "bf16", "f16"; "?" for a value that is no sl_dtype. Static
 * strings. */
const char *sl_dtype_name(sl_dtype t);
/* The type named: "f32" / "fp32", "bf16", "f16" / "fp16" (the CLI's
 * --precision spells them fp32 / fp16). SL_EINVAL naming the word for
 * anything else, NULL included; *out is untouched then. */
int sl_dtype_parse(const char *name, sl_dtype *out);

#ifdef __cplusplus
}
#endif

#endif /* SL_DTYPE_H */
