/*
 * pipeline/rng.h - counter-derived RNG streams: what order.c's shuffles
 * and image/geometry.c's crops draw from, so a sample's draws depend on
 * (seed, epoch, record id) only, never on which thread runs it or when.
 */
#ifndef SL_PIPELINE_RNG_H
#define SL_PIPELINE_RNG_H

#include <stdint.h>

/* splitmix64 steps from a state derived by hashing (seed, a, b): the stream
 * for "sample record_id in epoch e" is sl_rng_for(seed, e, record_id), so a
 * sample's draws never depend on which thread runs it or when. */
typedef struct sl_rng {
    uint64_t s;
} sl_rng;

static inline uint64_t sl_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline sl_rng sl_rng_for(uint64_t seed, uint64_t a, uint64_t b)
{
    sl_rng r = {sl_mix64(sl_mix64(sl_mix64(seed) ^ (a + 0x9e3779b97f4a7c15ull)) ^
                         (b + 0x632be59bd9b4e019ull))};
    return r;
}
static inline uint64_t sl_rng_next(sl_rng *r)
{
    return sl_mix64(r->s += 0x9e3779b97f4a7c15ull);
}
/* Uniform in [0, 1) with 24 random bits (exact in float). */
static inline float sl_rng_uniform(sl_rng *r)
{
    return (float)(sl_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}
/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < 2^-32
 * for n < 2^32, and deterministic, which is what matters here). */
static inline uint64_t sl_rng_below(sl_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)sl_rng_next(r) * n) >> 64);
}

#endif /* SL_PIPELINE_RNG_H */
