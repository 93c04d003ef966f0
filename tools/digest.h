/*
 * tools/digest.h - a 128-bit running hash of bytes (digest.c says which),
 * and of a pipeline batch in the order `sluice profile --digest` hashes it:
 * the sample count, the samples' bytes, labels, record ids and epochs.
 * Equal digests mean byte-identical batches in the same order.
 *
 * Threading: a digest is used by one thread at a time.
 */
#ifndef SL_DIGEST_H
#define SL_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/pipeline.h"

typedef struct digest {
    uint64_t v[4];
    uint8_t buf[32];
    size_t nbuf;
    uint64_t total;
} digest;

/* Start a digest (no allocation; nothing to free). */
void digest_init(digest *d);
/* Hash len bytes of data, after what came before (host byte order: digests
 * compare on one kind of host). */
void digest_update(digest *d, const void *data, size_t len);
/* One batch: n, data, labels, record ids, epochs (sl_batch, pipeline.h). */
void digest_batch(digest *d, const sl_batch *b);
/* 32 hex digits and a NUL into out; d is not changed, so hashing may go on. */
void digest_final(const digest *d, char out[33]);

#endif
