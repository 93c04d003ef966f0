/*
 * common/json.c - checked integers out of cJSON numbers (common/json.h).
 *
 * The order matters: the double is compared with -2^63 and 2^63 (both
 * exactly representable) before it is converted, so the conversion is
 * always defined; integrality is then the round trip, and [lo, hi] is
 * checked on the integer, so bounds that no double holds (2^63 - 1) are
 * exact too.
 *
 * sl_json_add_int writes the integer's decimal text as a raw member, which
 * cJSON prints verbatim.
 *
 * Threading: pure functions.
 */
#include "common/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "common/status.h"

int sl_json_is_int(const cJSON *item, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(item))
        return 0;
    double d = item->valuedouble;
    if (!(d >= -0x1p63 && d < 0x1p63)) /* NaN fails too */
        return 0;
    int64_t v = (int64_t)d;
    if ((double)v != d || v < lo || v > hi)
        return 0;
    if (out)
        *out = v;
    return 1;
}

/* A bound for a message: 2^k for the large powers of two, 2^63-1 for
 * INT64_MAX, else decimal. */
static const char *bound(int64_t v, char *buf, size_t cap)
{
    if (v == INT64_MAX) {
        snprintf(buf, cap, "2^63-1");
        return buf;
    }
    uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (m >= 65536 && (m & (m - 1)) == 0) {
        int k = 0;
        while (m >>= 1)
            k++;
        snprintf(buf, cap, "%s2^%d", v < 0 ? "-" : "", k);
    } else {
        snprintf(buf, cap, "%" PRId64, v);
    }
    return buf;
}

/* The shortest %g form of d that reads back as d (2.5, not 2.5000000000000000). */
static const char *number(double d, char *buf, size_t cap)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    return buf;
}

int sl_json_int(const cJSON *item, int64_t lo, int64_t hi, int64_t *out, const char *fn,
                const char *file, const char *name)
{
    if (sl_json_is_int(item, lo, hi, out))
        return SL_OK;
    if (!item)
        return sl_fail(SL_ECORRUPT, "%s: %s: %s: missing", fn, file, name);
    if (!cJSON_IsNumber(item))
        return sl_fail(SL_ECORRUPT, "%s: %s: %s: not a number", fn, file, name);
    char v[40], a[32], b[32];
    return sl_fail(SL_ECORRUPT, "%s: %s: %s: %s is not an integer in %s..%s", fn, file, name,
                   number(item->valuedouble, v, sizeof v), bound(lo, a, sizeof a),
                   bound(hi, b, sizeof b));
}

int sl_json_get_int(const cJSON *obj, const char *key, int required, int64_t lo, int64_t hi,
                    int64_t *out, const char *fn, const char *file)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it && !required)
        return SL_OK;
    return sl_json_int(it, lo, hi, out, fn, file, key);
}

cJSON *sl_json_add_int(cJSON *obj, const char *key, int64_t v)
{
    char text[24];
    snprintf(text, sizeof text, "%" PRId64, v);
    return cJSON_AddRawToObject(obj, key, text);
}
