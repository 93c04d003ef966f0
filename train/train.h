/*
 * train/train.h - the training side (DESIGN.md section 5): ResNet models
 * with torchvision's parameter names, SGD with momentum and LR schedules,
 * safetensors checkpoints PyTorch loads, TensorBoard event files and
 * metrics.jsonl, and the training / evaluation loops fed by the pipeline.
 *
 * Threading: a model, optimizer, summary writer or trainer is used by one
 * thread at a time. The cpu backend's SGEMMs run on OpenBLAS's threads
 * (sl_exec.threads); the trainer's input comes from the pipeline's threads.
 *
 * Errors: sl_status codes (common/status.h) with sl_errmsg() naming the
 * function, the file and what is wrong. Nothing here exits. Every function
 * that returns an int returns SL_OK or one of the codes its comment names;
 * SL_ENOMEM (an allocation failed) can come from any function that
 * allocates, and a cuda exec adds SL_ECUDA (and cuBLAS / cuDNN's codes) from
 * any function that runs on it; neither is repeated below.
 *
 * NULL: a destroy or close of NULL is a no-op. A function that returns a
 * status refuses a NULL handle or required pointer with SL_EINVAL (the
 * optional pointers, which may be NULL, say so). The accessors that return
 * a value rather than a status (sl_exec_backend, sl_model_config_of,
 * sl_model_tensors, sl_model_param_count, sl_model_bytes, sl_sgd_tensors,
 * sl_safetensors_count, sl_summary_path) need a live handle.
 *
 * Layouts: activations NHWC f32; conv weights are held OHWI (train/ops/ops.h
 * says why) and are OIHW, as torchvision's, in every file we write.
 */
#ifndef SL_TRAIN_H
#define SL_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/dtype.h"
#include "common/status.h"
#include "pipeline/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- execs */

/* Where the math runs: the naive reference loops (the oracle), the CPU
 * (im2col + OpenBLAS SGEMM), or a CUDA device (cuDNN, cuBLAS, own
 * kernels). */
typedef enum sl_backend {
    SL_BACKEND_REF = 0,
    SL_BACKEND_CPU,
    SL_BACKEND_CUDA,
} sl_backend;

/* "ref", "cpu", "cuda"; "?" for a value that is no sl_backend. parse takes
 * those names (SL_EINVAL for any other, NULL included; a build without
 * CUDA still parses "cuda": sl_exec_create says it is missing). */
const char *sl_backend_name(sl_backend b);
int sl_backend_parse(const char *name, sl_backend *out);
/* What runs the cpu backend's convolutions in this process: "oneDNN 2.6.3
 * (OpenMP)" in a build with oneDNN (SLUICE_WITH_DNNL), else "OpenBLAS
 * im2col" (also when SLUICE_CPU_CONV=blas forces that path). Static string. */
const char *sl_train_cpu_conv(void);
/* Whether the cpu backend trains in bf16 here: 1 when its convolutions
 * run on oneDNN (built with it, SLUICE_CPU_CONV not "blas") and oneDNN's
 * effective ISA has bf16 dot products (AVX512-BF16, AMX: the CPU's,
 * capped by DNNL_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA). *why (when why is not
 * NULL) is a static string: that ISA ("avx512_core_bf16") when 1, the
 * ISA or the reason there is none when 0. Read from oneDNN once a process
 * (its ISA cannot change after its first use). */
int sl_cpu_bf16(const char **why);

/* An execution context: a backend, its scratch memory, its threads (cpu:
 * OpenBLAS threads) or its device, streams and library handles (cuda).
 * Opaque; one thread uses it at a time. */
typedef struct sl_exec sl_exec;

/* Create an exec for backend b. threads: OpenBLAS threads for cpu, <= 0
 * for one per core. device: the CUDA device for cuda (-1: the
 * SLUICE_CUDA_DEVICE environment variable, else 0); ignored elsewhere.
 * SL_ENOTSUP for cuda in a build without it; SL_EINVAL for an unknown
 * backend or a bad SLUICE_CUDA_DEVICE / SLUICE_CUDA_FUSE (1 or 0) value;
 * SL_ECUDA when the device cannot be opened. *out is NULL on error. */
int sl_exec_create(sl_backend b, int threads, int device, sl_exec **out);
void sl_exec_destroy(sl_exec *e);
/* e's backend. */
sl_backend sl_exec_backend(const sl_exec *e);
/* Set the activation type of e: SL_DTYPE_F32 anywhere; SL_DTYPE_BF16 on
 * cuda, and on cpu where sl_cpu_bf16 says 1; SL_DTYPE_F16 on cuda only
 * (SL_ENOTSUP elsewhere, naming why; SL_EINVAL for a value that is no
 * sl_dtype). Set it before a model is placed on e. */
int sl_exec_set_act(sl_exec *e, sl_dtype act);
/* Bytes of one activation element of e (4, or 2 for bf16 / f16); 4 for
 * NULL. */
size_t sl_exec_act_size(const sl_exec *e);

/* ------------------------------------------------------------------ models */

typedef enum sl_arch {
    SL_ARCH_RESNET20 = 0, /* CIFAR-style: 3x3 stem, 3 stages x 3 BasicBlocks, widths w, 2w, 4w */
    SL_ARCH_RESNET18,     /* torchvision resnet18 */
    SL_ARCH_RESNET50,     /* torchvision resnet50 (v1.5: stride on the 3x3 conv) */
} sl_arch;

const char *sl_arch_name(sl_arch a);        /* "resnet20" ...; "?" for no sl_arch */
int sl_arch_parse(const char *name, sl_arch *out); /* SL_EINVAL for unknown names and NULL */

typedef struct sl_model_config {
    size_t size;            /* sizeof(sl_model_config), set by SL_MODEL_CONFIG_INIT:
                             * sl_model_create refuses another (a caller built against
                             * other headers) */
    sl_arch arch;
    int classes;            /* fc outputs */
    int width;              /* base width: 0 = 16 (resnet20) or 64 (resnet18/50) */
    int zero_init_residual; /* each block's last BN gamma starts at 0 (default 1) */
    float bn_momentum;      /* PyTorch's convention: new = (1-m)*old + m*batch; 0.1 */
    float bn_eps;           /* 1e-5 */
    uint64_t seed;          /* initialization (kaiming-normal fan_out convs, torch's fc init) */
} sl_model_config;

#define SL_MODEL_CONFIG_INIT                                                                  \
    {.size = sizeof(sl_model_config), .arch = SL_ARCH_RESNET50, .classes = 1000, .width = 0,  \
     .zero_init_residual = 1, .bn_momentum = 0.1f, .bn_eps = 1e-5f, .seed = 0}

typedef enum sl_dtype_tag { SL_T_F32 = 0, SL_T_I64 } sl_dtype_tag;

#define SL_TENSOR_PARAM 1u  /* trained (has grad) */
#define SL_TENSOR_DECAY 2u  /* weight decay applies: conv and fc weights, not BN, not biases */
#define SL_TENSOR_BUFFER 4u /* running_mean / running_var / num_batches_tracked */
#define SL_TENSOR_OHWI 8u   /* held (k, r, s, c); shape[] is torchvision's (k, c, r, s) */

/* One entry of a model's state dict, in torchvision's order. data and grad
 * (grad NULL for buffers) are owned by the model, valid until it is
 * destroyed. */
typedef struct sl_tensor_info {
    const char *name;  /* "layer1.0.bn2.running_var" */
    sl_dtype_tag dtype;
    void *data;        /* float* or int64_t* */
    float *grad;
    int64_t numel;
    int ndim;
    int64_t shape[4];  /* torchvision's shape (OIHW for convs) */
    unsigned flags;
} sl_tensor_info;

typedef struct sl_model sl_model;

/* Build and initialize a model for inputs (n <= max_batch, h, w, 3) NHWC
 * f32. Activations for max_batch are allocated here (sl_model_bytes).
 * SL_EINVAL for a bad config (classes, width, BN momentum / eps), batch or
 * an image too small for the arch's downsampling; *out is NULL on error. */
int sl_model_create(const sl_model_config *cfg, int max_batch, int h, int w, sl_model **out);
void sl_model_destroy(sl_model *m);
/* The config m was built with; valid until sl_model_destroy. */
const sl_model_config *sl_model_config_of(const sl_model *m);
/* The state dict: params and buffers in torchvision order; *count (not
 * NULL) gets its length. The array is the model's, valid until
 * sl_model_destroy. */
sl_tensor_info *sl_model_tensors(sl_model *m, int *count);
/* Look up one entry by name; NULL when absent. */
sl_tensor_info *sl_model_tensor(sl_model *m, const char *name);
int64_t sl_model_param_count(const sl_model *m); /* trainable scalars */
size_t sl_model_bytes(const sl_model *m);        /* weights + activations + grads */
/* The input height and width m was built for; h or w may be NULL.
 * SL_EINVAL for a NULL m. */
int sl_model_input_size(const sl_model *m, int *h, int *w);

/* Forward x (n, h, w, 3) NHWC f32 through the model. train = 1: batch
 * statistics (running stats updated), activations kept for backward;
 * train = 0: running statistics. *logits (n, classes) points into the
 * model, valid until its next forward. SL_EINVAL for n outside [1,
 * max_batch], an exec that is not on m's memory (a host exec for a placed
 * model, or another device), or one value per channel in a training-mode
 * BN. */
int sl_model_forward(sl_model *m, sl_exec *e, const float *x, int n, int train,
                     const float **logits);
/* Backward from dlogits (n, classes) of the last train forward: every
 * param's grad is overwritten. dx (n, h, w, 3) may be NULL (it is then not
 * computed; gradient checks pass a buffer). SL_EINVAL when no train
 * forward came first (or the sync-BN setting changed since it), or for
 * the exec mismatches of sl_model_forward; a grad hook's or sync-BN
 * all-reduce's non-zero return is returned as is. */
int sl_model_backward(sl_model *m, sl_exec *e, const float *dlogits, float *dx);

/* Synchronized batch norm across replicas (the mirrored strategy's
 * --sync-bn). When set, every train forward computes each BN's mean and
 * variance over the rows of all replicas, and backward uses the global sums,
 * so world replicas on equal slices of a batch compute what one model on the
 * whole batch would (running statistics included). allreduce_sum(ctx, buf,
 * n) must replace buf (n floats: host memory for ref/cpu; for a placed
 * model, device memory, read and written after the work queued on the
 * exec's stream, e.g. an NCCL all-reduce on that stream) by its sum over
 * the replicas, blocking; a non-zero return fails the forward/backward with
 * that status. Every replica must run the same forwards and backwards with
 * the same n. s = NULL turns it off. The struct is copied. SL_EINVAL for
 * a NULL m, a NULL allreduce_sum, world < 1 or rank outside [0, world). */
typedef struct sl_bn_sync {
    int (*allreduce_sum)(void *ctx, float *buf, int n);
    void *ctx;
    int world;          /* replicas (each with the same batch) */
    int rank;           /* this replica, 0..world-1: its slot in the forward's all-reduce of
                         * every replica's (mean, M2) (train/ops/ops.h bn_moments) */
} sl_bn_sync;
int sl_model_set_bn_sync(sl_model *m, const sl_bn_sync *s);

/* Gradient-ready hook, for all-reducing gradient buckets while backward
 * continues: during sl_model_backward, fn(ctx, i) is called exactly once
 * per trainable tensor i (index into sl_model_tensors) as soon as its grad
 * is final; a non-zero return stops backward with that status. fn NULL
 * removes it. Called on the thread running backward. m NULL: a no-op. */
typedef int (*sl_grad_ready_fn)(void *ctx, int tensor);
void sl_model_set_grad_hook(sl_model *m, sl_grad_ready_fn fn, void *ctx);

/* The model's parameter and gradient arenas (model_int.h): *n floats from
 * *params (and *grads) hold every trainable tensor (state-dict order, with
 * alignment padding that is zero in grads); tensor i's data - params is its
 * offset in both. Device memory once placed (the state dict's data then
 * points into a host copy at the same offsets). Valid until
 * sl_model_destroy. Each out-pointer may be NULL; m NULL gives NULL, NULL,
 * 0. */
void sl_model_arenas(sl_model *m, float **params, float **grads, size_t *n);

/* Put m on e's device. For a cuda exec the params, grads, buffers and
 * activations move to device memory (activations in e's activation type:
 * sl_exec_set_act before placing; with a 2-byte type the convs read a copy
 * of the weights in that type, which sl_model_refresh renews). From then
 * on forward and backward take device pointers (x in the activation type,
 * dlogits f32), *logits is device memory, and the state dict
 * (sl_model_tensors) describes HOST copies of the params and buffers:
 * sl_model_pull refreshes them from the device (before a checkpoint or a
 * hash), sl_model_push writes them back (after loading). num_batches_tracked
 * stays on the host. Sync-BN (sl_model_set_bn_sync) works on a device too:
 * its sums are then all-reduced in device memory on the exec's stream. For
 * ref and cpu execs in f32 placing is a no-op and pull / push / refresh do
 * nothing (SL_OK; so do they for a NULL or unplaced m). A cpu exec in bf16
 * (sl_exec_set_act) keeps the params, grads and buffers on the host as
 * they are (f32: the state dict's, the masters an optimizer steps) and
 * lays the activations out again in bf16, with a bf16 copy of the conv
 * weights and of the input that every forward renews from the f32 params
 * and x (so nothing needs a refresh); such a model runs only on execs of
 * its type. e must outlive m. sl_model_place: SL_EINVAL for NULL m or e,
 * or a model placed already; SL_ENOMEM. */
int sl_model_place(sl_model *m, sl_exec *e);
/* 1 when m is placed on a device, 0 otherwise (NULL included). */
int sl_model_on_device(const sl_model *m);
int sl_model_pull(sl_model *m);
int sl_model_push(sl_model *m);
/* After the params changed on the device (an optimizer step): renew the
 * convs' copy of the weights in the activation type (one cast kernel; on
 * a cpu exec in bf16 a host cast, which the forward does itself). */
int sl_model_refresh(sl_model *m);

/* --------------------------------------------------------------- optimizer */

typedef struct sl_sgd_config {
    float momentum;      /* 0.9 */
    int nesterov;        /* 0 */
    float weight_decay;  /* 5e-5; applied only to SL_TENSOR_DECAY tensors */
} sl_sgd_config;

#define SL_SGD_CONFIG_INIT {.momentum = 0.9f, .nesterov = 0, .weight_decay = 5e-5f}

typedef struct sl_sgd sl_sgd;

/* An optimizer over every SL_TENSOR_PARAM entry of tensors (count of them;
 * the array must outlive the optimizer). Momentum buffers start at zero.
 * PyTorch's SGD exactly: g += wd*p (decay tensors), buf = m*buf + g (the
 * first step buf = g), step = nesterov ? g + m*buf : buf, p -= lr*step.
 * SL_EINVAL for a negative count, NULL tensors with count > 0, or a bad
 * momentum / weight decay (negative, NaN; Nesterov without momentum);
 * *out is NULL on error. */
int sl_sgd_create(const sl_sgd_config *cfg, sl_tensor_info *tensors, int count, sl_sgd **out);
void sl_sgd_destroy(sl_sgd *o);
/* One step with learning rate lr on the host tensors. SL_EINVAL for a NULL
 * o or an lr that is negative, NaN or above 1e30. */
int sl_sgd_step(sl_sgd *o, float lr);
/* The optimizer state as state-dict entries named "optimizer.<param>.momentum_buffer"
 * (f32, the param's shape, OHWI flag as the param) plus "optimizer.step" (i64
 * scalar); *count (not NULL) gets their number. Owned by o, valid until
 * sl_sgd_destroy. */
sl_tensor_info *sl_sgd_tensors(sl_sgd *o, int *count);

/* ---------------------------------------------------------------- schedule */

typedef enum sl_sched_kind {
    SL_SCHED_COSINE = 0, /* 0.5*(1+cos(pi*t)) after warmup */
    SL_SCHED_STEP,       /* x0.1 at 1/3, 2/3 and 8/9 of the steps after warmup (30/60/80 of 90) */
    SL_SCHED_POLY,       /* (1-t)^2 */
} sl_sched_kind;

typedef struct sl_schedule {
    sl_sched_kind kind;
    double peak_lr;       /* base_lr * global_batch / 256 */
    int64_t warmup_steps; /* linear from peak_lr/warmup_steps to peak_lr (Goyal et al.) */
    int64_t total_steps;
} sl_schedule;

const char *sl_sched_name(sl_sched_kind k);              /* "cosine" ...; "?" for no kind */
int sl_sched_parse(const char *name, sl_sched_kind *out); /* SL_EINVAL for others and NULL */
/* LR for 0-based step; t = (step - warmup)/(total - warmup) in [0, 1]. s
 * must not be NULL. */
double sl_schedule_lr(const sl_schedule *s, int64_t step);

/* ---------------------------------------------------------- safetensors */
/* https://huggingface.co/docs/safetensors: u64 LE header length, a JSON
 * header {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]},
 * "__metadata__": {str: str}}, then the data (little-endian, C order). */

typedef struct sl_st_tensor {
    const char *name;
    sl_dtype_tag dtype; /* F32 or I64 */
    int ndim;           /* 0 for a scalar */
    int64_t shape[4];
    const void *data;   /* numel * element size bytes, in shape order */
} sl_st_tensor;

/* Write count tensors and string metadata (meta_kv: 2*meta_count strings,
 * key then value; may be NULL) to path atomically (path.tmp, fsync,
 * rename). Names must be unique. SL_EINVAL for a NULL or empty path or
 * name, a duplicate name, NULL data or a bad shape; SL_EIO naming the file
 * when writing fails (nothing is left at path then). */
int sl_safetensors_write(const char *path, const sl_st_tensor *t, int count,
                         const char *const *meta_kv, int meta_count);

typedef struct sl_safetensors sl_safetensors;
/* Open and validate path (header JSON, offsets inside the file, no
 * overlaps, dtypes F32/I64/F16/BF16 known): SL_ECORRUPT naming the file
 * and the tensor; SL_EIO when it cannot be read; SL_EINVAL for a NULL or
 * empty path. *out is NULL on error. */
int sl_safetensors_open(const char *path, sl_safetensors **out);
void sl_safetensors_close(sl_safetensors *f);
int sl_safetensors_count(const sl_safetensors *f);
/* The i-th tensor (file order) or the named one; data points into f, valid
 * until close. SL_EINVAL for i outside [0, count); SL_ENOENT for a name
 * not in the file; SL_ENOTSUP for a dtype other than F32 / I64. */
int sl_safetensors_at(const sl_safetensors *f, int i, sl_st_tensor *out);
int sl_safetensors_find(const sl_safetensors *f, const char *name, sl_st_tensor *out);
/* Metadata value for key, or NULL (no such key, or it is no string).
 * Valid until close. */
const char *sl_safetensors_meta(const sl_safetensors *f, const char *key);

/* --------------------------------------------------------------- checkpoint */
/* A checkpoint is PREFIX.safetensors (the model's state dict in torchvision
 * names and shapes, then the optimizer's entries, metadata
 * sluice.arch / sluice.width / sluice.classes / sluice.image_size) and
 * PREFIX.json (step, epoch, schedule, pipeline state, RNG; written last, so
 * a checkpoint exists only when its JSON does). */

/* Save m (and o when not NULL) with state_json (a JSON object text, copied
 * verbatim into PREFIX.json as "state"), both files atomically. image_size is
 * recorded in the metadata for sluice eval. SL_EINVAL for a NULL prefix,
 * m or state_json, or state_json that is no JSON object; SL_EIO naming the
 * file when a write fails (the files already there stay whole). */
int sl_checkpoint_save(const char *prefix, sl_model *m, sl_sgd *o, int image_size,
                       const char *state_json);
/* Load weights and buffers by name into m (shapes must match; OIHW -> OHWI),
 * and the optimizer state into o when not NULL and present. strict = 1:
 * every model tensor must be in the file. SL_ENOENT for (strict) a tensor
 * the file lacks; SL_EINVAL for a shape or dtype that does not match the
 * model's; the errors of sl_safetensors_open. */
int sl_checkpoint_load(const char *safetensors_path, sl_model *m, sl_sgd *o, int strict);
/* The model config and image size recorded in a checkpoint's metadata
 * (classes, arch, width), for building the model before loading;
 * image_size may be NULL. SL_ECORRUPT for missing or bad metadata; the
 * errors of sl_safetensors_open. */
int sl_checkpoint_model_config(const char *safetensors_path, sl_model_config *cfg,
                               int *image_size);
/* Newest complete checkpoint in dir: *prefix gets a malloc'ed
 * "DIR/ckpt-000001234" (caller frees); SL_ENOENT when none (or no dir);
 * SL_EINVAL for NULL arguments. */
int sl_checkpoint_latest(const char *dir, char **prefix);
/* PREFIX.json's "state" object as malloc'ed JSON text (caller frees; NULL
 * on error). SL_ENOENT when PREFIX.json is missing, SL_ECORRUPT when it is
 * no JSON or has no "state" object, SL_EIO when it cannot be read. */
int sl_checkpoint_read_state(const char *prefix, char **state_json);

/* ---------------------------------------------------------------- summaries */
/* TensorBoard event files: LOGDIR/events.out.tfevents.<secs>.<host>.<pid>.sluice,
 * TFRecord framing (records/) of Event protos: first {wall_time,
 * file_version: "brain.Event:2"}, then {wall_time, step, summary {value {tag,
 * simple_value}}}; plus LOGDIR/metrics.jsonl with one JSON object per
 * sl_summary_scalars call. Appended and flushed per call so TensorBoard
 * follows a running job; a crash loses at most the record being written. */

typedef struct sl_summary sl_summary;
/* Creates logdir (and its parents) and a new event file in it. SL_EINVAL
 * for a NULL or empty logdir; SL_EIO naming the path when it cannot be
 * created. *out is NULL on error. */
int sl_summary_open(const char *logdir, sl_summary **out);
/* Write n scalars for step: one Event holding n values, one metrics.jsonl line
 * {"step": step, "wall_time": t, tag: value, ...} (extra_json, when not NULL,
 * is a JSON object text whose members are appended to the line).
 * SL_EINVAL for a NULL s, n < 0, NULL tags / values with n > 0, an empty
 * tag or extra_json that is no JSON object; SL_EIO when a write fails. */
int sl_summary_scalars(sl_summary *s, int64_t step, const char *const *tags,
                       const double *values, int n, const char *extra_json);
/* Write text for step: one Event whose value is the text plugin's (a
 * DT_STRING scalar tensor with plugin_name "text": TensorBoard's Text
 * tab), one metrics.jsonl line {"step", "wall_time", tag: text}. SL_EINVAL
 * for a NULL s, text or an empty tag; SL_EIO when a write fails. */
int sl_summary_text(sl_summary *s, int64_t step, const char *tag, const char *text);
const char *sl_summary_path(const sl_summary *s); /* the event file; valid until close */
/* Flush and close both files; SL_EIO when the last flush fails. NULL is a
 * no-op (SL_OK). */
int sl_summary_close(sl_summary *s);

/* Read an event file back: fn is called for every scalar value in order;
 * a non-zero return from fn stops the walk and is returned. SL_ECORRUPT on a
 * bad record or proto, naming file and record; SL_EIO when the file cannot
 * be read; SL_EINVAL for a NULL path or fn. */
typedef int (*sl_event_fn)(void *ctx, int64_t step, double wall_time, const char *tag,
                           float value);
int sl_events_read(const char *path, sl_event_fn fn, void *ctx);
/* The same with the text values too (sl_summary_text's, and any string
 * tensor's first string): text_fn for each, in order among the scalars.
 * Either callback may be NULL (not both). */
typedef int (*sl_event_text_fn)(void *ctx, int64_t step, double wall_time, const char *tag,
                                const char *text);
int sl_events_read_all(const char *path, sl_event_fn fn, sl_event_text_fn text_fn, void *ctx);

/* ---------------------------------------------------------------- trainer */

/* How the work is spread (DESIGN.md section 6):
 *   single    one replica (the default)
 *   mirrored  synchronous data parallel: `replicas` replica threads of this
 *             process, or one replica per MPI rank when started by mpirun;
 *             each computes its slice of the global batch, gradients are
 *             averaged by all-reduce in buckets while backward runs, every
 *             replica applies the same update
 *   ps        asynchronous parameter server: `replicas` worker threads push
 *             gradients to `ps_servers` server threads and pull weights,
 *             with no barrier between steps */
typedef enum sl_strategy {
    SL_STRATEGY_SINGLE = 0,
    SL_STRATEGY_MIRRORED,
    SL_STRATEGY_PS,
} sl_strategy;

const char *sl_strategy_name(sl_strategy s);               /* "single" ...; "?" */
int sl_strategy_parse(const char *name, sl_strategy *out); /* SL_EINVAL for others, NULL */

#define SL_EVAL_SPLIT_AUTO "auto"

typedef struct sl_train_config {
    size_t size;                 /* sizeof(sl_train_config), set by sl_train_config_init:
                                  * sl_train_run refuses another (a caller built against
                                  * other headers) */
    sl_pipeline_config data;     /* the train input (split, batch, image size, ...); batch is
                                  * the GLOBAL batch, split evenly over mirrored replicas */
    const char *eval_split;      /* evaluated after each epoch; NULL or "" for none;
                                  * SL_EVAL_SPLIT_AUTO (the default): "test" if the data has
                                  * it, else "validation", else none. Checked before the
                                  * first step; with --data a glob or one file, looked for in
                                  * its folder */
    sl_model_config model;
    sl_sgd_config sgd;
    sl_backend backend;
    int threads;                 /* 0 = all cores */
    int precision;               /* activation type, an sl_dtype: cuda takes f32, bf16 or f16
                                  * (fp32 master weights; f16 with dynamic loss scaling);
                                  * cpu f32 or bf16 (sl_cpu_bf16); ref f32 only; -1 = bf16
                                  * where sl_cpu_bf16 / cuda, f32 elsewhere */
    int synthetic;               /* benchmark: train on the first batch over and over (no
                                  * input cost after it: the speed without the pipeline) */
    int64_t epochs;              /* used when max_steps == 0 */
    int64_t max_steps;           /* > 0: stop after this many steps */
    double base_lr;              /* per 256 images: peak = base_lr * batch / 256 */
    double warmup_epochs;
    sl_sched_kind schedule;
    float label_smoothing;
    const char *logdir;          /* NULL: no events / metrics */
    const char *ckpt_dir;        /* NULL: no checkpoints */
    int64_t ckpt_every;          /* steps; 0 = at the end of each epoch and at the end */
    int resume;                  /* continue from the newest checkpoint in ckpt_dir */
    int64_t log_every;           /* steps between progress lines; 0 = about 10 per epoch */
    FILE *progress;              /* progress lines; NULL = stderr */
    const volatile int *stop;    /* optional stop request (the CLI's Ctrl-C): once non-zero,
                                  * the single and mirrored strategies stop at the next step
                                  * every replica sees it at (each step with one replica,
                                  * every SL_TRAIN_STOP_EVERY steps with more: the replicas
                                  * agree through one all-reduce of a float), save that step
                                  * as a checkpoint (in ckpt_dir, else ./sluice-rescue) and
                                  * return SL_ECANCELED naming it. Set it from a signal
                                  * handler or another thread (a plain store). NULL = never;
                                  * ps ignores it */

    /* distribution */
    sl_strategy strategy;
    int replicas;                /* mirrored / ps: replica (worker) threads in this process;
                                  * 0 = 1 under mpirun, else the number of cores */
    int sync_bn;                 /* mirrored: BN statistics over the global batch */
    double bucket_mb;            /* mirrored: gradient bucket size; 0 = 25 MB */
    int no_overlap;              /* mirrored: all-reduce after backward, not during */
    int64_t check_every;         /* mirrored: check every N steps that all replicas hold
                                  * identical weights (debug); 0 = never */
    int ps_servers;              /* ps: server threads; 0 = 1 */
    int ps_ranks;                /* ps under mpirun: ranks [0, ps_ranks) serve; 0 = 1 */
    int max_staleness;           /* ps: bound on staleness (SSP); < 0 = none */
    int comm_timeout_s;          /* a collective waits this long for its peers; 0 = 300 */
    const struct sl_par_plan *plan; /* the parallelism chosen for this run (sl_par_choose),
                                  * written to the logdir at the first step (parallelism/...
                                  * scalars, the reason as text); NULL: only what the run
                                  * has (replicas, threads, workers, readers, prefetch) */
} sl_train_config;

/* Steps between the replicas' agreements on cfg->stop (world > 1). */
#define SL_TRAIN_STOP_EVERY 10

typedef struct sl_train_result {
    int64_t steps;               /* global step reached */
    int64_t stopped;             /* the step a stop request ended the run at (its checkpoint
                                  * is `checkpoint`); 0 when none did */
    int64_t epochs_done;
    double final_loss;           /* mean train loss over the last epoch (or since start) */
    double eval_top1, eval_top5; /* last evaluation; -1 when none ran */
    double images_per_sec;       /* training throughput, this run */
    double seconds;
    char checkpoint[4096];       /* last checkpoint prefix written, "" if none */
    int world;                   /* replicas (workers) that trained */
    int root;                    /* this process is the run's root (printed the progress;
                                  * under mpirun, one process of the job) */
    double comm_wait_frac;       /* mirrored: fraction of step time spent waiting for
                                  * all-reduce (mean over replicas) */
    double staleness_mean;       /* ps: mean and max staleness of the applied updates */
    int64_t staleness_max;
    double images_per_sec_steady; /* throughput after warm-up (the first tenth of the steps,
                                  * at least one, left out): what a benchmark quotes */
    double input_wait_frac;      /* fraction of the steady steps' time spent waiting for the
                                  * pipeline's next batch (root replica) */
    int64_t amp_skipped;         /* f16: steps skipped for inf/nan gradients */
    double amp_scale;            /* f16: the loss scale at the end */
    char eval_split[64];         /* the split evaluated after each epoch; "" for none */
    double peak_device_mib;      /* GPU: the most device memory the root replica's exec held
                                  * (model, optimizer, input, workspaces; MiB); 0 on a CPU */
    double device_used_mib;      /* GPU: the device's used memory at the end (cudaMemGetInfo:
                                  * also the CUDA context, libraries, the pipeline; MiB) */
    char cuda_graph[16];         /* GPU: the step as a CUDA graph: "on", "off" or "fallback"
                                  * (a capture failed: the step ran uncaptured) */
    char cuda_graph_why[200];    /* its detail: replays, or why off / fallback */
    int64_t cuda_graph_replays;  /* steps run as graph replays (root replica) */
    char cudnn_fusion[40];       /* GPU, fp16: the residual blocks' convolutions through
                                  * cuDNN's fused plans in the last step: "on", "partial (n
                                  * of N)" or "off" */
    char cudnn_fusion_why[240];  /* why partial / off: cuDNN's first refusal, or the setting */
    int64_t skipped;             /* bad records the training input skipped (on_error skip), over
                                  * every replica, each counted every epoch it is met; its slot
                                  * took the next good record. Named on the progress stream
                                  * as they come (the first 16 of each replica) */
    char skipped_first[256];     /* the first of them this process met: "FILE: record N @ OFF
                                  * (id I): why"; "" when none */
    int64_t eval_skipped;        /* bad records the last evaluation left out (its top1/top5
                                  * count only the others); 0 when none ran */
    char eval_skipped_first[256];/* the first of them (this process's share); "" when none */
    char cudnn_fusion_detail[32768]; /* GPU, fp16: each convolution's fused plans and every
                                  * refusal's reason in cuDNN's words, as one JSON object
                                  * (train/model/model_fuse.c's top comment); "" otherwise */
    sl_pipeline_tuning tuning;   /* what online tuning (data.tune) did to the root replica's
                                  * pipeline, at the end (each replica's pipeline tunes
                                  * itself); also the tuning/ scalars at each log step */
} sl_train_result;

/* The config initializer of this struct (it holds a pipeline config, so a
 * function rather than a macro): every field's default, named one by one
 * in loop/config.c; the caller then overrides what the user gave. Image size
 * and classes stay 0: sl_train_run takes them from dataset.json. cfg must
 * not be NULL. */
void sl_train_config_init(sl_train_config *cfg);
/* The activation type a config trains in: its precision, or when that is
 * -1, bf16 on cuda and on a cpu where sl_cpu_bf16 says 1, f32 elsewhere
 * (ref; a cpu without bf16 dot products or without oneDNN). */
sl_dtype sl_train_precision(const sl_train_config *c);
/* That precision in words for the start-up line: "bf16 (oneDNN ISA
 * avx512_core_bf16)", "fp32 (oneDNN ISA avx512_core: no bf16 dot
 * products)", "fp32 (this build has no oneDNN)" on the cpu; the name alone
 * elsewhere. Into buf (cap bytes, NUL-terminated). */
void sl_train_precision_note(const sl_train_config *c, char *buf, size_t cap);
/* The CLI's spelling of common/dtype.h's types: "fp32", "bf16", "fp16"
 * ("?" for no sl_dtype); parse also takes "f32" and "f16" (SL_EINVAL else,
 * NULL included). */
const char *sl_precision_name(sl_dtype t);
int sl_precision_parse(const char *name, sl_dtype *out);

/* Train. Errors before the first step (no such split or eval split, no
 * classes, bad config) leave nothing behind. With the single and mirrored
 * strategies an error after steps have run saves the last completed step
 * as a checkpoint first (in ckpt_dir, else in ./sluice-rescue; progress
 * says so) and the error message says where; a stop request (cfg->stop)
 * does the same with every replica's statistics averaged first, and
 * SL_ECANCELED. SL_EINVAL for a bad config
 * (the message names the field), SL_ENOENT for a missing split,
 * SL_ENOTSUP for a combination this build cannot run (cuda without CUDA,
 * bf16 on cpu, ...), SL_EIO / SL_ECORRUPT from the data, checkpoints and
 * event files. res (not NULL) is filled as far as the run got. */
int sl_train_run(const sl_train_config *cfg, sl_train_result *res);
/* 1 when sl_train_run on cfg will evaluate after its epochs (the choice
 * it makes before the first step: a split named, or under
 * SL_EVAL_SPLIT_AUTO a test or validation split that `data` has; data
 * that does not resolve counts as 1), 0 when not; for planning, e.g. the
 * memory an evaluation pipeline needs beside the training one. With 1 and
 * the split found, the evaluated dataset's path (the folder beside a glob
 * or one shard) goes into dir and the split's name into split, as the run's
 * evaluation pipeline will read them; both "" when the data or that split
 * does not resolve (the run then refuses it by name) or a buffer is too
 * small (dcap or scap 0: not wanted). */
int sl_train_eval_where(const sl_train_config *cfg, const char *data, char *dir, size_t dcap,
                        char *split, size_t scap);

typedef struct sl_eval_result {
    int64_t images;              /* good records evaluated: top1, top5 and loss are over these */
    double top1, top5, loss;
    double seconds;
    int64_t skipped;             /* bad records left out (on_error skip; the pipeline's eval
                                  * transform never refills a slot, so none counts twice) */
    char skipped_first[256];     /* the first of them, "FILE: record N @ OFF (id I): why";
                                  * "" when none */
    sl_pipeline_tuning tuning;   /* what online tuning (data->tune) did, at the end */
} sl_eval_result;

/* Evaluate m on a pipeline configured for eval (in order, eval transform,
 * no drop-remainder): every good record once, a bad one left out and
 * counted (skipped) under on_error skip. SL_EINVAL for NULL arguments or
 * a pipeline whose batches the model cannot take; SL_ECORRUPT naming the
 * first bad record when every record is bad (data->world 1; a rank's share
 * of a larger world may be all bad: its caller sums and decides); the
 * pipeline's errors (SL_EIO, SL_ECORRUPT, SL_ENOENT) as they come. */
int sl_eval_run(sl_model *m, sl_exec *e, const sl_pipeline_config *data, sl_eval_result *res);


/* ------------------------------------------------------- parallelism plan */
/* Issue 43: with no parallelism options, `sluice train / eval / profile`
 * choose replicas x threads, decode workers, readers and prefetch within a
 * CPU budget (--cpus; default: common/cpus.h, the cores this process may
 * use). loop/plan.c says how and why. Every field the user gave wins. */

typedef enum sl_par_job {
    SL_PAR_TRAIN = 0, /* compute (replicas x threads) and the replicas' pipelines */
    SL_PAR_EVAL,      /* one exec's threads and its pipeline */
    SL_PAR_PIPELINE,  /* the pipeline alone (profile; a Python loader) */
} sl_par_job;

typedef struct sl_par_request {
    sl_par_job job;
    int cpus;                 /* the budget, >= 1 */
    double free_cores;        /* sl_cpus_free(cpus, ...) at start-up, reported; 0 = not measured */
    double probe_s;           /* the seconds that measurement took (0: none) */
    sl_backend backend;
    sl_arch arch;             /* train / eval: the model, its width (0 = the arch's) and */
    int width;                /* the input size: the per-image cost */
    unsigned height, image_width;
    unsigned batch;           /* the global batch */
    int mpi;                  /* started by mpirun: one replica per process */
    /* what the user gave; -1 (strategy) or 0 = choose */
    int strategy;
    int replicas, threads;
    unsigned workers, readers, prefetch;
} sl_par_request;

#define SL_PAR_REQUEST_INIT {.strategy = -1, .cpus = 1, .batch = 64}

typedef struct sl_par_plan {
    int cpus;
    sl_strategy strategy;
    int replicas;             /* replica threads (1 under single and mpirun) */
    int threads;              /* compute threads per replica (0 for the pipeline alone) */
    unsigned workers;         /* decode workers of each replica's pipeline */
    unsigned readers;         /* reader threads of each pipeline */
    unsigned prefetch;        /* 0 = the pipeline's own default */
    double free_cores;        /* as measured (0: not) */
    double probe_s;           /* the seconds the measurement took (0: none) */
    double gmac_per_image;    /* the model's forward cost, multiply-adds (0: none) */
    char reason[256];         /* why, in a sentence: the start-up line and --json */
    char budget[160];         /* where cpus came from ("2 cores (affinity)", "--cpus 2; ..."):
                               * the caller's (sl_par_choose leaves it "") */
} sl_par_plan;

/* Choose within q->cpus. Pure: the same request gives the same plan.
 * Replicas and threads per replica (which change what a step computes:
 * batch norm over each replica's slice, oneDNN's reductions by thread)
 * depend on the budget, the batch and the model only; free_cores is only
 * reported. */
void sl_par_choose(const sl_par_request *q, sl_par_plan *p);
/* The plan as one JSON object (no newline) into buf: {"cpus":..,
 * "strategy":..,"replicas":..,"threads":..,"workers":..,"readers":..,
 * "prefetch":..,"free_cores":..,"probe_s":..,"gmac_per_image":..,
 * "budget":"..","reason":".."}. */
void sl_par_json(const sl_par_plan *p, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* SL_TRAIN_H */
