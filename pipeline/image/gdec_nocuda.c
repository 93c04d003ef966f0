/*
 * pipeline/image/gdec_nocuda.c - the GPU decode stage in a build without CUDA
 * (gdec_int.h): --decode auto is the CPU path, --decode gpu is refused.
 * CMake compiles it only when CUDA is off; gdec_cuda.cu replaces it.
 */
#include "pipeline/image/gdec_int.h"

#include <stdio.h>

int sl_gdec_create(const sl_pipeline_config *cfg, unsigned workers, unsigned nslots,
                   const sl_source_set *src, sl_gdec **out)
{
    (void)workers, (void)nslots, (void)src;
    *out = NULL;
    if (cfg->decode == SL_DECODE_GPU)
        return sl_fail(SL_ENOTSUP, "--decode gpu: this build has no CUDA (use --decode cpu or "
                                   "auto)");
    return SL_OK;
}

void sl_gdec_destroy(sl_gdec *g)
{
    (void)g;
}

int sl_gdec_stage(sl_gdec *g, unsigned worker, unsigned slot, unsigned k, uint64_t id,
                  const uint8_t *jpeg, size_t len, unsigned jflags, int W, int H,
                  const sl_crop *crop, int flip)
{
    (void)g, (void)worker, (void)slot, (void)k, (void)id, (void)jpeg, (void)len, (void)jflags;
    (void)W, (void)H, (void)crop, (void)flip;
    return SL_ENOTSUP;
}

void sl_gdec_move(sl_gdec *g, unsigned slot, unsigned from, unsigned to)
{
    (void)g, (void)slot, (void)from, (void)to;
}

int sl_gdec_submit(sl_gdec *g, unsigned slot, unsigned n, void *host, void *dev, void *event)
{
    (void)g, (void)slot, (void)n, (void)host, (void)dev, (void)event;
    return sl_fail(SL_ENOTSUP, "sl_gdec_submit: this build has no CUDA");
}

void sl_gdec_describe(sl_gdec *g, char *buf, size_t cap)
{
    (void)g;
    snprintf(buf, cap, "cpu");
}
