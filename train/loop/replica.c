/*
 * train/loop/replica.c - one data-parallel replica of a training run: its
 * pipeline, model and optimizer, one step with bucketed gradient
 * all-reduce, and the collectives the loop needs besides (trainer_int.h).
 *
 * Gradient buckets (the mirrored strategy; PyTorch DDP's design). The
 * grads arena holds every trainable tensor in state-dict order, so a run of
 * consecutive tensors is one contiguous span: buckets are such runs, about
 * bucket_mb each, formed from the END of the state dict (the fc, then the
 * last blocks), because backward produces gradients roughly in that order.
 * The model's grad hook counts a bucket's tensors as their gradients
 * become final; the last one starts an asynchronous all-reduce (average)
 * of the span, which runs on the communicator's progress thread while
 * backward goes on to earlier layers. After backward the replica waits
 * for every bucket, in the order they were started, then steps SGD. Every
 * replica runs the same backward, so the buckets start in the same order
 * everywhere, as the collectives require. With no_overlap the buckets are
 * all-reduced one after the other once backward is done (for measuring
 * what overlap buys, perf/scaling).
 *
 * Identical updates. The all-reduce gives every replica bitwise the same
 * averaged gradients, and SGD is deterministic, so the weights stay
 * bitwise identical (--check-every verifies it). BN running statistics are
 * per replica (each sees its own slice) unless --sync-bn; they are averaged
 * over replicas before each evaluation and checkpoint, so the model that
 * is evaluated and saved is one model.
 *
 * CUDA graphs with several GPUs (step_graph). Where the gradients are on a
 * GPU, their comm is NCCL on the exec's stream, so a bucket's all-reduce
 * is ordered after the backward kernels that wrote it and before the
 * optimizer's: the host wait of the plain step is for errors and deadlines
 * only. The graph step drops it: the buckets (and --sync-bn's sums) are
 * enqueued on the stream (sl_comm_allreduce_enqueue: no event, no host
 * wait, so the whole step, all-reduces included, is captured once and
 * replayed), the fp16 loss-scale check and update run on the device after
 * them (sl_dev_sgd_enqueue: every replica sees the same averaged gradients,
 * so every replica skips the same steps), and after each launch the host
 * waits for a fence on the stream (sl_comm_fence), which keeps the
 * communicator's deadline and abort: a dead peer ends the run with an error,
 * not a hang. (The fence costs the gap between one step's end and the next
 * launch, a few tens of microseconds; the plain step waits for its buckets
 * every step too.) Every replica captures at the same step and, should a
 * capture fail on one replica and not on another, the collectives still
 * match: the uncaptured fallback enqueues the same all-reduces in the same
 * order.
 *
 * Threading: a replica is driven by one thread (its own, or the caller's
 * for replica 0); its communicator's progress thread runs the bucket
 * all-reduces.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train/loop/trainer_int.h"

/* ---------------------------------------------------------------- buckets */

/* A stream-ordered all-reduce of a graph step (f32, in place on the exec's
 * stream). Not made when the capture it would join was invalidated (by a
 * refused call): NCCL would fail on the stream and break the communicator,
 * where the step can still fall back to running uncaptured. */
static int coll_enqueue(sl_replica *rep, float *buf, size_t n, sl_redop op)
{
    int rc = sl_dev_capture_intact(&rep->e);
    return rc ? rc : sl_comm_allreduce_enqueue(rep->gcomm, buf, n, SL_DTYPE_F32, op);
}

static int on_grad_ready(void *ctx, int tensor)
{
    sl_replica *rep = ctx;
    int b = rep->bucket_of[tensor];
    if (b < 0)
        return SL_OK;
    sl_bucket *bk = &rep->bk[b];
    if (--bk->pending > 0)
        return SL_OK;
    if (bk->pending < 0 || bk->req)
        return sl_fail(SL_EINVAL, "sl_train_run: replica %d: gradient bucket %d reported ready "
                       "twice", rep->rank, b);
    rep->start_order[rep->started++] = b;
    if (rep->coll_stream)
        return coll_enqueue(rep, rep->grads + bk->off, bk->n, SL_RED_AVG);
    return sl_comm_allreduce_start(rep->gcomm, rep->grads + bk->off, bk->n, SL_DTYPE_F32,
                                   SL_RED_AVG, &bk->req);
}

/* Buckets of about bucket_mb over the trainable tensors, last tensor first. */
static int make_buckets(sl_replica *rep)
{
    int nt;
    sl_tensor_info *t = sl_model_tensors(rep->m, &nt);
    float *params;
    size_t total;
    sl_model_arenas(rep->m, &params, &rep->grads, &total);
    /* offsets from the state dict's grads (the host copy once placed) */
    const float *grads = rep->m->dev_e ? rep->m->h_grads : rep->grads;
    double mb = rep->run->cfg->bucket_mb > 0 ? rep->run->cfg->bucket_mb : 25.0;
    size_t cap = (size_t)(mb * 1e6 / sizeof(float));
    if (cap < 1)
        cap = 1;
    rep->bucket_of = malloc(sizeof(int) * (size_t)nt);
    rep->bk = calloc((size_t)nt, sizeof *rep->bk);
    rep->start_order = calloc((size_t)nt, sizeof(int));
    if (!rep->bucket_of || !rep->bk || !rep->start_order)
        return sl_fail(SL_ENOMEM, "sl_train_run: gradient buckets");
    int nb = -1;
    size_t lo = 0, hi = 0, fill = 0;
    for (int i = nt - 1; i >= 0; i--) {
        rep->bucket_of[i] = -1;
        if (!(t[i].flags & SL_TENSOR_PARAM))
            continue;
        size_t off = (size_t)(t[i].grad - grads), end = off + (size_t)t[i].numel;
        if (nb < 0 || fill >= cap) {
            if (nb >= 0) {
                rep->bk[nb].off = lo;
                rep->bk[nb].n = hi - lo;
            }
            nb++;
            lo = off;
            hi = end;
            fill = 0;
        }
        /* Reverse state-dict order walks the arena downwards: extend the
         * span to cover this tensor (and the padding up to the next one). */
        if (off < lo)
            lo = off;
        if (end > hi)
            hi = end;
        fill += (size_t)t[i].numel;
        rep->bucket_of[i] = nb;
        rep->bk[nb].tensors++;
    }
    if (nb >= 0) {
        rep->bk[nb].off = lo;
        rep->bk[nb].n = hi - lo;
    }
    rep->nbk = nb + 1;
    return SL_OK;
}

/* After backward: wait for (or, without overlap, run) every bucket. */
static int finish_buckets(sl_replica *rep)
{
    double t0 = sl_now_s();
    int rc = SL_OK;
    if (rep->run->cfg->no_overlap) {
        for (int b = 0; !rc && b < rep->nbk; b++)
            rc = sl_comm_allreduce(rep->gcomm, rep->grads + rep->bk[b].off, rep->bk[b].n,
                                   SL_DTYPE_F32, SL_RED_AVG);
    } else {
        char first[SL_ERRMSG_MAX] = ""; /* the first failure's message: later waits overwrite it */
        if (rep->started != rep->nbk && !rc) {
            rc = sl_fail(SL_EINVAL, "sl_train_run: replica %d: %d of %d gradient buckets "
                         "became ready", rep->rank, rep->started, rep->nbk);
            snprintf(first, sizeof first, "%s", sl_errmsg());
        }
        for (int i = 0; i < rep->started; i++) {
            sl_bucket *bk = &rep->bk[rep->start_order[i]];
            int r = sl_comm_wait(rep->gcomm, bk->req);
            bk->req = NULL;
            if (r && !rc) {
                rc = r;
                snprintf(first, sizeof first, "%s", sl_errmsg());
            }
        }
        if (rc)
            sl_fail(rc, "%s", first);
    }
    rep->comm_wait_s += sl_now_s() - t0;
    return rc;
}

/* ------------------------------------------------------------ collectives */

int sl_replica_sum(sl_replica *rep, float *v, int n)
{
    if (!rep->comm)
        return SL_OK;
    return sl_comm_allreduce(rep->comm, v, (size_t)n, SL_DTYPE_F32, SL_RED_SUM);
}

/* sync-BN's sums: buf is the model's (device memory on a GPU, where gcomm
 * is the NCCL comm on the exec's stream; else the host comm); in a graph
 * step, enqueued on the stream (the kernels after it read the sums there) */
static int bn_sync_sum(void *ctx, float *buf, int n)
{
    sl_replica *rep = ctx;
    if (rep->coll_stream)
        return coll_enqueue(rep, buf, (size_t)n, SL_RED_SUM);
    return sl_comm_allreduce(rep->gcomm, buf, (size_t)n, SL_DTYPE_F32, SL_RED_SUM);
}

int sl_replica_sync_buffers(sl_replica *rep)
{
    if (!rep->comm || rep->run->cfg->sync_bn)
        return SL_OK;
    int nt, rc;
    sl_tensor_info *t = sl_model_tensors(rep->m, &nt);
    if ((rc = sl_model_pull(rep->m))) /* the host copies, on a device */
        return rc;
    for (int i = 0; i < nt; i++) {
        if (!(t[i].flags & SL_TENSOR_BUFFER) || t[i].dtype != SL_T_F32)
            continue;
        if ((rc = sl_comm_allreduce(rep->comm, t[i].data, (size_t)t[i].numel, SL_DTYPE_F32,
                                    SL_RED_AVG)))
            return rc;
    }
    return sl_model_push(rep->m);
}

int sl_replica_eval(sl_replica *rep, sl_eval_result *er)
{
    const sl_run *r = rep->run;
    sl_pipeline_config ev; /* eval_data, eval_split: resolved before the first step (run.c) */
    sl_pipeline_eval_config(&rep->data, r->eval_data, r->eval_split, &ev);
    /* Replicas with a communicator evaluate a share each; a lone replica
     * (world 1, or the ps strategy's snapshot) evaluates everything. */
    ev.rank = rep->comm ? (unsigned)rep->rank : 0;
    ev.world = rep->comm ? (unsigned)r->world : 1;
    ev.rank_split = ev.world > 1 ? SL_SPLIT_RECORDS : SL_SPLIT_FILES;
    memset(er, 0, sizeof *er);
    int rc = sl_eval_run(rep->m, &rep->e, &ev, er);
    if (rc)
        return sl_fail(rc, "sl_train_run: replica %d: evaluating split '%s': %s", rep->rank,
                       ev.split, sl_errmsg());
    if (!rep->comm)
        return SL_OK;
    /* the correct counts and images summed exactly (an f32 sum is exact only
     * below 2^24 images: issue 26); the loss sum is a float sum */
    int64_t k[4] = {llround(er->top1 * (double)er->images),
                    llround(er->top5 * (double)er->images), er->images, er->skipped};
    float loss = (float)(er->loss * (double)er->images);
    if ((rc = sl_comm_allreduce_i64(rep->comm, k, 4)) || (rc = sl_replica_sum(rep, &loss, 1)))
        return rc;
    er->images = k[2];
    er->skipped = k[3];
    /* every replica's share all bad: each fails alike (sl_eval_run leaves
     * a share's own emptiness to this sum) */
    if (er->images == 0 && er->skipped > 0)
        return sl_fail(SL_ECORRUPT, "sl_train_run: evaluating split '%s': all %lld records are "
                       "bad; the first%s: %s", ev.split, (long long)er->skipped,
                       er->skipped_first[0] ? "" : " (another replica's share)",
                       er->skipped_first[0] ? er->skipped_first : "not named here");
    if (er->images > 0) {
        er->top1 = (double)k[0] / (double)k[2];
        er->top5 = (double)k[1] / (double)k[2];
        er->loss = (double)loss / (double)k[2];
    }
    return SL_OK;
}

/* FNV-1a over the parameter arena, split in four 16-bit pieces that f32
 * carries exactly, so an all-gather of floats compares them. */
int sl_replica_check_identical(sl_replica *rep, int64_t step)
{
    if (!rep->comm)
        return SL_OK;
    float *params, *grads;
    size_t n;
    int rc = sl_model_pull(rep->m);
    if (rc)
        return rc;
    sl_model_arenas(rep->m, &params, &grads, &n);
    if (rep->m->dev_e)
        params = rep->m->h_params;
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)params;
    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    float mine[4], *all = malloc(sizeof(float) * 4 * (size_t)rep->run->world);
    if (!all)
        return sl_fail(SL_ENOMEM, "sl_train_run: check-every");
    for (int k = 0; k < 4; k++)
        mine[k] = (float)((h >> (16 * k)) & 0xffff);
    rc = sl_comm_allgather(rep->comm, mine, all, 4, SL_DTYPE_F32);
    for (int r = 1; !rc && r < rep->run->world; r++)
        if (memcmp(all, all + 4 * r, 4 * sizeof(float)))
            rc = sl_fail(SL_EINVAL, "sl_train_run: step %lld: replica %d's weights differ from "
                         "replica 0's (the replicas diverged: a bug, or non-deterministic "
                         "kernels)", (long long)step, r);
    free(all);
    return rc;
}

/* ------------------------------------------------------------------ setup */

int sl_replica_setup(sl_replica *rep, uint64_t start_batches, uint64_t start_samples,
                     const char *start_state)
{
    sl_run *r = rep->run;
    const sl_train_config *c = r->cfg;
    int rc;
    rep->data = r->data;
    rep->data.batch = r->local_batch;
    rep->data.rank = (unsigned)rep->rank;
    rep->data.world = (unsigned)r->world;
    int threads = c->threads;
    if (r->nlocal > 1) {
        /* OpenBLAS's thread count is process-wide: give each replica thread
         * its share (one each on a small machine, so SGEMMs run on the
         * replica's own thread in parallel). */
        int all = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        threads = all / r->nlocal > 0 ? all / r->nlocal : 1;
    }
    /* the GPU: under mpirun the local rank's; else --device (the pipeline's
     * device flag) when given; else SLUICE_CUDA_DEVICE or 0 (exec) */
    int device = c->backend != SL_BACKEND_CUDA ? -1
                 : r->mpi                      ? sl_comm_local_rank(r->mpi)
                                               : c->data.device;
    if ((rc = sl_exec_init_on(&rep->e, c->backend, threads, device)))
        return rc;
    rep->exec_ok = 1;
    rep->dev = sl_mem_on_device(&rep->e);
    if ((rc = sl_exec_set_act(&rep->e, sl_train_precision(c))))
        return sl_fail(rc, "sl_train_run: %s", sl_errmsg());
    if (rep->dev) {
        /* u8 batches copied to the GPU by the pipeline, normalized there */
        rep->data.device = sl_mem_device(&rep->e);
        rep->data.layout = SL_LAYOUT_NHWC_U8;
    }
    if (start_state)
        rc = sl_pipeline_create_from_state(&rep->data, start_state, strlen(start_state), &rep->p);
    else if (start_samples > 0)
        rc = sl_pipeline_create_at(&rep->data, start_batches, start_samples, &rep->p);
    else
        rc = sl_pipeline_create(&rep->data, &rep->p);
    if (rc)
        return sl_fail(rc, "sl_train_run: replica %d: %s", rep->rank, sl_errmsg());
    sl_model_config mc = c->model;
    mc.classes = r->classes;
    if ((rc = sl_model_create(&mc, (int)rep->data.batch, rep->data.height, rep->data.width,
                              &rep->m)))
        return rc;
    if ((rc = sl_model_place(rep->m, &rep->e)))
        return rc;
    int nt;
    sl_tensor_info *t = sl_model_tensors(rep->m, &nt);
    if ((rc = sl_sgd_create(&c->sgd, t, nt, &rep->o)))
        return rc;
    if ((rc = sl_mem_alloc(&rep->e, sizeof(float) * rep->data.batch * (size_t)mc.classes,
                           (void **)&rep->dlogits)))
        return rc;
    rep->labels = malloc(sizeof(int32_t) * rep->data.batch);
    if (!rep->labels)
        return sl_fail(SL_ENOMEM, "sl_train_run: labels for batch %u", rep->data.batch);
    if (rep->dev &&
        ((rc = sl_dev_sgd_create(&rep->e, &c->sgd, rep->o, rep->m, &rep->dsgd)) ||
         (rc = sl_dev_feed_create(&rep->e, (int)rep->data.batch, rep->data.height,
                                  rep->data.width, rep->data.mean, rep->data.std,
                                  &rep->feed)) ||
         (rc = sl_mem_alloc(&rep->e, 2 * sizeof(double), (void **)&rep->d_acc))))
        return sl_fail(rc, "sl_train_run: replica %d: %s", rep->rank, sl_errmsg());
    rep->gcomm = rep->comm;
    if (rep->dev && rep->comm) {
        /* gradients live on the GPU: their all-reduce goes through NCCL, on
         * the exec's stream (ordered after the backward that wrote them) */
        sl_comm_config cc = SL_COMM_CONFIG_INIT;
        cc.timeout_ms = r->timeout_ms;
        cc.device = sl_mem_device(&rep->e);
        cc.stream = sl_mem_stream(&rep->e);
        if ((rc = sl_comm_nccl_create(&cc, &rep->gcomm)))
            return sl_fail(rc, "sl_train_run: replica %d: gradients on GPU %d need NCCL: %s",
                           rep->rank, cc.device, sl_errmsg());
    }
    if (rep->dev && !sl_dev_graph_wanted(&rep->e)) {
        rep->graph_off = 1;
        snprintf(rep->graph_why, sizeof rep->graph_why, "SLUICE_CUDA_GRAPH=0");
    } else if (rep->dev && rep->comm &&
               (c->strategy != SL_STRATEGY_MIRRORED || !sl_comm_stream_ordered(rep->gcomm))) {
        /* the step's collectives would need the host (not one stream) */
        rep->graph_off = 1;
        snprintf(rep->graph_why, sizeof rep->graph_why,
                 "%d replicas: the %s strategy's collectives (%s) are not stream-ordered",
                 r->world, c->strategy == SL_STRATEGY_MIRRORED ? "mirrored" : "ps",
                 sl_comm_backend_name(sl_comm_backend_of(rep->gcomm)));
    }
    if (rep->comm && c->strategy == SL_STRATEGY_MIRRORED) {
        if ((rc = make_buckets(rep)))
            return rc;
        if (!c->no_overlap)
            sl_model_set_grad_hook(rep->m, on_grad_ready, rep);
        if (c->sync_bn) {
            sl_bn_sync s = {bn_sync_sum, rep, r->world, rep->rank};
            if ((rc = sl_model_set_bn_sync(rep->m, &s)))
                return rc;
        }
    }
    return SL_OK;
}

void sl_replica_fini(sl_replica *rep)
{
    sl_dev_graph_destroy(rep->graph);
    if (rep->gcomm && rep->gcomm != rep->comm)
        sl_comm_destroy(rep->gcomm);
    sl_dev_feed_destroy(rep->feed);
    sl_dev_sgd_destroy(rep->dsgd);
    sl_mem_free(&rep->e, rep->d_acc);
    sl_mem_free(&rep->e, rep->dlogits);
    sl_sgd_destroy(rep->o);
    sl_model_destroy(rep->m);
    sl_pipeline_destroy(rep->p);
    if (rep->exec_ok)
        sl_exec_fini(&rep->e);
    free(rep->labels);
    free(rep->bk);
    free(rep->bucket_of);
    free(rep->start_order);
    memset(rep, 0, sizeof *rep);
}

/* ------------------------------------------------------------------- step */

/* The device step after the input is in place: forward, the loss summed
 * on the device, backward, and with sgd the optimizer (queued; no host
 * sync, no host counter but num_batches_tracked: capturable once warm). */
static int body_dev(sl_replica *rep, int n, int sgd)
{
    const sl_train_config *c = rep->run->cfg;
    const float *logits;
    int rc;
    if ((rc = sl_model_forward(rep->m, &rep->e, rep->x, n, 1, &logits)) ||
        (rc = sl_dev_xent_acc(&rep->e, n, rep->run->classes, logits, rep->d_labels,
                              c->label_smoothing, sl_dev_sgd_scale(rep->dsgd), rep->dlogits,
                              rep->d_acc)) ||
        (rc = sl_model_backward(rep->m, &rep->e, rep->dlogits, NULL)) ||
        (sgd && (rc = sl_dev_sgd_enqueue(rep->dsgd))))
        return rc;
    return SL_OK;
}

/* body_dev with several replicas, for the graph step: the gradient buckets
 * (and --sync-bn's sums) enqueued on the exec's stream as backward makes
 * them ready (with no_overlap all of them after it, in bucket order, as
 * finish_buckets runs them), then the optimizer behind them. No host wait:
 * capturable. The same all-reduces in the same order as the plain step, so
 * the same bits. */
static int body_coll(sl_replica *rep, int n)
{
    rep->started = 0;
    for (int k = 0; k < rep->nbk; k++)
        rep->bk[k].pending = rep->bk[k].tensors;
    rep->coll_stream = 1;
    int rc = body_dev(rep, n, 0);
    if (!rc && rep->run->cfg->no_overlap) {
        for (int b = 0; !rc && b < rep->nbk; b++)
            rc = coll_enqueue(rep, rep->grads + rep->bk[b].off, rep->bk[b].n, SL_RED_AVG);
    } else if (!rc && rep->started != rep->nbk) {
        rc = sl_fail(SL_EINVAL, "sl_train_run: replica %d: %d of %d gradient buckets became "
                     "ready", rep->rank, rep->started, rep->nbk);
    }
    rep->coll_stream = 0;
    if (!rc)
        rc = sl_dev_sgd_enqueue(rep->dsgd);
    return rc;
}

/* The whole device step of the graph path, optimizer included. */
static int body_step(sl_replica *rep, int n)
{
    return rep->comm ? body_coll(rep, n) : body_dev(rep, n, 1);
}

/* After a graph step with several replicas: wait, with the communicator's
 * deadline and abort, until the stream has run it, all-reduces included. */
static int fence_wait(sl_replica *rep)
{
    sl_comm_req *f;
    int rc = sl_comm_fence(rep->gcomm, &f);
    if (rc || (rc = sl_comm_wait(rep->gcomm, f)))
        return sl_fail(rc, "sl_train_run: replica %d: %s", rep->rank, sl_errmsg());
    return SL_OK;
}

/* The device step's forward and backward: input from the feed (once, with
 * --synthetic), the loss summed on the device. */
static int grads_dev(sl_replica *rep, const sl_batch *b)
{
    int rc;
    if (!(rep->run->cfg->synthetic && rep->x) &&
        (rc = sl_dev_feed_put(rep->feed, b, rep->run->classes, &rep->x, &rep->d_labels)))
        return rc;
    return body_dev(rep, (int)b->n, 0);
}

int sl_replica_take(sl_replica *rep, double out[2])
{
    out[0] = out[1] = 0;
    if (!rep->dev)
        return SL_OK;
    int rc = sl_dev_loss_take(&rep->e, rep->d_acc, out);
    if (rc)
        return sl_fail(rc, "sl_train_run: replica %d: reading the loss: %s", rep->rank,
                       sl_errmsg());
    if (!isfinite(out[0]))
        return sl_fail(SL_EINVAL, "sl_train_run: replica %d: loss is %f (diverged: lower --lr "
                       "or add --warmup-epochs)", rep->rank, out[0]);
    return SL_OK;
}

int sl_replica_grads(sl_replica *rep, const sl_batch *b, float *loss, int *correct)
{
    int classes = rep->run->classes, n = (int)b->n, rc;
    if (rep->dev) {
        *loss = 0, *correct = 0; /* summed on the device: sl_replica_take */
        return grads_dev(rep, b);
    }
    if ((rc = sl_labels_check("sl_train_run", b, classes)))
        return rc;
    for (int i = 0; i < n; i++)
        rep->labels[i] = b->labels[i];
    const float *logits;
    if ((rc = sl_model_forward(rep->m, &rep->e, (const float *)b->data, n, 1, &logits)) ||
        (rc = sl_xent_fwd_bwd(&rep->e, n, classes, logits, rep->labels,
                                       rep->run->cfg->label_smoothing, loss, rep->dlogits,
                                       correct)) ||
        (rc = sl_model_backward(rep->m, &rep->e, rep->dlogits, NULL)))
        return rc;
    if (!isfinite(*loss))
        return sl_fail(SL_EINVAL, "sl_train_run: replica %d: loss is %f (diverged: lower --lr "
                       "or add --warmup-epochs)", rep->rank, (double)*loss);
    return SL_OK;
}

/* ---------------------------------------------------------- CUDA graph */

/* Capture body_step into rep->graph and queue its first replay; on any
 * failure (the driver refused a call, a buffer moved, a call failed) the
 * host state the capture advanced is put back and SL_ECUDA says why: the
 * caller runs the step uncaptured (nothing queued ran). */
static int capture(sl_replica *rep, int n)
{
    sl_model *m = rep->m;
    int64_t *nbt = malloc(sizeof *nbt * (size_t)m->ncbn);
    if (!nbt)
        return sl_fail(SL_ENOMEM, "capture: %d counters", m->ncbn);
    memcpy(nbt, m->nbts, sizeof *nbt * (size_t)m->ncbn);
    rep->graph_tries++;
    int rc = sl_dev_capture_begin(&rep->e);
    if (!rc) {
        int body = body_step(rep, n);
        char why[SL_ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", body ? sl_errmsg() : "");
        rc = sl_dev_capture_end(&rep->e, body == SL_OK, &rep->graph);
        if (rc && body)
            rc = sl_fail(rc, "%s: %s", sl_errmsg(), why);
    }
    if (!rc)
        rc = sl_dev_graph_launch(rep->graph);
    if (rc) {
        memcpy(m->nbts, nbt, sizeof *nbt * (size_t)m->ncbn);
        m->train_n = 0;
        sl_dev_graph_destroy(rep->graph);
        rep->graph = NULL;
    } else {
        rep->graph_n = n, rep->graph_x = rep->x;
        rep->graph_replays++; /* the capture's work runs as the graph's first launch */
    }
    free(nbt);
    return rc;
}

/* The device step with its CUDA graph (one replica, or several with their
 * all-reduces on the stream: body_coll): captured on the second step of
 * the process (the first chose cuDNN's algorithms and grew every buffer;
 * the optimizer's first-step rule is behind it) and replayed after, with
 * the learning rate copied in before each launch. A graph whose buffers
 * moved (an eval of another batch size grew the workspace) is captured
 * again; a batch of another size (a last short batch) runs uncaptured;
 * three failed captures turn it off (fallback: the step as before, the
 * reason in the log and --json). With several replicas the host waits for
 * each step's fence (the file's comment). */
static int step_graph(sl_replica *rep, const sl_batch *b, float lr)
{
    int n = (int)b->n, rc;
    if (!(rep->run->cfg->synthetic && rep->x) &&
        (rc = sl_dev_feed_put(rep->feed, b, rep->run->classes, &rep->x, &rep->d_labels)))
        return rc;
    if ((rc = sl_dev_sgd_set_lr(rep->dsgd, lr)))
        return rc;
    if (rep->graph && (sl_dev_graph_stale(rep->graph) || rep->graph_x != rep->x)) {
        sl_dev_graph_destroy(rep->graph); /* its buffers moved: capture again */
        rep->graph = NULL;
    }
    int done = 0;
    if (rep->graph && rep->graph_n == n) {
        if ((rc = sl_dev_graph_launch(rep->graph)))
            return rc;
        sl_model_note_replay(rep->m, rep->x, n);
        rep->graph_replays++;
        done = 1;
    } else if (!rep->graph && !rep->graph_off && rep->dev_steps >= 1 &&
               sl_dev_sgd_steps(rep->dsgd) >= 1) {
        if ((rc = capture(rep, n)) == SL_OK) {
            done = 1;
        } else if (rep->graph_tries >= 3) {
            rep->graph_off = 1;
            snprintf(rep->graph_why, sizeof rep->graph_why, "fallback: %s", sl_errmsg());
            if (rep->run->out)
                fprintf(rep->run->out, "train: replica %d: CUDA graph capture failed 3 times, "
                        "the step runs uncaptured: %s\n", rep->rank, sl_errmsg());
        }
    }
    if (!done && (rc = body_step(rep, n)))
        return rc;
    if (rep->comm && (rc = fence_wait(rep)))
        return rc;
    sl_dev_sgd_count(rep->dsgd);
    rep->dev_steps++;
    return sl_dev_feed_done(rep->feed);
}

/* res's cudnn_fusion fields from the model's last train forward. */
static void fusion_report(const sl_replica *rep, sl_train_result *res)
{
    int fused = 0, total = 0;
    sl_model_fusion(rep->m, &fused, &total);
    const char *why = "";
    if (fused == total && total > 0)
        snprintf(res->cudnn_fusion, sizeof res->cudnn_fusion, "on");
    else if (fused > 0)
        snprintf(res->cudnn_fusion, sizeof res->cudnn_fusion, "partial (%d of %d)", fused,
                 total);
    else
        snprintf(res->cudnn_fusion, sizeof res->cudnn_fusion, "off");
    if (fused < total || total == 0) {
        why = sl_fuse_refusal(&rep->e);
        if (!sl_fuse_available(&rep->e))
            why = rep->e.backend != SL_BACKEND_CUDA ? "not a cuda run"
                  : rep->e.act != SL_DTYPE_F16     ? "fusion runs with --precision fp16"
                  : "SLUICE_CUDNN_FUSION=0";
        else if (rep->m->sync_on)
            why = "--sync-bn runs the unfused batch norm";
    }
    snprintf(res->cudnn_fusion_why, sizeof res->cudnn_fusion_why, "%s", why);
    sl_model_fusion_json(rep->m, &rep->e, res->cudnn_fusion_detail,
                         sizeof res->cudnn_fusion_detail);
}

void sl_replica_graph_report(const sl_replica *rep, sl_train_result *res)
{
    fusion_report(rep, res);
    res->cuda_graph_replays = rep->graph_replays;
    if (!rep->dev) {
        snprintf(res->cuda_graph, sizeof res->cuda_graph, "off");
        snprintf(res->cuda_graph_why, sizeof res->cuda_graph_why, "%s backend",
                 sl_backend_name(rep->e.backend));
    } else if (rep->graph_replays > 0 && !rep->graph_off) {
        snprintf(res->cuda_graph, sizeof res->cuda_graph, "on");
        snprintf(res->cuda_graph_why, sizeof res->cuda_graph_why, "%lld of %lld steps launched as the graph",
                 (long long)rep->graph_replays, (long long)rep->dev_steps);
    } else {
        snprintf(res->cuda_graph, sizeof res->cuda_graph, "%s",
                 strncmp(rep->graph_why, "fallback", 8) ? "off" : "fallback");
        snprintf(res->cuda_graph_why, sizeof res->cuda_graph_why, "%s",
                 rep->graph_why[0] ? rep->graph_why : "the run ended before a capture");
    }
}

/* ------------------------------------------------------------------- step */

int sl_replica_step(sl_replica *rep, const sl_batch *b, float lr, float *loss, int *correct)
{
    double t0 = sl_now_s();
    int rc;
    if (rep->dev && !rep->graph_off) {
        *loss = 0, *correct = 0; /* summed on the device: sl_replica_take */
        if ((rc = step_graph(rep, b, lr)))
            return rc;
        rep->step_s += sl_now_s() - t0;
        return SL_OK;
    }
    rep->started = 0;
    for (int k = 0; k < rep->nbk; k++)
        rep->bk[k].pending = rep->bk[k].tensors;
    rc = sl_replica_grads(rep, b, loss, correct);
    if (rep->comm && rep->nbk > 0) {
        /* wait even after a failed backward: started requests own the buffers */
        int r2 = finish_buckets(rep);
        if (!rc)
            rc = r2;
    }
    if (rc)
        return rc;
    if (rep->dev) {
        /* the step is queued; the batch may go back once the GPU has read
         * it (sl_dev_feed_done: the host stays one step ahead at most) */
        if ((rc = sl_dev_sgd_step(rep->dsgd, lr)) || (rc = sl_dev_feed_done(rep->feed)))
            return rc;
        rep->dev_steps++;
    } else if ((rc = sl_sgd_step(rep->o, lr))) {
        return rc;
    }
    rep->step_s += sl_now_s() - t0;
    return SL_OK;
}
