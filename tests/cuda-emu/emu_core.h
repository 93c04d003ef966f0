// emu_core.h - the emulator's shared core: one lock for every API call,
// device memory (one mmap region, PROT_NONE while host code runs),
// streams with a queue each (ops run when something forces them: lazy
// mode, EMU_LAZY=1, the default; EMU_LAZY=0 runs each op as it is queued),
// events, misuse reports.
#pragma once
#include <cuda_runtime_api.h>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

namespace emu {
extern std::recursive_mutex mu;
#define EMU_LOCK std::lock_guard<std::recursive_mutex> emu_lk_(emu::mu)

void init();
// "EMU: error: ..." with a backtrace on stderr (EMU_ABORT=1: then abort).
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

enum Kind { HOST = 0, DEVICE = 1, PINNED = 2 };
Kind kind_of(const void *p);
// p .. p+n must lie in one live allocation of kind want (DEVICE / PINNED),
// or, for want == HOST, in no device allocation; else a report naming api
// and what. Returns false after a report.
bool check_range(const char *api, const char *what, const void *p, size_t n, Kind want);
// device allocations readable/writable (nesting count); only while ops run
void dev_open();
void dev_close();

struct Stream;
// NULL: the legacy default stream. A destroyed or unknown handle: report,
// NULL returned (the caller returns cudaErrorInvalidResourceHandle).
Stream *stream_of(cudaStream_t s, const char *api, bool *ok);
// Queue op on s (or into its graph when capturing). what names it in reports.
void enqueue(Stream *s, std::function<void()> op, const char *what);
// Host work on stream h, in stream order like a kernel (emu_nccl.cpp's
// collectives): step(block) runs when the stream reaches it and is called
// again while it returns false (in progress: later ops wait behind it, a
// query says not ready). block: the host is blocked on the stream (a
// synchronize), so step may wait; else (a query, an eager enqueue) it
// must not. False (reported) for a bad handle or during capture.
bool enqueue_step(cudaStream_t h, const char *api, std::function<bool(bool)> step, const char *what);
// A step made by make() when it is queued: at once on a stream that is not
// capturing; during a capture, make goes into the graph and every launch of
// it makes and queues a fresh step (a captured NCCL collective runs once a
// launch, numbered in launch order). False (reported) for a bad handle.
bool enqueue_step_made(cudaStream_t h, const char *api,
                       std::function<std::function<bool(bool)>()> make, const char *what);
// Run s's queued work (block: waiting for steps in progress); false when a
// step is still in progress after that (a blocking caller then fails with
// cudaErrorLaunchTimeout: on a GPU it would hang).
bool flush(Stream *s, bool block = true);
bool flush_all();
// flush for a stream handle (a bad one is reported: false)
bool progress(cudaStream_t h, bool block);
bool lazy();
void set_error(cudaError_t e);

// emu_dnn.cpp's convolutions in f32, shared with emu_dnn_graph.cpp (the
// backend graph API's fused convolutions). Layouts: x (n,h,w,c), w
// (k,r,s,c), y (n,p,q,k), all packed; padding ph / pw before the image
// (p and q say where the output ends, so post-padding may differ).
struct ConvShape { int n, h, w, c, k, r, s, p, q, ph, pw, sh, sw, dh, dw; };
enum ConvDir { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER };
// FWD: a = x, b = w -> out = y; BWD_DATA: a = w, b = dy -> out = dx;
// BWD_FILTER: a = x, b = dy -> out = dw. out is overwritten.
void conv_f32(ConvDir d, const ConvShape &g, const float *a, const float *b, float *out);
}
struct cudnnContext;
namespace emu {
// emu_dnn_graph.cpp's switches (README's "cuDNN graph API"): read when a
// handle is made (cudnnCreate) and again at the heuristics (the later
// setting wins; off and no_1x1s2 if either says so, max_c the smaller).
struct GraphKnobs {
    bool off;       // EMU_CUDNN_GRAPH=0: every graph refused
    long max_c;     // EMU_CUDNN_GRAPH_MAX_C: C or K above refused (0: no limit)
    int configs;    // EMU_CUDNN_GRAPH_CONFIGS: engine configurations answered, 1..16 (0: unset, 2)
    int nondet;     // EMU_CUDNN_GRAPH_NONDET: the first N marked NONDETERMINISTIC (-1: unset, 0)
    bool no_1x1s2;  // EMU_CUDNN_GRAPH_1X1S2=0: 1x1 stride-2 convolutions refused
    int wgrad_virt; // EMU_CUDNN_GRAPH_WGRAD_VIRT=HALF|FLOAT: ConvBNwgrad's only intermediate
                    // type (-1: unset, both)
    unsigned refuse; // EMU_CUDNN_GRAPH_REFUSE=F,W,D: those patterns refused (bits 1 F, 2 W, 4 D)
};
GraphKnobs graph_knobs_from_env();
// EMU_CUDNN_VERSION (cudnnGetVersion's answer; unset: the headers' CUDNN_VERSION).
long dnn_version();
// A cuDNN handle for emu_dnn_graph.cpp: 1 live (*stream and *knobs set),
// 0 destroyed, -1 never made by cudnnCreate.
int dnn_handle_state(cudnnContext *h, cudaStream_t *stream, GraphKnobs *knobs = nullptr);
// "EMU: warning: cuDNN: msg", kept for cudnnGetLastErrorString
void dnn_error(const char *msg);

// v rounded to TF32 (10 mantissa bits, nearest even; inf / NaN as they are):
// what tensor-op math does to f32 inputs (cuDNN and cuBLAS alike).
inline float tf32(float v)
{
    uint32_t u;
    __builtin_memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return v;
    u += 0xfffu + ((u >> 13) & 1u);
    u &= 0xffffe000u;
    __builtin_memcpy(&v, &u, 4);
    return v;
}

// bf16 / f16 <-> f32, round to nearest even (as __float2bfloat16_rn /
// __float2half_rn: NaN kept quiet, f16 overflow to inf, subnormals kept):
// the widening and rounding of emu_dnn.cpp's convolutions and
// emu_nccl.cpp's reductions.
inline float bf16_to_f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
inline uint16_t f_to_bf16(float v)
{
    uint32_t u;
    __builtin_memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float h_to_f(uint16_t b)
{
    int e = (b >> 10) & 0x1f, m = b & 0x3ff;
    float mag = e == 0 ? __builtin_ldexpf((float)m, -24)
              : e == 31 ? (m ? __builtin_nanf("") : __builtin_inff())
                        : __builtin_ldexpf((float)(m | 0x400), e - 25);
    return b & 0x8000u ? -mag : mag;
}
inline uint16_t f_to_h(float v)
{
    uint32_t u;
    __builtin_memcpy(&u, &v, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | 0x7e00u;
    if (u >= 0x47800000u) return sign | 0x7c00u;
    if (u < 0x38800000u) { // subnormal: the FPU's rounding of 0.5 + |v|
        float f;
        __builtin_memcpy(&f, &u, 4);
        f += 0.5f;
        uint32_t g;
        __builtin_memcpy(&g, &f, 4);
        return sign | (uint16_t)(g - 0x3f000000u);
    }
    u += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u);
    return sign | (uint16_t)(u >> 13);
}
}
