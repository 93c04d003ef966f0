/*
 * tools/digest.c - the 128-bit hash of `sluice profile --digest`: four
 * xxHash64 lanes over 32-byte blocks (XXH64's round and primes,
 * github.com/Cyan4973/xxHash, xxhash.h), finished into 128 bits with the
 * murmur3/splitmix finalizer. Not cryptographic: it tells runs apart.
 * tests/python/test_pipeline.py computes the same hash again in Python
 * from this comment and the code below: change both or neither.
 *
 * Threading: none; one digest per thread.
 */
#include <stdio.h>
#include <string.h>

#include "digest.h"

#define DG_P1 0x9E3779B185EBCA87ull
#define DG_P2 0xC2B2AE3D27D4EB4Full

static uint64_t dg_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t dg_round(uint64_t acc, uint64_t in)
{
    return dg_rotl(acc + in * DG_P2, 31) * DG_P1;
}

static uint64_t dg_fmix(uint64_t z)
{
    z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
    z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ull;
    return z ^ (z >> 33);
}

void digest_init(digest *d)
{
    memset(d, 0, sizeof *d);
    d->v[0] = DG_P1 + DG_P2;
    d->v[1] = DG_P2;
    d->v[2] = 0;
    d->v[3] = 0 - DG_P1;
}

static void dg_block(digest *d, const uint8_t *p)
{
    for (int i = 0; i < 4; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8); /* host byte order: digests compare on one kind of host */
        d->v[i] = dg_round(d->v[i], w);
    }
}

void digest_update(digest *d, const void *data, size_t len)
{
    const uint8_t *p = data;
    d->total += len;
    if (d->nbuf) {
        size_t take = 32 - d->nbuf < len ? 32 - d->nbuf : len;
        memcpy(d->buf + d->nbuf, p, take);
        d->nbuf += take;
        p += take;
        len -= take;
        if (d->nbuf < 32)
            return;
        dg_block(d, d->buf);
        d->nbuf = 0;
    }
    for (; len >= 32; p += 32, len -= 32)
        dg_block(d, p);
    memcpy(d->buf, p, len);
    d->nbuf = len;
}

void digest_final(const digest *in, char out[33])
{
    digest d = *in;
    memset(d.buf + d.nbuf, 0, 32 - d.nbuf);
    dg_block(&d, d.buf); /* the zero-padded tail; total tells paddings apart */
    uint64_t a = dg_fmix(d.v[0] ^ dg_rotl(d.v[2], 17) ^ d.total);
    uint64_t b = dg_fmix(d.v[1] ^ dg_rotl(d.v[3], 29) ^ (d.total * DG_P1));
    uint64_t hi = dg_fmix(a + b * DG_P2), lo = dg_fmix(b ^ dg_rotl(a, 23) ^ hi);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
}

void digest_batch(digest *d, const sl_batch *b)
{
    uint64_t n = b->n;
    digest_update(d, &n, sizeof n);
    digest_update(d, b->data, (size_t)b->n * b->sample_bytes);
    digest_update(d, b->labels, b->n * sizeof *b->labels);
    digest_update(d, b->record_ids, b->n * sizeof *b->record_ids);
    digest_update(d, b->epochs, b->n * sizeof *b->epochs);
}
