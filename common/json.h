/*
 * common/json.h - integers out of parsed JSON (cJSON trees), checked.
 *
 * JSON has one number type, which cJSON keeps as a double. A count, a step
 * or a batch size read from a file that was damaged or written by someone
 * else can be a fraction, negative, 1e300 or (from "1e999") infinite, and
 * converting such a double to an integer type it does not fit is undefined
 * behaviour (C11 6.3.1.4). Every integer sluice reads from JSON (checkpoint
 * sidecars, dataset.json, the pipeline's resume state, safetensors headers)
 * goes through these functions: the range and integrality are checked in
 * double arithmetic first, the conversion comes after.
 *
 * Doubles hold every integer up to 2^53 exactly (SL_JSON_INT_MAX); that is
 * the bound for counts that sluice itself writes as JSON numbers, because
 * a larger one cannot have come back from its writer unchanged.
 *
 * Writing goes the other way through sl_json_add_int, so that what sluice
 * writes reads back exactly.
 *
 * Errors: SL_ECORRUPT naming the function, the file and the key, as
 *   "sl_train_run: ck/ckpt-000000100.json: step: 1e+300 is not an integer in 0..2^53"
 *
 * Threading: pure functions (sl_json_int sets the calling thread's message).
 */
#ifndef SL_JSON_H
#define SL_JSON_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* 2^53: doubles are exact integers up to here. */
#define SL_JSON_INT_MAX ((int64_t)1 << 53)

/* Predicate: item is a JSON number holding an integer in [lo, hi]; then
 * *out (when out is not NULL) gets it. NULL, non-numbers, fractions, NaN,
 * infinities and values outside [lo, hi] give 0 and leave *out alone. Any
 * lo <= hi in int64's range is fine. */
int sl_json_is_int(const struct cJSON *item, int64_t lo, int64_t hi, int64_t *out);

/* Action: sl_json_is_int, or SL_ECORRUPT "fn: file: name: what", where
 * what is "missing" (item NULL), "not a number" or "V is not an integer
 * in LO..HI" (bounds that are powers of two of 2^16 and up written 2^k).
 * *out is untouched on error. */
int sl_json_int(const struct cJSON *item, int64_t lo, int64_t hi, int64_t *out,
                const char *fn, const char *file, const char *name);

/* sl_json_int on obj's member key (case-sensitive), named by the key. An
 * absent member is the error "missing" when required, else SL_OK with *out
 * untouched (the caller's default stays). */
int sl_json_get_int(const struct cJSON *obj, const char *key, int required, int64_t lo,
                    int64_t hi, int64_t *out, const char *fn, const char *file);

/* Add member key = v to obj as an exact integer literal ("9007199254740993"):
 * cJSON's own printer writes a number with 15 significant digits whenever
 * that reads back within a rounding error, so integers from about 10^15 on
 * would not come back as written. Returns the new item, NULL when out of
 * memory (obj unchanged), like cJSON's add functions. */
struct cJSON *sl_json_add_int(struct cJSON *obj, const char *key, int64_t v);

#ifdef __cplusplus
}
#endif

#endif /* SL_JSON_H */
