/*
 * train/device/dev_graph_cuda.c - dev_int.h's CUDA graphs: a training step
 * captured once on the exec's stream and replayed with one launch, and
 * whether a capture is still intact (dev_int.h has the rules). Built with
 * the cuda backend; dev_none.c replaces it otherwise.
 *
 * Threading: an exec's thread; the capture is the calling thread's
 * (cudaStreamCaptureModeThreadLocal).
 */
#include <stdlib.h>
#include <string.h>

#include "train/ops/cuda_int.h"
#include "train/device/dev_int.h"

struct sl_dev_graph {
    sl_exec *e;
    cudaGraphExec_t exec;
    unsigned gen; /* the context's mem_gen at the capture */
};

int sl_dev_graph_wanted(sl_exec *e) { return sl_mem_on_device(e) && sl_cuda_of(e)->graph; }

int sl_dev_capture_begin(sl_exec *e)
{
    if (!sl_mem_on_device(e))
        return sl_fail(SL_ENOTSUP, "sl_dev_capture_begin: %s backend", sl_backend_name(e->backend));
    int rc = SL_CUDA(cudaStreamBeginCapture(sl_cuda_of(e)->stream,
                                            cudaStreamCaptureModeThreadLocal));
    return rc ? sl_fail(rc, "sl_dev_capture_begin: %s", sl_errmsg()) : SL_OK;
}

int sl_dev_capture_end(sl_exec *e, int ok, sl_dev_graph **out)
{
    *out = NULL;
    sl_cuda_ctx *c = sl_cuda_of(e);
    cudaGraph_t g = NULL;
    cudaError_t ce = cudaStreamEndCapture(c->stream, &g);
    int rc;
    if (ce != cudaSuccess || !g) {
        (void)cudaGetLastError();
        if (g)
            cudaGraphDestroy(g);
        return sl_fail(SL_ECUDA, "sl_dev_capture_end: cudaStreamEndCapture: %s%s",
                       cudaGetErrorString(ce), ok ? "" : " (after a failed call)");
    }
    if (!ok) {
        cudaGraphDestroy(g);
        return sl_fail(SL_ECUDA, "sl_dev_capture_end: a call failed while capturing");
    }
    sl_dev_graph *dg = calloc(1, sizeof *dg);
    if (!dg) {
        cudaGraphDestroy(g);
        return sl_fail(SL_ENOMEM, "sl_dev_capture_end: out of memory");
    }
    rc = SL_CUDA(cudaGraphInstantiate(&dg->exec, g, 0));
    cudaGraphDestroy(g);
    if (rc) {
        free(dg);
        return sl_fail(rc, "sl_dev_capture_end: %s", sl_errmsg());
    }
    dg->e = e;
    dg->gen = c->mem_gen;
    *out = dg;
    return SL_OK;
}

int sl_dev_graph_launch(sl_dev_graph *g)
{
    return SL_CUDA(cudaGraphLaunch(g->exec, sl_cuda_of(g->e)->stream));
}

int sl_dev_graph_stale(const sl_dev_graph *g) { return g->gen != sl_cuda_of(g->e)->mem_gen; }

int sl_dev_capture_intact(sl_exec *e)
{
    if (!sl_mem_on_device(e))
        return SL_OK;
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t ce = cudaStreamIsCapturing(sl_cuda_of(e)->stream, &st);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return sl_fail(SL_ECUDA, "sl_dev_capture_intact: cudaStreamIsCapturing: %s",
                       cudaGetErrorString(ce));
    }
    if (st == cudaStreamCaptureStatusInvalidated)
        return sl_fail(SL_ECUDA, "sl_dev_capture_intact: the stream's capture was invalidated "
                       "(a call the driver refuses while capturing)");
    return SL_OK;
}

void sl_dev_graph_destroy(sl_dev_graph *g)
{
    if (!g)
        return;
    (void)cudaStreamSynchronize(sl_cuda_of(g->e)->stream); /* no replay in flight */
    cudaGraphExecDestroy(g->exec);
    free(g);
}
