// emu_dnn_graph.cpp - cuDNN's backend graph API (cudnn_graph.h:
// cudnnBackendCreateDescriptor / SetAttribute / GetAttribute / Finalize /
// Execute) on the host, for the three fused patterns of NVIDIA's MLPerf
// ResNet, checked rule by rule against what NVIDIA documents and ships
// (never against sluice's own graphs):
//   F  ConvBNfprop            [x*s+b -> relu ->] conv fwd -> genstats (sum, sqsum)
//   W  ConvBNwgrad            x*s+b -> relu -> conv bwd filter
//   D  DgradDreluBNBwdWeight  conv bwd data; (xc - mean)*invstd*gamma + beta;
//                             relu bwd -> bn bwd weights on the same tensors
// The sources each rule cites:
//   [doc] cuDNN developer guide, Graph API, "Supported Graph Patterns" >
//         "Specialized Pre-Compiled Engines" (ConvBNfprop, ConvBNwgrad,
//         DgradDreluBNBwdWeight, dBNApply);
//   [fe]  NVIDIA/cudnn-frontend: samples/cpp/convolution/fprop.cpp "SBRCS",
//         wgrads.cpp "scale-bias-relu-wgrad", dgrads.cpp "Dgrad Drelu
//         DBNweight Graph" (v1.11.0 changed its mean step from ADD to SUB and
//         its cuDNN floor to 9.8.0: "the right operation for the dgrad + drelu
//         fusion"); samples/legacy_samples/fusion_sample.cpp
//         run_bn_conv_gen_stat, run_bn_bwd_weight; include/cudnn_frontend/
//         node/pointwise.h (RELU_BWD: IN_0 dy, IN_1 x), node/dbn_weight.h,
//         Filters.h (numerical notes read from a config's engine);
//   [pd]  PaddlePaddle paddle/phi/kernels/fusion/gpu/
//         fused_dconv_drelu_dbn_kernel.cu (ADD mean with alpha2 = -1; fp32
//         BN vectors; "bn_dgamma, bn_dbeta, bn_mean, bn_inv_std, bn_scale,
//         bn_bias should have shape [C] and dtype FP32") and
//         fused_scale_bias_relu_conv_bn_kernel.cu.
// Descriptors are attribute maps checked against a schema (type, count,
// descriptor kind); a finalized one is immutable. An operation graph that
// is well formed finalizes; it is matched against F / W / D by dataflow
// (tensor uids, in any op order) and each rule below; a graph that breaks
// one gets zero heuristic results (the rule's words in
// cudnnGetLastErrorString), and an ENGINE built for it by index fails to
// finalize (CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN). An accepted graph
// gets EMU_CUDNN_GRAPH_CONFIGS made-up engines (default 2; engine 0 needs
// a workspace of 4 KiB per output channel, the others none; the first
// EMU_CUDNN_GRAPH_NONDET carry CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC and
// sum their statistics in an order that moves from one execution to the
// next, as atomics do). Switches (at the cudnnCreate of the graph's
// OPERATIONGRAPH_HANDLE or at the heuristics' Finalize): EMU_CUDNN_GRAPH=0
// refuses every graph, EMU_CUDNN_GRAPH_MAX_C=N those with C or K above N,
// EMU_CUDNN_GRAPH_1X1S2=0 1x1 stride-2 convolutions, EMU_CUDNN_GRAPH_REFUSE=F,W,D
// the named patterns, and
// EMU_CUDNN_GRAPH_WGRAD_VIRT=HALF|FLOAT ConvBNwgrad graphs whose
// intermediates are of the other type; EMU_CUDNN_VERSION is the cuDNN
// version answered and matched (SUB in D needs 9.8.0).
// cudnnBackendExecute checks the variant pack (a pointer per real tensor,
// device memory with the tensor's extent and alignment, the workspace)
// and queues the work on the handle's stream (captured into a CUDA graph
// with its arguments as at the capture), like emu_dnn.cpp's legacy calls.
// Numerics: f32 (emu_dnn.cpp's conv_f32), each output and each fp16
// virtual tensor rounded to nearest even, sums in double (float in a
// moving order on a NONDETERMINISTIC engine).
#include "emu.h"
#include "emu_core.h"
#include <cudnn.h>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace emu;

#define T(x) CUDNN_TYPE_##x
#define D(x) CUDNN_BACKEND_##x##_DESCRIPTOR
#define A(x) CUDNN_ATTR_##x

namespace { // this file's types (emu_nccl.cpp has a Slot too)

// ---------------------------------------------------------------- descriptors
struct Attr { int type; int64_t count; std::vector<uint8_t> bytes; };
struct Pattern;
struct Desc {
    int type;
    bool final = false, dead = false;
    std::map<int, Attr> attrs;
    // set by Finalize: OPERATIONGRAPH (the match, or why there is none),
    // ENGINEHEUR (results), ENGINE / ENGINECFG / EXECUTION_PLAN (engine, workspace)
    std::shared_ptr<const Pattern> pat;
    std::string refused;
    GraphKnobs knobs{false, 0, 0, -1, false, -1, 0}; // OPERATIONGRAPH: its handle's (unset without one);
                                                   // ENGINEHEUR: those in force at its Finalize
    int nresults = 0, engine = -1;
    bool nondet = false; // ENGINE / ENGINECFG / EXECUTION_PLAN: NUMERICAL_NOTE_NONDETERMINISTIC
    int64_t ws = 0;
};
// Descriptors live on after destroy (dead: a later use is reported), so
// that what refers to them stays readable, as emu_dnn.cpp's do.
static std::set<Desc *> descs;

static cudnnStatus_t fail(cudnnStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cudnnStatus_t fail(cudnnStatus_t s, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    dnn_error(buf);
    return s;
}

static const char *tname(int t)
{
    switch (t) {
    case D(TENSOR): return "TENSOR";
    case D(CONVOLUTION): return "CONVOLUTION";
    case D(POINTWISE): return "POINTWISE";
    case D(OPERATION_CONVOLUTION_FORWARD): return "OPERATION_CONVOLUTION_FORWARD";
    case D(OPERATION_CONVOLUTION_BACKWARD_FILTER): return "OPERATION_CONVOLUTION_BACKWARD_FILTER";
    case D(OPERATION_CONVOLUTION_BACKWARD_DATA): return "OPERATION_CONVOLUTION_BACKWARD_DATA";
    case D(OPERATION_POINTWISE): return "OPERATION_POINTWISE";
    case D(OPERATION_GEN_STATS): return "OPERATION_GEN_STATS";
    case D(OPERATION_BN_BWD_WEIGHTS): return "OPERATION_BN_BWD_WEIGHTS";
    case D(OPERATIONGRAPH): return "OPERATIONGRAPH";
    case D(ENGINEHEUR): return "ENGINEHEUR";
    case D(ENGINECFG): return "ENGINECFG";
    case D(ENGINE): return "ENGINE";
    case D(EXECUTION_PLAN): return "EXECUTION_PLAN";
    case D(VARIANT_PACK): return "VARIANT_PACK";
    default: return NULL;
    }
}
static bool is_op(int t)
{
    return t == D(OPERATION_CONVOLUTION_FORWARD) || t == D(OPERATION_CONVOLUTION_BACKWARD_FILTER) ||
           t == D(OPERATION_CONVOLUTION_BACKWARD_DATA) || t == D(OPERATION_POINTWISE) ||
           t == D(OPERATION_GEN_STATS) || t == D(OPERATION_BN_BWD_WEIGHTS);
}

// A descriptor made by cudnnBackendCreateDescriptor and not destroyed;
// else a report (NULL: a plain error) and NULL.
static Desc *get(void *p, const char *api)
{
    if (!p) { fail(CUDNN_STATUS_BAD_PARAM, "%s: NULL descriptor", api); return NULL; }
    Desc *d = (Desc *)p;
    if (!descs.count(d)) { report("%s: %p is not a cuDNN backend descriptor", api, p); return NULL; }
    if (d->dead) { report("%s: %s descriptor %p used after cudnnBackendDestroyDescriptor", api, tname(d->type), p); return NULL; }
    return d;
}

// ---------------------------------------------------------------- schema
enum { REQ = 1, GET = 2 }; // required to finalize; derived, get only
static const int NONE = -1, ANY_OP = -2;
struct Spec { int desc, name, t1, t2; int64_t maxn; int flags, ref; };
#define TEN(n, f) {D(OPERATION_##n), A(f), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(TENSOR)}
#define TEN_OPT(n, f) {D(OPERATION_##n), A(f), T(BACKEND_DESCRIPTOR), NONE, 1, 0, D(TENSOR)}
#define SCALAR(n, f, fl) {D(OPERATION_##n), A(f), T(FLOAT), T(DOUBLE), 1, fl, NONE}
static const Spec specs[] = {
    {D(TENSOR), A(TENSOR_DATA_TYPE), T(DATA_TYPE), NONE, 1, REQ, NONE},
    {D(TENSOR), A(TENSOR_DIMENSIONS), T(INT64), NONE, CUDNN_DIM_MAX, REQ, NONE},
    {D(TENSOR), A(TENSOR_STRIDES), T(INT64), NONE, CUDNN_DIM_MAX, REQ, NONE},
    {D(TENSOR), A(TENSOR_UNIQUE_ID), T(INT64), NONE, 1, REQ, NONE},
    {D(TENSOR), A(TENSOR_BYTE_ALIGNMENT), T(INT64), NONE, 1, REQ, NONE},
    {D(TENSOR), A(TENSOR_IS_VIRTUAL), T(BOOLEAN), NONE, 1, 0, NONE},
    {D(TENSOR), A(TENSOR_IS_BY_VALUE), T(BOOLEAN), NONE, 1, 0, NONE},
    {D(TENSOR), A(TENSOR_VECTOR_COUNT), T(INT64), NONE, 1, 0, NONE},
    {D(TENSOR), A(TENSOR_VECTORIZED_DIMENSION), T(INT64), NONE, 1, 0, NONE},
    {D(TENSOR), A(TENSOR_REORDERING_MODE), T(TENSOR_REORDERING_MODE), NONE, 1, 0, NONE},
    {D(CONVOLUTION), A(CONVOLUTION_COMP_TYPE), T(DATA_TYPE), NONE, 1, REQ, NONE},
    {D(CONVOLUTION), A(CONVOLUTION_CONV_MODE), T(CONVOLUTION_MODE), NONE, 1, REQ, NONE},
    {D(CONVOLUTION), A(CONVOLUTION_SPATIAL_DIMS), T(INT64), NONE, 1, REQ, NONE},
    {D(CONVOLUTION), A(CONVOLUTION_DILATIONS), T(INT64), NONE, CUDNN_DIM_MAX - 2, REQ, NONE},
    {D(CONVOLUTION), A(CONVOLUTION_FILTER_STRIDES), T(INT64), NONE, CUDNN_DIM_MAX - 2, REQ, NONE},
    {D(CONVOLUTION), A(CONVOLUTION_PRE_PADDINGS), T(INT64), NONE, CUDNN_DIM_MAX - 2, REQ, NONE},
    {D(CONVOLUTION), A(CONVOLUTION_POST_PADDINGS), T(INT64), NONE, CUDNN_DIM_MAX - 2, REQ, NONE},
    {D(POINTWISE), A(POINTWISE_MODE), T(POINTWISE_MODE), NONE, 1, REQ, NONE},
    {D(POINTWISE), A(POINTWISE_MATH_PREC), T(DATA_TYPE), NONE, 1, REQ, NONE},
    {D(POINTWISE), A(POINTWISE_NAN_PROPAGATION), T(NAN_PROPOGATION), NONE, 1, 0, NONE},
    {D(POINTWISE), A(POINTWISE_RELU_LOWER_CLIP), T(DOUBLE), T(FLOAT), 1, 0, NONE},
    {D(POINTWISE), A(POINTWISE_RELU_UPPER_CLIP), T(DOUBLE), T(FLOAT), 1, 0, NONE},
    {D(POINTWISE), A(POINTWISE_RELU_LOWER_CLIP_SLOPE), T(DOUBLE), T(FLOAT), 1, 0, NONE},
    {D(POINTWISE), A(POINTWISE_AXIS), T(INT64), NONE, 1, 0, NONE},
    SCALAR(CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_ALPHA, REQ),
    SCALAR(CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_BETA, REQ),
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_CONV_DESC), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(CONVOLUTION)},
    TEN(CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_W),
    TEN(CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_X),
    TEN(CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_Y),
    SCALAR(CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_ALPHA, REQ),
    SCALAR(CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_BETA, REQ),
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(CONVOLUTION)},
    TEN(CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_W),
    TEN(CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_DX),
    TEN(CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_DY),
    SCALAR(CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, REQ),
    SCALAR(CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_BETA, REQ),
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(CONVOLUTION)},
    TEN(CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_DW),
    TEN(CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_X),
    TEN(CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_DY),
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_PW_DESCRIPTOR), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(POINTWISE)},
    TEN_OPT(POINTWISE, OPERATION_POINTWISE_XDESC), TEN_OPT(POINTWISE, OPERATION_POINTWISE_BDESC),
    TEN_OPT(POINTWISE, OPERATION_POINTWISE_YDESC), TEN_OPT(POINTWISE, OPERATION_POINTWISE_DXDESC),
    TEN_OPT(POINTWISE, OPERATION_POINTWISE_DYDESC), TEN_OPT(POINTWISE, OPERATION_POINTWISE_TDESC),
    SCALAR(POINTWISE, OPERATION_POINTWISE_ALPHA1, 0), SCALAR(POINTWISE, OPERATION_POINTWISE_ALPHA2, 0),
    {D(OPERATION_GEN_STATS), A(OPERATION_GENSTATS_MODE), T(GENSTATS_MODE), NONE, 1, REQ, NONE},
    {D(OPERATION_GEN_STATS), A(OPERATION_GENSTATS_MATH_PREC), T(DATA_TYPE), NONE, 1, REQ, NONE},
    TEN(GEN_STATS, OPERATION_GENSTATS_XDESC), TEN(GEN_STATS, OPERATION_GENSTATS_SUMDESC),
    TEN(GEN_STATS, OPERATION_GENSTATS_SQSUMDESC),
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_MATH_PREC), T(DATA_TYPE), NONE, 1, REQ, NONE},
    TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_MEAN_DESC), TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC),
    TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC), TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_X_DESC),
    TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_DY_DESC), TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC),
    TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC), TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC),
    TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC), TEN(BN_BWD_WEIGHTS, OPERATION_BN_BWD_WEIGHTS_EQ_BIAS),
    {D(OPERATIONGRAPH), A(OPERATIONGRAPH_HANDLE), T(HANDLE), NONE, 1, 0, NONE}, // deprecated in cuDNN 9
    {D(OPERATIONGRAPH), A(OPERATIONGRAPH_OPS), T(BACKEND_DESCRIPTOR), NONE, 64, REQ, ANY_OP},
    {D(OPERATIONGRAPH), A(OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED), T(BOOLEAN), NONE, 1, 0, NONE},
    {D(OPERATIONGRAPH), A(OPERATIONGRAPH_ENGINE_GLOBAL_COUNT), T(INT64), NONE, 1, GET, NONE},
    {D(ENGINEHEUR), A(ENGINEHEUR_OPERATION_GRAPH), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(OPERATIONGRAPH)},
    {D(ENGINEHEUR), A(ENGINEHEUR_MODE), T(HEUR_MODE), NONE, 1, REQ, NONE},
    {D(ENGINEHEUR), A(ENGINEHEUR_SM_COUNT_TARGET), T(INT32), NONE, 1, 0, NONE},
    {D(ENGINEHEUR), A(ENGINEHEUR_RESULTS), T(BACKEND_DESCRIPTOR), NONE, 0, GET, D(ENGINECFG)},
    {D(ENGINE), A(ENGINE_OPERATION_GRAPH), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(OPERATIONGRAPH)},
    {D(ENGINE), A(ENGINE_GLOBAL_INDEX), T(INT64), NONE, 1, REQ, NONE},
    {D(ENGINE), A(ENGINE_SM_COUNT_TARGET), T(INT32), NONE, 1, 0, NONE},
    {D(ENGINE), A(ENGINE_NUMERICAL_NOTE), T(NUMERICAL_NOTE), NONE, 0, GET, NONE},
    {D(ENGINE), A(ENGINE_BEHAVIOR_NOTE), T(BEHAVIOR_NOTE), NONE, 0, GET, NONE},
    {D(ENGINE), A(ENGINE_KNOB_INFO), T(BACKEND_DESCRIPTOR), NONE, 0, GET, NONE},
    {D(ENGINE), A(ENGINE_LAYOUT_INFO), T(BACKEND_DESCRIPTOR), NONE, 0, GET, NONE},
    {D(ENGINECFG), A(ENGINECFG_ENGINE), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(ENGINE)},
    {D(ENGINECFG), A(ENGINECFG_KNOB_CHOICES), T(BACKEND_DESCRIPTOR), NONE, 0, 0, NONE}, // no knobs here
    {D(ENGINECFG), A(ENGINECFG_WORKSPACE_SIZE), T(INT64), NONE, 1, GET, NONE},
    {D(EXECUTION_PLAN), A(EXECUTION_PLAN_HANDLE), T(HANDLE), NONE, 1, 0, NONE}, // deprecated in cuDNN 9
    {D(EXECUTION_PLAN), A(EXECUTION_PLAN_ENGINE_CONFIG), T(BACKEND_DESCRIPTOR), NONE, 1, REQ, D(ENGINECFG)},
    {D(EXECUTION_PLAN), A(EXECUTION_PLAN_WORKSPACE_SIZE), T(INT64), NONE, 1, GET, NONE},
    {D(EXECUTION_PLAN), A(EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS), T(INT64), NONE, 0, GET, NONE},
    {D(VARIANT_PACK), A(VARIANT_PACK_UNIQUE_IDS), T(INT64), NONE, 1024, 0, NONE},
    {D(VARIANT_PACK), A(VARIANT_PACK_DATA_POINTERS), T(VOID_PTR), NONE, 1024, 0, NONE},
    {D(VARIANT_PACK), A(VARIANT_PACK_WORKSPACE), T(VOID_PTR), NONE, 1, 0, NONE},
};

static const Spec *spec_of(int desc, int name)
{
    for (const Spec &s : specs)
        if (s.desc == desc && s.name == name) return &s;
    return NULL;
}
static size_t esize(int t)
{
    switch (t) {
    case T(HANDLE): case T(INT64): case T(DOUBLE): case T(VOID_PTR): case T(BACKEND_DESCRIPTOR): return 8;
    case T(BOOLEAN): case T(CHAR): return 1;
    case T(FRACTION): return 16;
    default: return 4; // the enums, FLOAT, INT32
    }
}

// attribute readers (unset: the default)
static const Attr *attr(const Desc *d, int name)
{
    auto it = d->attrs.find(name);
    return it == d->attrs.end() ? NULL : &it->second;
}
static int64_t count(const Desc *d, int name) { const Attr *a = attr(d, name); return a ? a->count : 0; }
static int64_t i64(const Desc *d, int name, int i = 0, int64_t dflt = 0)
{
    const Attr *a = attr(d, name);
    if (!a || i >= a->count) return dflt;
    int64_t v;
    memcpy(&v, a->bytes.data() + 8 * i, 8);
    return v;
}
static int e32(const Desc *d, int name, int dflt = -1)
{
    const Attr *a = attr(d, name);
    if (!a || !a->count) return dflt;
    int32_t v;
    memcpy(&v, a->bytes.data(), 4);
    return v;
}
static double num(const Desc *d, int name, double dflt)
{
    const Attr *a = attr(d, name);
    if (!a || !a->count) return dflt;
    if (a->type == T(FLOAT)) { float f; memcpy(&f, a->bytes.data(), 4); return f; }
    double v;
    memcpy(&v, a->bytes.data(), 8);
    return v;
}
static bool flag(const Desc *d, int name) { const Attr *a = attr(d, name); return a && a->count && a->bytes[0]; }
static void *ptr(const Desc *d, int name, int i = 0) { return (void *)i64(d, name, i, 0); }
static Desc *ref(const Desc *d, int name, int i = 0) { return (Desc *)ptr(d, name, i); }

// ---------------------------------------------------------------- tensors
struct Tensor { int64_t uid; int dt; int nd; int64_t dim[CUDNN_DIM_MAX], str[CUDNN_DIM_MAX]; int64_t align; bool virt; };
static Tensor tview(const Desc *t)
{
    Tensor v{};
    v.uid = i64(t, A(TENSOR_UNIQUE_ID));
    v.dt = e32(t, A(TENSOR_DATA_TYPE));
    v.nd = (int)count(t, A(TENSOR_DIMENSIONS));
    for (int i = 0; i < v.nd; i++) v.dim[i] = i64(t, A(TENSOR_DIMENSIONS), i), v.str[i] = i64(t, A(TENSOR_STRIDES), i);
    v.align = i64(t, A(TENSOR_BYTE_ALIGNMENT));
    v.virt = flag(t, A(TENSOR_IS_VIRTUAL));
    return v;
}
static bool same_tensor(const Tensor &a, const Tensor &b)
{
    if (a.dt != b.dt || a.nd != b.nd || a.virt != b.virt) return false;
    for (int i = 0; i < a.nd; i++)
        if (a.dim[i] != b.dim[i] || a.str[i] != b.str[i]) return false;
    return true;
}
// logical (n,c,h,w) stored NHWC packed: strides {h*w*c, 1, w*c, c}
// (filters KRSC: dims (k,c,r,s); per-channel vectors (1,C,1,1): (C,1,C,C))
static bool nhwc_packed(const Tensor &t)
{
    const int64_t *d = t.dim;
    return t.nd == 4 && t.str[0] == d[1] * d[2] * d[3] && t.str[1] == 1 && t.str[2] == d[3] * d[1] && t.str[3] == d[1];
}
// bytes from the first element to the end of the last
static size_t extent(const Tensor &t)
{
    size_t last = 0;
    for (int i = 0; i < t.nd; i++) last += (size_t)(t.dim[i] - 1) * (size_t)t.str[i];
    return (last + 1) * (t.dt == CUDNN_DATA_FLOAT ? 4 : t.dt == CUDNN_DATA_DOUBLE ? 8 : 2);
}

// The tensors of each operation kind: (descriptor type, attribute, written)
struct Slot { int op, name; bool out; };
static const Slot slots[] = {
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_X), false},
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_W), false},
    {D(OPERATION_CONVOLUTION_FORWARD), A(OPERATION_CONVOLUTION_FORWARD_Y), true},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_DY), false},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_W), false},
    {D(OPERATION_CONVOLUTION_BACKWARD_DATA), A(OPERATION_CONVOLUTION_BWD_DATA_DX), true},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_X), false},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_DY), false},
    {D(OPERATION_CONVOLUTION_BACKWARD_FILTER), A(OPERATION_CONVOLUTION_BWD_FILTER_DW), true},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_XDESC), false},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_BDESC), false},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_TDESC), false},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_DYDESC), false},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_YDESC), true},
    {D(OPERATION_POINTWISE), A(OPERATION_POINTWISE_DXDESC), true},
    {D(OPERATION_GEN_STATS), A(OPERATION_GENSTATS_XDESC), false},
    {D(OPERATION_GEN_STATS), A(OPERATION_GENSTATS_SUMDESC), true},
    {D(OPERATION_GEN_STATS), A(OPERATION_GENSTATS_SQSUMDESC), true},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_X_DESC), false},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_DY_DESC), false},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_MEAN_DESC), false},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC), false},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC), false},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC), true},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC), true},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC), true},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC), true},
    {D(OPERATION_BN_BWD_WEIGHTS), A(OPERATION_BN_BWD_WEIGHTS_EQ_BIAS), true},
};
static int64_t uid(const Desc *op, int name) { const Desc *t = ref(op, name); return t ? tview(t).uid : -1; }

// ---------------------------------------------------------------- operations
// The convolution of a conv op in forward terms (x, w, y: for backward
// data x = dx, y = dy; for backward filter w = dw); false with a message.
static bool conv_shape(const Desc *op, ConvShape *g, std::string *err)
{
    int x, w, y, c;
    if (op->type == D(OPERATION_CONVOLUTION_FORWARD))
        x = A(OPERATION_CONVOLUTION_FORWARD_X), w = A(OPERATION_CONVOLUTION_FORWARD_W),
        y = A(OPERATION_CONVOLUTION_FORWARD_Y), c = A(OPERATION_CONVOLUTION_FORWARD_CONV_DESC);
    else if (op->type == D(OPERATION_CONVOLUTION_BACKWARD_DATA))
        x = A(OPERATION_CONVOLUTION_BWD_DATA_DX), w = A(OPERATION_CONVOLUTION_BWD_DATA_W),
        y = A(OPERATION_CONVOLUTION_BWD_DATA_DY), c = A(OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC);
    else
        x = A(OPERATION_CONVOLUTION_BWD_FILTER_X), w = A(OPERATION_CONVOLUTION_BWD_FILTER_DW),
        y = A(OPERATION_CONVOLUTION_BWD_FILTER_DY), c = A(OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC);
    Tensor X = tview(ref(op, x)), W = tview(ref(op, w)), Y = tview(ref(op, y));
    const Desc *cd = ref(op, c);
    if (X.nd != 4 || W.nd != 4 || Y.nd != 4 || i64(cd, A(CONVOLUTION_SPATIAL_DIMS)) != 2) {
        *err = "emulated: 2-D convolutions of 4-D tensors only";
        return false;
    }
    int64_t pre[2] = {i64(cd, A(CONVOLUTION_PRE_PADDINGS), 0), i64(cd, A(CONVOLUTION_PRE_PADDINGS), 1)};
    int64_t post[2] = {i64(cd, A(CONVOLUTION_POST_PADDINGS), 0), i64(cd, A(CONVOLUTION_POST_PADDINGS), 1)};
    int64_t st[2] = {i64(cd, A(CONVOLUTION_FILTER_STRIDES), 0), i64(cd, A(CONVOLUTION_FILTER_STRIDES), 1)};
    int64_t dl[2] = {i64(cd, A(CONVOLUTION_DILATIONS), 0), i64(cd, A(CONVOLUTION_DILATIONS), 1)};
    int64_t p = (X.dim[2] + pre[0] + post[0] - dl[0] * (W.dim[2] - 1) - 1) / st[0] + 1;
    int64_t q = (X.dim[3] + pre[1] + post[1] - dl[1] * (W.dim[3] - 1) - 1) / st[1] + 1;
    if (X.dim[1] != W.dim[1] || Y.dim[0] != X.dim[0] || Y.dim[1] != W.dim[0] || Y.dim[2] != p || Y.dim[3] != q || p < 1 || q < 1) {
        char b[256];
        snprintf(b, sizeof b, "x (%lld,%lld,%lld,%lld) w (%lld,%lld,%lld,%lld) gives (%lld,%lld,%lld,%lld), y is (%lld,%lld,%lld,%lld)",
                 (long long)X.dim[0], (long long)X.dim[1], (long long)X.dim[2], (long long)X.dim[3], (long long)W.dim[0],
                 (long long)W.dim[1], (long long)W.dim[2], (long long)W.dim[3], (long long)X.dim[0], (long long)W.dim[0],
                 (long long)p, (long long)q, (long long)Y.dim[0], (long long)Y.dim[1], (long long)Y.dim[2], (long long)Y.dim[3]);
        *err = b;
        return false;
    }
    *g = ConvShape{(int)X.dim[0], (int)X.dim[2], (int)X.dim[3], (int)X.dim[1], (int)W.dim[0], (int)W.dim[2], (int)W.dim[3],
                   (int)p, (int)q, (int)pre[0], (int)pre[1], (int)st[0], (int)st[1], (int)dl[0], (int)dl[1]};
    return true;
}

// x, b -> y: ADD MUL MIN MAX ADD_SQUARE DIV MOD POW SUB ATAN2, the
// comparisons, LOGICAL_AND / OR (the rest take x alone, or are backward)
static bool binary_mode(int m)
{
    return (m >= CUDNN_POINTWISE_ADD && m <= CUDNN_POINTWISE_SUB && m != CUDNN_POINTWISE_SQRT) || m == CUDNN_POINTWISE_ATAN2 ||
           (m >= CUDNN_POINTWISE_CMP_EQ && m <= CUDNN_POINTWISE_CMP_LE) || m == CUDNN_POINTWISE_LOGICAL_AND ||
           m == CUDNN_POINTWISE_LOGICAL_OR;
}
static bool same_dims(const Tensor &a, const Tensor &b)
{
    if (a.nd != b.nd) return false;
    for (int i = 0; i < a.nd; i++) if (a.dim[i] != b.dim[i]) return false;
    return true;
}

// A well-formed operation (Finalize): its tensors set and of agreeing shapes.
static cudnnStatus_t op_finalize(Desc *d)
{
    std::string err;
    ConvShape g;
    switch (d->type) {
    case D(OPERATION_CONVOLUTION_FORWARD): case D(OPERATION_CONVOLUTION_BACKWARD_DATA):
    case D(OPERATION_CONVOLUTION_BACKWARD_FILTER):
        if (!conv_shape(d, &g, &err))
            return fail(err[0] == 'e' ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM,
                        "cudnnBackendFinalize: %s: %s", tname(d->type), err.c_str());
        return CUDNN_STATUS_SUCCESS;
    case D(OPERATION_POINTWISE): {
        int m = e32(ref(d, A(OPERATION_POINTWISE_PW_DESCRIPTOR)), A(POINTWISE_MODE));
        const Desc *x = ref(d, A(OPERATION_POINTWISE_XDESC)), *b = ref(d, A(OPERATION_POINTWISE_BDESC)),
                   *y = ref(d, A(OPERATION_POINTWISE_YDESC)), *dx = ref(d, A(OPERATION_POINTWISE_DXDESC)),
                   *dy = ref(d, A(OPERATION_POINTWISE_DYDESC));
        bool ok;
        if (m >= 200 && m < 300) // backward activations: dy, x -> dx
            ok = dx && dy && x && same_dims(tview(dx), tview(dy)) && same_dims(tview(x), tview(dy));
        else if (binary_mode(m)) { // x, b -> y; b broadcasts (each extent x's or 1)
            ok = x && b && y && same_dims(tview(x), tview(y)) && tview(b).nd == tview(x).nd;
            for (int i = 0; ok && i < tview(x).nd; i++) ok = tview(b).dim[i] == tview(x).dim[i] || tview(b).dim[i] == 1;
        } else
            ok = x && y && same_dims(tview(x), tview(y));
        if (!ok) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: OPERATION_POINTWISE mode %d: tensors missing or of disagreeing shapes", m);
        return CUDNN_STATUS_SUCCESS;
    }
    case D(OPERATION_GEN_STATS): {
        Tensor x = tview(ref(d, A(OPERATION_GENSTATS_XDESC)));
        for (int a : {A(OPERATION_GENSTATS_SUMDESC), A(OPERATION_GENSTATS_SQSUMDESC)}) {
            Tensor s = tview(ref(d, a));
            if (x.nd != 4 || s.nd != 4 || s.dim[0] != 1 || s.dim[1] != x.dim[1] || s.dim[2] != 1 || s.dim[3] != 1)
                return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: OPERATION_GEN_STATS: sums must be (1,C,1,1) for x's C");
        }
        return CUDNN_STATUS_SUCCESS;
    }
    default: { // BN_BWD_WEIGHTS: x and dy alike, every other tensor (1,C,1,1)
        Tensor x = tview(ref(d, A(OPERATION_BN_BWD_WEIGHTS_X_DESC)));
        if (x.nd != 4 || !same_dims(x, tview(ref(d, A(OPERATION_BN_BWD_WEIGHTS_DY_DESC)))))
            return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: OPERATION_BN_BWD_WEIGHTS: x and dy differ");
        for (const Slot &s : slots) {
            if (s.op != d->type || s.name == A(OPERATION_BN_BWD_WEIGHTS_X_DESC) || s.name == A(OPERATION_BN_BWD_WEIGHTS_DY_DESC)) continue;
            Tensor v = tview(ref(d, s.name));
            if (v.nd != 4 || v.dim[0] != 1 || v.dim[1] != x.dim[1] || v.dim[2] != 1 || v.dim[3] != 1)
                return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: OPERATION_BN_BWD_WEIGHTS: attribute %d must be (1,C,1,1)", s.name);
        }
        return CUDNN_STATUS_SUCCESS;
    }
    }
}

// ---------------------------------------------------------------- patterns
// The roles of a matched graph's real tensors (the variant pack's pointers).
enum { F_X, F_S, F_B, F_W, F_Y, F_SUM, F_SQSUM, F_N };
enum { W_X, W_S, W_B, W_DY, W_DW, W_N };
enum { D_DY, D_W, D_XC, D_MEAN, D_INVSTD, D_GAMMA, D_BETA, D_DA, D_DSCALE, D_DBIAS, D_EQ_DY, D_EQ_X, D_EQ_B, D_N };
static const char *role_names[3][D_N] = {
    {"x", "scale", "bias", "w", "y", "sum", "sqsum"},
    {"x", "scale", "bias", "dy", "dw"},
    {"dy", "w", "xc", "mean", "invstd", "bn_scale", "bn_bias", "da", "dbn_scale", "dbn_bias", "eq_dy_scale",
     "eq_x_scale", "eq_bias"}};
static const char *pattern_names[3] = {"ConvBNfprop", "ConvBNwgrad", "DgradDreluBNBwdWeight"};
struct Role { int64_t uid = -1; size_t bytes = 0; int64_t align = 0; };
struct Pattern {
    int kind = -1; // 0 F, 1 W, 2 D
    bool prologue = false; // F: scale, bias, ReLU before the convolution
    ConvShape g{};
    // virtual tensors' types: F / W: mul, add, relu outputs; D: dgrad dx, then the
    // mean, invstd, gamma and beta steps' outputs
    int v[5] = {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT};
    bool sub = false; // D: the mean step is SUB (else ADD with alpha2 = -1)
    Role role[D_N];
    int out_c = 0; // channels of the fused op's output (engine 0's workspace)
};

// the first failed condition's words
struct Check {
    std::string why;
    bool need(bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)))
    {
        if (!ok && why.empty()) {
            char b[256];
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(b, sizeof b, fmt, ap);
            va_end(ap);
            why = b;
        }
        return ok;
    }
};

struct GraphView {
    std::vector<const Desc *> ops;
    std::map<int64_t, Tensor> t;           // by uid
    std::map<int64_t, const Desc *> writer; // uid -> the op that writes it
    const Desc *one(int type, int pwmode = -1) const // the only op of this kind, or NULL
    {
        const Desc *r = NULL;
        for (const Desc *o : ops)
            if (o->type == type && (pwmode < 0 || pw_mode(o) == pwmode)) { if (r) return NULL; r = o; }
        return r;
    }
    const Desc *producer(int64_t u, int type, int pwmode = -1) const
    {
        auto it = writer.find(u);
        if (it == writer.end() || it->second->type != type) return NULL;
        return pwmode < 0 || pw_mode(it->second) == pwmode ? it->second : NULL;
    }
    static int pw_mode(const Desc *o)
    {
        return o->type == D(OPERATION_POINTWISE) ? e32(ref(o, A(OPERATION_POINTWISE_PW_DESCRIPTOR)), A(POINTWISE_MODE)) : -1;
    }
};

static void real(Check &ck, Pattern *p, int role, const Tensor &t, int dt)
{
    const char *n = role_names[p->kind][role];
    ck.need(!t.virt, "%s (uid %lld) must be a real tensor", n, (long long)t.uid);
    ck.need(t.dt == dt, "%s (uid %lld) is data type %d, the engine takes %s", n, (long long)t.uid, t.dt,
            dt == CUDNN_DATA_HALF ? "HALF" : "FLOAT");
    ck.need(nhwc_packed(t), "%s (uid %lld) is not NHWC packed", n, (long long)t.uid);
    ck.need(t.align % 16 == 0 && t.align > 0, "%s (uid %lld): BYTE_ALIGNMENT %lld, the engine needs 16", n, (long long)t.uid, (long long)t.align);
    p->role[role] = Role{t.uid, extent(t), t.align};
}
static void per_channel(Check &ck, Pattern *p, int role, const Tensor &t, int dt, int c)
{
    real(ck, p, role, t, dt);
    ck.need(t.nd == 4 && t.dim[0] == 1 && t.dim[1] == c && t.dim[2] == 1 && t.dim[3] == 1, "%s (uid %lld) must be (1,%d,1,1)",
            role_names[p->kind][role], (long long)t.uid, c);
}
static int virt(Check &ck, const Tensor &t, const char *what)
{
    ck.need(t.virt, "%s (uid %lld) must be virtual", what, (long long)t.uid);
    ck.need(t.dt == CUDNN_DATA_FLOAT || t.dt == CUDNN_DATA_HALF, "%s (uid %lld): virtual of data type %d (FLOAT or HALF)", what,
            (long long)t.uid, t.dt);
    return t.dt;
}
// A pointwise op of the patterns: compute type FLOAT ([fe] pointwise.h sets
// the graph's compute type, FLOAT in every sample; [pd] compute_dtype FLOAT),
// alpha1 1 and alpha2 as given (1, or D's ADD mean with -1: [pd]), a plain
// ReLU ([fe]: lower clip 0, upper clip FLT_MAX, slope 0; the legacy
// run_bn_conv_gen_stat's leaky slope 0.01 is not the ResNet chain).
static void pointwise(Check &ck, const Desc *op, const char *what, double alpha2 = 1)
{
    const Desc *pw = ref(op, A(OPERATION_POINTWISE_PW_DESCRIPTOR));
    ck.need(e32(pw, A(POINTWISE_MATH_PREC)) == CUDNN_DATA_FLOAT, "%s: MATH_PREC must be FLOAT", what);
    ck.need(num(op, A(OPERATION_POINTWISE_ALPHA1), 1) == 1, "%s: alpha1 must be 1", what);
    ck.need(num(op, A(OPERATION_POINTWISE_ALPHA2), 1) == alpha2, "%s: alpha2 must be %g", what, alpha2);
    ck.need(num(pw, A(POINTWISE_RELU_LOWER_CLIP), 0) == 0 && num(pw, A(POINTWISE_RELU_LOWER_CLIP_SLOPE), 0) == 0 &&
                num(pw, A(POINTWISE_RELU_UPPER_CLIP), 1e300) >= 3.4e38,
            "%s: a clipped or leaky ReLU", what);
}
// alpha: the op's ALPHA attribute (its BETA is the next one)
static void conv_op(Check &ck, const Desc *op, int alpha, int cdesc, const char *what)
{
    const Desc *cd = ref(op, cdesc);
    ck.need(e32(cd, A(CONVOLUTION_COMP_TYPE)) == CUDNN_DATA_FLOAT, "%s: COMP_TYPE must be FLOAT", what);
    ck.need(e32(cd, A(CONVOLUTION_CONV_MODE)) == CUDNN_CROSS_CORRELATION, "%s: CONV_MODE must be CROSS_CORRELATION", what);
    ck.need(num(op, alpha, 0) == 1 && num(op, alpha + 1, 1) == 0, "%s: alpha must be 1 and beta 0", what);
}

// x*s+b -> ReLU ending in uid `out` (F and W): the three ops, checked.
static bool prologue(Check &ck, const GraphView &g, Pattern *p, int64_t out, int xr, int sr, int br, int c)
{
    const Desc *relu = g.producer(out, D(OPERATION_POINTWISE), CUDNN_POINTWISE_RELU_FWD);
    const Desc *add = relu ? g.producer(uid(relu, A(OPERATION_POINTWISE_XDESC)), D(OPERATION_POINTWISE), CUDNN_POINTWISE_ADD) : NULL;
    const Desc *mul = add ? g.producer(uid(add, A(OPERATION_POINTWISE_XDESC)), D(OPERATION_POINTWISE), CUDNN_POINTWISE_MUL) : NULL;
    if (!ck.need(relu && add && mul, "the convolution's input is not x*scale+bias -> RELU_FWD (MUL, ADD, RELU_FWD by uid)")) return false;
    pointwise(ck, mul, "MUL"), pointwise(ck, add, "ADD"), pointwise(ck, relu, "RELU_FWD");
    const Tensor &x = g.t.at(uid(mul, A(OPERATION_POINTWISE_XDESC)));
    ck.need(!g.writer.count(x.uid), "x (uid %lld) is written by another operation", (long long)x.uid);
    real(ck, p, xr, x, CUDNN_DATA_HALF);
    per_channel(ck, p, sr, g.t.at(uid(mul, A(OPERATION_POINTWISE_BDESC))), CUDNN_DATA_HALF, c);
    per_channel(ck, p, br, g.t.at(uid(add, A(OPERATION_POINTWISE_BDESC))), CUDNN_DATA_HALF, c);
    p->v[0] = virt(ck, g.t.at(uid(mul, A(OPERATION_POINTWISE_YDESC))), "the MUL's output");
    p->v[1] = virt(ck, g.t.at(uid(add, A(OPERATION_POINTWISE_YDESC))), "the ADD's output");
    p->v[2] = virt(ck, g.t.at(out), "the RELU_FWD's output");
    return true;
}
// C and K multiples of 8: fp16 NHWC rows and (1,C,1,1) vectors 16 bytes
// aligned ([fe] legacy samples: "16B alignment is needed to run a tensor
// core engine", every tensor setAlignment(16)).
static void channels(Check &ck, const ConvShape &cs)
{
    ck.need(cs.c % 8 == 0, "C = %d is not a multiple of 8", cs.c);
    ck.need(cs.k % 8 == 0, "K = %d is not a multiple of 8", cs.k);
}

// ConvBNfprop ([doc]; [fe] SBRCS and run_bn_conv_gen_stat): x (HALF) ->
// MUL s -> ADD b -> RELU_FWD -> CONVOLUTION_FORWARD(w) -> y (HALF) ->
// GEN_STATS(SUM_SQSUM) -> sum, sqsum (FLOAT (1,K,1,1)); s and b HALF
// (1,C,1,1) ([fe] SBRCS: Surface<half> s_tensor(c), b_tensor(c)); the
// intermediates virtual (FLOAT in the samples). Without the prologue: the
// conv and GEN_STATS alone (the block input of sluice's identity
// prologue is the only other use; kept for the selftest).
static bool match_F(const GraphView &g, Pattern *p, Check &ck)
{
    const Desc *conv = g.one(D(OPERATION_CONVOLUTION_FORWARD)), *gs = g.one(D(OPERATION_GEN_STATS));
    if (!ck.need(conv && gs, "ConvBNfprop needs one CONVOLUTION_FORWARD and one GEN_STATS")) return false;
    std::string err;
    conv_shape(conv, &p->g, &err);
    int64_t xin = uid(conv, A(OPERATION_CONVOLUTION_FORWARD_X)), y = uid(conv, A(OPERATION_CONVOLUTION_FORWARD_Y));
    if (!ck.need(uid(gs, A(OPERATION_GENSTATS_XDESC)) == y, "GEN_STATS does not read the convolution's output")) return false;
    p->prologue = g.ops.size() == 5;
    if (!ck.need(g.ops.size() == 2 || p->prologue, "ConvBNfprop: %zu operations (2 or 5)", g.ops.size())) return false;
    if (p->prologue) {
        if (!prologue(ck, g, p, xin, F_X, F_S, F_B, p->g.c)) return false;
    } else
        real(ck, p, F_X, g.t.at(xin), CUDNN_DATA_HALF);
    conv_op(ck, conv, A(OPERATION_CONVOLUTION_FORWARD_ALPHA), A(OPERATION_CONVOLUTION_FORWARD_CONV_DESC), "CONVOLUTION_FORWARD");
    real(ck, p, F_W, g.t.at(uid(conv, A(OPERATION_CONVOLUTION_FORWARD_W))), CUDNN_DATA_HALF);
    real(ck, p, F_Y, g.t.at(y), CUDNN_DATA_HALF);
    ck.need(e32(gs, A(OPERATION_GENSTATS_MODE)) == CUDNN_GENSTATS_SUM_SQSUM, "GEN_STATS: MODE must be SUM_SQSUM");
    ck.need(e32(gs, A(OPERATION_GENSTATS_MATH_PREC)) == CUDNN_DATA_FLOAT, "GEN_STATS: MATH_PREC must be FLOAT");
    per_channel(ck, p, F_SUM, g.t.at(uid(gs, A(OPERATION_GENSTATS_SUMDESC))), CUDNN_DATA_FLOAT, p->g.k);
    per_channel(ck, p, F_SQSUM, g.t.at(uid(gs, A(OPERATION_GENSTATS_SQSUMDESC))), CUDNN_DATA_FLOAT, p->g.k);
    channels(ck, p->g);
    p->out_c = p->g.k;
    return ck.why.empty();
}

// ConvBNwgrad ([doc]; [fe] scale-bias-relu-wgrad; [pd] _BnActWgradImpl):
// x -> MUL s -> ADD b -> RELU_FWD -> CONVOLUTION_BACKWARD_FILTER(dy) -> dw,
// x, s, b, dy, dw HALF; the intermediates HALF in [fe] (its
// set_intermediate_data_type(HALF)), FLOAT in [pd]: both taken, unless
// EMU_CUDNN_GRAPH_WGRAD_VIRT names one (at the heuristics).
static bool match_W(const GraphView &g, Pattern *p, Check &ck)
{
    const Desc *conv = g.one(D(OPERATION_CONVOLUTION_BACKWARD_FILTER));
    if (!ck.need(conv && g.ops.size() == 4, "ConvBNwgrad: MUL, ADD, RELU_FWD and one CONVOLUTION_BACKWARD_FILTER")) return false;
    std::string err;
    conv_shape(conv, &p->g, &err);
    p->prologue = true;
    if (!prologue(ck, g, p, uid(conv, A(OPERATION_CONVOLUTION_BWD_FILTER_X)), W_X, W_S, W_B, p->g.c)) return false;
    conv_op(ck, conv, A(OPERATION_CONVOLUTION_BWD_FILTER_ALPHA), A(OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC), "CONVOLUTION_BACKWARD_FILTER");
    real(ck, p, W_DY, g.t.at(uid(conv, A(OPERATION_CONVOLUTION_BWD_FILTER_DY))), CUDNN_DATA_HALF);
    real(ck, p, W_DW, g.t.at(uid(conv, A(OPERATION_CONVOLUTION_BWD_FILTER_DW))), CUDNN_DATA_HALF);
    channels(ck, p->g);
    p->out_c = p->g.k;
    return ck.why.empty();
}

// DgradDreluBNBwdWeight ([doc]; [fe] "Dgrad Drelu DBNweight Graph" and
// run_bn_bwd_weight; [pd] _DgradDreluBnBwdWeightImpl), seven operations:
//   dy (HALF) -> CONVOLUTION_BACKWARD_DATA(w) -> g (virtual)
//   xc (HALF) -> SUB mean ([fe] v1.11.0 on, cuDNN >= 9.8.0) or ADD mean
//       with alpha2 = -1 ([pd]) -> MUL invstd -> MUL bn_scale -> ADD bn_bias
//       -> t (virtual): the previous BN recomputed in fp32;
//   RELU_BWD(dy = g, x = t) -> da (HALF, real: [fe] drelu_output
//       set_output(true));
//   BN_BWD_WEIGHTS(x = xc, dy = da) with mean, invstd and scale the very
//       tensors (uids) of the recompute ([fe] dbn_weight(drelu_output, X, M,
//       V, S); [pd] bn1_mean_desc, bn1_inv_std_desc, bn1_scale_desc in both)
//       -> dbn_scale, dbn_bias, eq_dy_scale, eq_x_scale, eq_bias.
//   mean, invstd, bn_scale, bn_bias and the five outputs FLOAT (1,C,1,1)
//   ([fe] set_data_type(FLOAT) on M, V, S, B; [pd] "dtype FP32").
// A plain ADD of the mean (alpha2 1: x + mean) is the graph of the samples
// before v1.11.0, which its release notes correct; fp16 or folded
// scale / bias vectors, or a BN_BWD_WEIGHTS with tensors of its own, are
// not this pattern.
static bool match_D(const GraphView &g, Pattern *p, Check &ck)
{
    const Desc *conv = g.one(D(OPERATION_CONVOLUTION_BACKWARD_DATA)), *bnw = g.one(D(OPERATION_BN_BWD_WEIGHTS));
    if (!ck.need(conv && bnw && g.ops.size() == 7,
                 "DgradDreluBNBwdWeight: %zu operations, the pattern has 7 (CONVOLUTION_BACKWARD_DATA; SUB mean (or ADD "
                 "alpha2 -1), MUL invstd, MUL scale, ADD bias on fp32 (1,C,1,1) vectors; RELU_BWD; BN_BWD_WEIGHTS)",
                 g.ops.size()))
        return false;
    std::string err;
    conv_shape(conv, &p->g, &err);
    int64_t g_uid = uid(conv, A(OPERATION_CONVOLUTION_BWD_DATA_DX));
    const Desc *rb = g.one(D(OPERATION_POINTWISE), CUDNN_POINTWISE_RELU_BWD);
    const Desc *addb = rb ? g.producer(uid(rb, A(OPERATION_POINTWISE_XDESC)), D(OPERATION_POINTWISE), CUDNN_POINTWISE_ADD) : NULL;
    const Desc *mulg = addb ? g.producer(uid(addb, A(OPERATION_POINTWISE_XDESC)), D(OPERATION_POINTWISE), CUDNN_POINTWISE_MUL) : NULL;
    const Desc *muli = mulg ? g.producer(uid(mulg, A(OPERATION_POINTWISE_XDESC)), D(OPERATION_POINTWISE), CUDNN_POINTWISE_MUL) : NULL;
    int64_t v1 = muli ? uid(muli, A(OPERATION_POINTWISE_XDESC)) : -1;
    const Desc *msub = g.producer(v1, D(OPERATION_POINTWISE), CUDNN_POINTWISE_SUB);
    const Desc *madd = g.producer(v1, D(OPERATION_POINTWISE), CUDNN_POINTWISE_ADD);
    const Desc *mean = msub ? msub : madd;
    if (!ck.need(rb && addb && mulg && muli && mean,
                 "RELU_BWD's x is not (xc SUB mean) MUL invstd MUL scale ADD bias (by uid through each op's XDESC)"))
        return false;
    p->sub = msub != NULL;
    // the emulated cuDNN's version: SUB from 9.8.0 ([fe] dgrads.cpp: "requires cudnn 9.8.0 and up")
    ck.need(!p->sub || dnn_version() >= 90800, "the SUB mean step needs cuDNN 9.8.0 (this is %ld; ADD with alpha2 -1 "
            "before)", dnn_version());
    int64_t xc = uid(mean, A(OPERATION_POINTWISE_XDESC)), da = uid(rb, A(OPERATION_POINTWISE_DXDESC));
    int64_t mu = uid(mean, A(OPERATION_POINTWISE_BDESC)), is = uid(muli, A(OPERATION_POINTWISE_BDESC)),
            ga = uid(mulg, A(OPERATION_POINTWISE_BDESC)), be = uid(addb, A(OPERATION_POINTWISE_BDESC));
    // [fe] pointwise.h: RELU_BWD's IN_0 (the dgrad output) is DYDESC, IN_1 (the recompute) XDESC
    if (!ck.need(uid(rb, A(OPERATION_POINTWISE_DYDESC)) == g_uid, "RELU_BWD's dy is not the dgrad's dx") ||
        !ck.need(uid(bnw, A(OPERATION_BN_BWD_WEIGHTS_X_DESC)) == xc, "BN_BWD_WEIGHTS's x is not the recompute's xc") ||
        !ck.need(uid(bnw, A(OPERATION_BN_BWD_WEIGHTS_DY_DESC)) == da, "BN_BWD_WEIGHTS's dy is not the RELU_BWD's dx") ||
        !ck.need(uid(bnw, A(OPERATION_BN_BWD_WEIGHTS_MEAN_DESC)) == mu &&
                     uid(bnw, A(OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC)) == is &&
                     uid(bnw, A(OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC)) == ga,
                 "BN_BWD_WEIGHTS's mean / invstd / scale are not the recompute's (the same uids)"))
        return false;
    // [pd]: ADD(x, mean) with alpha1 1, alpha2 -1; [fe] v1.11.0: SUB, alphas 1
    ck.need(p->sub || num(mean, A(OPERATION_POINTWISE_ALPHA2), 1) == -1,
            "ADD(xc, mean) with alpha2 %g adds the mean (the samples before cudnn-frontend v1.11.0): the "
            "pattern subtracts it (SUB, or ADD with alpha2 -1)", num(mean, A(OPERATION_POINTWISE_ALPHA2), 1));
    pointwise(ck, mean, p->sub ? "SUB mean" : "ADD mean (x - mean: alpha2 -1)", p->sub ? 1 : -1);
    pointwise(ck, muli, "MUL invstd"), pointwise(ck, mulg, "MUL scale"), pointwise(ck, addb, "ADD bias");
    pointwise(ck, rb, "RELU_BWD");
    conv_op(ck, conv, A(OPERATION_CONVOLUTION_BWD_DATA_ALPHA), A(OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC), "CONVOLUTION_BACKWARD_DATA");
    ck.need(e32(bnw, A(OPERATION_BN_BWD_WEIGHTS_MATH_PREC)) == CUDNN_DATA_FLOAT, "BN_BWD_WEIGHTS: MATH_PREC must be FLOAT");
    ck.need(same_dims(g.t.at(xc), g.t.at(g_uid)), "xc and the dgrad's dx differ in shape");
    int c = p->g.c;
    real(ck, p, D_DY, g.t.at(uid(conv, A(OPERATION_CONVOLUTION_BWD_DATA_DY))), CUDNN_DATA_HALF);
    real(ck, p, D_W, g.t.at(uid(conv, A(OPERATION_CONVOLUTION_BWD_DATA_W))), CUDNN_DATA_HALF);
    real(ck, p, D_XC, g.t.at(xc), CUDNN_DATA_HALF);
    real(ck, p, D_DA, g.t.at(da), CUDNN_DATA_HALF);
    const int64_t vecs[4] = {mu, is, ga, be};
    for (int i = 0; i < 4; i++) per_channel(ck, p, D_MEAN + i, g.t.at(vecs[i]), CUDNN_DATA_FLOAT, c);
    static const int outs[] = {A(OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC), A(OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC),
                               A(OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC), A(OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC),
                               A(OPERATION_BN_BWD_WEIGHTS_EQ_BIAS)};
    for (int i = 0; i < 5; i++) per_channel(ck, p, D_DSCALE + i, g.t.at(uid(bnw, outs[i])), CUDNN_DATA_FLOAT, c);
    p->v[0] = virt(ck, g.t.at(g_uid), "the dgrad's dx");
    p->v[1] = virt(ck, g.t.at(v1), "the mean step's output");
    p->v[2] = virt(ck, g.t.at(uid(muli, A(OPERATION_POINTWISE_YDESC))), "the MUL invstd's output");
    p->v[3] = virt(ck, g.t.at(uid(mulg, A(OPERATION_POINTWISE_YDESC))), "the MUL scale's output");
    p->v[4] = virt(ck, g.t.at(uid(addb, A(OPERATION_POINTWISE_YDESC))), "the ADD bias's output");
    channels(ck, p->g);
    p->out_c = c;
    return ck.why.empty();
}

// OPERATIONGRAPH Finalize: well formed (else an error status), then
// matched (d->pat) or not (d->refused says why).
static cudnnStatus_t graph_finalize(Desc *d)
{
    cudaStream_t st;
    if (const Attr *h = attr(d, A(OPERATIONGRAPH_HANDLE)))
        if (dnn_handle_state(*(cudnnHandle_t *)h->bytes.data(), &st, &d->knobs) != 1)
            return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: OPERATIONGRAPH: its handle was destroyed");
    GraphView g;
    std::set<const Desc *> seen;
    for (int64_t i = 0; i < count(d, A(OPERATIONGRAPH_OPS)); i++) {
        const Desc *op = ref(d, A(OPERATIONGRAPH_OPS), (int)i);
        if (!seen.insert(op).second) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: OPERATIONGRAPH: operation %lld given twice", (long long)i);
        g.ops.push_back(op);
        for (const Slot &s : slots) {
            if (s.op != op->type || !ref(op, s.name)) continue;
            Tensor t = tview(ref(op, s.name));
            auto it = g.t.find(t.uid);
            if (it != g.t.end() && !same_tensor(it->second, t))
                return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: OPERATIONGRAPH: uid %lld names two different tensors", (long long)t.uid);
            g.t[t.uid] = t;
            if (s.out && !g.writer.emplace(t.uid, op).second)
                return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: OPERATIONGRAPH: tensor uid %lld written by two operations", (long long)t.uid);
        }
    }
    auto p = std::make_shared<Pattern>();
    Check ck;
    bool ok;
    if (g.one(D(OPERATION_CONVOLUTION_FORWARD))) p->kind = 0, ok = match_F(g, p.get(), ck);
    else if (g.one(D(OPERATION_CONVOLUTION_BACKWARD_FILTER))) p->kind = 1, ok = match_W(g, p.get(), ck);
    else if (g.one(D(OPERATION_CONVOLUTION_BACKWARD_DATA))) p->kind = 2, ok = match_D(g, p.get(), ck);
    else ok = ck.need(false, "not ConvBNfprop, ConvBNwgrad nor DgradDreluBNBwdWeight (no single convolution)");
    if (ok) d->pat = p;
    else d->refused = ck.why;
    return CUDNN_STATUS_SUCCESS;
}

// The switches in force for graph: its handle's (at cudnnCreate) and the
// environment's now, the later winning (emu_core.h).
static GraphKnobs knobs_of(const Desc *graph)
{
    GraphKnobs kn = graph->knobs, now = graph_knobs_from_env(), r = kn;
    r.off = kn.off || now.off;
    r.max_c = kn.max_c > 0 && (now.max_c <= 0 || kn.max_c < now.max_c) ? kn.max_c : now.max_c;
    r.configs = now.configs > 0 ? now.configs : kn.configs > 0 ? kn.configs : 2;
    r.nondet = now.nondet >= 0 ? now.nondet : kn.nondet >= 0 ? kn.nondet : 0;
    r.no_1x1s2 = kn.no_1x1s2 || now.no_1x1s2;
    r.wgrad_virt = now.wgrad_virt >= 0 ? now.wgrad_virt : kn.wgrad_virt;
    r.refuse = kn.refuse | now.refuse;
    return r;
}

// Whether an engine serves graph (a finalized OPERATIONGRAPH); why not.
static bool engine_for(const Desc *graph, std::string *why)
{
    GraphKnobs kn = knobs_of(graph);
    if (kn.off) { *why = "EMU_CUDNN_GRAPH=0 refuses every graph"; return false; }
    if (!graph->pat) { *why = graph->refused; return false; }
    const Pattern &p = *graph->pat;
    if (kn.max_c > 0 && (p.g.c > kn.max_c || p.g.k > kn.max_c)) {
        *why = "C " + std::to_string(p.g.c) + " or K " + std::to_string(p.g.k) + " above EMU_CUDNN_GRAPH_MAX_C=" +
               std::to_string(kn.max_c);
        return false;
    }
    if (kn.refuse & (1u << p.kind)) {
        *why = std::string(pattern_names[p.kind]) + " refused (EMU_CUDNN_GRAPH_REFUSE)";
        return false;
    }
    if (kn.no_1x1s2 && p.g.r == 1 && p.g.s == 1 && (p.g.sh == 2 || p.g.sw == 2)) {
        *why = "a 1x1 stride-2 convolution (EMU_CUDNN_GRAPH_1X1S2=0)";
        return false;
    }
    if (p.kind == 1 && kn.wgrad_virt >= 0 && (p.v[0] != kn.wgrad_virt || p.v[1] != kn.wgrad_virt || p.v[2] != kn.wgrad_virt)) {
        *why = std::string("ConvBNwgrad's intermediates must be ") + (kn.wgrad_virt == CUDNN_DATA_HALF ? "HALF" : "FLOAT") +
               " (EMU_CUDNN_GRAPH_WGRAD_VIRT)";
        return false;
    }
    // [fe]: every pattern's sample skips unless Ampere or Hopper
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (!((major == 8 || major == 9) && minor == 0)) {
        *why = "compute capability " + std::to_string(major) + "." + std::to_string(minor) + " (the engines need 8.0 or 9.0)";
        return false;
    }
    return true;
}
static int64_t workspace_of(const Pattern &p, int engine) { return engine == 0 ? (int64_t)4096 * p.out_c : 0; }

// ---------------------------------------------------------------- execution
// One cudnnBackendExecute: the plan's pattern and the pack's pointers by
// role, as at the call (a CUDA graph replays them as captured).
struct Job { std::shared_ptr<const Pattern> pat; void *p[D_N] = {}; void *ws = NULL; int64_t wsb = 0; bool nondet = false; };

// Per-channel sums of v (rows of c values) into out: in double, row order;
// on a NONDETERMINISTIC engine in float from a row that moves with each
// execution (as atomics arrive), so that its bits may change run to run.
static unsigned long executions;
static void channel_sums(const std::vector<double> &v, int c, bool nondet, std::vector<double> &out)
{
    size_t rows = v.size() / (size_t)c;
    out.assign((size_t)c, 0.0);
    if (!nondet) {
        for (size_t i = 0; i < v.size(); i++) out[i % c] += v[i];
        return;
    }
    size_t start = rows ? (size_t)(executions++ * 7919u) % rows : 0;
    std::vector<float> f((size_t)c, 0.0f);
    for (size_t r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++) f[ch] += (float)v[((start + r) % rows) * c + ch];
    for (int ch = 0; ch < c; ch++) out[ch] = f[ch];
}

static std::vector<float> load_h(const void *p, size_t n)
{
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = h_to_f(((const uint16_t *)p)[i]);
    return v;
}
static std::vector<float> load_f(const void *p, size_t n)
{
    std::vector<float> v(n);
    memcpy(v.data(), p, n * 4);
    return v;
}
static void store_h(void *p, const std::vector<float> &v)
{
    for (size_t i = 0; i < v.size(); i++) ((uint16_t *)p)[i] = f_to_h(v[i]);
}
// v as a virtual tensor of type t holds it
static float as(float v, int t) { return t == CUDNN_DATA_HALF ? h_to_f(f_to_h(v)) : v; }

// x = relu(x*s + b) per channel (c innermost), each step rounded as its
// virtual output's type v[0..2]
static void scale_bias_relu(std::vector<float> &x, const void *s, const void *b, int c, const int v[3])
{
    std::vector<float> S = load_h(s, c), B = load_h(b, c);
    for (size_t i = 0; i < x.size(); i++) {
        float t = as(as(x[i] * S[i % c], v[0]) + B[i % c], v[1]);
        x[i] = as(t > 0 ? t : 0, v[2]);
    }
}

// F: y = conv(relu(x*s+b), w) rounded to half; sum / sqsum of the rounded y per channel
static void run_F(const Job &j)
{
    const Pattern &p = *j.pat;
    const ConvShape &g = p.g;
    size_t nx = (size_t)g.n * g.h * g.w * g.c, nw = (size_t)g.k * g.r * g.s * g.c, ny = (size_t)g.n * g.p * g.q * g.k;
    std::vector<float> x = load_h(j.p[F_X], nx), w = load_h(j.p[F_W], nw), y(ny);
    if (p.prologue) scale_bias_relu(x, j.p[F_S], j.p[F_B], g.c, p.v);
    conv_f32(CONV_FWD, g, x.data(), w.data(), y.data());
    uint16_t *yo = (uint16_t *)j.p[F_Y];
    std::vector<double> r(ny), r2(ny), sum, sq;
    for (size_t i = 0; i < ny; i++) {
        yo[i] = f_to_h(y[i]);
        r[i] = h_to_f(yo[i]), r2[i] = r[i] * r[i];
    }
    channel_sums(r, g.k, j.nondet, sum), channel_sums(r2, g.k, j.nondet, sq);
    for (int k = 0; k < g.k; k++) ((float *)j.p[F_SUM])[k] = (float)sum[k], ((float *)j.p[F_SQSUM])[k] = (float)sq[k];
}

// W: dw = conv_bwd_filter(relu(x*s+b), dy) rounded to half
static void run_W(const Job &j)
{
    const Pattern &p = *j.pat;
    const ConvShape &g = p.g;
    size_t nx = (size_t)g.n * g.h * g.w * g.c, nw = (size_t)g.k * g.r * g.s * g.c, ny = (size_t)g.n * g.p * g.q * g.k;
    std::vector<float> x = load_h(j.p[W_X], nx), dy = load_h(j.p[W_DY], ny), dw(nw);
    scale_bias_relu(x, j.p[W_S], j.p[W_B], g.c, p.v);
    conv_f32(CONV_BWD_FILTER, g, x.data(), dy.data(), dw.data());
    store_h(j.p[W_DW], dw);
}

// D: g = conv_bwd_data(dy, w); t = (xc - mean)*invstd*gamma + beta (each
// step rounded as its virtual's type); da = (t > 0 ? g : 0) rounded to half;
// batch norm's weight gradients and the coefficients of its input gradient
// dx = eq_dy_scale*da + eq_x_scale*xc + eq_bias (M = n*h*w):
//   dbn_bias = sum da, dbn_scale = sum da*xhat, xhat = (xc-mean)*invstd,
//   eq_dy_scale = gamma*invstd, eq_x_scale = -gamma*invstd^2*dbn_scale/M,
//   eq_bias = gamma*invstd*(mean*invstd*dbn_scale - dbn_bias)/M
static void run_D(const Job &j)
{
    const Pattern &p = *j.pat;
    const ConvShape &g = p.g;
    int c = g.c;
    size_t nx = (size_t)g.n * g.h * g.w * g.c, nw = (size_t)g.k * g.r * g.s * g.c, ny = (size_t)g.n * g.p * g.q * g.k;
    std::vector<float> w = load_h(j.p[D_W], nw), dy = load_h(j.p[D_DY], ny), gr(nx);
    conv_f32(CONV_BWD_DATA, g, w.data(), dy.data(), gr.data());
    std::vector<float> xc = load_h(j.p[D_XC], nx), mean = load_f(j.p[D_MEAN], c), inv = load_f(j.p[D_INVSTD], c);
    std::vector<float> gamma = load_f(j.p[D_GAMMA], c), beta = load_f(j.p[D_BETA], c);
    uint16_t *da = (uint16_t *)j.p[D_DA];
    std::vector<double> dv(nx), dxv(nx), db, ds;
    for (size_t i = 0; i < nx; i++) {
        int ch = (int)(i % c);
        float t = as(as(as(as(xc[i] - mean[ch], p.v[1]) * inv[ch], p.v[2]) * gamma[ch], p.v[3]) + beta[ch], p.v[4]);
        da[i] = f_to_h(t > 0 ? as(gr[i], p.v[0]) : 0.0f);
        dv[i] = h_to_f(da[i]);
        dxv[i] = dv[i] * (((double)xc[i] - mean[ch]) * inv[ch]);
    }
    channel_sums(dv, c, j.nondet, db), channel_sums(dxv, c, j.nondet, ds);
    double M = (double)g.n * g.h * g.w;
    for (int k = 0; k < c; k++) {
        double gi = (double)gamma[k] * inv[k];
        ((float *)j.p[D_DSCALE])[k] = (float)ds[k];
        ((float *)j.p[D_DBIAS])[k] = (float)db[k];
        ((float *)j.p[D_EQ_DY])[k] = (float)gi;
        ((float *)j.p[D_EQ_X])[k] = (float)(-gi * inv[k] * ds[k] / M);
        ((float *)j.p[D_EQ_B])[k] = (float)(gi * ((double)mean[k] * inv[k] * ds[k] - db[k]) / M);
    }
}

static void run(const Job &j)
{
    if (j.wsb) memset(j.ws, 0xa5, (size_t)j.wsb); // the workspace holds garbage afterwards
    if (j.pat->kind == 0) run_F(j);
    else if (j.pat->kind == 1) run_W(j);
    else run_D(j);
}

// ---------------------------------------------------------------- finalize
static void set_raw(Desc *d, int name, int type, const void *v, int64_t n = 1)
{
    const uint8_t *b = (const uint8_t *)v;
    d->attrs[name] = Attr{type, n, std::vector<uint8_t>(b, b + n * esize(type))};
}

static cudnnStatus_t finalize(Desc *d)
{
    const char *api = "cudnnBackendFinalize";
    switch (d->type) {
    case D(TENSOR): {
        Tensor t = tview(d);
        bool ok = t.nd >= 1 && count(d, A(TENSOR_STRIDES)) == t.nd && t.align > 0 && !(t.align & (t.align - 1));
        for (int i = 0; ok && i < t.nd; i++) ok = t.dim[i] > 0 && t.str[i] > 0;
        if (!ok) return fail(CUDNN_STATUS_BAD_PARAM, "%s: TENSOR uid %lld: bad dimensions, strides or alignment", api, (long long)t.uid);
        return CUDNN_STATUS_SUCCESS;
    }
    case D(CONVOLUTION): {
        int64_t sd = i64(d, A(CONVOLUTION_SPATIAL_DIMS));
        bool ok = sd >= 1 && sd <= CUDNN_DIM_MAX - 2;
        for (int a : {A(CONVOLUTION_DILATIONS), A(CONVOLUTION_FILTER_STRIDES), A(CONVOLUTION_PRE_PADDINGS), A(CONVOLUTION_POST_PADDINGS)})
            for (int i = 0; ok && i < sd; i++)
                ok = count(d, a) == sd && i64(d, a, i) >= (a == A(CONVOLUTION_DILATIONS) || a == A(CONVOLUTION_FILTER_STRIDES) ? 1 : 0);
        if (!ok) return fail(CUDNN_STATUS_BAD_PARAM, "%s: CONVOLUTION: spatial dims, dilations, strides or paddings", api);
        return CUDNN_STATUS_SUCCESS;
    }
    case D(POINTWISE): return CUDNN_STATUS_SUCCESS;
    case D(OPERATIONGRAPH): return graph_finalize(d);
    case D(ENGINEHEUR): {
        int m = e32(d, A(ENGINEHEUR_MODE));
        if (m < CUDNN_HEUR_MODE_INSTANT || m > CUDNN_HEUR_MODE_A) return fail(CUDNN_STATUS_BAD_PARAM, "%s: ENGINEHEUR: mode %d", api, m);
        std::string why;
        const Desc *graph = ref(d, A(ENGINEHEUR_OPERATION_GRAPH));
        GraphKnobs kn = knobs_of(graph);
        d->nresults = engine_for(graph, &why) ? kn.configs : 0;
        d->knobs = kn; // the engines' notes (heur_results)
        if (!d->nresults) dnn_error(("cudnnBackendFinalize: ENGINEHEUR: no engine for this graph: " + why).c_str());
        return CUDNN_STATUS_SUCCESS;
    }
    case D(ENGINE): {
        int64_t i = i64(d, A(ENGINE_GLOBAL_INDEX));
        const Desc *graph = ref(d, A(ENGINE_OPERATION_GRAPH));
        std::string why;
        GraphKnobs kn = knobs_of(graph);
        if (i < 0 || i >= kn.configs)
            return fail(CUDNN_STATUS_BAD_PARAM, "%s: ENGINE: global index %lld (this graph has %d)", api, (long long)i, kn.configs);
        if (!engine_for(graph, &why))
            return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "%s: ENGINE %lld: no engine for this graph: %s", api, (long long)i, why.c_str());
        d->engine = (int)i, d->pat = graph->pat, d->nondet = i < kn.nondet;
        return CUDNN_STATUS_SUCCESS;
    }
    case D(ENGINECFG): case D(EXECUTION_PLAN): {
        const Desc *from = ref(d, d->type == D(ENGINECFG) ? A(ENGINECFG_ENGINE) : A(EXECUTION_PLAN_ENGINE_CONFIG));
        d->engine = from->engine, d->pat = from->pat, d->ws = workspace_of(*from->pat, from->engine);
        d->nondet = from->nondet;
        return CUDNN_STATUS_SUCCESS;
    }
    case D(VARIANT_PACK): {
        int64_t n = count(d, A(VARIANT_PACK_UNIQUE_IDS));
        if (n != count(d, A(VARIANT_PACK_DATA_POINTERS)))
            return fail(CUDNN_STATUS_BAD_PARAM, "%s: VARIANT_PACK: %lld uids, %lld pointers", api, (long long)n,
                        (long long)count(d, A(VARIANT_PACK_DATA_POINTERS)));
        std::set<int64_t> u;
        for (int64_t i = 0; i < n; i++)
            if (!u.insert(i64(d, A(VARIANT_PACK_UNIQUE_IDS), (int)i)).second)
                return fail(CUDNN_STATUS_BAD_PARAM, "%s: VARIANT_PACK: uid %lld given twice", api, (long long)i64(d, A(VARIANT_PACK_UNIQUE_IDS), (int)i));
        return CUDNN_STATUS_SUCCESS;
    }
    default: return op_finalize(d);
    }
}

// ENGINEHEUR_RESULTS: fill the caller's ENGINECFG descriptors (finalized,
// each with its own ENGINE), engine 0 first.
static cudnnStatus_t heur_results(const Desc *h, int64_t req, int64_t *cnt, void *out)
{
    if (cnt) *cnt = h->nresults;
    int64_t n = req < h->nresults ? req : h->nresults;
    if (n && !out) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: ENGINEHEUR_RESULTS: NULL array");
    const Desc *graph = ref(h, A(ENGINEHEUR_OPERATION_GRAPH));
    for (int64_t i = 0; i < n; i++) {
        Desc *cfg = get(((void **)out)[i], "cudnnBackendGetAttribute");
        if (!cfg) return CUDNN_STATUS_BAD_PARAM;
        if (cfg->type != D(ENGINECFG))
            return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: ENGINEHEUR_RESULTS[%lld] is a %s descriptor, not ENGINECFG", (long long)i, tname(cfg->type));
        Desc *eng = new Desc();
        descs.insert(eng);
        eng->type = D(ENGINE);
        set_raw(eng, A(ENGINE_OPERATION_GRAPH), T(BACKEND_DESCRIPTOR), &graph);
        set_raw(eng, A(ENGINE_GLOBAL_INDEX), T(INT64), &i);
        eng->final = true, eng->engine = (int)i, eng->pat = graph->pat, eng->nondet = i < h->knobs.nondet;
        *cfg = Desc();
        cfg->type = D(ENGINECFG);
        set_raw(cfg, A(ENGINECFG_ENGINE), T(BACKEND_DESCRIPTOR), &eng);
        cfg->final = true, cfg->engine = (int)i, cfg->pat = graph->pat, cfg->ws = workspace_of(*graph->pat, (int)i);
        cfg->nondet = eng->nondet;
    }
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t put(const void *vals, int64_t n, size_t es, int64_t req, int64_t *cnt, void *out)
{
    if (cnt) *cnt = n;
    int64_t k = req < n ? req : n;
    if (k && !out) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: NULL array for %lld elements", (long long)k);
    if (k) memcpy(out, vals, (size_t)k * es);
    return CUDNN_STATUS_SUCCESS;
}

} // namespace

GraphKnobs emu::graph_knobs_from_env()
{
    const char *off = getenv("EMU_CUDNN_GRAPH"), *max_c = getenv("EMU_CUDNN_GRAPH_MAX_C");
    const char *cfgs = getenv("EMU_CUDNN_GRAPH_CONFIGS"), *nd = getenv("EMU_CUDNN_GRAPH_NONDET");
    const char *s2 = getenv("EMU_CUDNN_GRAPH_1X1S2"), *wv = getenv("EMU_CUDNN_GRAPH_WGRAD_VIRT");
    const char *rf = getenv("EMU_CUDNN_GRAPH_REFUSE");
    GraphKnobs k{off && !strcmp(off, "0"), max_c && *max_c ? atol(max_c) : 0, 0, -1, s2 && !strcmp(s2, "0"), -1, 0};
    for (const char *c = rf; c && *c; c++) k.refuse |= *c == 'F' ? 1u : *c == 'W' ? 2u : *c == 'D' ? 4u : 0u;
    if (cfgs && *cfgs) k.configs = atoi(cfgs) < 1 ? 1 : atoi(cfgs) > 16 ? 16 : atoi(cfgs);
    if (nd && *nd) k.nondet = atoi(nd);
    if (wv && !strcmp(wv, "HALF")) k.wgrad_virt = CUDNN_DATA_HALF;
    if (wv && !strcmp(wv, "FLOAT")) k.wgrad_virt = CUDNN_DATA_FLOAT;
    return k;
}

#define G_BEGIN EMU_LOCK; emu::init()

extern "C" {
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *d)
{
    G_BEGIN;
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendCreateDescriptor: NULL");
    if (!tname(t)) return fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendCreateDescriptor: descriptor type %d is not emulated", (int)t);
    Desc *n = new Desc();
    n->type = t;
    descs.insert(n);
    *d = n;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d)
{
    G_BEGIN;
    if (!d) return CUDNN_STATUS_SUCCESS;
    Desc *x = get(d, "cudnnBackendDestroyDescriptor");
    if (!x) return CUDNN_STATUS_BAD_PARAM;
    x->dead = true;
    return CUDNN_STATUS_SUCCESS;
}

// deprecated: back to a fresh descriptor of the same type
cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t d)
{
    G_BEGIN;
    Desc *x = get(d, "cudnnBackendInitialize");
    if (!x) return CUDNN_STATUS_BAD_PARAM;
    int t = x->type;
    *x = Desc();
    x->type = t;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t n, const void *vals)
{
    G_BEGIN;
    const char *api = "cudnnBackendSetAttribute";
    Desc *d = get(desc, api);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    const char *tn = tname(d->type);
    const Spec *s = spec_of(d->type, name);
    if (!s || (s->flags & GET)) return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s has no settable attribute %d", api, tn, (int)name);
    if (d->final) return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d: the descriptor is finalized", api, tn, (int)name);
    if ((int)type != s->t1 && (int)type != s->t2)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d: attribute type %d (this attribute takes %d)", api, tn, (int)name, (int)type, s->t1);
    if (n < 0 || n > s->maxn || (n && !vals))
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d: %lld elements (at most %lld)", api, tn, (int)name, (long long)n, (long long)s->maxn);
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t i = 0; i < n; i++) {
            Desc *r = get(((void *const *)vals)[i], api);
            if (!r) return CUDNN_STATUS_BAD_PARAM;
            if (s->ref == ANY_OP ? !is_op(r->type) : r->type != s->ref)
                return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d: element %lld is a %s descriptor, not %s", api, tn, (int)name,
                            (long long)i, tname(r->type), s->ref == ANY_OP ? "an operation" : tname(s->ref));
            if (!r->final)
                return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d: element %lld (%s) is not finalized", api, tn, (int)name,
                            (long long)i, tname(r->type));
        }
    if (type == CUDNN_TYPE_HANDLE) {
        cudaStream_t st;
        cudnnHandle_t h = *(const cudnnHandle_t *)vals;
        int hs = dnn_handle_state(h, &st);
        if (hs == 0) { report("%s: %s: cuDNN handle %p used after cudnnDestroy", api, tn, (void *)h); return CUDNN_STATUS_BAD_PARAM; }
        if (hs < 0) return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s: %p is not a cuDNN handle", api, tn, (void *)h);
    }
    set_raw(d, name, type, vals, n);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t req, int64_t *cnt, void *out)
{
    G_BEGIN;
    const char *api = "cudnnBackendGetAttribute";
    Desc *d = get(desc, api);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    const char *tn = tname(d->type);
    const Spec *s = spec_of(d->type, name);
    if (!s) return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s has no attribute %d", api, tn, (int)name);
    if (!d->final) return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d: the descriptor is not finalized", api, tn, (int)name);
    if ((int)type != s->t1 && (int)type != s->t2)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d: attribute type %d (this attribute is %d)", api, tn, (int)name, (int)type, s->t1);
    if (req < 0) return fail(CUDNN_STATUS_BAD_PARAM, "%s: requested %lld elements", api, (long long)req);
    static const int64_t two = 2;
    // every engine a tensor-core one; the first EMU_CUDNN_GRAPH_NONDET also
    // NONDETERMINISTIC ([fe] Filters.h reads exactly this attribute)
    static const int32_t notes[2] = {CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC};
    int64_t nengines;
    switch ((int)name) {
    case A(OPERATIONGRAPH_ENGINE_GLOBAL_COUNT): nengines = knobs_of(d).configs; return put(&nengines, 1, 8, req, cnt, out);
    case A(ENGINEHEUR_RESULTS): return heur_results(d, req, cnt, out);
    case A(ENGINECFG_WORKSPACE_SIZE): case A(EXECUTION_PLAN_WORKSPACE_SIZE): return put(&d->ws, 1, 8, req, cnt, out);
    case A(ENGINE_NUMERICAL_NOTE): return put(notes, d->nondet ? 2 : 1, 4, req, cnt, out);
    case A(ENGINE_BEHAVIOR_NOTE): case A(ENGINE_KNOB_INFO): case A(ENGINE_LAYOUT_INFO):
    case A(EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS): return put(&two, 0, 8, req, cnt, out);
    }
    const Attr *a = attr(d, name);
    if (!a) return put(&two, 0, 8, req, cnt, out); // unset: no elements
    if (a->type != (int)type)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d was set as type %d, asked as %d", api, tn, (int)name, a->type, (int)type);
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return put(a->bytes.data(), a->count, esize(a->type), req, cnt, out);
    // descriptors: copied into the caller's, of the same type
    if (cnt) *cnt = a->count;
    int64_t k = req < a->count ? req : a->count;
    if (k && !out) return fail(CUDNN_STATUS_BAD_PARAM, "%s: NULL array for %lld descriptors", api, (long long)k);
    for (int64_t i = 0; i < k; i++) {
        Desc *dst = get(((void **)out)[i], api), *src = ref(d, name, (int)i);
        if (!dst) return CUDNN_STATUS_BAD_PARAM;
        if (dst->type != src->type)
            return fail(CUDNN_STATUS_BAD_PARAM, "%s: %s attribute %d: element %lld is a %s, the caller's descriptor a %s", api, tn,
                        (int)name, (long long)i, tname(src->type), tname(dst->type));
        *dst = *src;
        dst->dead = false;
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc)
{
    G_BEGIN;
    Desc *d = get(desc, "cudnnBackendFinalize");
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (d->final) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: %s: finalized already", tname(d->type));
    for (const Spec &s : specs)
        if (s.desc == d->type && (s.flags & REQ) && !count(d, s.name))
            return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: %s: attribute %d is not set", tname(d->type), s.name);
    cudnnStatus_t st = finalize(d);
    d->final = st == CUDNN_STATUS_SUCCESS;
    return st;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack)
{
    G_BEGIN;
    const char *api = "cudnnBackendExecute";
    cudaStream_t stream = NULL;
    int hs = dnn_handle_state(h, &stream);
    if (hs == 0) { report("%s: cuDNN handle %p used after cudnnDestroy", api, (void *)h); return CUDNN_STATUS_BAD_PARAM; }
    if (hs < 0) return fail(CUDNN_STATUS_BAD_PARAM, "%s: %p is not a cuDNN handle", api, (void *)h);
    Desc *pl = get(plan, api), *vp = get(pack, api);
    if (!pl || !vp) return CUDNN_STATUS_BAD_PARAM;
    if (pl->type != D(EXECUTION_PLAN) || vp->type != D(VARIANT_PACK))
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: wants an EXECUTION_PLAN and a VARIANT_PACK, got %s and %s", api, tname(pl->type), tname(vp->type));
    if (!pl->final || !vp->final)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: the %s is not finalized", api, !pl->final ? "EXECUTION_PLAN" : "VARIANT_PACK");
    auto job = std::make_shared<Job>();
    job->pat = pl->pat;
    job->nondet = pl->nondet;
    const Pattern &p = *pl->pat;
    std::map<int64_t, void *> given;
    for (int64_t i = 0; i < count(vp, A(VARIANT_PACK_UNIQUE_IDS)); i++)
        given[i64(vp, A(VARIANT_PACK_UNIQUE_IDS), (int)i)] = ptr(vp, A(VARIANT_PACK_DATA_POINTERS), (int)i);
    bool ok = true;
    int nroles = p.kind == 0 ? (int)F_N : p.kind == 1 ? (int)W_N : (int)D_N;
    for (int r = 0; r < nroles; r++) {
        const Role &ro = p.role[r];
        if (ro.uid < 0) continue; // ConvBNfprop without its prologue: no scale / bias
        char what[128];
        snprintf(what, sizeof what, "%s (uid %lld) of the %s graph", role_names[p.kind][r], (long long)ro.uid, pattern_names[p.kind]);
        auto it = given.find(ro.uid);
        if (it == given.end() || !it->second) {
            report("%s: the variant pack has no pointer for %s", api, what);
            ok = false;
            continue;
        }
        ok &= check_range(api, what, it->second, ro.bytes, DEVICE);
        if ((uintptr_t)it->second % (uintptr_t)ro.align) {
            report("%s: %s at %p is not %lld-byte aligned (its BYTE_ALIGNMENT)", api, what, it->second, (long long)ro.align);
            ok = false;
        }
        job->p[r] = it->second;
    }
    if (pl->ws) {
        void *ws = ptr(vp, A(VARIANT_PACK_WORKSPACE));
        if (!ws) {
            report("%s: the plan (%s, engine %d) needs a workspace of %lld bytes; the variant pack has none", api,
                   pattern_names[p.kind], pl->engine, (long long)pl->ws);
            ok = false;
        } else
            ok &= check_range(api, "workspace", ws, (size_t)pl->ws, DEVICE);
        job->ws = ws, job->wsb = pl->ws;
    }
    if (!ok) return fail(CUDNN_STATUS_BAD_PARAM, "%s: bad variant pack (see the report above)", api);
    bool sok;
    Stream *s = stream_of(stream, api, &sok);
    if (!sok) return fail(CUDNN_STATUS_BAD_PARAM, "%s: the handle's stream is gone", api);
    enqueue(s, [job]() { run(*job); }, pattern_names[p.kind]);
    return CUDNN_STATUS_SUCCESS;
}
} // extern "C"
