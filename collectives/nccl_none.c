/*
 * collectives/nccl_none.c - the nccl backend of a build without NCCL
 * (no CUDA, or nccl.h / libnccl not found): creating a communicator is
 * SL_ENOTSUP.
 *
 * Threading: no state.
 */
#include "collectives/collectives_int.h"

int sl_comm_nccl_create(const sl_comm_config *cfg, sl_comm **out)
{
    (void)cfg;
    if (out)
        *out = NULL;
    return sl_fail(SL_ENOTSUP, "sl_comm_nccl_create: built without NCCL (configure with CUDA "
                   "and NCCL, e.g. -DNCCL_ROOT=...)");
}
