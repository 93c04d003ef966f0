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
void flush(Stream *s);
void flush_all();
bool lazy();
void set_error(cudaError_t e);

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
}
