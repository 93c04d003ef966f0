/*
 * train/ops/graph_cuda.c - MLPerf ResNet's fused convolutions through
 * cuDNN's graph API (cudnn_graph.h's backend descriptors, plain C): the
 * functions behind train_int.h's sl_fuse_prepare / sl_fuse_conv_* (issue
 * 27). Three op graphs, those of cuDNN's specialized engines for the
 * ResNet chain (fp16 in and out, NHWC, filters KRSC; NVIDIA's
 * cudnn-frontend samples and apex's bottleneck build the same):
 *
 *   ConvBNfprop            X -> *S -> +B -> ReLU -> conv(W) -> Y
 *                          Y -> GenStats -> SUM, SQSUM (f32, per channel)
 *   ConvBNwgrad            X -> *S -> +B -> ReLU -> wgrad(DY) -> DW
 *   DgradDreluBNBwdWeight  DY -> dgrad(W) -> G;  XC -> *S -> +B -> T;
 *                          DA = ReLU'(T) G;  BN_BWD_WEIGHTS(XC, DA, MEAN,
 *                          INVSTD, GAMMA) -> DGAMMA, DBETA, EQ_DY, EQ_X, EQ_B
 *
 * S and B are the previous BN's folded scale and bias (fp16, what the
 * engines take), so the BN'd, ReLU'd activation between two convolutions is
 * never written: ConvBNfprop recomputes it on the way into the
 * convolution, ConvBNwgrad on the way into the weight gradient, and the
 * dgrad plan recomputes its ReLU mask. The intermediates are virtual
 * tensors of f32 (the engines' compute type).
 *
 * Plans: per (graph, shape), built on the first sl_fuse_prepare: the
 * operation graph, cuDNN's heuristic ranking (mode A, then FALLBACK), and
 * the first engine configuration whose execution plan finalizes with a
 * workspace within the context's cap (SLUICE_CUDNN_WS_MB, as conv_cuda.cu).
 * Channel counts that are not multiples of 8 are refused without asking
 * (the engines' documented rule). A graph with no such plan is refused:
 * whatever cuDNN said (a
 * NOT_SUPPORTED code on a device whose engines lack the pattern, or any
 * other failure while building) is kept as the cache's refusal text, the
 * shape is remembered as refused, and the caller runs that layer unfused,
 * which is always correct. Once built, a plan runs with a variant pack of
 * device pointers on the context's stream (capturable: no allocation and
 * no host wait; the workspace is grown when the plan is made).
 * The descriptors of a plan (tensors, operations, graph, configuration)
 * stay alive with it until the context goes.
 *
 * The weight gradient comes out in fp16 (the engine's output type) into
 * the context's tmp buffer and is widened into the f32 gradient, as
 * conv_cuda.cu's bf16 / f16 backward-filter does.
 *
 * Threading: the cache belongs to its context (one thread at a time).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ops/cuda_int.h"

typedef cudnnBackendDescriptor_t bdesc;

enum { G_FPROP, G_WGRAD, G_DGRAD, NGRAPH };
static const char *const graph_name[NGRAPH] = {"ConvBNfprop", "ConvBNwgrad",
                                               "DgradDreluBNBwdWeight"};

/* Unique ids of the tensors (the variant pack names them). */
enum {
    U_X = 1, U_S, U_B, U_W, U_Y, U_SUM, U_SQSUM, U_DY, U_DW, U_XC, U_DA,
    U_MEAN, U_INVSTD, U_GAMMA, U_DGAMMA, U_DBETA, U_EQ_DY, U_EQ_X, U_EQ_B,
    U_V1 = 101, U_V2, U_V3
};

#define MAX_DESC 32

typedef struct plan_entry {
    int graph;
    sl_conv_shape sh;
    int ok;             /* a plan was made (else: refused) */
    bdesc plan;
    int64_t ws;         /* its workspace bytes */
    bdesc keep[MAX_DESC]; /* the plan's descriptors, destroyed with the cache */
    int nkeep;
} plan_entry;

struct sl_graph_cache {
    plan_entry **e;
    int n, cap;
    int built, refused;
    char refusal[240];  /* the first refusal */
};

int sl_graph_cache_create(sl_graph_cache **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? SL_OK : sl_fail(SL_ENOMEM, "sl_graph_cache_create: out of memory");
}

static void entry_free(plan_entry *p)
{
    for (int i = p->nkeep - 1; i >= 0; i--)
        (void)cudnnBackendDestroyDescriptor(p->keep[i]);
    free(p);
}

void sl_graph_cache_free(sl_graph_cache *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        entry_free(g->e[i]);
    free(g->e);
    free(g);
}

const char *sl_graph_refusal_cuda(const sl_cuda_ctx *c)
{
    return c && c->graphs ? c->graphs->refusal : "";
}

void sl_graph_stats(const sl_cuda_ctx *c, int *built, int *refused)
{
    *built = c && c->graphs ? c->graphs->built : 0;
    *refused = c && c->graphs ? c->graphs->refused : 0;
}

/* ------------------------------------------------------------- building */

/* A plan under construction: its descriptors (kept by the entry) and the
 * first cuDNN call that failed. */
typedef struct builder {
    plan_entry *p;
    cudnnStatus_t st;
    char what[120];
} builder;

static bool ok(builder *b, cudnnStatus_t s, const char *call)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return true;
    if (b->st == CUDNN_STATUS_SUCCESS) {
        b->st = s;
        snprintf(b->what, sizeof b->what, "%s", call);
    }
    return false;
}
#define TRY(b, call) ok((b), (call), #call)

static bdesc mk(builder *b, cudnnBackendDescriptorType_t t)
{
    bdesc d = NULL;
    if (b->p->nkeep == MAX_DESC) {
        ok(b, CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "descriptor table full");
        return NULL;
    }
    if (!TRY(b, cudnnBackendCreateDescriptor(t, &d)))
        return NULL;
    b->p->keep[b->p->nkeep++] = d;
    return d;
}

static bool set(builder *b, bdesc d, cudnnBackendAttributeName_t a,
                cudnnBackendAttributeType_t t, int64_t n, const void *v)
{
    return d && TRY(b, cudnnBackendSetAttribute(d, a, t, n, v));
}

static bool fin(builder *b, bdesc d) { return d && TRY(b, cudnnBackendFinalize(d)); }

/* An NHWC-packed tensor of logical dims (n, c, h, w) (a KRSC filter is (k,
 * c, r, s), a per-channel vector (1, c, 1, 1)). */
static bdesc tensor(builder *b, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c,
                    int64_t h, int64_t w, bool virt)
{
    int64_t dim[4] = {n, c, h, w}, str[4] = {h * w * c, 1, w * c, c}, align = 16;
    bdesc d = mk(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!set(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) ||
        !set(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim) ||
        !set(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str) ||
        !set(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) ||
        !set(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) ||
        !set(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt) || !fin(b, d))
        return NULL;
    return d;
}

static bdesc vec(builder *b, int64_t uid, cudnnDataType_t dt, int64_t c)
{
    return tensor(b, uid, dt, 1, c, 1, 1, false);
}

static bdesc conv_desc(builder *b, const sl_conv_shape *sh)
{
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t nd = 2, dil[2] = {1, 1}, str[2] = {sh->stride, sh->stride},
            pad[2] = {sh->pad, sh->pad};
    bdesc d = mk(b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    if (!set(b, d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct) ||
        !set(b, d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
        !set(b, d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd) ||
        !set(b, d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
        !set(b, d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str) ||
        !set(b, d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
        !set(b, d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) || !fin(b, d))
        return NULL;
    return d;
}

/* A pointwise operation: y = mode(x, bb) (bb NULL for unary modes), or for
 * RELU_BWD dx = relu'(x) dy with x = the forward input, bb = dy, y = dx. */
static bdesc pointwise(builder *b, cudnnPointwiseMode_t mode, bdesc x, bdesc bb, bdesc y)
{
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    bdesc pw = mk(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    if (!set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
        !set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) ||
        !fin(b, pw))
        return NULL;
    bdesc op = mk(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             1, &pw))
        return NULL;
    const cudnnBackendAttributeType_t t = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    if (mode == CUDNN_POINTWISE_RELU_BWD) {
        if (!set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t, 1, &x) ||
            !set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, t, 1, &bb) ||
            !set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, t, 1, &y))
            return NULL;
    } else if (!set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t, 1, &x) ||
               (bb && !set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, t, 1, &bb)) ||
               !set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t, 1, &y)) {
        return NULL;
    }
    return fin(b, op) ? op : NULL;
}

/* The prologue relu(x*s + b) into the virtual v3; its three operations
 * into ops. */
static bool prologue(builder *b, bdesc x, bdesc s, bdesc bias, bdesc v1, bdesc v2, bdesc v3,
                     bdesc *ops)
{
    ops[0] = pointwise(b, CUDNN_POINTWISE_MUL, x, s, v1);
    ops[1] = pointwise(b, CUDNN_POINTWISE_ADD, v1, bias, v2);
    ops[2] = pointwise(b, CUDNN_POINTWISE_RELU_FWD, v2, NULL, v3);
    return ops[0] && ops[1] && ops[2];
}

/* A convolution operation of direction t: (a, w_or_dy, out) are (x, w, y)
 * forward, (dy, w, dx) backward-data, (x, dy, dw) backward-filter. */
static bdesc conv_op(builder *b, const sl_conv_shape *sh, int dir, bdesc a, bdesc bb, bdesc out)
{
    static const cudnnBackendDescriptorType_t type[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    static const cudnnBackendAttributeName_t attr[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    const cudnnBackendAttributeType_t t = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    float alpha = 1.0f, beta = 0.0f;
    bdesc cd = conv_desc(b, sh), op = mk(b, type[dir]);
    if (!cd || !set(b, op, attr[dir][0], t, 1, &cd) || !set(b, op, attr[dir][1], t, 1, &a) ||
        !set(b, op, attr[dir][2], t, 1, &bb) || !set(b, op, attr[dir][3], t, 1, &out) ||
        !set(b, op, attr[dir][4], CUDNN_TYPE_FLOAT, 1, &alpha) ||
        !set(b, op, attr[dir][5], CUDNN_TYPE_FLOAT, 1, &beta) || !fin(b, op))
        return NULL;
    return op;
}

/* The operations of graph g for sh into ops (*nops of them). */
static bool graph_ops(builder *b, int g, const sl_conv_shape *sh, bdesc *ops, int *nops)
{
    const cudnnDataType_t H = CUDNN_DATA_HALF, F = CUDNN_DATA_FLOAT;
    const cudnnBackendAttributeType_t t = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    int64_t n = sh->n, c = sh->c, h = sh->h, w = sh->w, k = sh->k, p = sh->p, q = sh->q;
    bdesc W = tensor(b, g == G_WGRAD ? U_DW : U_W, H, k, c, sh->r, sh->s, false);
    bdesc S = vec(b, U_S, H, c), B = vec(b, U_B, H, c);
    if (!W || !S || !B)
        return false;
    if (g == G_FPROP || g == G_WGRAD) {
        bdesc X = tensor(b, U_X, H, n, c, h, w, false);
        bdesc v1 = tensor(b, U_V1, F, n, c, h, w, true), v2 = tensor(b, U_V2, F, n, c, h, w, true);
        bdesc v3 = tensor(b, U_V3, F, n, c, h, w, true);
        if (!X || !v1 || !v2 || !v3 || !prologue(b, X, S, B, v1, v2, v3, ops))
            return false;
        if (g == G_WGRAD) {
            bdesc DY = tensor(b, U_DY, H, n, k, p, q, false);
            *nops = 4;
            return DY && (ops[3] = conv_op(b, sh, 2, v3, DY, W)) != NULL;
        }
        bdesc Y = tensor(b, U_Y, H, n, k, p, q, false);
        bdesc SUM = vec(b, U_SUM, F, k), SQ = vec(b, U_SQSUM, F, k);
        if (!Y || !SUM || !SQ || !(ops[3] = conv_op(b, sh, 0, v3, W, Y)))
            return false;
        cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
        cudnnDataType_t prec = F;
        bdesc gs = mk(b, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
        if (!set(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gm) ||
            !set(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) ||
            !set(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, t, 1, &Y) ||
            !set(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, t, 1, &SUM) ||
            !set(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, t, 1, &SQ) || !fin(b, gs))
            return false;
        ops[4] = gs;
        *nops = 5;
        return true;
    }
    /* G_DGRAD */
    bdesc DY = tensor(b, U_DY, H, n, k, p, q, false), XC = tensor(b, U_XC, H, n, c, h, w, false);
    bdesc G = tensor(b, U_V1, F, n, c, h, w, true), v2 = tensor(b, U_V2, F, n, c, h, w, true);
    bdesc T = tensor(b, U_V3, F, n, c, h, w, true), DA = tensor(b, U_DA, H, n, c, h, w, false);
    bdesc M = vec(b, U_MEAN, F, c), IS = vec(b, U_INVSTD, F, c), GA = vec(b, U_GAMMA, F, c);
    bdesc DG = vec(b, U_DGAMMA, F, c), DB = vec(b, U_DBETA, F, c);
    bdesc E1 = vec(b, U_EQ_DY, F, c), E2 = vec(b, U_EQ_X, F, c), E3 = vec(b, U_EQ_B, F, c);
    if (!DY || !XC || !G || !v2 || !T || !DA || !M || !IS || !GA || !DG || !DB || !E1 || !E2 ||
        !E3)
        return false;
    if (!(ops[0] = conv_op(b, sh, 1, DY, W, G)) ||
        !(ops[1] = pointwise(b, CUDNN_POINTWISE_MUL, XC, S, v2)) ||
        !(ops[2] = pointwise(b, CUDNN_POINTWISE_ADD, v2, B, T)) ||
        !(ops[3] = pointwise(b, CUDNN_POINTWISE_RELU_BWD, T, G, DA)))
        return false;
    cudnnDataType_t prec = F;
    bdesc bw = mk(b, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
    if (!set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, t, 1, &M) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, t, 1, &IS) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, t, 1, &GA) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, t, 1, &XC) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, t, 1, &DA) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, t, 1, &DG) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, t, 1, &DB) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, t, 1, &E1) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, t, 1, &E2) ||
        !set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, t, 1, &E3) || !fin(b, bw))
        return false;
    ops[4] = bw;
    *nops = 5;
    return true;
}

/* The first engine configuration of graph og, by heuristics mode, whose
 * plan finalizes with a workspace within cap: the plan into p. */
static bool pick_plan(builder *b, sl_cuda_ctx *cx, bdesc og, cudnnBackendHeurMode_t mode,
                      size_t cap)
{
    bdesc heur = mk(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    if (!set(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &og) ||
        !set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ||
        !fin(b, heur))
        return false;
    enum { MAX_CFG = 8 };
    bdesc cfg[MAX_CFG];
    int64_t got = 0, want = 0;
    if (!TRY(b, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &want, NULL)))
        return false;
    if (want > MAX_CFG)
        want = MAX_CFG;
    for (int i = 0; i < want; i++)
        if (!(cfg[i] = mk(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)))
            return false;
    if (want > 0 && !TRY(b, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &got,
                                                      cfg)))
        return false;
    for (int i = 0; i < got; i++) {
        bdesc plan = NULL;
        int64_t ws = 0;
        cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                                       &plan);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                         CUDNN_TYPE_HANDLE, 1, &cx->cudnn);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendFinalize(plan);
        int64_t cnt = 0;
        if (s == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &cnt, &ws);
        if (s == CUDNN_STATUS_SUCCESS && ws >= 0 && (size_t)ws <= cap &&
            b->p->nkeep < MAX_DESC) {
            b->p->keep[b->p->nkeep++] = plan;
            b->p->plan = plan;
            b->p->ws = ws;
            return true;
        }
        if (s != CUDNN_STATUS_SUCCESS)
            ok(b, s, "cudnnBackendFinalize(execution plan)");
        else if (b->st == CUDNN_STATUS_SUCCESS)
            snprintf(b->what, sizeof b->what, "every plan's workspace is over the %zu MiB cap",
                     cap >> 20);
        if (plan)
            (void)cudnnBackendDestroyDescriptor(plan);
    }
    if (got == 0 && b->st == CUDNN_STATUS_SUCCESS)
        snprintf(b->what, sizeof b->what, "cuDNN's heuristics offer no engine");
    return false;
}

/* Build graph g's plan for sh into p: true when one was made. */
static bool build(builder *b, sl_cuda_ctx *cx, int g, const sl_conv_shape *sh)
{
    bdesc ops[5] = {0};
    int nops = 0;
    if (!graph_ops(b, g, sh, ops, &nops))
        return false;
    bdesc og = mk(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!set(b, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops) ||
        !set(b, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &cx->cudnn) ||
        !fin(b, og))
        return false;
    size_t cap = cx->ws_max;
    return pick_plan(b, cx, og, CUDNN_HEUR_MODE_A, cap) ||
           pick_plan(b, cx, og, CUDNN_HEUR_MODE_FALLBACK, cap);
}

/* The entry of (g, sh), built on first use; NULL with sl_fail on an
 * allocation failure. A refused entry is returned with ok == 0. */
static plan_entry *entry_of(sl_cuda_ctx *cx, int g, const sl_conv_shape *sh)
{
    sl_graph_cache *gc = cx->graphs;
    for (int i = 0; i < gc->n; i++)
        if (gc->e[i]->graph == g && memcmp(&gc->e[i]->sh, sh, sizeof *sh) == 0)
            return gc->e[i];
    if (gc->n == gc->cap) {
        int ncap = gc->cap ? 2 * gc->cap : 32;
        plan_entry **ne = realloc(gc->e, (size_t)ncap * sizeof *ne);
        if (!ne) {
            sl_fail(SL_ENOMEM, "sl_fuse_prepare: a table of %d plans", ncap);
            return NULL;
        }
        gc->e = ne, gc->cap = ncap;
    }
    plan_entry *p = calloc(1, sizeof *p);
    if (!p) {
        sl_fail(SL_ENOMEM, "sl_fuse_prepare: out of memory");
        return NULL;
    }
    p->graph = g;
    p->sh = *sh;
    builder b = {p, CUDNN_STATUS_SUCCESS, ""};
    /* The engines' rule, asked of no device: channels in multiples of 8
     * (16-byte vectors of fp16), which the per-channel vectors' alignment
     * relies on too. */
    if (sh->c % 8 || sh->k % 8)
        snprintf(b.what, sizeof b.what, "channels not multiples of 8");
    else
        p->ok = build(&b, cx, g, sh);
    if (p->ok && p->ws > 0 && !sl_cuda_workspace(cx, (size_t)p->ws)) {
        sl_fail(SL_ECUDA, "sl_fuse_prepare: %s workspace of %lld bytes: %s", graph_name[g],
                (long long)p->ws, sl_errmsg());
        entry_free(p);
        return NULL;
    }
    if (p->ok) {
        gc->built++;
    } else {
        gc->refused++;
        if (!gc->refusal[0])
            snprintf(gc->refusal, sizeof gc->refusal,
                     "%s refused for n=%d %dx%d c=%d k=%d %dx%d/%d: %s%s%s", graph_name[g],
                     sh->n, sh->h, sh->w, sh->c, sh->k, sh->r, sh->s, sh->stride, b.what,
                     b.st != CUDNN_STATUS_SUCCESS ? ": " : "",
                     b.st != CUDNN_STATUS_SUCCESS ? cudnnGetErrorString(b.st) : "");
        /* The refused plan's descriptors go now; the entry remembers the refusal. */
        for (int i = p->nkeep - 1; i >= 0; i--)
            (void)cudnnBackendDestroyDescriptor(p->keep[i]);
        p->nkeep = 0;
        p->plan = NULL;
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
    for (int g = 0; g < NGRAPH; g++) {
        if (!(kinds & (1u << g)))
            continue;
        plan_entry *p = entry_of(cx, g, sh);
        if (!p)
            return SL_ENOMEM;
        if (!p->ok)
            return sl_fail(SL_ENOTSUP, "sl_fuse_prepare: %s", cx->graphs->refusal);
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
        return sl_fail(SL_ENOTSUP, "%s: %s (sl_fuse_prepare refuses it)", fn,
                       cx->graphs->refusal);
    void *ws = NULL;
    if (p->ws > 0 && !(ws = sl_cuda_workspace(cx, (size_t)p->ws)))
        return sl_fail(SL_ECUDA, "%s: workspace: %s", fn, sl_errmsg());
    bdesc vp = NULL;
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
                        "unfused ops)", fn, graph_name[g], sh->n, sh->h, sh->w, sh->c, sh->k,
                        sl_errmsg())
              : SL_OK;
}

/* The bias half of a prologue's fp16 scale-and-bias vector of c. */
static void *bias_of(const void *sb, int c) { return (char *)(uintptr_t)sb + (size_t)c * 2; }

int sl_graph_conv_fwd_cuda(sl_exec *e, const sl_conv_shape *sh, const float *x, const void *sb,
                           const float *w, float *y, float *sum, float *sqsum)
{
    int64_t uid[] = {U_X, U_S, U_B, U_W, U_Y, U_SUM, U_SQSUM};
    void *ptr[] = {(void *)x, (void *)sb, bias_of(sb, sh->c), (void *)w, y, sum, sqsum};
    return run_plan("sl_fuse_conv_fwd", e, G_FPROP, sh, 7, uid, ptr);
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
    int64_t uid[] = {U_X, U_S, U_B, U_DY, U_DW};
    void *ptr[] = {(void *)x, (void *)sb, bias_of(sb, sh->c), (void *)dy, dw16};
    if ((rc = run_plan(fn, e, G_WGRAD, sh, 5, uid, ptr)))
        return rc;
    return sl_cast_cuda(e, nw, dw16, SL_DTYPE_F16, dw, SL_DTYPE_F32);
}

int sl_graph_conv_dgrad_cuda(sl_exec *e, const sl_conv_shape *sh, const float *dy,
                             const float *w, const float *xc, const void *sb, const float *mean,
                             const float *invstd, const float *gamma, float *da, float *dgamma,
                             float *dbeta, float *coef)
{
    int c = sh->c;
    int64_t uid[] = {U_DY, U_W, U_XC, U_S, U_B, U_DA, U_MEAN, U_INVSTD, U_GAMMA,
                     U_DGAMMA, U_DBETA, U_EQ_DY, U_EQ_X, U_EQ_B};
    void *ptr[] = {(void *)dy, (void *)w, (void *)xc, (void *)sb, bias_of(sb, c), da,
                   (void *)mean, (void *)invstd, (void *)gamma, dgamma, dbeta, coef,
                   coef + c, coef + 2 * (size_t)c};
    return run_plan("sl_fuse_conv_dgrad", e, G_DGRAD, sh, 14, uid, ptr);
}
