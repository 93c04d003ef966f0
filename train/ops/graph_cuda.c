/*
 * train/ops/graph_cuda.c - MLPerf ResNet's fused convolutions through
 * cuDNN's graph API: the plan cache behind ops.h's sl_fuse_prepare /
 * sl_fuse_conv_* / sl_fuse_plan (issue 27; issue 37 made the graphs
 * NVIDIA's documented ones). graph_build_cuda.c builds the three operation
 * graphs (ConvBNfprop, ConvBNwgrad, DgradDreluBNBwdWeight: its top
 * comment gives them and their sources); this file chooses an engine
 * configuration for each, keeps the plan, and runs it.
 *
 * Plans: per (graph, shape), built on the first sl_fuse_prepare that asks:
 *   1. Channel counts not multiples of 8 are refused without asking
 *      (fp16 NHWC rows and per-channel vectors 16-byte aligned, which the
 *      descriptors promise).
 *   2. The operation graph in its form (graph_cuda.h's sl_graph_form):
 *      DgradDreluBNBwdWeight's mean step by cudnnGetVersion() (SUB from
 *      9.8.0 on, ADD with alpha2 = -1 before); ConvBNwgrad's intermediates
 *      HALF as cudnn-frontend's sample, and when cuDNN refuses that form,
 *      FLOAT as Paddle's (the first refusal's reason kept in the note).
 *   3. cuDNN's heuristics, mode A then FALLBACK; every configuration they
 *      offer, in their order: its engine's numerical notes read
 *      (ENGINECFG_ENGINE, ENGINE_NUMERICAL_NOTE, as cudnn-frontend's
 *      Filters.h does); with SLUICE_CUDNN_DETERMINISTIC=1 (the default, as
 *      conv_cuda.cu, and as Paddle filters under FLAGS_cudnn_deterministic)
 *      NONDETERMINISTIC ones are skipped; the first whose execution plan
 *      finalizes with a workspace within the context's cap
 *      (SLUICE_CUDNN_WS_MB) is the plan. Only that configuration's
 *      descriptors are kept (the table grows as needed); the others go.
 *   4. No plan: the shape is remembered as refused with the real cause in
 *      words (which call failed and cuDNN's own reason from
 *      cudnnGetLastErrorString, or per heuristics mode how many
 *      configurations were offered, filtered as nondeterministic, failed
 *      to finalize (the first one's reason), or needed more workspace than
 *      the cap), and the caller runs that convolution unfused, which is
 *      always correct. sl_fuse_plan gives each entry's state and words.
 * A built plan runs with a variant pack of device pointers on the
 * context's stream (capturable: no allocation and no host wait; the
 * workspace is grown when the plan is made). Its descriptors (tensors,
 * operations, graph, configuration, plan) stay alive with it until the
 * context goes, the chain cudnn-frontend keeps.
 *
 * The weight gradient comes out in fp16 (the engine's output type) into
 * the context's tmp buffer and is widened into the f32 gradient, as
 * conv_cuda.cu's bf16 / f16 backward-filter does.
 *
 * Threading: the cache belongs to its context (one thread at a time).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ops/graph_cuda.h"

typedef struct plan_entry {
    int graph;
    sl_conv_shape sh;
    int ok;               /* a plan was made (else: refused) */
    sl_bdesc plan;
    int64_t ws;           /* its workspace bytes */
    int engine;           /* its engine's global index (-1: not read) */
    int nondet;           /* that engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC */
    sl_graph_form form;   /* the form built */
    char note[600];       /* refused: why; built: a retry's story, or "" */
    sl_desc_set keep;     /* the plan's descriptors, destroyed with the cache */
} plan_entry;

struct sl_graph_cache {
    plan_entry **e;
    int n, cap;
    int built, refused;
    int det;              /* NONDETERMINISTIC engine configurations skipped */
    char refusal[600];    /* the first refusal */
};

static void entry_free(plan_entry *p)
{
    sl_desc_set_clear(&p->keep);
    free(p);
}

static void cache_free(void *obj)
{
    sl_graph_cache *g = obj;
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        entry_free(g->e[i]);
    free(g->e);
    free(g);
}

/* The context frees it (sl_cuda_ctx_own): it never calls this file. */
int sl_graph_cache_attach(sl_cuda_ctx *cx)
{
    sl_graph_cache *g = calloc(1, sizeof *g);
    if (!g)
        return sl_fail(SL_ENOMEM, "sl_graph_cache_attach: out of memory");
    g->det = cx->det;
    int rc = sl_cuda_ctx_own(cx, g, cache_free); /* frees g when it fails */
    if (!rc)
        cx->graphs = g;
    return rc;
}

int sl_graph_available_cuda(const sl_exec *e)
{
    const sl_cuda_ctx *c = e ? (const sl_cuda_ctx *)e->cuda : NULL;
    return e && e->backend == SL_BACKEND_CUDA && c && e->act == SL_DTYPE_F16 && c->cudnn_fusion;
}

const char *sl_graph_refusal_cuda(const sl_exec *e)
{
    const sl_cuda_ctx *c = e ? (const sl_cuda_ctx *)e->cuda : NULL;
    return c && c->graphs ? c->graphs->refusal : "";
}

void sl_graph_stats(const sl_cuda_ctx *c, int *built, int *refused)
{
    *built = c && c->graphs ? c->graphs->built : 0;
    *refused = c && c->graphs ? c->graphs->refused : 0;
}

/* ----------------------------------------------------- engine configurations */

/* printf onto the end of out (cap bytes), cut at its end. */
static void append(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *out, size_t cap, const char *fmt, ...)
{
    size_t at = strlen(out);
    if (at + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + at, cap - at, fmt, ap);
    va_end(ap);
}


/* What one heuristics mode offered and why none of it was taken. */
typedef struct tally {
    int offered, nondet, failed, over;
    int64_t least_ws;      /* the smallest workspace over the cap */
    char first_fail[300];  /* the first configuration that failed to finalize: why */
    char none[300];        /* no configuration at all: cuDNN's words, if any */
    char call[400];        /* a call around the heuristics themselves failed: which, why */
} tally;

/* The engine behind cfg: its global index and whether its numerical notes
 * say NONDETERMINISTIC. false when cuDNN does not say (then it is not
 * known to be deterministic). */
static bool cfg_engine(sl_bdesc cfg, int *engine, int *nondet)
{
    sl_bdesc eng = NULL;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0, nn = 0, gi = -1;
    bool ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                       CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                       &nn, notes) == CUDNN_STATUS_SUCCESS;
    if (ok)
        (void)cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                       &n, &gi);
    if (eng)
        (void)cudnnBackendDestroyDescriptor(eng);
    *engine = (int)gi;
    *nondet = !ok;
    for (int64_t i = 0; ok && i < nn && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        *nondet |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    return ok;
}

/* cuDNN's status and reason for a failed call, into out. */
static void cudnn_words(cudnnStatus_t s, const char *call, char *out, size_t n)
{
    char why[256] = "";
    cudnnGetLastErrorString(why, sizeof why);
    snprintf(out, n, "%s: %s%s%s", call, cudnnGetErrorString(s), why[0] ? ": " : "", why);
}

/* The first configuration of the heuristics (mode) on og that passes
 * (the top comment's step 3): its plan into p, the configuration kept
 * with it. false with t saying why not. */
static bool pick_plan(plan_entry *p, sl_cuda_ctx *cx, sl_bdesc og, cudnnBackendHeurMode_t mode,
                      int det, tally *t)
{
    sl_graph_builder hb = {&p->keep, CUDNN_STATUS_SUCCESS, ""}, *b = &hb;
    sl_bdesc heur = NULL, *cfg = NULL;
    int64_t want = 0, got = 0;
    bool chosen = false;
    if (!sl_graph_ok(b, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur),
                     "cudnnBackendCreateDescriptor(ENGINEHEUR)") ||
        !sl_graph_ok(b, cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og),
                     "cudnnBackendSetAttribute(ENGINEHEUR_OPERATION_GRAPH)") ||
        !sl_graph_ok(b, cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE,
                                                 CUDNN_TYPE_HEUR_MODE, 1, &mode),
                     "cudnnBackendSetAttribute(ENGINEHEUR_MODE)") ||
        !sl_graph_ok(b, cudnnBackendFinalize(heur), "cudnnBackendFinalize(ENGINEHEUR)") ||
        !sl_graph_ok(b, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &want, NULL),
                     "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)"))
        goto done;
    if (want <= 0) {
        char why[256] = "";
        cudnnGetLastErrorString(why, sizeof why);
        snprintf(t->none, sizeof t->none, "%s", why);
        goto done;
    }
    if (!(cfg = calloc((size_t)want, sizeof *cfg))) {
        sl_graph_ok(b, CUDNN_STATUS_ALLOC_FAILED, "engine configurations: out of host memory");
        goto done;
    }
    for (int64_t i = 0; i < want; i++)
        if (!sl_graph_ok(b, cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                         &cfg[i]),
                         "cudnnBackendCreateDescriptor(ENGINECFG)"))
            goto done;
    if (!sl_graph_ok(b, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &got, cfg),
                     "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)"))
        goto done;
    got = got < want ? got : want; /* cuDNN's count may exceed what was asked for */
    t->offered += (int)got;
    for (int64_t i = 0; i < got && !chosen; i++) {
        int engine = -1, nondet = 0;
        (void)cfg_engine(cfg[i], &engine, &nondet);
        if (nondet && det) {
            t->nondet++;
            continue;
        }
        sl_bdesc plan = NULL;
        int64_t ws = 0, cnt = 0;
        const char *call = "cudnnBackendCreateDescriptor(EXECUTION_PLAN)";
        cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                                       &plan);
        if (s == CUDNN_STATUS_SUCCESS) {
            call = "cudnnBackendSetAttribute(EXECUTION_PLAN_HANDLE)";
            s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                         CUDNN_TYPE_HANDLE, 1, &cx->cudnn);
        }
        if (s == CUDNN_STATUS_SUCCESS) {
            call = "cudnnBackendSetAttribute(EXECUTION_PLAN_ENGINE_CONFIG)";
            s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        }
        if (s == CUDNN_STATUS_SUCCESS) {
            call = "cudnnBackendFinalize(EXECUTION_PLAN)";
            s = cudnnBackendFinalize(plan);
        }
        if (s == CUDNN_STATUS_SUCCESS) {
            call = "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)";
            s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &cnt, &ws);
        }
        if (s != CUDNN_STATUS_SUCCESS) {
            if (!t->failed++) {
                char w[260];
                cudnn_words(s, call, w, sizeof w);
                snprintf(t->first_fail, sizeof t->first_fail, "engine %d: %s", engine, w);
            }
        } else if (ws < 0 || (size_t)ws > cx->ws_max) {
            t->over++;
            t->least_ws = t->least_ws && t->least_ws < ws ? t->least_ws : ws;
        } else {
            sl_bdesc c = cfg[i];
            cfg[i] = NULL; /* kept with the plan, or destroyed by a failed add */
            bool kept = sl_desc_set_add(&p->keep, c);
            if (!kept)
                (void)cudnnBackendDestroyDescriptor(plan); /* c went with the failed add */
            else
                kept = sl_desc_set_add(&p->keep, plan);   /* a failed add destroys plan */
            if (!kept) {
                sl_graph_ok(b, CUDNN_STATUS_ALLOC_FAILED,
                            "the plan's descriptors: out of host memory");
                break;
            }
            p->plan = plan, p->ws = ws, p->engine = engine, p->nondet = nondet;
            chosen = true;
            continue;
        }
        if (plan)
            (void)cudnnBackendDestroyDescriptor(plan);
    }
done:
    if (hb.st != CUDNN_STATUS_SUCCESS)
        snprintf(t->call, sizeof t->call, "%s", hb.what);
    for (int64_t i = 0; cfg && i < want; i++)
        if (cfg[i])
            (void)cudnnBackendDestroyDescriptor(cfg[i]);
    free(cfg);
    if (heur)
        (void)cudnnBackendDestroyDescriptor(heur);
    return chosen;
}

/* Why mode's configurations did not serve, appended to out. */
static void describe(char *out, size_t n, const char *mode, const tally *t, size_t cap)
{
    const char *sep = out[0] ? "; " : "";
    if (t->call[0] && !t->offered) {
        append(out, n, "%sheuristics %s: %s", sep, mode, t->call);
        return;
    }
    if (!t->offered) {
        append(out, n, "%sheuristics %s offer no engine configuration%s%s%s", sep, mode,
               t->none[0] ? " (cuDNN: " : "", t->none, t->none[0] ? ")" : "");
        return;
    }
    append(out, n, "%sheuristics %s: %d configuration(s)", sep, mode, t->offered);
    if (t->nondet)
        append(out, n, ", %d NONDETERMINISTIC (skipped: SLUICE_CUDNN_DETERMINISTIC=1)",
               t->nondet);
    if (t->failed)
        append(out, n, ", %d failed to finalize (the first: %s)", t->failed, t->first_fail);
    if (t->over)
        append(out, n, ", %d need more workspace than the %zu MiB cap (SLUICE_CUDNN_WS_MB; "
               "the least %lld MiB)", t->over, cap >> 20,
               (long long)((t->least_ws + (1 << 20) - 1) >> 20));
    if (t->call[0])
        append(out, n, "; then %s", t->call);
}

/* Graph p->graph of p->sh in form f, and a plan for it: true when made;
 * false with why (everything built for it destroyed). */
static bool build(plan_entry *p, sl_cuda_ctx *cx, const sl_graph_form *f, char *why, size_t n)
{
    sl_graph_builder b = {&p->keep, CUDNN_STATUS_SUCCESS, ""};
    tally ta = {0}, tf = {0};
    sl_bdesc og = sl_graph_build(&b, cx->cudnn, p->graph, &p->sh, f);
    bool ok = og && (pick_plan(p, cx, og, CUDNN_HEUR_MODE_A, cx->graphs->det, &ta) ||
                     pick_plan(p, cx, og, CUDNN_HEUR_MODE_FALLBACK, cx->graphs->det, &tf));
    if (ok) {
        p->form = *f;
        return true;
    }
    why[0] = '\0';
    if (!og) {
        append(why, n, "the operation graph: %s", b.what);
    } else {
        describe(why, n, "mode A", &ta, cx->ws_max);
        describe(why, n, "FALLBACK", &tf, cx->ws_max);
    }
    sl_desc_set_clear(&p->keep);
    return false;
}

static const char *form_name(int g, const sl_graph_form *f)
{
    if (g == SL_G_DGRAD)
        return f->mean_sub ? "mean step SUB (cuDNN >= 9.8)" : "mean step ADD alpha2 -1";
    return f->virt == CUDNN_DATA_HALF ? "HALF intermediates" : "FLOAT intermediates";
}

/* The entry of (g, sh), or NULL. */
static plan_entry *find(const sl_graph_cache *gc, int g, const sl_conv_shape *sh)
{
    for (int i = 0; gc && i < gc->n; i++)
        if (gc->e[i]->graph == g && memcmp(&gc->e[i]->sh, sh, sizeof *sh) == 0)
            return gc->e[i];
    return NULL;
}

/* The entry of (g, sh), built on first use; NULL with sl_fail on an
 * allocation failure. A refused entry is returned with ok == 0. */
static plan_entry *entry_of(sl_cuda_ctx *cx, int g, const sl_conv_shape *sh)
{
    sl_graph_cache *gc = cx->graphs;
    plan_entry *p = find(gc, g, sh);
    if (p)
        return p;
    if (gc->n == gc->cap) {
        int ncap = gc->cap ? 2 * gc->cap : 32;
        plan_entry **ne = realloc(gc->e, (size_t)ncap * sizeof *ne);
        if (!ne) {
            sl_fail(SL_ENOMEM, "sl_fuse_prepare: a table of %d plans", ncap);
            return NULL;
        }
        gc->e = ne, gc->cap = ncap;
    }
    if (!(p = calloc(1, sizeof *p))) {
        sl_fail(SL_ENOMEM, "sl_fuse_prepare: out of memory");
        return NULL;
    }
    p->graph = g, p->sh = *sh, p->engine = -1;
    /* the forms to try, in order (graph_cuda.h) */
    int sub = cudnnGetVersion() >= 90800;
    sl_graph_form forms[2] = {{CUDNN_DATA_FLOAT, sub}, {CUDNN_DATA_FLOAT, sub}};
    int nforms = 1;
    if (g == SL_G_WGRAD)
        forms[0].virt = CUDNN_DATA_HALF, nforms = 2;
    char why[2][600] = {"", ""};
    if (sh->c % 8 || sh->k % 8)
        snprintf(why[0], sizeof why[0], "channels not multiples of 8 (fp16 NHWC tensors "
                 "16-byte aligned)");
    else
        for (int i = 0; i < nforms && !p->ok; i++) {
            p->ok = build(p, cx, &forms[i], why[i], sizeof why[i]);
            if (p->ok && i)
                append(p->note, sizeof p->note, "%s refused (%s); built with %s",
                       form_name(g, &forms[0]), why[0], form_name(g, &forms[1]));
        }
    if (p->ok && p->ws > 0 && !sl_cuda_workspace(cx, (size_t)p->ws)) {
        sl_fail(SL_ECUDA, "sl_fuse_prepare: %s workspace of %lld bytes: %s", sl_graph_names[g],
                (long long)p->ws, sl_errmsg());
        entry_free(p);
        return NULL;
    }
    if (p->ok) {
        gc->built++;
    } else {
        gc->refused++;
        append(p->note, sizeof p->note, "%s refused for n=%d %dx%d c=%d k=%d %dx%d/%d: ",
               sl_graph_names[g], sh->n, sh->h, sh->w, sh->c, sh->k, sh->r, sh->s, sh->stride);
        for (int i = 0; i < nforms && why[i][0]; i++)
            append(p->note, sizeof p->note, "%s%s%s%s", i ? "; then " : "",
                   nforms > 1 ? form_name(g, &forms[i]) : "", nforms > 1 ? ": " : "", why[i]);
        if (!gc->refusal[0])
            memcpy(gc->refusal, p->note, sizeof gc->refusal);
    }
    gc->e[gc->n++] = p;
    return p;
}

static int ctx_of(const char *fn, sl_exec *e, sl_cuda_ctx **out)
{
    int rc = sl_cuda_exec_ctx(fn, e, out);
    if (!rc && !(*out)->graphs)
        rc = sl_fail(SL_EINVAL, "%s: the cuda context has no plan cache", fn);
    return rc;
}

int sl_graph_prepare_cuda(sl_exec *e, const sl_conv_shape *sh, unsigned kinds)
{
    sl_cuda_ctx *cx = NULL;
    int rc = ctx_of("sl_fuse_prepare", e, &cx);
    if (rc)
        return rc;
    const char *refused = NULL;
    for (int g = 0; g < SL_NGRAPH; g++) {
        if (!(kinds & (1u << g)))
            continue;
        plan_entry *p = entry_of(cx, g, sh);
        if (!p)
            return SL_ENOMEM;
        if (!p->ok && !refused)
            refused = p->note; /* every kind asked for is built or refused first */
    }
    return refused ? sl_fail(SL_ENOTSUP, "sl_fuse_prepare: %s", refused) : SL_OK;
}

int sl_graph_plan_info_cuda(const sl_exec *e, int g, const sl_conv_shape *sh,
                            sl_fuse_plan_info *out)
{
    const sl_cuda_ctx *c = e ? (const sl_cuda_ctx *)e->cuda : NULL;
    memset(out, 0, sizeof *out);
    out->engine = -1;
    out->note = out->form = "";
    const plan_entry *p = find(c ? c->graphs : NULL, g, sh);
    if (!p)
        return SL_ENOENT;
    out->built = p->ok;
    out->note = p->note;
    if (p->ok) {
        out->engine = p->engine;
        out->nondeterministic = p->nondet;
        out->workspace = p->ws;
        out->form = form_name(g, &p->form);
    }
    return SL_OK;
}

/* ------------------------------------------------------------ execution */

/* Run (g, sh)'s plan with n tensors: uid[i] at ptr[i]. */
static int run_plan(const char *fn, sl_exec *e, int g, const sl_conv_shape *sh, int n,
                    const int64_t *uid, void **ptr)
{
    sl_cuda_ctx *cx = NULL;
    int rc = ctx_of(fn, e, &cx);
    if (rc)
        return rc;
    plan_entry *p = entry_of(cx, g, sh);
    if (!p)
        return SL_ENOMEM;
    if (!p->ok)
        return sl_fail(SL_ENOTSUP, "%s: %s (sl_fuse_prepare refuses it)", fn, p->note);
    void *ws = NULL;
    if (p->ws > 0 && !(ws = sl_cuda_workspace(cx, (size_t)p->ws)))
        return sl_fail(SL_ECUDA, "%s: workspace: %s", fn, sl_errmsg());
    sl_bdesc vp = NULL;
    if ((rc = SL_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp))))
        return sl_fail(rc, "%s: %s", fn, sl_errmsg());
    if (!(rc = SL_CUDNN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                                 CUDNN_TYPE_INT64, n, uid))) &&
        !(rc = SL_CUDNN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                                 CUDNN_TYPE_VOID_PTR, n, ptr))) &&
        !(rc = SL_CUDNN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                                 CUDNN_TYPE_VOID_PTR, 1, &ws))) &&
        !(rc = SL_CUDNN(cudnnBackendFinalize(vp))))
        rc = SL_CUDNN(cudnnBackendExecute(cx->cudnn, p->plan, vp));
    (void)cudnnBackendDestroyDescriptor(vp);
    return rc ? sl_fail(rc, "%s: %s n=%d %dx%d c=%d k=%d: %s (SLUICE_CUDNN_FUSION=0 runs the "
                        "unfused ops)", fn, sl_graph_names[g], sh->n, sh->h, sh->w, sh->c, sh->k,
                        sl_errmsg())
              : SL_OK;
}

/* The bias half of a prologue's fp16 scale-and-bias vector of c. */
static void *bias_of(const void *sb, int c) { return (char *)(uintptr_t)sb + (size_t)c * 2; }

int sl_graph_conv_fwd_cuda(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                           const float *w, float *y, float *sum, float *sqsum)
{
    int64_t uid[] = {SL_U_X, SL_U_S, SL_U_B, SL_U_W, SL_U_Y, SL_U_SUM, SL_U_SQSUM};
    void *ptr[] = {(void *)x, (void *)sb, bias_of(sb, sh->c), (void *)w, y, sum, sqsum};
    return run_plan("sl_fuse_conv_fwd", e, SL_G_FPROP, sh, 7, uid, ptr);
}

int sl_graph_conv_wgrad_cuda(sl_exec *e, const sl_conv_shape *sh, const float *x,
                             const void *sb, const float *dy, float *dw)
{
    const char *fn = "sl_fuse_conv_wgrad";
    sl_cuda_ctx *cx = NULL;
    int rc = ctx_of(fn, e, &cx);
    if (rc)
        return rc;
    int64_t nw = (int64_t)sh->k * sh->r * sh->s * sh->c;
    void *dw16 = sl_cuda_tmp(cx, (size_t)nw * 2);
    if (!dw16)
        return sl_fail(SL_ECUDA, "%s: %lld fp16 weight gradients of scratch: %s", fn,
                       (long long)nw, sl_errmsg());
    int64_t uid[] = {SL_U_X, SL_U_S, SL_U_B, SL_U_DY, SL_U_DW};
    void *ptr[] = {(void *)x, (void *)sb, bias_of(sb, sh->c), (void *)dy, dw16};
    if ((rc = run_plan(fn, e, SL_G_WGRAD, sh, 5, uid, ptr)))
        return rc;
    return sl_cast_cuda(e, nw, dw16, SL_DTYPE_F16, dw, SL_DTYPE_F32);
}

int sl_graph_conv_dgrad_cuda(sl_exec *e, const sl_conv_shape *sh, const float *dy,
                             const float *w, const float *xc, const float *mean,
                             const float *invstd, const float *gamma, const float *beta,
                             float *da, float *dgamma, float *dbeta, float *coef)
{
    int c = sh->c;
    int64_t uid[] = {SL_U_DY, SL_U_W, SL_U_XC, SL_U_MEAN, SL_U_INVSTD, SL_U_GAMMA, SL_U_BETA,
                     SL_U_DA, SL_U_DGAMMA, SL_U_DBETA, SL_U_EQ_DY, SL_U_EQ_X, SL_U_EQ_B};
    void *ptr[] = {(void *)dy, (void *)w, (void *)xc, (void *)mean, (void *)invstd,
                   (void *)gamma, (void *)beta, da, dgamma, dbeta, coef, coef + c,
                   coef + 2 * (size_t)c};
    return run_plan("sl_fuse_conv_dgrad", e, SL_G_DGRAD, sh, 13, uid, ptr);
}
