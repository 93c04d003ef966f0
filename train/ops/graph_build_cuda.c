/*
 * train/ops/graph_build_cuda.c - the operation graphs of cuDNN's
 * specialized engines for the ResNet conv + BN chain, built descriptor by
 * descriptor with the backend API (cudnn_graph.h, plain C) exactly as
 * NVIDIA's sources build them (graph_cuda.c chooses their engine
 * configurations and runs them). fp16 activations in NHWC (filters KRSC),
 * 16-byte aligned; the compute type FLOAT everywhere.
 *
 * Sources, each graph as it appears there:
 *   [doc]   cuDNN developer guide, Graph API, "Supported Graph Patterns",
 *           "Specialized Pre-Compiled Engines": ConvBNfprop, ConvBNwgrad,
 *           DgradDreluBNBwdWeight (and dBNApply, which fuse_cuda.cu's own
 *           pass replaces);
 *   [fe]    cudnn-frontend samples/cpp/convolution/fprop.cpp "SBRCS",
 *           wgrads.cpp "scale-bias-relu-wgrad", dgrads.cpp "Dgrad Drelu
 *           DBNweight Graph"; samples/legacy_samples/fusion_sample.cpp
 *           run_bn_conv_gen_stat and run_bn_bwd_weight (backend
 *           descriptors); include/cudnn_frontend/node/pointwise.h (which
 *           port is which: RELU_BWD's IN_0 is dy, IN_1 x; ALPHA1 / ALPHA2
 *           set to 1 on every pointwise op; a ReLU's clip attributes) and
 *           node/dbn_weight.h;
 *   [pd]    PaddlePaddle paddle/phi/kernels/fusion/gpu/
 *           fused_dconv_drelu_dbn_kernel.cu and
 *           fused_scale_bias_relu_conv_bn_kernel.cu (the same graphs in
 *           production).
 *
 *   ConvBNfprop [doc][fe SBRCS, run_bn_conv_gen_stat]
 *       X (fp16) -> MUL S -> ADD B -> RELU_FWD -> CONV_FWD(W) -> Y (fp16)
 *       Y -> GEN_STATS(SUM_SQSUM) -> SUM, SQSUM (fp32 (1,K,1,1))
 *       S, B fp16 (1,C,1,1): the previous BN folded (scale = gamma*invstd,
 *       bias = beta - mean*scale).
 *   ConvBNwgrad [doc][fe scale-bias-relu-wgrad][pd _BnActWgradImpl]
 *       X -> MUL S -> ADD B -> RELU_FWD -> CONV_BWD_FILTER(DY) -> DW (fp16)
 *       intermediates HALF in [fe], FLOAT in [pd]: graph_cuda.c tries one,
 *       then the other.
 *   DgradDreluBNBwdWeight [doc][fe Dgrad Drelu DBNweight, run_bn_bwd_weight]
 *       [pd _DgradDreluBnBwdWeightImpl]
 *       DY (fp16) -> CONV_BWD_DATA(W) -> G
 *       XC (fp16, the previous BN's input) -> SUB MEAN (or ADD MEAN with
 *       alpha2 = -1) -> MUL INVSTD -> MUL GAMMA -> ADD BETA -> T
 *       RELU_BWD(dy = G, x = T) -> DA (fp16, real)
 *       BN_BWD_WEIGHTS(x = XC, dy = DA, mean = MEAN, invstd = INVSTD,
 *       scale = GAMMA) -> DGAMMA, DBETA, EQ_DY, EQ_X, EQ_B
 *       MEAN, INVSTD, GAMMA, BETA and the five outputs fp32 (1,C,1,1); the
 *       BN_BWD_WEIGHTS operation takes the very tensors the recompute
 *       reads (the same uids).
 *
 * Threading: as the cache (graph_cuda.c), one thread at a time.
 */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ops/graph_cuda.h"

const char *const sl_graph_names[SL_NGRAPH] = {"ConvBNfprop", "ConvBNwgrad",
                                              "DgradDreluBNBwdWeight"};

void sl_desc_set_clear(sl_desc_set *s)
{
    for (int i = s->n - 1; i >= 0; i--)
        (void)cudnnBackendDestroyDescriptor(s->d[i]);
    free(s->d);
    s->d = NULL;
    s->n = s->cap = 0;
}

bool sl_desc_set_add(sl_desc_set *s, sl_bdesc d)
{
    if (s->n == s->cap) {
        int ncap = s->cap ? 2 * s->cap : 48; /* the dgrad graph alone holds ~35 */
        sl_bdesc *nd = realloc(s->d, (size_t)ncap * sizeof *nd);
        if (!nd) {
            (void)cudnnBackendDestroyDescriptor(d);
            return false;
        }
        s->d = nd, s->cap = ncap;
    }
    s->d[s->n++] = d;
    return true;
}

bool sl_graph_ok(sl_graph_builder *b, cudnnStatus_t s, const char *call)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return true;
    if (b->st == CUDNN_STATUS_SUCCESS) {
        /* cuDNN 9 keeps a per-thread text with the reason (which
         * descriptor, which limit): the useful half of the message */
        char why[256] = "";
        cudnnGetLastErrorString(why, sizeof why);
        b->st = s;
        snprintf(b->what, sizeof b->what, "%s: %s%s%s", call, cudnnGetErrorString(s),
                 why[0] ? ": " : "", why);
    }
    return false;
}
#define TRY(b, call) sl_graph_ok((b), (call), #call)

sl_bdesc sl_graph_desc(sl_graph_builder *b, cudnnBackendDescriptorType_t t)
{
    sl_bdesc d = NULL;
    if (b->st != CUDNN_STATUS_SUCCESS || !TRY(b, cudnnBackendCreateDescriptor(t, &d)))
        return NULL;
    if (!sl_desc_set_add(b->keep, d)) {
        b->st = CUDNN_STATUS_ALLOC_FAILED;
        snprintf(b->what, sizeof b->what, "a table of %d cuDNN descriptors: out of host memory",
                 b->keep->n + 1);
        return NULL;
    }
    return d;
}

static bool set(sl_graph_builder *b, sl_bdesc d, cudnnBackendAttributeName_t a,
                cudnnBackendAttributeType_t t, int64_t n, const void *v)
{
    return d && TRY(b, cudnnBackendSetAttribute(d, a, t, n, v));
}
static bool setd(sl_graph_builder *b, sl_bdesc d, cudnnBackendAttributeName_t a, sl_bdesc v)
{
    return v && set(b, d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}
static bool fin(sl_graph_builder *b, sl_bdesc d) { return d && TRY(b, cudnnBackendFinalize(d)); }

/* An NHWC-packed tensor of logical dims (n, c, h, w) (a KRSC filter is (k,
 * c, r, s), a per-channel vector (1, c, 1, 1)), 16-byte aligned ([fe]:
 * "16B alignment is needed to run a tensor core engine"). */
static sl_bdesc tensor(sl_graph_builder *b, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c,
                       int64_t h, int64_t w, bool virt)
{
    int64_t dim[4] = {n, c, h, w}, str[4] = {h * w * c, 1, w * c, c}, align = 16;
    sl_bdesc d = sl_graph_desc(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!set(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) ||
        !set(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim) ||
        !set(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str) ||
        !set(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) ||
        !set(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) ||
        !set(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt) || !fin(b, d))
        return NULL;
    return d;
}

static sl_bdesc vec(sl_graph_builder *b, int64_t uid, cudnnDataType_t dt, int64_t c)
{
    return tensor(b, uid, dt, 1, c, 1, 1, false);
}

static sl_bdesc conv_desc(sl_graph_builder *b, const sl_conv_shape *sh)
{
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t nd = 2, dil[2] = {1, 1}, str[2] = {sh->stride, sh->stride},
            pad[2] = {sh->pad, sh->pad};
    sl_bdesc d = sl_graph_desc(b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
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

/* A pointwise operation as [fe]'s pointwise.h makes it: y = mode(alpha1*x,
 * alpha2*bb) (bb NULL for unary modes), or for RELU_BWD dx = relu'(x) dy
 * with x = the forward input, bb = dy, y = dx; a ReLU's clips and NaN
 * propagation set to a plain ReLU's. */
static sl_bdesc pointwise(sl_graph_builder *b, cudnnPointwiseMode_t mode, sl_bdesc x, sl_bdesc bb,
                          sl_bdesc y, float alpha2)
{
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    float alpha1 = 1.0f;
    sl_bdesc pw = sl_graph_desc(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    if (!set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
        !set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec))
        return NULL;
    if (mode == CUDNN_POINTWISE_RELU_FWD || mode == CUDNN_POINTWISE_RELU_BWD) {
        cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
        double lo = 0.0, hi = FLT_MAX, slope = 0.0;
        if (!set(b, pw, CUDNN_ATTR_POINTWISE_NAN_PROPAGATION, CUDNN_TYPE_NAN_PROPOGATION, 1, &nan) ||
            !set(b, pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lo) ||
            !set(b, pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &hi) ||
            !set(b, pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, CUDNN_TYPE_DOUBLE, 1, &slope))
            return NULL;
    }
    if (!fin(b, pw))
        return NULL;
    sl_bdesc op = sl_graph_desc(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw))
        return NULL;
    if (mode == CUDNN_POINTWISE_RELU_BWD) {
        if (!setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x) ||
            !setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, bb) ||
            !setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, y))
            return NULL;
    } else if (!setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x) ||
               (bb && !setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bb)) ||
               !setd(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)) {
        return NULL;
    }
    if (!set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha1) ||
        !set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha2))
        return NULL;
    return fin(b, op) ? op : NULL;
}

/* A convolution operation of direction dir: (a, bb, out) are (x, w, y)
 * forward, (dy, w, dx) backward-data, (x, dy, dw) backward-filter; alpha
 * 1, beta 0 ([fe], [pd]). */
static sl_bdesc conv_op(sl_graph_builder *b, const sl_conv_shape *sh, int dir, sl_bdesc a,
                        sl_bdesc bb, sl_bdesc out)
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
    float alpha = 1.0f, beta = 0.0f;
    sl_bdesc cd = conv_desc(b, sh), op = sl_graph_desc(b, type[dir]);
    if (!setd(b, op, attr[dir][0], cd) || !setd(b, op, attr[dir][1], a) ||
        !setd(b, op, attr[dir][2], bb) || !setd(b, op, attr[dir][3], out) ||
        !set(b, op, attr[dir][4], CUDNN_TYPE_FLOAT, 1, &alpha) ||
        !set(b, op, attr[dir][5], CUDNN_TYPE_FLOAT, 1, &beta) || !fin(b, op))
        return NULL;
    return op;
}

/* X -> MUL S -> ADD B -> RELU_FWD into a virtual of type vt: the three
 * operations into ops, the ReLU's output returned (ConvBNfprop's and
 * ConvBNwgrad's prologue, [fe] SBRCS / scale-bias-relu-wgrad). */
static sl_bdesc prologue(sl_graph_builder *b, const sl_conv_shape *sh, cudnnDataType_t vt,
                         sl_bdesc *ops)
{
    const cudnnDataType_t H = CUDNN_DATA_HALF;
    int64_t n = sh->n, c = sh->c, h = sh->h, w = sh->w;
    sl_bdesc X = tensor(b, SL_U_X, H, n, c, h, w, false);
    sl_bdesc S = vec(b, SL_U_S, H, c), B = vec(b, SL_U_B, H, c);
    sl_bdesc v1 = tensor(b, SL_U_V1, vt, n, c, h, w, true);
    sl_bdesc v2 = tensor(b, SL_U_V1 + 1, vt, n, c, h, w, true);
    sl_bdesc v3 = tensor(b, SL_U_V1 + 2, vt, n, c, h, w, true);
    if (!(ops[0] = pointwise(b, CUDNN_POINTWISE_MUL, X, S, v1, 1.0f)) ||
        !(ops[1] = pointwise(b, CUDNN_POINTWISE_ADD, v1, B, v2, 1.0f)) ||
        !(ops[2] = pointwise(b, CUDNN_POINTWISE_RELU_FWD, v2, NULL, v3, 1.0f)))
        return NULL;
    return v3;
}

static int fprop_ops(sl_graph_builder *b, const sl_conv_shape *sh, const sl_graph_form *f,
                     sl_bdesc *ops)
{
    const cudnnDataType_t H = CUDNN_DATA_HALF, F = CUDNN_DATA_FLOAT;
    sl_bdesc in = prologue(b, sh, f->virt, ops);
    sl_bdesc W = tensor(b, SL_U_W, H, sh->k, sh->c, sh->r, sh->s, false);
    sl_bdesc Y = tensor(b, SL_U_Y, H, sh->n, sh->k, sh->p, sh->q, false);
    sl_bdesc SUM = vec(b, SL_U_SUM, F, sh->k), SQ = vec(b, SL_U_SQSUM, F, sh->k);
    if (!in || !(ops[3] = conv_op(b, sh, 0, in, W, Y)))
        return 0;
    cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
    sl_bdesc gs = sl_graph_desc(b, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    if (!set(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gm) ||
        !set(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &F) ||
        !setd(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, Y) ||
        !setd(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, SUM) ||
        !setd(b, gs, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, SQ) || !fin(b, gs))
        return 0;
    ops[4] = gs;
    return 5;
}

static int wgrad_ops(sl_graph_builder *b, const sl_conv_shape *sh, const sl_graph_form *f,
                     sl_bdesc *ops)
{
    const cudnnDataType_t H = CUDNN_DATA_HALF;
    sl_bdesc in = prologue(b, sh, f->virt, ops);
    sl_bdesc DY = tensor(b, SL_U_DY, H, sh->n, sh->k, sh->p, sh->q, false);
    sl_bdesc DW = tensor(b, SL_U_DW, H, sh->k, sh->c, sh->r, sh->s, false);
    return in && (ops[3] = conv_op(b, sh, 2, in, DY, DW)) ? 4 : 0;
}

static int dgrad_ops(sl_graph_builder *b, const sl_conv_shape *sh, const sl_graph_form *f,
                     sl_bdesc *ops)
{
    const cudnnDataType_t H = CUDNN_DATA_HALF, F = CUDNN_DATA_FLOAT, V = f->virt;
    int64_t n = sh->n, c = sh->c, h = sh->h, w = sh->w;
    sl_bdesc DY = tensor(b, SL_U_DY, H, n, sh->k, sh->p, sh->q, false);
    sl_bdesc W = tensor(b, SL_U_W, H, sh->k, c, sh->r, sh->s, false);
    sl_bdesc XC = tensor(b, SL_U_XC, H, n, c, h, w, false);
    sl_bdesc M = vec(b, SL_U_MEAN, F, c), IS = vec(b, SL_U_INVSTD, F, c);
    sl_bdesc GA = vec(b, SL_U_GAMMA, F, c), BE = vec(b, SL_U_BETA, F, c);
    sl_bdesc DA = tensor(b, SL_U_DA, H, n, c, h, w, false);
    sl_bdesc DG = vec(b, SL_U_DGAMMA, F, c), DB = vec(b, SL_U_DBETA, F, c);
    sl_bdesc E1 = vec(b, SL_U_EQ_DY, F, c), E2 = vec(b, SL_U_EQ_X, F, c);
    sl_bdesc E3 = vec(b, SL_U_EQ_B, F, c);
    sl_bdesc v[5];
    for (int i = 0; i < 5; i++)
        v[i] = tensor(b, SL_U_V1 + i, V, n, c, h, w, true);
    /* the previous BN recomputed in fp32 from its input: the mean step as
     * the running cuDNN takes it (graph_cuda.c picks f->mean_sub) */
    cudnnPointwiseMode_t msub = f->mean_sub ? CUDNN_POINTWISE_SUB : CUDNN_POINTWISE_ADD;
    if (!(ops[0] = conv_op(b, sh, 1, DY, W, v[0])) ||
        !(ops[1] = pointwise(b, msub, XC, M, v[1], f->mean_sub ? 1.0f : -1.0f)) ||
        !(ops[2] = pointwise(b, CUDNN_POINTWISE_MUL, v[1], IS, v[2], 1.0f)) ||
        !(ops[3] = pointwise(b, CUDNN_POINTWISE_MUL, v[2], GA, v[3], 1.0f)) ||
        !(ops[4] = pointwise(b, CUDNN_POINTWISE_ADD, v[3], BE, v[4], 1.0f)) ||
        !(ops[5] = pointwise(b, CUDNN_POINTWISE_RELU_BWD, v[4], v[0], DA, 1.0f)))
        return 0;
    const cudnnBackendAttributeName_t in[5] = {
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC};
    const cudnnBackendAttributeName_t out[5] = {
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS};
    sl_bdesc ins[5] = {XC, DA, M, IS, GA}, outs[5] = {DG, DB, E1, E2, E3};
    sl_bdesc bw = sl_graph_desc(b, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
    if (!set(b, bw, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &F))
        return 0;
    for (int i = 0; i < 5; i++)
        if (!setd(b, bw, in[i], ins[i]) || !setd(b, bw, out[i], outs[i]))
            return 0;
    if (!fin(b, bw))
        return 0;
    ops[6] = bw;
    return 7;
}

sl_bdesc sl_graph_build(sl_graph_builder *b, cudnnHandle_t h, int g, const sl_conv_shape *sh,
                        const sl_graph_form *f)
{
    sl_bdesc ops[7] = {0};
    int nops = g == SL_G_FPROP ? fprop_ops(b, sh, f, ops)
               : g == SL_G_WGRAD ? wgrad_ops(b, sh, f, ops)
                                 : dgrad_ops(b, sh, f, ops);
    if (!nops)
        return NULL;
    sl_bdesc og = sl_graph_desc(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!set(b, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops) ||
        !set(b, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) || !fin(b, og))
        return NULL;
    return og;
}
