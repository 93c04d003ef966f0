/* tests/train/ops/test_norm_sync.c - synchronized batch norm pieces
 * (train/ops/norm_sync_ref.c, train/ops/norm_sync_cpu.c): cpu against ref on awkward
 * shapes, the pieces composed over W fake replicas (sums added in rank order
 * as an all-reduce would) against bn_fwd_train / bn_bwd on the concatenated
 * rows, a golden case split over two replicas, argument errors, and data far
 * from zero. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train/ops/ops.h"

static float urand(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_rand(st) >> 11) * (1.0 / 9007199254740992.0));
}

static float *falloc(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert(p, "malloc %lld floats", (long long)n);
    return p;
}

static float *fdup(const float *v, int64_t n)
{
    float *p = falloc(n);
    memcpy(p, v, (size_t)n * sizeof(float));
    return p;
}

/* max over channels of |gamma|*invstd: the size of a BN's y and dx terms
 * per unit of (x - mean) and dy, which sets their absolute float error. */
static double max_gi(const float *gamma, const float *invstd, int c)
{
    double m = 0;
    for (int ch = 0; ch < c; ch++)
        m = fmax(m, fabs((double)gamma[ch]) * invstd[ch]);
    return m;
}

static double max_abs(const float *v, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)v[i]));
    return m;
}

static void exec_init(sl_exec *e, sl_backend b)
{
    cr_assert_eq(sl_exec_init(e, b, 1), SL_OK, "%s", sl_errmsg());
}

/* Inputs of one BN: x, dy (rows, c) with per-channel offsets and scales;
 * gamma, beta, running stats (c). */
typedef struct bn_in {
    int64_t rows;
    int c;
    float *x, *dy, *gamma, *beta, *rmean, *rvar;
} bn_in;

static void bn_in_random(bn_in *b, int64_t rows, int c, uint64_t seed, float offset,
                         float noise)
{
    uint64_t st = seed;
    b->rows = rows, b->c = c;
    b->x = falloc(rows * c), b->dy = falloc(rows * c);
    b->gamma = falloc(c), b->beta = falloc(c), b->rmean = falloc(c), b->rvar = falloc(c);
    float *off = falloc(c), *sc = falloc(c);
    for (int ch = 0; ch < c; ch++) {
        off[ch] = offset + urand(&st, -3, 3);
        sc[ch] = noise * urand(&st, 0.2f, 4);
        b->gamma[ch] = urand(&st, 0.5f, 2);
        b->beta[ch] = urand(&st, -1, 1);
        b->rmean[ch] = urand(&st, -1, 1);
        b->rvar[ch] = urand(&st, 0.5f, 2);
    }
    for (int64_t r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) {
            b->x[r * c + ch] = off[ch] + sc[ch] * urand(&st, -1, 1);
            b->dy[r * c + ch] = urand(&st, -1, 1);
        }
    free(off);
    free(sc);
}

static void bn_in_free(bn_in *b)
{
    free(b->x), free(b->dy), free(b->gamma), free(b->beta), free(b->rmean), free(b->rvar);
}

/* ------------------------------------------------------------ cpu vs ref */

Test(train_norm_sync, cpu_matches_ref_awkward_shapes)
{
    static const int64_t rows[] = {1, 3, 1007};
    static const int cs[] = {1, 3, 17, 64};
    sl_exec er, ec;
    exec_init(&er, SL_BACKEND_REF);
    exec_init(&ec, SL_BACKEND_CPU);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
            int64_t R = rows[i];
            int c = cs[j];
            int64_t n = R * c;
            double total = (double)R * 3; /* as if two more replicas had as many rows */
            bn_in b;
            bn_in_random(&b, R, c, 7 + 13 * i + j, 0.0f, 1.0f);
            cr_log_info("sync pieces rows %lld c %d", (long long)R, c);
            int64_t ns = 2 * SL_BN_MOMENT_FLOATS * (int64_t)c; /* two replicas' slots */
            float *sr = falloc(ns), *sc = falloc(ns), *mean = falloc(c), *var = falloc(c),
                  *mc = falloc(c), *vc = falloc(c);
            /* bn_moments as replica 1 of 2, then the merge (slot 0 as if
             * replica 0 had these rows too) */
            cr_assert_eq(er.ops->bn_moments(&er, R, c, b.x, 2, 1, sr), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(ec.ops->bn_moments(&ec, R, c, b.x, 2, 1, sc), SL_OK, "%s", sl_errmsg());
            memcpy(sr, sr + ns / 2, (size_t)ns / 2 * sizeof(float));
            memcpy(sc, sc + ns / 2, (size_t)ns / 2 * sizeof(float));
            cr_assert_eq(er.ops->bn_moments_merge(&er, R, c, 2, sr, mean, var), SL_OK);
            cr_assert_eq(ec.ops->bn_moments_merge(&ec, R, c, 2, sc, mc, vc), SL_OK);
            tu_assert_close(mc, mean, c, 1e-6, 1e-6, "merged mean");
            tu_assert_close(vc, var, c, 1e-12, 2e-6, "merged var"); /* non-negative terms */
            for (int ch = 0; ch < c; ch++)
                var[ch] += 0.01f; /* generic, never 0 */

            /* bn_fwd_apply with the same mean / var */
            float *rm_r = fdup(b.rmean, c), *rv_r = fdup(b.rvar, c), *rm_c = fdup(b.rmean, c),
                  *rv_c = fdup(b.rvar, c);
            float *yr = falloc(n), *yc = falloc(n), *smr = falloc(c), *smc = falloc(c),
                  *sir = falloc(c), *sic = falloc(c);
            cr_assert_eq(er.ops->bn_fwd_apply(&er, R, c, b.x, b.gamma, b.beta, mean, var, total,
                                              0.1f, 1e-5f, rm_r, rv_r, yr, smr, sir), SL_OK,
                         "%s", sl_errmsg());
            cr_assert_eq(ec.ops->bn_fwd_apply(&ec, R, c, b.x, b.gamma, b.beta, mean, var, total,
                                              0.1f, 1e-5f, rm_c, rv_c, yc, smc, sic), SL_OK,
                         "%s", sl_errmsg());
            tu_assert_close(yc, yr, n, 2e-6, 2e-6, "y");
            tu_assert_close(smc, mean, c, 0, 0, "save_mean (= mean)");
            tu_assert_close(smr, mean, c, 0, 0, "ref save_mean (= mean)");
            tu_assert_close(sic, sir, c, 0, 1e-7, "save_invstd");
            tu_assert_close(rm_c, rm_r, c, 0, 0, "running_mean");
            tu_assert_close(rv_c, rv_r, c, 0, 1e-7, "running_var");
            for (int ch = 0; ch < c; ch++) { /* the running update by hand */
                double want = 0.9 * b.rvar[ch] + 0.1 * var[ch] * total / (total - 1);
                cr_assert(fabs(rv_r[ch] - want) <= 1e-6 * want, "running_var[%d] %g want %g",
                          ch, rv_r[ch], want);
            }

            /* bn_bwd_reduce with the same saved stats */
            float *sdy_r = falloc(c), *sdy_c = falloc(c), *sdx_r = falloc(c), *sdx_c = falloc(c);
            cr_assert_eq(er.ops->bn_bwd_reduce(&er, R, c, b.x, b.dy, smr, sir, sdy_r, sdx_r),
                         SL_OK, "%s", sl_errmsg());
            cr_assert_eq(ec.ops->bn_bwd_reduce(&ec, R, c, b.x, b.dy, smr, sir, sdy_c, sdx_c),
                         SL_OK, "%s", sl_errmsg());
            double atol = 2e-6 * sqrt((double)R);
            tu_assert_close(sdy_c, sdy_r, c, atol, 1e-5, "sum_dy");
            tu_assert_close(sdx_c, sdx_r, c, atol, 1e-5, "sum_dy_xhat");

            /* bn_bwd_apply with the same sums (as if all-reduced: x3) */
            for (int ch = 0; ch < c; ch++)
                sdy_r[ch] *= 3, sdx_r[ch] *= 3;
            float *dxr = falloc(n), *dxc = falloc(n);
            cr_assert_eq(er.ops->bn_bwd_apply(&er, R, c, b.x, b.dy, b.gamma, smr, sir, sdy_r,
                                              sdx_r, total, dxr), SL_OK, "%s", sl_errmsg());
            cr_assert_eq(ec.ops->bn_bwd_apply(&ec, R, c, b.x, b.dy, b.gamma, smr, sir, sdy_r,
                                              sdx_r, total, dxc), SL_OK, "%s", sl_errmsg());
            /* dx = a*dy - k*(x-mean) - b: terms of size gamma*invstd whose
             * float rounding stays when they cancel */
            tu_assert_close(dxc, dxr, n, 4e-7 * max_gi(b.gamma, sir, c), 1e-5, "dx");
            /* dx may be dy: in place gives the same */
            float *g = fdup(b.dy, n);
            cr_assert_eq(ec.ops->bn_bwd_apply(&ec, R, c, b.x, g, b.gamma, smr, sir, sdy_r, sdx_r,
                                              total, g), SL_OK);
            cr_assert_eq(memcmp(g, dxc, (size_t)n * sizeof(float)), 0, "in-place dx");
            free(g);

            free(mc), free(vc);
            free(sr), free(sc), free(mean), free(var), free(rm_r), free(rv_r), free(rm_c);
            free(rv_c), free(yr), free(yc), free(smr), free(smc), free(sir), free(sic);
            free(sdy_r), free(sdy_c), free(sdx_r), free(sdx_c), free(dxr), free(dxc);
            bn_in_free(&b);
        }
    sl_exec_fini(&er);
    sl_exec_fini(&ec);
}

/* ------------------------------------------- W replicas vs one big batch */

static void run_moments(sl_exec *e, const float *x, int64_t rows, int c, int W, float *mean,
                        float *var);

/* Replica r of W gets rows [cut[r], cut[r+1]), as many as every other
 * replica (the model's replicas have one batch size). */
typedef struct sync_out {
    float *y, *dx;               /* (rows, c), replica slices in place */
    float *smean, *sinv, *rm, *rv; /* (c), replica 0's (every replica's must be equal) */
    float *dgamma, *dbeta;       /* (c), sum over replicas of the local sums, in double */
} sync_out;

/* What the model does per BN, with the all-reduces done here in rank order
 * in float (as the test all-reduce of test_model_sync.c and the local
 * communicator's ring do, up to the order of the adds). */
static void run_sync(sl_exec *e, const bn_in *b, int W, const int64_t *cut, sync_out *o)
{
    int c = b->c;
    int64_t n = b->rows * c;
    double total = (double)b->rows;
    float *part = falloc((int64_t)W * 2 * c), *g = falloc(2 * c), *mean = falloc(c),
          *var = falloc(c);
    float *sm = falloc((int64_t)W * c), *si = falloc((int64_t)W * c), *rm = falloc((int64_t)W * c),
          *rv = falloc((int64_t)W * c);
#define SLICE(r) (cut[r + 1] - cut[r]), c
#define AT(v, r) ((v) + cut[r] * c)
    for (int r = 0; r < W; r++)
        cr_assert_eq(cut[r + 1] - cut[r], b->rows / W, "replica %d: unequal slice", r);
    /* forward: moments -> all-reduce -> Chan's merge; apply */
    run_moments(e, b->x, b->rows, c, W, mean, var);
    o->y = falloc(n), o->dx = falloc(n);
    for (int r = 0; r < W; r++) {
        memcpy(rm + r * c, b->rmean, (size_t)c * sizeof(float));
        memcpy(rv + r * c, b->rvar, (size_t)c * sizeof(float));
        cr_assert_eq(e->ops->bn_fwd_apply(e, SLICE(r), AT(b->x, r), b->gamma, b->beta, mean, var,
                                          total, 0.1f, 1e-5f, rm + r * c, rv + r * c,
                                          AT(o->y, r), sm + r * c, si + r * c), SL_OK, "%s",
                     sl_errmsg());
    }
    /* every replica ends with the same statistics, bit for bit */
    for (int r = 1; r < W; r++) {
        cr_assert_eq(memcmp(sm, sm + r * c, (size_t)c * 4), 0, "replica %d save_mean", r);
        cr_assert_eq(memcmp(si, si + r * c, (size_t)c * 4), 0, "replica %d save_invstd", r);
        cr_assert_eq(memcmp(rm, rm + r * c, (size_t)c * 4), 0, "replica %d running_mean", r);
        cr_assert_eq(memcmp(rv, rv + r * c, (size_t)c * 4), 0, "replica %d running_var", r);
    }
    o->smean = fdup(sm, c), o->sinv = fdup(si, c), o->rm = fdup(rm, c), o->rv = fdup(rv, c);

    /* backward: local sums; all-reduce both in one buffer; apply */
    for (int r = 0; r < W; r++)
        cr_assert_eq(e->ops->bn_bwd_reduce(e, SLICE(r), AT(b->x, r), AT(b->dy, r), sm + r * c,
                                           si + r * c, part + 2 * r * c, part + 2 * r * c + c),
                     SL_OK, "%s", sl_errmsg());
    o->dgamma = falloc(c), o->dbeta = falloc(c);
    for (int k = 0; k < 2 * c; k++) {
        float s = 0;
        double d = 0;
        for (int r = 0; r < W; r++)
            s += part[2 * r * c + k], d += part[2 * r * c + k];
        g[k] = s;
        if (k < c)
            o->dbeta[k] = (float)d;
        else
            o->dgamma[k - c] = (float)d;
    }
    for (int r = 0; r < W; r++)
        cr_assert_eq(e->ops->bn_bwd_apply(e, SLICE(r), AT(b->x, r), AT(b->dy, r), b->gamma,
                                          sm + r * c, si + r * c, g, g + c, total, AT(o->dx, r)),
                     SL_OK, "%s", sl_errmsg());
#undef SLICE
#undef AT
    free(part), free(g), free(mean), free(var), free(sm), free(si), free(rm), free(rv);
}

static void sync_out_free(sync_out *o)
{
    free(o->y), free(o->dx), free(o->smean), free(o->sinv), free(o->rm), free(o->rv);
    free(o->dgamma), free(o->dbeta);
}

/* Cut rows into W equal slices (rows a multiple of W). */
static void cuts(int64_t rows, int W, int64_t *cut)
{
    cr_assert_eq(rows % W, 0, "%lld rows over %d replicas", (long long)rows, W);
    for (int r = 0; r <= W; r++)
        cut[r] = rows / W * r;
}

Test(train_norm_sync, pieces_compose_to_bn_over_all_rows)
{
    static const int64_t rows[] = {12, 1008};
    static const int cs[] = {3, 17};
    static const int worlds[] = {1, 2, 3, 4};
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                int64_t R = rows[i];
                int c = cs[j];
                int64_t n = R * c;
                bn_in b;
                bn_in_random(&b, R, c, 100 + 7 * i + j, 0.0f, 1.0f);
                /* the whole batch on one replica, same backend */
                float *rm = fdup(b.rmean, c), *rv = fdup(b.rvar, c), *y = falloc(n),
                      *sm = falloc(c), *si = falloc(c), *dx = falloc(n), *dg = falloc(c),
                      *db = falloc(c);
                cr_assert_eq(e.ops->bn_fwd_train(&e, R, c, b.x, b.gamma, b.beta, 0.1f, 1e-5f, rm,
                                                 rv, y, sm, si), SL_OK, "%s", sl_errmsg());
                cr_assert_eq(e.ops->bn_bwd(&e, R, c, b.x, b.dy, b.gamma, sm, si, dx, dg, db),
                             SL_OK, "%s", sl_errmsg());
                for (int wi = 0; wi < 4; wi++) {
                    int W = worlds[wi];
                    int64_t cut[5];
                    cuts(R, W, cut);
                    cr_log_info("%s rows %lld c %d W %d", e.ops->name, (long long)R, c, W);
                    sync_out o;
                    run_sync(&e, &b, W, cut, &o);
                    /* The merged mean reaches bn_fwd_apply as a float: within
                     * ~ulp(xmax) of bn_fwd_train's; y and dx move by that times
                     * gamma*invstd. */
                    double mtol = 4e-7 * max_abs(b.x, n), gi = max_gi(b.gamma, si, c);
                    tu_assert_close(o.smean, sm, c, mtol, 0, "save_mean");
                    tu_assert_close(o.sinv, si, c, 0, 1e-6, "save_invstd");
                    tu_assert_close(o.rm, rm, c, mtol, 1e-6, "running_mean");
                    tu_assert_close(o.rv, rv, c, 0, 1e-6, "running_var");
                    tu_assert_close(o.y, y, n, 2e-6 + mtol * gi, 2e-6, "y");
                    tu_assert_close(o.dx, dx, n, 4e-7 * gi + 2 * mtol * gi * gi, 1e-5, "dx");
                    /* the replicas' local param grads add up to the whole batch's */
                    double atol = 2e-6 * sqrt((double)R);
                    tu_assert_close(o.dgamma, dg, c, atol, 1e-5, "sum of local dgamma");
                    tu_assert_close(o.dbeta, db, c, atol, 1e-5, "sum of local dbeta");
                    sync_out_free(&o);
                }
                free(rm), free(rv), free(y), free(sm), free(si), free(dx), free(dg), free(db);
                bn_in_free(&b);
            }
        sl_exec_fini(&e);
    }
}

/* test_norm.c's golden step (PyTorch's formulas worked by hand): rows 4,
 * c 2, over two replicas of 2 rows. */
Test(train_norm_sync, golden_split_over_two_replicas)
{
    static const float x[] = {1, 10, 2, 10, 3, 10, 4, 14};
    static const float y1[] = {-2.18327084f, -1.28867465f, -0.39442361f, -1.28867465f,
                               1.39442361f,  -1.28867465f, 3.18327084f,  -0.13397604f};
    static const float rm1[] = {0.25f, 1.1f}, rv1[] = {1.066666667f, 1.3f};
    static const float mean1[] = {2.5f, 11.0f}, inv1[] = {0.8944236133f, 0.5773493069f};
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float gamma[] = {2.0f, 0.5f}, beta[] = {0.5f, -1.0f};
        float dy[8] = {1, 0, 0, 1, 0, 0, 0, 0};
        bn_in b = {4, 2, (float *)x, dy, gamma, beta, (float[]){0, 0}, (float[]){1, 1}};
        int64_t cut[3] = {0, 2, 4};
        sync_out o;
        run_sync(&e, &b, 2, cut, &o);
        tu_assert_close(o.y, y1, 8, 1e-6, 1e-6, "y");
        tu_assert_close(o.smean, mean1, 2, 0, 1e-7, "save_mean");
        tu_assert_close(o.sinv, inv1, 2, 0, 1e-6, "save_invstd");
        tu_assert_close(o.rm, rm1, 2, 1e-7, 1e-6, "running_mean");
        tu_assert_close(o.rv, rv1, 2, 0, 1e-6, "running_var");
        /* dy = 1 at row 0 of ch 0 and row 1 of ch 1, else 0: dbeta = (1, 1),
         * dgamma = (xhat[0][0], xhat[1][1]) = ((1-2.5)*inv, (10-11)*inv) */
        float want_db[2] = {1, 1}, want_dg[2] = {-1.5f * inv1[0], -1.0f * inv1[1]};
        tu_assert_close(o.dbeta, want_db, 2, 0, 0, "dbeta");
        tu_assert_close(o.dgamma, want_dg, 2, 1e-7, 1e-6, "dgamma");
        /* dx[r][ch] = gamma*inv/4 * (4*dy - 1 - xhat*dgamma) */
        for (int r = 0; r < 4; r++)
            for (int ch = 0; ch < 2; ch++) {
                double xh = (x[r * 2 + ch] - mean1[ch]) * (double)inv1[ch];
                double want = gamma[ch] * (double)inv1[ch] / 4 *
                              (4 * dy[r * 2 + ch] - 1 - xh * want_dg[ch]);
                cr_assert(fabs(o.dx[r * 2 + ch] - want) <= 1e-6, "%s dx[%d][%d] %g want %g",
                          e.ops->name, r, ch, o.dx[r * 2 + ch], want);
            }
        sync_out_free(&o);
        sl_exec_fini(&e);
    }
}

/* ------------------------------------------------------------ errors */

Test(train_norm_sync, bad_arguments)
{
    float x[6] = {1, 2, 3, 4, 5, 6}, one[3] = {1, 1, 1}, zero[3] = {0}, out[6], rm[3] = {7, 7, 7},
          rv[3] = {9, 9, 9}, sm[3], si[3];
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        const sl_ops *o = e.ops;
        cr_assert_eq(sl_bn_bwd_reduce(&e, 2, 0, x, x, zero, one, out, out + 3), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "bn_bwd_reduce") && strstr(sl_errmsg(), o->name), "%s",
                  sl_errmsg());
        cr_assert_eq(sl_bn_bwd_reduce(&e, 2, -3, x, x, zero, one, out, out + 3), SL_EINVAL);
        /* a replica may have no rows: its sums are zero */
        out[0] = out[3] = 5;
        cr_assert_eq(sl_bn_bwd_reduce(&e, 0, 3, x, x, zero, one, out, out + 3), SL_OK, "%s",
                     sl_errmsg());
        cr_assert(out[0] == 0.0f && out[3] == 0.0f);
        /* forward statistics need 2 rows in all; total >= this replica's rows */
        for (int t = 0; t < 3; t++) {
            double totals[] = {1.0, 0.5, NAN};
            int rc = sl_bn_fwd_apply(&e, 1, 3, x, one, zero, zero, one, totals[t], 0.1f, 1e-5f,
                                     rm, rv, out, sm, si);
            cr_assert_eq(rc, SL_EINVAL, "%s total %g", o->name, totals[t]);
            cr_assert(strstr(sl_errmsg(), "at least 2 values per channel"), "%s", sl_errmsg());
        }
        cr_assert_eq(sl_bn_fwd_apply(&e, 2, 3, x, one, zero, zero, one, 1.5, 0.1f, 1e-5f, rm, rv,
                                     out, sm, si), SL_EINVAL, "total below rows");
        for (int ch = 0; ch < 3; ch++)
            cr_assert(rm[ch] == 7 && rv[ch] == 9, "nothing written on refusal");
        cr_assert_eq(sl_bn_bwd_apply(&e, 2, 3, x, x, one, zero, one, zero, zero, 0.0, out),
                     SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "bn_bwd_apply"), "%s", sl_errmsg());
        sl_exec_fini(&e);
    }
#ifndef SLUICE_TRAIN_CUDA
    /* the cuda table's slots are absent and the entry points say so (a
     * build with the cuda backend has real ops there, which need a cuda
     * sl_exec) */
    sl_exec ce = {.ops = &sl_ops_cuda, .backend = SL_BACKEND_CUDA};
    cr_assert_eq(sl_bn_fwd_apply(&ce, 2, 3, x, one, zero, zero, one, 2.0, 0.1f, 1e-5f, rm, rv,
                                 out, sm, si), SL_ENOTSUP);
    cr_assert_eq(sl_bn_bwd_reduce(&ce, 2, 3, x, x, zero, one, out, out + 3), SL_ENOTSUP);
    cr_assert(strstr(sl_errmsg(), "bn_bwd_reduce") && strstr(sl_errmsg(), "no cuda backend"),
              "%s", sl_errmsg());
    cr_assert_eq(sl_bn_bwd_apply(&ce, 2, 3, x, x, one, zero, one, zero, zero, 2.0, out),
                 SL_ENOTSUP);
#endif
}

/* ------------------------------------------------------ far from zero */

/* x = 1000 + noise over 3 replicas. The variance stays accurate: each
 * replica's M2 is a sum of squared deviations around its own mean, merged
 * with Chan's formula, where a sum of squares minus a squared sum (1e6 -
 * 1e6 in float) would be noise. The merged mean reaches bn_fwd_apply as a
 * float (ulp(1000)/2 off at most), and y moves by that times gamma*invstd
 * against bn_fwd_train (whose cpu version keeps the mean as hi + lo). The
 * tolerances below are a few times that bound. */
Test(train_norm_sync, large_offset_accuracy)
{
    const int64_t R = 30000;
    const int c = 5;
    sl_exec er;
    exec_init(&er, SL_BACKEND_REF);
    bn_in b;
    bn_in_random(&b, R, c, 3, 1000.0f, 0.5f);
    float *rm = fdup(b.rmean, c), *rv = fdup(b.rvar, c), *y = falloc(R * c), *sm = falloc(c),
          *si = falloc(c), *dx = falloc(R * c), *dg = falloc(c), *db = falloc(c);
    cr_assert_eq(er.ops->bn_fwd_train(&er, R, c, b.x, b.gamma, b.beta, 0.1f, 1e-5f, rm, rv, y, sm,
                                      si), SL_OK);
    cr_assert_eq(er.ops->bn_bwd(&er, R, c, b.x, b.dy, b.gamma, sm, si, dx, dg, db), SL_OK);
    double mtol = 4 * 6.1e-5, gi = max_gi(b.gamma, si, c); /* 4 ulp(1000) */
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        int64_t cut[4];
        cuts(R, 3, cut);
        sync_out o;
        run_sync(&e, &b, 3, cut, &o);
        cr_log_info("%s: y tolerance %.3g", e.ops->name, mtol * gi);
        tu_assert_close(o.smean, sm, c, mtol, 0, "save_mean");
        tu_assert_close(o.sinv, si, c, 0, 1e-5, "save_invstd");
        tu_assert_close(o.rv, rv, c, 0, 1e-5, "running_var");
        tu_assert_close(o.y, y, R * c, mtol * gi, 1e-5, "y");
        tu_assert_close(o.dx, dx, R * c, 4e-7 * gi + 2 * mtol * gi * gi, 1e-4, "dx");
        sync_out_free(&o);
        sl_exec_fini(&e);
    }
    free(rm), free(rv), free(y), free(sm), free(si), free(dx), free(dg), free(db);
    bn_in_free(&b);
    sl_exec_fini(&er);
}

/* ------------------------------------------------ moments (Chan merge) */

/* What the model's synchronized forward does for its statistics (model.c
 * bn_sync_fwd): each of W replicas (equal slices of rows) fills its slot,
 * the slots are summed in rank order in float (the all-reduce), every
 * replica merges them. mean, var (c) get replica 0's; every replica's must
 * be the same bits. */
static void run_moments(sl_exec *e, const float *x, int64_t rows, int c, int W, float *mean,
                        float *var)
{
    int64_t per = (int64_t)SL_BN_MOMENT_FLOATS * c, n = (int64_t)W * per;
    int64_t slice = rows / W;
    cr_assert_eq(slice * W, rows, "rows must split evenly");
    float *buf = falloc((int64_t)W * n), *sum = falloc(n), *m = falloc(c), *v = falloc(c);
    for (int r = 0; r < W; r++) {
        float *mine = buf + r * n;
        for (int64_t i = 0; i < n; i++)
            mine[i] = NAN; /* bn_moments writes every slot */
        cr_assert_eq(e->ops->bn_moments(e, slice, c, x + (int64_t)r * slice * c, W, r, mine),
                     SL_OK, "%s", sl_errmsg());
        for (int q = 0; q < W; q++)
            for (int64_t i = 0; i < per; i++)
                if (q != r)
                    cr_assert(mine[q * per + i] == 0.0f, "replica %d slot %d not zeroed", r, q);
    }
    for (int64_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < W; r++)
            s += buf[r * n + i];
        sum[i] = s;
    }
    for (int r = 0; r < W; r++) {
        cr_assert_eq(e->ops->bn_moments_merge(e, slice, c, W, sum, r ? m : mean, r ? v : var),
                     SL_OK, "%s", sl_errmsg());
        if (r) {
            cr_assert_eq(memcmp(m, mean, (size_t)c * 4), 0, "replica %d mean", r);
            cr_assert_eq(memcmp(v, var, (size_t)c * 4), 0, "replica %d var", r);
        }
    }
    free(buf), free(sum), free(m), free(v);
}

/* mean and biased variance of each channel of x in long double, two passes. */
static void exact_stats(const float *x, int64_t rows, int c, double *mean, double *var)
{
    for (int ch = 0; ch < c; ch++) {
        long double s = 0, q = 0;
        for (int64_t r = 0; r < rows; r++)
            s += x[r * c + ch];
        long double mu = s / rows;
        for (int64_t r = 0; r < rows; r++) {
            long double d = x[r * c + ch] - mu;
            q += d * d;
        }
        mean[ch] = (double)mu;
        var[ch] = (double)(q / rows);
    }
}

/* ref and cpu, 1..3 replicas, awkward shapes: the merged statistics are
 * those of all the rows (long double), to float rounding; bn_fwd_apply
 * with them gives bn_fwd_train's outputs on all the rows. */
Test(train_norm_sync, moments_compose_to_stats_of_all_rows)
{
    static const int64_t rows[] = {6, 30, 1002, 256 * 7 * 7 * 3 + 6};
    static const int cs[] = {1, 3, 17, 64, 129};
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e, er;
        exec_init(&e, backs[k]);
        exec_init(&er, SL_BACKEND_REF);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++)
                for (int W = 1; W <= 3; W++) {
                    int64_t R = rows[i];
                    int c = cs[j];
                    if (R * c > 1000000 && W != 2)
                        continue; /* the big shape once: time under ASan */
                    bn_in b;
                    bn_in_random(&b, R, c, 11 + 7 * i + j + 100 * W, (float)j, 1.0f);
                    float *mean = falloc(c), *var = falloc(c);
                    double *em = malloc(sizeof(double) * c), *ev = malloc(sizeof(double) * c);
                    cr_assert(em && ev);
                    run_moments(&e, b.x, R, c, W, mean, var);
                    exact_stats(b.x, R, c, em, ev);
                    for (int ch = 0; ch < c; ch++) {
                        double sd = sqrt(ev[ch]);
                        cr_assert(fabs(mean[ch] - em[ch]) <= 1e-6 * sd + 6e-8 * fabs(em[ch]),
                                  "%s W %d rows %lld c %d: mean[%d] %.9g want %.9g",
                                  e.ops->name, W, (long long)R, c, ch, mean[ch], em[ch]);
                        cr_assert(fabs(var[ch] - ev[ch]) <= 1e-6 * ev[ch],
                                  "%s W %d rows %lld c %d: var[%d] %.9g want %.9g",
                                  e.ops->name, W, (long long)R, c, ch, var[ch], ev[ch]);
                    }
                    /* the forward on the merged statistics is bn_fwd_train's */
                    float *rm = fdup(b.rmean, c), *rv = fdup(b.rvar, c), *y = falloc(R * c),
                          *sm = falloc(c), *si = falloc(c);
                    float *rm2 = fdup(b.rmean, c), *rv2 = fdup(b.rvar, c), *y2 = falloc(R * c),
                          *sm2 = falloc(c), *si2 = falloc(c);
                    cr_assert_eq(er.ops->bn_fwd_train(&er, R, c, b.x, b.gamma, b.beta, 0.1f,
                                                      1e-5f, rm, rv, y, sm, si), SL_OK);
                    cr_assert_eq(e.ops->bn_fwd_apply(&e, R, c, b.x, b.gamma, b.beta, mean, var,
                                                     (double)R, 0.1f, 1e-5f, rm2, rv2, y2, sm2,
                                                     si2), SL_OK, "%s", sl_errmsg());
                    tu_assert_close(rv2, rv, c, 0, 1e-6, "running_var");
                    tu_assert_close(rm2, rm, c, 1e-7, 1e-6, "running_mean");
                    tu_assert_close(y2, y, R * c, 1e-5 * max_gi(b.gamma, si, c), 1e-5, "y");
                    free(rm), free(rv), free(y), free(sm), free(si);
                    free(rm2), free(rv2), free(y2), free(sm2), free(si2);
                    free(mean), free(var), free(em), free(ev);
                    bn_in_free(&b);
                }
        sl_exec_fini(&e);
        sl_exec_fini(&er);
    }
}

/* The variance the model took before Chan's merge: each replica's float sum
 * of x (accumulated in double), the sums all-reduced in float, the mean a
 * float; then each replica's float sum of (x - mean)^2 all-reduced alike
 * (the bn_sum / bn_sqdev_sum ops, removed since). */
static void float_sums_var(const float *x, int64_t rows, int c, int W, float *var)
{
    int64_t slice = rows / W;
    for (int ch = 0; ch < c; ch++) {
        float s = 0, q = 0;
        for (int r = 0; r < W; r++) {
            double a = 0;
            for (int64_t i = r * slice; i < (r + 1) * slice; i++)
                a += x[i * c + ch];
            s += (float)a;
        }
        float mean = (float)(s / (double)rows);
        for (int r = 0; r < W; r++) {
            double a = 0;
            for (int64_t i = r * slice; i < (r + 1) * slice; i++) {
                double d = x[i * c + ch] - (double)mean;
                a += d * d;
            }
            q += (float)a;
        }
        var[ch] = (float)(q / (double)rows);
    }
}

/* Data far from zero with many rows a replica (a 224 px BN: 50,176 rows a
 * channel per image): Chan's merge keeps the variance to float rounding;
 * a variance from float sums of the replicas (float_sums_var, as the model
 * did before) does not. */
Test(train_norm_sync, moments_far_from_zero_beat_float_sums)
{
    const int64_t R = 2 * 50176;
    const int c = 3, W = 2;
    bn_in b;
    bn_in_random(&b, R, c, 5, 3000.0f, 0.02f);
    double em[3], ev[3];
    exact_stats(b.x, R, c, em, ev);
    float fv[3];
    float_sums_var(b.x, R, c, W, fv);
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        float mean[3], var[3];
        run_moments(&e, b.x, R, c, W, mean, var);
        double worst_m = 0, worst_f = 0;
        for (int ch = 0; ch < c; ch++) {
            worst_m = fmax(worst_m, fabs(var[ch] - ev[ch]) / ev[ch]);
            worst_f = fmax(worst_f, fabs(fv[ch] - ev[ch]) / ev[ch]);
        }
        cr_log_info("%s: variance at mean/std ~ 1e5: Chan merge off by %.2g, float sums by %.2g",
                    e.ops->name, worst_m, worst_f);
        cr_assert_leq(worst_m, 1e-6, "%s: merged variance off by %g", e.ops->name, worst_m);
        cr_assert_gt(worst_f, 10 * worst_m, "%s: float sums as good (%g vs %g)?", e.ops->name,
                     worst_f, worst_m);
        sl_exec_fini(&e);
    }
    bn_in_free(&b);
}

Test(train_norm_sync, moments_bad_arguments)
{
    float x[6] = {1, 2, 3, 4, 5, 6}, slots[18], mean[3], var[3];
    sl_backend backs[] = {SL_BACKEND_REF, SL_BACKEND_CPU};
    for (int k = 0; k < 2; k++) {
        sl_exec e;
        exec_init(&e, backs[k]);
        const sl_ops *o = e.ops;
        cr_assert_eq(sl_bn_moments(&e, 2, 3, x, 2, 2, slots), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "bn_moments") && strstr(sl_errmsg(), o->name) &&
                  strstr(sl_errmsg(), "replica 2 of 2"), "%s", sl_errmsg());
        cr_assert_eq(sl_bn_moments(&e, 2, 3, x, 0, 0, slots), SL_EINVAL);
        cr_assert_eq(sl_bn_moments(&e, 2, 0, x, 1, 0, slots), SL_EINVAL);
        cr_assert_eq(sl_bn_moments_merge(&e, -1, 3, 1, slots, mean, var), SL_EINVAL);
        cr_assert_eq(sl_bn_moments_merge(&e, 2, 3, 0, slots, mean, var), SL_EINVAL);
        cr_assert(strstr(sl_errmsg(), "bn_moments_merge"), "%s", sl_errmsg());
        /* no rows anywhere: zeros (bn_fwd_apply refuses the total later) */
        cr_assert_eq(sl_bn_moments(&e, 0, 3, x, 2, 1, slots), SL_OK, "%s", sl_errmsg());
        for (int i = 0; i < 18; i++)
            cr_assert(slots[i] == 0.0f);
        cr_assert_eq(sl_bn_moments_merge(&e, 0, 3, 2, slots, mean, var), SL_OK);
        cr_assert(mean[0] == 0 && var[0] == 0);
        sl_exec_fini(&e);
    }
#ifndef SLUICE_TRAIN_CUDA
    sl_exec ce = {.ops = &sl_ops_cuda, .backend = SL_BACKEND_CUDA};
    cr_assert_eq(sl_bn_moments(&ce, 2, 3, x, 1, 0, slots), SL_ENOTSUP);
    cr_assert(strstr(sl_errmsg(), "bn_moments") && strstr(sl_errmsg(), "no cuda backend"), "%s",
              sl_errmsg());
    cr_assert_eq(sl_bn_moments_merge(&ce, 2, 3, 1, slots, mean, var), SL_ENOTSUP);
#endif
}
