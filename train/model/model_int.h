/*
 * train/model/model_int.h - private to the model files: the layout of a built
 * ResNet, shared by train/model/resnet.c (building: architecture,
 * initialization, state dict, placing), train/model/layout.c (the memory
 * plan), train/model/model.c (running: forward, backward, accessors) and
 * train/model/unit.c (one conv+BN unit, sync-BN: under model.c and
 * model_fuse.c).
 *
 * A ResNet here is a list of conv+BN units (sl_cbn) in state-dict order and
 * a list of residual blocks that index into it. Memory (sizes at max_batch):
 *
 *   params   one arena, state-dict order: conv weights (OHWI), BN gamma and
 *            beta, fc weight (classes, feat) and bias; grads: a second
 *            arena at the same offsets (so an optimizer or an all-reduce can
 *            walk one contiguous span);
 *   buffers  BN running_mean / running_var (f32) and num_batches_tracked (i64);
 *   acts     what backward needs, each once, in the activation type (a byte
 *            arena: 2-byte elements on a bf16 / f16 exec): each conv's output
 *            y (= its BN's input; backward overwrites it with its own
 *            gradient, see model.c), each BN's output z that a later conv
 *            reads (ReLU applied in place; the last BN of a block also takes
 *            the residual add and the block's ReLU, so z is the block
 *            output), the stem's max-pool output and argmax, the pooled
 *            features, their gradient and the logits (f32);
 *            not kept (ztemp): the z of a downsample BN (read once, by the
 *            block's shortcut add) and of the stem when a max pool follows
 *            it (its backward needs only the argmax and the ReLU mask, which
 *            the pool output carries): each lives in scratch while the
 *            forward runs;
 *   grads    activation gradients, as PyTorch's allocator would free and
 *            reuse: backward runs the blocks last to first, so when block b
 *            runs, the activations of the blocks after it are dead; block
 *            b's gradient buffers (gd: the chain through its units, gout:
 *            d(block input), gtmp: a measured search's scratch) are placed
 *            in that dead memory, and only what does not fit goes into a
 *            tail buffer at the end of the arena (the last block's,
 *            ResNet-50: 0.14 GiB at batch 256). The forward's scratch (the
 *            ztemp outputs) goes into memory not yet written (the blocks
 *            after the one running) the same way. layout.c's plan_grads
 *            places them; model.c's backward says how each is used.
 * Issue 14's budget: ResNet-50 at batch 256 in bf16 within PyTorch eager's
 * 11.0 GiB (train/device/dev_plan.c counts it; tests hold it there).
 */
#ifndef SL_MODEL_INT_H
#define SL_MODEL_INT_H

#include <stdint.h>

#include "train/ops/ops.h" /* the exec's struct; includes train.h */

/* Bytes placing a model of cfg at max_batch and h x w on a device with
 * act_size-byte activations and a table with conv_bwd_data_acc or not
 * (acc) takes (sl_model_place's allocations): the
 * params, grads and compute-type copy of the weights; the BN buffers and
 * sync-BN's exchange; the activation arena and argmax. Nothing is
 * allocated but the plan; SL_EINVAL as sl_model_create. (resnet.c) */
typedef struct sl_model_bytes {
    size_t params, bufs, acts;
    int64_t param_floats; /* the params arena (floats: the optimizer's momentum too) */
} sl_model_mem;
int sl_model_plan_bytes(const sl_model_config *cfg, int max_batch, int h, int w,
                        size_t act_size, int acc, sl_model_mem *out);

/* A train forward + backward of n images at x ran as a replayed CUDA
 * graph (captured from sl_model_forward / sl_model_backward): the host
 * side of those calls again (each BN's num_batches_tracked, the batch and
 * input the next backward and checkpoint see). (model.c) */
void sl_model_note_replay(sl_model *m, const float *x, int n);

/* One convolution (no bias) followed by batch norm and, when relu, a ReLU. */
typedef struct sl_cbn {
    char conv_name[32];  /* "layer1.0.conv1", "layer2.0.downsample.0" */
    char bn_name[32];    /* "layer1.0.bn1", "layer2.0.downsample.1" */
    int cin, cout, r, stride, pad;
    int ih, iw;          /* input spatial size */
    int p, q;            /* output spatial size */
    int relu;            /* ReLU right after the BN (not the block's last BN) */
    int input;           /* where x comes from: -2 model input, -1 max-pool output,
                            >= 0 the z of that cbn */
    int ztemp;           /* z is not kept: it lives in a gradient buffer during the
                            forward (a downsample BN's, a pooled stem's) */
    float *w, *gw;       /* (cout, r, r, cin) OHWI */
    float *wc;           /* the weights the convs read: w, or (placed with a 2-byte
                            activation type) w's copy in that type (sl_model_refresh) */
    float *gamma, *beta, *ggamma, *gbeta; /* (cout) */
    float *rmean, *rvar; /* (cout) running statistics */
    int64_t *nbt;        /* num_batches_tracked */
    float *smean, *sinvstd; /* (cout) batch statistics of the last train forward */
    float *y;            /* (max_batch, p, q, cout) conv output = BN input; after
                            backward's BN step, the gradient of y */
    float *z;            /* (max_batch, p, q, cout) BN (+ReLU) output */
    int tensor;          /* state-dict index of the conv weight; BN weight +1, bias +2 */
    /* cuDNN fusion (model.c's top comment): device memory when the model is
     * placed on an exec that fuses (sl_fuse_available), else NULL. */
    float *fsum, *fsq;   /* (cout) the conv epilogue's sum and sum of squares of y */
    float *fk;           /* (4 cout) the BN apply's constants (sl_fuse_bn_finalize) */
    float *fcoef;        /* (8 cout) its input gradient's coefficients (sl_fuse_conv_dgrad) */
    void *fsb;           /* (2 cout) fp16: this BN folded into the next conv's prologue */
    unsigned fuse_want;  /* the last train forward: the SL_FUSE_* plans this conv is meant
                            to use in a fused block (model_fuse.c), 0 outside one */
    unsigned fuse_got;   /* those of them cuDNN built (the rest ran unfused) */
} sl_cbn;

/* A residual block: main path cbn[first .. first+nconv-1], optional
 * downsample cbn[ds]; output = relu(z_last + (ds ? z_ds : input)) written
 * over cbn[first+nconv-1].z. */
typedef struct sl_block {
    int first, nconv;    /* 2 (BasicBlock) or 3 (Bottleneck) */
    int ds;              /* downsample cbn index, -1 for the identity */
    /* backward's buffers (model_int.h's top comment), in the activation type */
    float *gd;           /* d(z) of the main path's units but the last (and, on a table
                            without conv_bwd_data_acc, d(block input) before its add) */
    float *gout;         /* d(block input): the incoming d(block output) itself (identity,
                            accumulated in place) or a buffer of its own (downsample) */
    float *gtmp;         /* a measured search's scratch of d(block input)'s size, or NULL */
    int fused;           /* the last train forward ran it through model_fuse.c (at least one
                            of its cuDNN plans built) */
} sl_block;

struct sl_model {
    sl_model_config cfg; /* width resolved (never 0) */
    int max_batch, h, w;

    int ncbn, nblock;
    sl_cbn *cbn;         /* state-dict order; cbn[0] is the stem */
    sl_block *blk;

    int stem_pool;       /* resnet18/50: 3x3/2 max pool after the stem */
    int pool_h, pool_w;  /* max-pool output size */
    float *pool_y;       /* (max_batch, pool_h, pool_w, stem cout) */
    int32_t *pool_arg;   /* same count: argmax into the stem's z */

    int feat, feat_hw;   /* channels and h*w of the last block output */
    float *fc_w, *fc_b, *fc_gw, *fc_gb; /* (classes, feat), (classes) */
    float *pooled;       /* (max_batch, feat) */
    float *dpooled;      /* (max_batch, feat) */
    float *logits;       /* (max_batch, classes) */

    float *ghead;        /* d(last block output), written by gap_bwd */
    float *gpool;        /* d(stem z) from the max-pool backward (pool models) */
    int acc;             /* the layout is for a table with conv_bwd_data_acc */

    float *params, *grads, *bufs; /* the arenas (see the top comment) */
    char *acts;
    int64_t *nbts;
    int64_t n_params;    /* trainable scalars (no alignment padding) */
    int64_t arena_floats; /* floats in params (and grads), padding included */
    size_t bytes;        /* everything allocated for tensors */

    sl_tensor_info *tensors; /* the state dict */
    int ntensors;
    char (*names)[64];   /* storage of the tensors' names */
    int fc_tensor;       /* state-dict index of fc.weight; fc.bias +1 */

    /* Synchronized BN (sl_model_set_bn_sync): the sums of one BN cross the
     * all-reduce in sync_buf, 2 x the widest BN's channels floats (forward:
     * mean then var; backward: sum_dy then sum_dy_xhat, one call); device
     * memory on a device (h_sync_buf: the host one, kept for destroy). */
    int sync_on;
    sl_bn_sync sync;
    float *sync_buf, *h_sync_buf;
    int64_t sync_floats;
    /* The forward's statistics slots, (world, SL_BN_MOMENT_FLOATS, widest
     * BN's channels) floats, made by the first synchronized forward in the
     * memory of its exec (device memory when placed: freed with dev_e). */
    float *sync_slots;
    int64_t sync_slots_floats;

    sl_grad_ready_fn hook; /* sl_model_set_grad_hook; NULL: none */
    void *hook_ctx;

    /* On a device (sl_model_place): the arenas above, pool_arg and the
     * activation pointers are device memory of dev_e; the state dict
     * points at the host copies h_params / h_bufs (sl_model_pull/push);
     * h_grads is the host grads arena the state dict's grad fields name
     * (not written while placed). wc_arena: the conv weights in the
     * activation type (arena_floats elements of act_size bytes, at the
     * params' offsets), NULL with f32. */
    sl_exec *dev_e;
    float *h_params, *h_grads, *h_bufs;
    void *wc_arena;
    int64_t bufs_floats; /* arena size (floats) */
    size_t acts_bytes;   /* arena size (bytes) */

    /* cuDNN fusion: the per-BN vectors above in one device arena, and the
     * identity prologue (fp16: fuse_idc ones, then fuse_idc zeros). */
    void *fuse_arena;
    void *fuse_id;
    int fuse_idc;
    int fuse_units, fuse_total; /* convolutions of the residual blocks with every plan they
                                   want built in the last train forward, and in all */
    int fuse_n;          /* the batch of that forward (its plans' shapes) */

    /* On a host exec in bf16 (sl_model_place's place_host, resnet.c): the
     * acts arena in bf16, wc_arena the convs' bf16 weights (renewed by
     * each forward from params), xin the stem's bf16 copy of the input
     * (max_batch, h, w, 3); act f32 and both NULL otherwise (a device
     * model keeps act f32 here: its exec says its type). */
    sl_dtype act;
    void *xin;

    const float *x;      /* input of the last forward (the caller's buffer; xin on a
                            host bf16 model) */
    int train_n;         /* batch of the last forward when it was a train one, else 0 */
};

/* unit.c: one conv+BN unit, what model.c and model_fuse.c (the cuDNN-fused
 * blocks) both run. */
/* An op's failure rc wrapped with the function and layer: "fn: what: <the
 * op's message>". */
static inline int sl_model_op_fail(int rc, const char *fn, const char *what)
{
    return sl_fail(rc, "%s: %s: %s", fn, what, sl_errmsg());
}
/* The activation a cbn reads: the model input, the max-pool output or the
 * z of an earlier cbn. */
const float *sl_model_input_of(const sl_model *m, const sl_cbn *c);
int sl_model_conv_shape(const sl_cbn *c, int n, sl_conv_shape *sh);
/* The forward runs the fused bn_fwd_train_act: a train forward without
 * sync-BN on a table that has it (model.c's top comment). */
static inline int sl_model_fuse_fwd(const sl_model *m, const sl_exec *e, int train)
{
    return train && !m->sync_on && e->ops->bn_fwd_train_act;
}
/* y = conv(x); z = bn(y) (batch or running statistics); z = relu(z).
 * Fused BN slots (a train forward without sync-BN on a table that has
 * them): z = relu(bn(y) + r) in one op when the cbn has its own ReLU (r
 * NULL) or r is the block's shortcut; r is NULL otherwise. */
int sl_model_cbn_fwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int train, const float *r);
/* Tell the grad-ready hook (if any) that tensor t's grad is final. A
 * non-zero return stops backward with that code. */
int sl_model_grad_ready(sl_model *m, int t);
/* What a conv backward does with the gradient of the cbn's input:
 * nothing, dx = conv_bwd_data(d(y)), dx += it (tmp: a free buffer of dx's
 * size). */
enum { SL_DX_NONE, SL_DX_SET, SL_DX_ADD };
/* The BN half of a cbn's backward: from dz = d(z), d(y) written over y
 * (relu: the ReLU undone on dz in place first), dgamma and dbeta, their
 * hooks. */
int sl_model_bn_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int relu, float *dz);
/* The conv half: dw from y's gradient and the cbn's input (then its
 * hook), and d(input) as how says. */
int sl_model_conv_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, float *dx, int how, float *tmp);
/* Both, BN first; dx may be dz (the BN backward consumed dz before the
 * conv's data gradient writes). */
int sl_model_cbn_bwd(sl_model *m, sl_exec *e, sl_cbn *c, int n, int relu, float *dz, float *dx,
                     int how, float *tmp);

/* model_fuse.c: for a train forward of block b at batch n, each conv's
 * cuDNN plans (fuse_want, fuse_got) and b->fused, the model's fusion
 * counts updated; then the block's forward and backward through them.
 * The plan: SL_OK, or a negated error code (not SL_ENOTSUP: a refusal is
 * a state, not an error). */
int sl_model_fuse_plan(sl_model *m, sl_exec *e, sl_block *b, int n);
int sl_model_block_fwd_fused(sl_model *m, sl_exec *e, const sl_block *b, int n);
int sl_model_block_bwd_fused(sl_model *m, sl_exec *e, const sl_block *b, int n, float *A);

/* Floats rounded up to 64 bytes, so every tensor of an arena starts
 * aligned. */
static inline int64_t sl_al(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Arena sizes: params and bufs in floats, the activations in bytes. */
typedef struct sl_arena_use {
    int64_t params, bufs;
    size_t acts;
} sl_arena_use;

/* layout.c: walk the memory plan and count the arenas into u, or (assign)
 * also hand out pointers from m's arenas (m->params, grads, bufs, acts);
 * asz: bytes of one activation element (4 on the host, the exec's on a
 * device). SL_ENOMEM when the plan's tables cannot be allocated. */
int sl_model_layout(sl_model *m, sl_arena_use *u, size_t asz, int assign);

/* unit.c: free the sync-BN statistics slots (sl_model_destroy; before the
 * device arenas go, with dev_e). */
void sl_model_sync_free(sl_model *m);

/* The convolutions of m's residual blocks that its last train forward ran
 * with every fused plan they are meant to use, and how many there are
 * (train/model/model_fuse.c). */
void sl_model_fusion(const sl_model *m, int *fused, int *total);
/* The per-convolution fusion state of m's last train forward on e as
 * JSON (model_fuse.c's top comment gives the shape) into buf (cap bytes,
 * NUL-terminated, always whole JSON: reasons that do not fit are cut and
 * say so). "" when m never ran a train forward. */
void sl_model_fusion_json(const sl_model *m, const sl_exec *e, char *buf, size_t cap);

#endif /* SL_MODEL_INT_H */
