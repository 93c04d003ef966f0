/*
 * train/device/dev_int.h - private to train/: what the training loop needs
 * from a device besides the ops and memory (DESIGN.md section 5; the GPU
 * issue): the input feed from the pipeline's load stage, the loss
 * accumulated on the device, the optimizer on the device, CUDA graphs and
 * the memory plan.
 *
 *   the cuda implementation (C on the CUDA runtime and the cuda backend's
 *   kernels, train/ops/cuda_int.h), built with it, one job a file:
 *     dev_feed_cuda.c   feed
 *     dev_loss_cuda.c   loss
 *     dev_sgd_cuda.c    optimizer
 *     dev_graph_cuda.c  CUDA graphs
 *   dev_none.c       builds without the cuda backend: the feed, the device
 *                    loss, the device optimizer and graphs say SL_ENOTSUP
 *   dev_labels.c     every build: the one host label check
 *   dev_plan.c       every build: the memory plan
 *
 * Memory (sl_mem_alloc and the copies) is train/ops/mem.h's, beside the
 * exec's context, since the model places its tensors with it; this header
 * includes it.
 *
 * Feed (cuda). The pipeline, configured with device = the exec's device
 * and layout SL_LAYOUT_NHWC_U8, copies each batch into device memory on
 * its own copy stream and records an event (pipeline.h, sl_batch). The
 * feed makes the exec's stream wait for that event, normalizes the u8
 * batch into its input buffer in the exec's activation type
 * (sl_cuda_normalize) and copies the labels up through pinned staging; the
 * host does not wait. Before the batch goes back to the pipeline (whose
 * copy of a later batch will overwrite the device slot) sl_dev_feed_done
 * waits for an event recorded after the normalization: by then the GPU has
 * finished the previous step's work, so the host stays at most one step
 * ahead and the GPU always has the next step queued.
 *
 * Loss. The step's loss and correct count are added to two device doubles
 * (sl_xent_acc_cuda) and read when the loop logs (sl_dev_loss_take), so no
 * step waits for its loss.
 *
 * Optimizer. sl_dev_sgd holds the momentum buffers in device memory and
 * runs sl_sgd_step_cuda over the model's device params; the host sl_sgd
 * stays the checkpoint's view (sl_dev_sgd_pull / push copy between them).
 * With fp16 activations it owns the dynamic loss scale (sl_amp_state,
 * torch.cuda.amp.GradScaler's rules): xent multiplies dlogits by the
 * scale, a step with inf/nan grads is skipped on the device.
 *
 * Threading: everything here belongs to one exec, used by one thread at a
 * time (train/ops/ops.h).
 */
#ifndef SL_DEV_INT_H
#define SL_DEV_INT_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/pipeline.h"
#include "train/ops/ops.h" /* the exec's struct; includes train.h */
#include "train/ops/mem.h"   /* an exec's memory, beside its context */

/* --------------------------------------------------------- memory plan */

/* What one replica of the device trainer allocates with sl_mem_alloc and
 * its exec's context, for model cfg at batch (h x w images, activations
 * of act), computed without a device (dev_plan.c): the budget issue 14
 * holds ResNet-50 at batch 256 to (PyTorch eager's 11.0 GiB), and what
 * sl_mem_usage's peak reaches (the workspace and scratch as bounds: the cap
 * ws_max, SLUICE_CUDNN_WS_MB's, and the largest op scratch on a device of
 * sms multiprocessors). */
typedef struct sl_dev_plan {
    size_t model;     /* sl_model_place: params, grads, compute weights, BN buffers,
                         activations, argmax */
    size_t optimizer; /* momentum buffers, their table, the learning rate */
    size_t io;        /* the feed's input batch and labels, dlogits, the loss sums */
    size_t workspace; /* the cuDNN workspace cap */
    size_t scratch;   /* the context's op scratch, at most */
    size_t total;
} sl_dev_plan;
int sl_dev_plan_train(const sl_model_config *cfg, int batch, int h, int w, sl_dtype act,
                      size_t ws_max, int sms, sl_dev_plan *out);

/* --------------------------------------------------------------- feed */

typedef struct sl_dev_feed sl_dev_feed;
/* Input buffers for batches up to max_batch of (h, w, 3) images,
 * normalized with mean and std (0..255 units, the pipeline config's). */
int sl_dev_feed_create(sl_exec *e, int max_batch, int h, int w, const float mean[3],
                       const float std[3], sl_dev_feed **out);
void sl_dev_feed_destroy(sl_dev_feed *f);
/* Enqueue batch b (from a pipeline with device >= 0 and layout
 * SL_LAYOUT_NHWC_U8): *x gets the device input (n, h, w, 3) in e's
 * activation type, *labels the device labels; both valid until the next
 * put. Labels are checked against classes on the host first (SL_EINVAL
 * naming the record). */
int sl_dev_feed_put(sl_dev_feed *f, const sl_batch *b, int classes, const void **x,
                    const int32_t **labels);
/* Block until the GPU has read the last put's batch (release it after). */
int sl_dev_feed_done(sl_dev_feed *f);

/* Check a batch's labels against the model's classes (every path that
 * feeds labels to a model: host, feed, eval): SL_EINVAL "fn: record R has
 * label L, the model has K classes", with a hint at --label-offset when L
 * is K (labels counted from 1, as in TensorFlow's ImageNet shards) or
 * negative. Defined in dev_labels.c, over sl_labels_bad (train/ops/ops.h). */
int sl_labels_check(const char *fn, const sl_batch *b, int classes);

/* --------------------------------------------------------------- loss */

/* Softmax cross-entropy on the device without a host wait: acc (two device
 * doubles) += (mean loss, correct count); dlogits scaled by *d_scale when
 * d_scale is not NULL (fp16 loss scaling). */
int sl_dev_xent_acc(sl_exec *e, int n, int classes, const float *logits,
                    const int32_t *labels, float smoothing, const float *d_scale,
                    float *dlogits, double *acc);
/* Read acc (after the queued work) into out[2] and zero it. */
int sl_dev_loss_take(sl_exec *e, double *acc, double out[2]);

/* ---------------------------------------------------------- optimizer */

typedef struct sl_dev_sgd sl_dev_sgd;
/* The device optimizer for the placed model m (sl_model_place) with the
 * hyperparameters cfg (those o was made with) and o's state (momentum
 * buffers and step are copied up). o and m must outlive it. */
int sl_dev_sgd_create(sl_exec *e, const sl_sgd_config *cfg, sl_sgd *o, sl_model *m,
                      sl_dev_sgd **out);
void sl_dev_sgd_destroy(sl_dev_sgd *d);
/* One step with learning rate lr over the model's device grads; then the
 * model's compute copy of the weights is refreshed (sl_model_refresh).
 * = sl_dev_sgd_set_lr + sl_dev_sgd_enqueue + sl_dev_sgd_count. */
int sl_dev_sgd_step(sl_dev_sgd *d, float lr);
/* The pieces, for a step captured into a CUDA graph: set_lr copies lr into
 * the device float the kernel reads (through a ring of pinned slots, each
 * reused once the device has read it: the host runs at most that many
 * steps ahead); it is a plain copy, so it stays out of a capture. enqueue
 * queues the step (loss-scale check, update, scale update, refresh):
 * graph-capturable, no host counter moves. count advances the host's step
 * counter (the first step's momentum rule reads it at enqueue). */
int sl_dev_sgd_set_lr(sl_dev_sgd *d, float lr);
int sl_dev_sgd_enqueue(sl_dev_sgd *d);
void sl_dev_sgd_count(sl_dev_sgd *d);
/* The optimizer's step counter (its first step is step 0). */
int64_t sl_dev_sgd_steps(const sl_dev_sgd *d);
/* The loss scale's device float for xent (NULL unless fp16). */
const float *sl_dev_sgd_scale(sl_dev_sgd *d);
/* Steps skipped for inf/nan gradients (fp16), read from the device. */
int sl_dev_sgd_skipped(sl_dev_sgd *d, int64_t *skipped, float *scale);
/* Device momentum and step -> o's host tensors (before a checkpoint) and
 * back (after loading one). */
int sl_dev_sgd_pull(sl_dev_sgd *d);
int sl_dev_sgd_push(sl_dev_sgd *d);

/* --------------------------------------------------------- CUDA graphs */

/* A training step captured once and replayed (cudaStreamBeginCapture /
 * EndCapture / cudaGraphLaunch on the exec's stream): one launch instead of
 * a thousand, no host work between kernels. The capture is the calling
 * thread's (cudaStreamCaptureModeThreadLocal: the pipeline's threads keep
 * copying meanwhile); anything the driver does not allow in it (a host
 * sync, cudaMalloc, a copy from pageable memory) makes the capture fail,
 * and the caller runs the step uncaptured instead.
 *   sl_dev_graph_wanted  SLUICE_CUDA_GRAPH (0 or 1; default 1) on a cuda
 *                        exec, read when its context was made; 0 on a host
 *   sl_dev_capture_begin begin capturing e's stream
 *   sl_dev_capture_end   end it; with ok (the captured calls succeeded) and
 *                        a capture the driver kept, instantiate it into
 *                        *out; else *out = NULL and SL_ECUDA saying why
 *                        (the work queued while capturing did not run)
 *   sl_dev_graph_launch  queue one replay on e's stream
 *   sl_dev_graph_stale   the scratch or workspace moved since the capture
 *                        (the graph holds their old addresses)
 * Threading: an exec's thread. */
typedef struct sl_dev_graph sl_dev_graph;
int sl_dev_graph_wanted(sl_exec *e);
int sl_dev_capture_begin(sl_exec *e);
int sl_dev_capture_end(sl_exec *e, int ok, sl_dev_graph **out);
int sl_dev_graph_launch(sl_dev_graph *g);
int sl_dev_graph_stale(const sl_dev_graph *g);
/* SL_OK unless e's stream is capturing and that capture was invalidated
 * (then SL_ECUDA): a caller about to queue work that would fail on such a
 * stream (an NCCL collective) stops first. SL_OK on a host exec. */
int sl_dev_capture_intact(sl_exec *e);
void sl_dev_graph_destroy(sl_dev_graph *g); /* NULL is a no-op */

#endif /* SL_DEV_INT_H */
