/*
 * train/ops/scratch.c - an exec's scratch memory: the one buffer every cpu
 * kernel (act_cpu.c, conv_cpu.c, conv_dnnl.c, norm_cpu.c, norm_sync_cpu.c)
 * carves its per-call arrays from.
 *
 * DESIGN. Below both exec.c (which frees it in sl_exec_fini) and the
 * kernels (which exec.c's tables name), so calls go one way: the table
 * file calls the kernels, the kernels call this file, this file calls
 * nobody in train/. It grows and never shrinks: a step asks the same sizes
 * every time, so after the first step it allocates nothing.
 */
#include <stdlib.h>

#include "train/ops/ops.h"

void *sl_exec_scratch(sl_exec *e, size_t bytes)
{
    if (bytes <= e->scratch_cap)
        return e->scratch;
    size_t cap = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap ? cap : 64)) {
        sl_fail(SL_ENOMEM, "sl_exec_scratch: %zu bytes", bytes);
        return NULL;
    }
    free(e->scratch);
    e->scratch = p;
    e->scratch_cap = cap;
    return p;
}
