/*
 * tests/train/model/test_model_sync.c - the model's hooks for the distribution
 * strategies (train/model/model.c): synchronized batch norm across replica
 * threads against one model on the whole batch, the grad-ready hook
 * (once per trainable tensor, grads final when called, a non-zero return
 * stops backward) and the parameter / gradient arenas.
 *
 * The replicas all-reduce through a test-local sum (a shared buffer and a
 * barrier with a deadline, adding in rank order), so these tests depend on
 * nothing in collectives/.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "testutil.h"
#include "train/train.h"
#include "train/ops/ops.h" /* SL_BN_MOMENT_FLOATS */

enum { N = 6, H = 8, WD = 8, K = 5, WIDTH = 4, MAXW = 3 };

/* ------------------------------------------------------------- helpers */

static float *randn(int64_t n, uint64_t seed, float mean, float std)
{
    float *v = malloc((size_t)n * sizeof *v);
    cr_assert_not_null(v);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double u1 = ((tu_rand(&s) >> 11) + 1) * 0x1p-53, u2 = (tu_rand(&s) >> 11) * 0x1p-53;
        v[i] = mean + std * (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    }
    return v;
}

/* ResNet-20 width 4, zero_init_residual off (with gamma 0 the main paths
 * get no gradient), BN gammas and betas moved off their init the same way
 * in every copy, so that copies built with the same seed are identical. */
static sl_model *mk(int max_batch)
{
    sl_model_config c = SL_MODEL_CONFIG_INIT;
    c.arch = SL_ARCH_RESNET20, c.classes = K, c.width = WIDTH, c.zero_init_residual = 0;
    c.seed = 7;
    sl_model *m = NULL;
    cr_assert_eq(sl_model_create(&c, max_batch, H, WD, &m), SL_OK, "%s", sl_errmsg());
    int count;
    sl_tensor_info *t = sl_model_tensors(m, &count);
    uint64_t s = 99;
    for (int i = 0; i < count; i++)
        if ((t[i].flags & SL_TENSOR_PARAM) && !(t[i].flags & SL_TENSOR_DECAY) &&
            strcmp(t[i].name, "fc.bias") != 0)
            for (int64_t j = 0; j < t[i].numel; j++)
                ((float *)t[i].data)[j] += 0.5f * ((tu_rand(&s) >> 40) * 0x1p-24f - 0.5f);
    return m;
}

/* |a - ref| <= tol * (max |ref| + |ref|) elementwise: relative to the
 * tensor's scale, so tiny entries of a gradient do not demand digits they
 * never had. Returns the largest err / (max |ref| + |ref|). */
static double rel_err(const float *a, const float *ref, int64_t n)
{
    double mx = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        mx = fmax(mx, fabs((double)ref[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]) / (mx + fabs((double)ref[i]) + 1e-30);
        worst = fmax(worst, d);
    }
    return worst;
}

/* ----------------------------------------------------- test all-reduce */

/* W replica threads meeting at a barrier: each rank copies its buffer into
 * its slot, all wait, each adds the slots in rank order 0..W-1 into its
 * own buffer (so every rank gets the same bits), all wait again before the
 * slots are reused. Every wait has a deadline, and a rank that fails
 * cancels the team so that nobody waits for it. */
typedef struct team {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int world, arrived;
    unsigned gen;
    int canceled;
    float *slots; /* world x cap */
    int cap;
} team;

typedef struct rank_ctx {
    team *t;
    int rank;
    int calls;      /* all-reduces this rank made */
    int64_t floats; /* floats it all-reduced */
    int fail_at;    /* > 0: the fail_at-th call returns SL_EIO (injection) */
} rank_ctx;

static void team_init(team *t, int world, int cap)
{
    memset(t, 0, sizeof *t);
    cr_assert_eq(pthread_mutex_init(&t->mu, NULL), 0);
    cr_assert_eq(pthread_cond_init(&t->cv, NULL), 0);
    t->world = world, t->cap = cap;
    t->slots = calloc((size_t)world * cap, sizeof(float));
    cr_assert_not_null(t->slots);
}

static void team_fini(team *t)
{
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t->slots);
}

static void team_cancel(team *t)
{
    pthread_mutex_lock(&t->mu);
    t->canceled = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* Barrier: SL_OK, SL_ECANCELED (a rank gave up) or SL_ETIMEDOUT (30 s). */
static int team_wait(team *t)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30;
    int rc = SL_OK;
    pthread_mutex_lock(&t->mu);
    unsigned gen = t->gen;
    if (++t->arrived == t->world) {
        t->arrived = 0;
        t->gen++;
        pthread_cond_broadcast(&t->cv);
    }
    while (gen == t->gen && !t->canceled && rc == SL_OK)
        if (pthread_cond_timedwait(&t->cv, &t->mu, &dl) == ETIMEDOUT)
            rc = SL_ETIMEDOUT;
    if (gen != t->gen)
        rc = SL_OK; /* everyone arrived, whatever happened since */
    else if (t->canceled)
        rc = SL_ECANCELED;
    if (rc)
        t->canceled = 1, pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

static int test_allreduce(void *ctx, float *buf, int n)
{
    rank_ctx *rc_ = ctx;
    team *t = rc_->t;
    rc_->calls++;
    rc_->floats += n;
    if (rc_->fail_at && rc_->calls == rc_->fail_at) {
        team_cancel(t);
        return sl_fail(SL_EIO, "test_allreduce: rank %d: injected failure", rc_->rank);
    }
    if (n > t->cap)
        return sl_fail(SL_EINVAL, "test_allreduce: %d floats over the slot size %d", n, t->cap);
    memcpy(t->slots + (size_t)rc_->rank * t->cap, buf, (size_t)n * sizeof(float));
    int rc = team_wait(t);
    if (rc)
        return sl_fail(rc, "test_allreduce: rank %d: barrier", rc_->rank);
    for (int i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < t->world; r++)
            s += t->slots[(size_t)r * t->cap + i];
        buf[i] = s;
    }
    rc = team_wait(t);
    if (rc)
        return sl_fail(rc, "test_allreduce: rank %d: barrier", rc_->rank);
    return SL_OK;
}

/* ---------------------------------------------------- replica threads */

typedef struct replica {
    rank_ctx ctx;
    sl_model *m;
    sl_exec e;
    int sync;
    int n;                  /* images */
    const float *x;         /* (n, H, WD, 3): its slice */
    const int32_t *labels;  /* (n) */
    float logits[N * K];    /* (n, K) */
    float loss;
    int rc;
    char err[SL_ERRMSG_MAX];
} replica;

/* One train step on the replica's slice: forward, xent over its n images
 * (its own mean, as a strategy's replica computes it), backward. */
static void *replica_main(void *arg)
{
    replica *r = arg;
    float dl[N * K];
    const float *lg = NULL;
    int rc = SL_OK;
    if (r->sync) {
        sl_bn_sync s = {test_allreduce, &r->ctx, r->ctx.t->world, r->ctx.rank};
        rc = sl_model_set_bn_sync(r->m, &s);
    }
    if (!rc)
        rc = sl_model_forward(r->m, &r->e, r->x, r->n, 1, &lg);
    if (!rc) {
        memcpy(r->logits, lg, (size_t)r->n * K * sizeof(float));
        rc = r->e.ops->xent_fwd_bwd(&r->e, r->n, K, lg, r->labels, 0.0f, &r->loss, dl, NULL);
    }
    if (!rc)
        rc = sl_model_backward(r->m, &r->e, dl, NULL);
    r->rc = rc;
    if (rc) {
        snprintf(r->err, sizeof r->err, "%s", sl_errmsg());
        team_cancel(r->ctx.t);
    }
    return NULL;
}

/* The whole batch: N images, labels, one model's step, and W replicas'. */
typedef struct batch {
    float *x;
    int32_t labels[N];
} batch;

static void batch_init(batch *b)
{
    b->x = randn(N * H * WD * 3, 11, 0.3f, 1.0f);
    for (int i = 0; i < N; i++)
        b->labels[i] = (i * 3 + 1) % K;
}

/* Run W replicas (sync on or off) on b; rep[] holds the results. fail_rank
 * / fail_at inject an all-reduce failure (0: none). */
static void run_replicas(replica *rep, int W, sl_backend be, int sync, const batch *b, team *t,
                         int fail_rank, int fail_at)
{
    int n = N / W;
    /* the forward's statistics slots: W x 3 x the widest BN (4 x width) */
    team_init(t, W, W * SL_BN_MOMENT_FLOATS * 4 * WIDTH);
    pthread_t th[MAXW];
    for (int r = 0; r < W; r++) {
        replica *p = &rep[r];
        memset(p, 0, sizeof *p);
        p->ctx.t = t, p->ctx.rank = r;
        p->ctx.fail_at = r == fail_rank ? fail_at : 0;
        p->m = mk(n);
        /* exec init here: openblas_set_num_threads is process-wide */
        cr_assert_eq(sl_exec_init(&p->e, be, 1), SL_OK, "%s", sl_errmsg());
        p->sync = sync, p->n = n;
        p->x = b->x + (size_t)r * n * H * WD * 3;
        p->labels = b->labels + r * n;
    }
    for (int r = 0; r < W; r++)
        cr_assert_eq(pthread_create(&th[r], NULL, replica_main, &rep[r]), 0);
    for (int r = 0; r < W; r++)
        pthread_join(th[r], NULL);
}

static void replicas_free(replica *rep, int W, team *t)
{
    for (int r = 0; r < W; r++) {
        sl_model_destroy(rep[r].m);
        sl_exec_fini(&rep[r].e);
    }
    team_fini(t);
}

/* One model on the whole batch: logits (N, K) copied out. */
static sl_model *single_step(sl_backend be, const batch *b, float *logits, float *loss)
{
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, be, 1), SL_OK);
    sl_model *m = mk(N);
    const float *lg;
    float dl[N * K];
    cr_assert_eq(sl_model_forward(m, &e, b->x, N, 1, &lg), SL_OK, "%s", sl_errmsg());
    memcpy(logits, lg, sizeof(float) * N * K);
    cr_assert_eq(e.ops->xent_fwd_bwd(&e, N, K, lg, b->labels, 0.0f, loss, dl, NULL), SL_OK);
    cr_assert_eq(sl_model_backward(m, &e, dl, NULL), SL_OK, "%s", sl_errmsg());
    sl_exec_fini(&e);
    return m;
}

/* The largest relative differences between W replicas and the single
 * model: logits, running statistics (every replica), and the replicas'
 * average param grads. */
typedef struct diffs {
    double logits, stats, grads;
    const char *grad_worst, *stats_worst;
} diffs;

static diffs compare(sl_model *single, const float *slog, replica *rep, int W)
{
    diffs d = {0, 0, 0, "", ""};
    int n = N / W, count, rcount;
    for (int r = 0; r < W; r++)
        d.logits = fmax(d.logits, rel_err(rep[r].logits, slog + r * n * K, (int64_t)n * K));
    sl_tensor_info *ts = sl_model_tensors(single, &count);
    float *avg = malloc(sizeof(float) * (size_t)sl_model_param_count(single));
    cr_assert_not_null(avg);
    for (int i = 0; i < count; i++) {
        if (ts[i].dtype == SL_T_I64) {
            for (int r = 0; r < W; r++)
                cr_assert_eq(*(int64_t *)sl_model_tensors(rep[r].m, &rcount)[i].data,
                             *(int64_t *)ts[i].data, "%s", ts[i].name);
            continue;
        }
        if (ts[i].flags & SL_TENSOR_BUFFER) {
            for (int r = 0; r < W; r++) {
                double e = rel_err(sl_model_tensors(rep[r].m, &rcount)[i].data, ts[i].data,
                                   ts[i].numel);
                if (e > d.stats)
                    d.stats = e, d.stats_worst = ts[i].name;
            }
            continue;
        }
        for (int64_t j = 0; j < ts[i].numel; j++) {
            double s = 0;
            for (int r = 0; r < W; r++)
                s += sl_model_tensors(rep[r].m, &rcount)[i].grad[j];
            avg[j] = (float)(s / W);
        }
        double e = rel_err(avg, ts[i].grad, ts[i].numel);
        if (e > d.grads)
            d.grads = e, d.grad_worst = ts[i].name;
    }
    free(avg);
    return d;
}

/* ------------------------------------------------------------ sync BN */

static void sync_vs_single(sl_backend be, int W)
{
    batch b;
    batch_init(&b);
    float slog[N * K], sloss;
    sl_model *single = single_step(be, &b, slog, &sloss);
    int nbn = 0, count;
    sl_tensor_info *ts = sl_model_tensors(single, &count);
    for (int i = 0; i < count; i++)
        nbn += ts[i].dtype == SL_T_I64;

    /* synchronized: what one model on the whole batch computes */
    replica rep[MAXW];
    team t;
    run_replicas(rep, W, be, 1, &b, &t, 0, 0);
    for (int r = 0; r < W; r++) {
        cr_assert_eq(rep[r].rc, SL_OK, "rank %d: %s", r, rep[r].err);
        /* 1 all-reduce per BN forward (every replica's mean and M2), 1 of
         * 2c floats per BN backward */
        cr_assert_eq(rep[r].ctx.calls, 2 * nbn, "rank %d: %d all-reduces for %d BNs", r,
                     rep[r].ctx.calls, nbn);
    }
    diffs d = compare(single, slog, rep, W);
    cr_log_info("%s W %d sync: logits %.2g, running stats %.2g (%s), avg grads %.2g (%s)",
                sl_backend_name(be), W, d.logits, d.stats, d.stats_worst, d.grads,
                d.grad_worst);
    cr_assert_leq(d.logits, 1e-4, "logits differ by %g", d.logits);
    cr_assert_leq(d.stats, 1e-4, "%s differs by %g", d.stats_worst, d.stats);
    cr_assert_leq(d.grads, 1e-4, "%s: average grad differs by %g", d.grad_worst, d.grads);
    /* every replica has the same running statistics, bit for bit */
    for (int r = 1; r < W; r++)
        for (int i = 0; i < count; i++)
            if (ts[i].flags & SL_TENSOR_BUFFER)
                cr_assert_eq(memcmp(sl_model_tensors(rep[0].m, &count)[i].data,
                                    sl_model_tensors(rep[r].m, &count)[i].data,
                                    (size_t)ts[i].numel * (ts[i].dtype == SL_T_I64 ? 8 : 4)),
                             0, "rank %d %s", r, ts[i].name);
    replicas_free(rep, W, &t);

    /* without sync each replica normalizes over its own slice: the same
     * comparison must fail by a wide margin (the test can fail) */
    run_replicas(rep, W, be, 0, &b, &t, 0, 0);
    for (int r = 0; r < W; r++) {
        cr_assert_eq(rep[r].rc, SL_OK, "rank %d: %s", r, rep[r].err);
        cr_assert_eq(rep[r].ctx.calls, 0);
    }
    d = compare(single, slog, rep, W);
    cr_log_info("%s W %d local BN: logits %.2g, running stats %.2g, avg grads %.2g",
                sl_backend_name(be), W, d.logits, d.stats, d.grads);
    cr_assert_gt(d.logits, 1e-2);
    cr_assert_gt(d.stats, 1e-2);
    cr_assert_gt(d.grads, 1e-2);
    replicas_free(rep, W, &t);
    sl_model_destroy(single);
    free(b.x);
}

Test(train_model_sync, two_replicas_ref) { sync_vs_single(SL_BACKEND_REF, 2); }
Test(train_model_sync, three_replicas_ref) { sync_vs_single(SL_BACKEND_REF, 3); }
Test(train_model_sync, two_replicas_cpu) { sync_vs_single(SL_BACKEND_CPU, 2); }
Test(train_model_sync, three_replicas_cpu) { sync_vs_single(SL_BACKEND_CPU, 3); }

/* An all-reduce failure on one rank fails every replica's step (the
 * failing rank with its status and the BN named; the others see the team
 * canceled) and nobody hangs. */
Test(train_model_sync, allreduce_failure_stops_every_replica)
{
    batch b;
    batch_init(&b);
    replica rep[MAXW];
    team t;
    /* call 3: the third BN's statistics (forward); call 21 + 2: the second
     * BN backward (21 BNs, one all-reduce each in forward) */
    int at[2] = {3, 23};
    for (int k = 0; k < 2; k++) {
        run_replicas(rep, 3, SL_BACKEND_REF, 1, &b, &t, 1, at[k]);
        cr_assert_eq(rep[1].rc, SL_EIO, "rank 1: %d %s", rep[1].rc, rep[1].err);
        cr_assert(strstr(rep[1].err, "sync-BN all-reduce") && strstr(rep[1].err, "injected"),
                  "%s", rep[1].err);
        cr_assert(strstr(rep[1].err, k ? "sl_model_backward" : "sl_model_forward: layer1.0.bn2"),
                  "%s", rep[1].err);
        for (int r = 0; r < 3; r += 2)
            cr_assert_eq(rep[r].rc, SL_ECANCELED, "rank %d: %d %s", r, rep[r].rc, rep[r].err);
        replicas_free(rep, 3, &t);
    }
    free(b.x);
}

/* A fake all-reduce that doubles the buffer: world 2 of two identical
 * replicas. */
static int doubling(void *ctx, float *buf, int n)
{
    (void)ctx;
    for (int i = 0; i < n; i++)
        buf[i] *= 2;
    return SL_OK;
}

static int never_called(void *ctx, float *buf, int n)
{
    (void)ctx, (void)buf, (void)n;
    return sl_fail(SL_EIO, "never_called: an eval forward all-reduced");
}

Test(train_model_sync, settings_and_global_row_check)
{
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_REF, 1), SL_OK);
    sl_model *m = mk(N);
    sl_bn_sync s = {NULL, NULL, 2};
    cr_assert_eq(sl_model_set_bn_sync(m, &s), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "allreduce_sum"), "%s", sl_errmsg());
    s.allreduce_sum = doubling, s.world = 0;
    cr_assert_eq(sl_model_set_bn_sync(m, &s), SL_EINVAL);
    cr_assert_eq(sl_model_set_bn_sync(NULL, NULL), SL_EINVAL);

    /* eval forwards use the running statistics: no all-reduce */
    float *x = randn(N * H * WD * 3, 3, 0.0f, 1.0f), dl[N * K] = {0};
    const float *lg;
    s.allreduce_sum = never_called, s.world = 2;
    cr_assert_eq(sl_model_set_bn_sync(m, &s), SL_OK);
    cr_assert_eq(sl_model_forward(m, &e, x, N, 0, &lg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_forward(m, &e, x, N, 1, &lg), SL_EIO);
    cr_assert(strstr(sl_errmsg(), "never_called"), "%s", sl_errmsg());

    /* a change of the sync setting between forward and backward makes that
     * backward refuse (it would mix local and global statistics) */
    s.allreduce_sum = doubling;
    cr_assert_eq(sl_model_set_bn_sync(m, &s), SL_OK);
    cr_assert_eq(sl_model_forward(m, &e, x, N, 1, &lg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_set_bn_sync(m, NULL), SL_OK);
    cr_assert_eq(sl_model_backward(m, &e, dl, NULL), SL_EINVAL);
    sl_model_destroy(m);

    /* layer3 of ResNet-20 at 4x4 is 1x1: one image gives one value per
     * channel, refused alone, fine with sync over 2 replicas */
    sl_model_config c = SL_MODEL_CONFIG_INIT;
    c.arch = SL_ARCH_RESNET20, c.classes = K, c.width = WIDTH;
    cr_assert_eq(sl_model_create(&c, 1, 4, 4, &m), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_forward(m, &e, x, 1, 1, &lg), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "layer3") && strstr(sl_errmsg(), "one value per channel"),
              "%s", sl_errmsg());
    cr_assert_eq(sl_model_set_bn_sync(m, &s), SL_OK);
    cr_assert_eq(sl_model_forward(m, &e, x, 1, 1, &lg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_backward(m, &e, dl, NULL), SL_OK, "%s", sl_errmsg());
    s.world = 1;
    cr_assert_eq(sl_model_set_bn_sync(m, &s), SL_OK);
    cr_assert_eq(sl_model_forward(m, &e, x, 1, 1, &lg), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "layer3") && strstr(sl_errmsg(), "sync-BN"), "%s",
              sl_errmsg());
    sl_model_destroy(m);
    free(x);
    sl_exec_fini(&e);
}

/* Without sync the model runs exactly today's ops: a model whose sync was
 * set and cleared gives the same bits as one never synchronized. */
Test(train_model_sync, off_is_bit_for_bit)
{
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_CPU, 1), SL_OK);
    sl_model *a = mk(N), *b = mk(N);
    sl_bn_sync s = {doubling, NULL, 2};
    cr_assert_eq(sl_model_set_bn_sync(b, &s), SL_OK);
    cr_assert_eq(sl_model_set_bn_sync(b, NULL), SL_OK);
    float *x = randn(N * H * WD * 3, 4, 0.0f, 1.0f), *dl = randn(N * K, 5, 0.0f, 0.1f);
    float la[N * K];
    const float *lg;
    cr_assert_eq(sl_model_forward(a, &e, x, N, 1, &lg), SL_OK);
    memcpy(la, lg, sizeof la);
    cr_assert_eq(sl_model_forward(b, &e, x, N, 1, &lg), SL_OK);
    cr_assert_eq(memcmp(la, lg, sizeof la), 0);
    cr_assert_eq(sl_model_backward(a, &e, dl, NULL), SL_OK);
    cr_assert_eq(sl_model_backward(b, &e, dl, NULL), SL_OK);
    int count;
    sl_tensor_info *ta = sl_model_tensors(a, &count), *tb = sl_model_tensors(b, &count);
    for (int i = 0; i < count; i++) {
        size_t bytes = (size_t)ta[i].numel * (ta[i].dtype == SL_T_I64 ? 8 : 4);
        cr_assert_eq(memcmp(ta[i].data, tb[i].data, bytes), 0, "%s", ta[i].name);
        if (ta[i].grad)
            cr_assert_eq(memcmp(ta[i].grad, tb[i].grad, bytes), 0, "%s grad", ta[i].name);
    }
    sl_model_destroy(a);
    sl_model_destroy(b);
    free(x), free(dl);
    sl_exec_fini(&e);
}

/* ---------------------------------------------------------- grad hook */

typedef struct hook_rec {
    sl_model *m;
    int ncalls;
    int order[512];  /* tensor index of each call */
    int calls[512];  /* per tensor */
    float **snap;    /* per tensor: its grad when the hook ran */
    int stop_at;     /* > 0: the stop_at-th call returns SL_ECANCELED */
} hook_rec;

static int hook(void *ctx, int i)
{
    hook_rec *h = ctx;
    int count;
    sl_tensor_info *t = sl_model_tensors(h->m, &count);
    if (i < 0 || i >= count || h->ncalls >= 512)
        return sl_fail(SL_EINVAL, "hook: index %d of %d", i, count);
    h->order[h->ncalls++] = i;
    h->calls[i]++;
    if (t[i].grad && h->snap[i])
        memcpy(h->snap[i], t[i].grad, (size_t)t[i].numel * sizeof(float));
    if (h->stop_at && h->ncalls == h->stop_at)
        return sl_fail(SL_ECANCELED, "hook: stop requested at call %d", h->ncalls);
    return SL_OK;
}

static void hook_case(int sync)
{
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_REF, 1), SL_OK);
    sl_model *m = mk(N);
    if (sync) { /* world 2 of two identical replicas */
        sl_bn_sync s = {doubling, NULL, 2};
        cr_assert_eq(sl_model_set_bn_sync(m, &s), SL_OK);
    }
    int count;
    sl_tensor_info *t = sl_model_tensors(m, &count);
    cr_assert_leq(count, 512);
    float *x1 = randn(N * H * WD * 3, 1, 0.0f, 1.0f), *x2 = randn(N * H * WD * 3, 2, 0.5f, 2.0f);
    float *dl1 = randn(N * K, 3, 0.0f, 0.1f), *dl2 = randn(N * K, 4, 0.0f, 0.1f);
    const float *lg;
    /* a first backward leaves grads that the second must overwrite: a hook
     * called before the last write would snapshot these */
    cr_assert_eq(sl_model_forward(m, &e, x1, N, 1, &lg), SL_OK);
    cr_assert_eq(sl_model_backward(m, &e, dl1, NULL), SL_OK);
    float **old = calloc((size_t)count, sizeof *old);
    hook_rec h = {.m = m, .snap = calloc((size_t)count, sizeof(float *))};
    cr_assert(old && h.snap);
    for (int i = 0; i < count; i++)
        if (t[i].grad) {
            old[i] = malloc((size_t)t[i].numel * sizeof(float));
            h.snap[i] = malloc((size_t)t[i].numel * sizeof(float));
            memcpy(old[i], t[i].grad, (size_t)t[i].numel * sizeof(float));
        }
    sl_model_set_grad_hook(m, hook, &h);
    cr_assert_eq(sl_model_forward(m, &e, x2, N, 1, &lg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(h.ncalls, 0, "no calls in forward");
    cr_assert_eq(sl_model_backward(m, &e, dl2, NULL), SL_OK, "%s", sl_errmsg());
    int nparams = 0;
    for (int i = 0; i < count; i++) {
        if (!(t[i].flags & SL_TENSOR_PARAM)) {
            cr_assert_eq(h.calls[i], 0, "buffer %s: %d calls", t[i].name, h.calls[i]);
            continue;
        }
        nparams++;
        cr_assert_eq(h.calls[i], 1, "%s: %d calls", t[i].name, h.calls[i]);
        size_t bytes = (size_t)t[i].numel * sizeof(float);
        cr_assert_eq(memcmp(h.snap[i], t[i].grad, bytes), 0, "%s: grad changed after its hook",
                     t[i].name);
        cr_assert_neq(memcmp(old[i], t[i].grad, bytes), 0, "%s: grad not rewritten", t[i].name);
    }
    cr_assert_eq(h.ncalls, nparams);
    /* backward order: the head first, the stem's conv last */
    cr_assert_str_eq(t[h.order[0]].name, "fc.weight");
    cr_assert_str_eq(t[h.order[1]].name, "fc.bias");
    cr_assert_str_eq(t[h.order[h.ncalls - 1]].name, "conv1.weight");
    cr_assert_str_eq(t[h.order[h.ncalls - 2]].name, "bn1.bias");

    /* a non-zero return stops backward with that code, and no call follows
     * (each backward needs a forward of its own: it writes each BN's input
     * gradient over its input; without one it refuses) */
    memset(&h.calls, 0, sizeof h.calls);
    h.ncalls = 0, h.stop_at = 7;
    cr_assert_eq(sl_model_backward(m, &e, dl1, NULL), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no train forward since the last backward"), "%s", sl_errmsg());
    cr_assert_eq(h.ncalls, 0);
    cr_assert_eq(sl_model_forward(m, &e, x2, N, 1, &lg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_backward(m, &e, dl1, NULL), SL_ECANCELED);
    cr_assert_eq(h.ncalls, 7);
    cr_assert(strstr(sl_errmsg(), "grad-ready hook") && strstr(sl_errmsg(), "stop requested") &&
              strstr(sl_errmsg(), t[h.order[6]].name), "%s", sl_errmsg());
    /* removed: backward runs again with no calls */
    sl_model_set_grad_hook(m, NULL, &h);
    h.ncalls = 0;
    cr_assert_eq(sl_model_forward(m, &e, x2, N, 1, &lg), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_model_backward(m, &e, dl1, NULL), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(h.ncalls, 0);
    for (int i = 0; i < count; i++)
        free(old[i]), free(h.snap[i]);
    free(old), free(h.snap), free(x1), free(x2), free(dl1), free(dl2);
    sl_model_destroy(m);
    sl_exec_fini(&e);
}

Test(train_model_sync, grad_hook_once_per_param_when_final) { hook_case(0); }
Test(train_model_sync, grad_hook_with_sync_bn) { hook_case(1); }

/* ------------------------------------------------------------ arenas */

Test(train_model_sync, arenas_hold_every_param)
{
    sl_exec e;
    cr_assert_eq(sl_exec_init(&e, SL_BACKEND_REF, 1), SL_OK);
    sl_model *m = mk(N);
    float *P = NULL, *G = NULL;
    size_t n = 0;
    sl_model_arenas(m, &P, &G, &n);
    cr_assert(P && G && P != G);
    cr_assert_geq(n, (size_t)sl_model_param_count(m));
    char *covered = calloc(n, 1);
    cr_assert_not_null(covered);
    int count;
    sl_tensor_info *t = sl_model_tensors(m, &count);
    int64_t sum = 0;
    ptrdiff_t last = -1;
    for (int i = 0; i < count; i++) {
        if (!(t[i].flags & SL_TENSOR_PARAM))
            continue;
        ptrdiff_t off = (float *)t[i].data - P;
        cr_assert(off >= 0 && (size_t)(off + t[i].numel) <= n, "%s outside the arena",
                  t[i].name);
        cr_assert_eq(t[i].grad - G, off, "%s: grad at another offset", t[i].name);
        cr_assert_gt(off, last, "%s: not in state-dict order", t[i].name);
        cr_assert_eq(off % 16, 0, "%s: not 64-byte aligned", t[i].name);
        for (int64_t j = 0; j < t[i].numel; j++) {
            cr_assert_eq(covered[off + j], 0, "%s overlaps", t[i].name);
            covered[off + j] = 1;
        }
        last = off;
        sum += t[i].numel;
    }
    cr_assert_eq(sum, sl_model_param_count(m));
    /* after a backward the padding between tensors is still zero */
    float *x = randn(N * H * WD * 3, 1, 0.0f, 1.0f), *dl = randn(N * K, 2, 0.0f, 0.1f);
    const float *lg;
    cr_assert_eq(sl_model_forward(m, &e, x, N, 1, &lg), SL_OK);
    cr_assert_eq(sl_model_backward(m, &e, dl, NULL), SL_OK);
    size_t pad = 0, nonzero = 0;
    for (size_t j = 0; j < n; j++) {
        if (covered[j]) {
            nonzero += G[j] != 0.0f;
            continue;
        }
        pad++;
        cr_assert_eq(G[j], 0.0f, "grad padding at %zu", j);
        cr_assert_eq(P[j], 0.0f, "param padding at %zu", j);
    }
    cr_log_info("arena %zu floats, %zu padding, %zu nonzero grads", n, pad, nonzero);
    cr_assert_gt(nonzero, (size_t)sum / 2);
    sl_model_arenas(NULL, &P, &G, &n);
    cr_assert(!P && !G && n == 0);
    free(covered), free(x), free(dl);
    sl_model_destroy(m);
    sl_exec_fini(&e);
}
