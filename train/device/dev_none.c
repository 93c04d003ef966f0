/*
 * train/device/dev_none.c - train/device/dev_int.h in a build without the cuda backend:
 * the feed, the device loss, the device optimizer and CUDA graphs say
 * SL_ENOTSUP (no cuda exec can exist in such a build: sl_exec_init
 * refuses it). One file for the four dev_*_cuda.c it replaces (each
 * section names its counterpart): they are stubs. Memory is
 * train/ops/mem_none.c's.
 */

#include "train/device/dev_int.h"

#define NOTSUP(fn) sl_fail(SL_ENOTSUP, fn ": this build has no cuda backend")

/* ----------------------------------------------- feed: dev_feed_cuda.c */

int sl_dev_feed_create(sl_exec *e, int max_batch, int h, int w, const float mean[3],
                       const float std[3], sl_dev_feed **out)
{
    (void)e, (void)max_batch, (void)h, (void)w, (void)mean, (void)std;
    *out = NULL;
    return NOTSUP("sl_dev_feed_create");
}

void sl_dev_feed_destroy(sl_dev_feed *f) { (void)f; }

int sl_dev_feed_put(sl_dev_feed *f, const sl_batch *b, int classes, const void **x,
                    const int32_t **labels)
{
    (void)f, (void)b, (void)classes, (void)x, (void)labels;
    return NOTSUP("sl_dev_feed_put");
}

int sl_dev_feed_done(sl_dev_feed *f)
{
    (void)f;
    return SL_OK;
}

/* ----------------------------------------------- loss: dev_loss_cuda.c */

int sl_dev_xent_acc(sl_exec *e, int n, int classes, const float *logits,
                    const int32_t *labels, float smoothing, const float *d_scale,
                    float *dlogits, double *acc)
{
    (void)e, (void)n, (void)classes, (void)logits, (void)labels, (void)smoothing;
    (void)d_scale, (void)dlogits, (void)acc;
    return NOTSUP("sl_dev_xent_acc");
}

int sl_dev_loss_take(sl_exec *e, double *acc, double out[2])
{
    (void)e;
    out[0] = acc[0], out[1] = acc[1];
    acc[0] = acc[1] = 0;
    return SL_OK;
}

/* ------------------------------------------- optimizer: dev_sgd_cuda.c */

int sl_dev_sgd_create(sl_exec *e, const sl_sgd_config *cfg, sl_sgd *o, sl_model *m,
                      sl_dev_sgd **out)
{
    (void)e, (void)cfg, (void)o, (void)m;
    *out = NULL;
    return NOTSUP("sl_dev_sgd_create");
}

void sl_dev_sgd_destroy(sl_dev_sgd *d) { (void)d; }

int sl_dev_sgd_step(sl_dev_sgd *d, float lr)
{
    (void)d, (void)lr;
    return NOTSUP("sl_dev_sgd_step");
}

const float *sl_dev_sgd_scale(sl_dev_sgd *d)
{
    (void)d;
    return NULL;
}

int sl_dev_sgd_skipped(sl_dev_sgd *d, int64_t *skipped, float *scale)
{
    (void)d;
    *skipped = 0, *scale = 1.0f;
    return SL_OK;
}

int sl_dev_sgd_pull(sl_dev_sgd *d)
{
    (void)d;
    return NOTSUP("sl_dev_sgd_pull");
}

int sl_dev_sgd_push(sl_dev_sgd *d)
{
    (void)d;
    return NOTSUP("sl_dev_sgd_push");
}

int sl_dev_sgd_set_lr(sl_dev_sgd *d, float lr)
{
    (void)d, (void)lr;
    return NOTSUP("sl_dev_sgd_set_lr");
}

int sl_dev_sgd_enqueue(sl_dev_sgd *d)
{
    (void)d;
    return NOTSUP("sl_dev_sgd_enqueue");
}

void sl_dev_sgd_count(sl_dev_sgd *d) { (void)d; }

int64_t sl_dev_sgd_steps(const sl_dev_sgd *d)
{
    (void)d;
    return 0;
}

/* No CUDA graphs without the cuda backend: the trainer never asks. */
/* --------------------------------------- CUDA graphs: dev_graph_cuda.c */

int sl_dev_graph_wanted(sl_exec *e)
{
    (void)e;
    return 0;
}

int sl_dev_capture_begin(sl_exec *e)
{
    (void)e;
    return NOTSUP("sl_dev_capture_begin");
}

int sl_dev_capture_end(sl_exec *e, int ok, sl_dev_graph **out)
{
    (void)e, (void)ok;
    *out = NULL;
    return NOTSUP("sl_dev_capture_end");
}

int sl_dev_graph_launch(sl_dev_graph *g)
{
    (void)g;
    return NOTSUP("sl_dev_graph_launch");
}

int sl_dev_graph_stale(const sl_dev_graph *g)
{
    (void)g;
    return 1;
}

void sl_dev_graph_destroy(sl_dev_graph *g) { (void)g; }

int sl_dev_capture_intact(sl_exec *e)
{
    (void)e;
    return SL_OK; /* host execs never capture */
}
