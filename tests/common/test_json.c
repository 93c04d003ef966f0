/* tests/common/test_json.c - common/json.h: integers out of JSON numbers,
 * range and integrality checked before the conversion (issue 26). The
 * sanitizer builds (float-cast-overflow) would stop on a conversion made
 * first and checked after. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/json.h"
#include "common/status.h"

/* sl_json_is_int on the JSON text `num` (a number literal, or any JSON). */
static int is_int(const char *num, int64_t lo, int64_t hi, int64_t *out)
{
    cJSON *j = cJSON_Parse(num);
    cr_assert_not_null(j, "%s does not parse", num);
    int ok = sl_json_is_int(j, lo, hi, out);
    cJSON_Delete(j);
    return ok;
}

Test(common_json, integers_in_range_only)
{
    static const struct {
        const char *text;
        int64_t lo, hi;
        int ok;
        int64_t want;
    } cases[] = {
        {"0", 0, 10, 1, 0},
        {"-0", 0, 10, 1, 0},
        {"10", 0, 10, 1, 10},
        {"11", 0, 10, 0, 0},
        {"-1", 0, 10, 0, 0},
        {"-1", -1, 10, 1, -1},
        {"2.5", 0, 10, 0, 0},
        {"3.0", 0, 10, 1, 3},
        {"1e1", 0, 10, 1, 10},
        {"1e300", 0, INT64_MAX, 0, 0},
        {"-1e300", INT64_MIN, INT64_MAX, 0, 0},
        {"1e999", 0, INT64_MAX, 0, 0},   /* strtod: inf */
        {"-1e999", INT64_MIN, 0, 0, 0},  /* -inf */
        {"1e-999", 0, 10, 1, 0},         /* underflows to 0 */
        {"9007199254740992", 0, SL_JSON_INT_MAX, 1, (int64_t)1 << 53},
        {"9007199254740994", 0, SL_JSON_INT_MAX, 0, 0},
        /* the edges of int64: -2^63 converts, 2^63 (what INT64_MAX reads as) does not */
        {"-9223372036854775808", INT64_MIN, INT64_MAX, 1, INT64_MIN},
        {"9223372036854775807", INT64_MIN, INT64_MAX, 0, 0},
        {"9223372036854775808", INT64_MIN, INT64_MAX, 0, 0},
        {"9223372036854774784", INT64_MIN, INT64_MAX, 1, INT64_MAX - 1023},
        {"4294967295", 1, UINT32_MAX, 1, 4294967295},
        {"4294967296", 1, UINT32_MAX, 0, 0},
        {"\"3\"", 0, 10, 0, 0},
        {"null", 0, 10, 0, 0},
        {"true", 0, 10, 0, 0},
        {"[3]", 0, 10, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t v = 12345;
        int ok = is_int(cases[i].text, cases[i].lo, cases[i].hi, &v);
        cr_assert_eq(ok, cases[i].ok, "%s in [%lld, %lld]", cases[i].text,
                     (long long)cases[i].lo, (long long)cases[i].hi);
        cr_assert_eq(v, ok ? cases[i].want : 12345, "%s: %lld", cases[i].text, (long long)v);
    }
    cr_assert_eq(sl_json_is_int(NULL, 0, 10, NULL), 0);
    /* a NaN that no parser gives but a caller could set */
    cJSON *nan = cJSON_CreateNumber(0.0 / 0.0);
    cr_assert_eq(sl_json_is_int(nan, INT64_MIN, INT64_MAX, NULL), 0);
    cJSON_Delete(nan);
}

Test(common_json, messages_name_file_key_value_and_range)
{
    cJSON *j = cJSON_Parse("{\"step\":1e300,\"half\":2.5,\"neg\":-1,\"s\":\"7\",\"inf\":1e999,"
                           "\"big\":18446744073709551616,\"ok\":12}");
    cr_assert_not_null(j);
    static const struct {
        const char *key;
        int required;
        int64_t lo, hi;
        const char *want;
    } cases[] = {
        {"step", 1, 0, (int64_t)1 << 62,
         "sl_train_run: ckpt-000000100.json: step: 1e+300 is not an integer in 0..2^62"},
        {"half", 1, 0, SL_JSON_INT_MAX,
         "sl_train_run: ckpt-000000100.json: half: 2.5 is not an integer in 0..2^53"},
        {"neg", 1, 1, UINT32_MAX,
         "sl_train_run: ckpt-000000100.json: neg: -1 is not an integer in 1..4294967295"},
        {"s", 1, 0, 10, "sl_train_run: ckpt-000000100.json: s: not a number"},
        {"inf", 1, INT64_MIN, INT64_MAX,
         "sl_train_run: ckpt-000000100.json: inf: inf is not an integer in -2^63..2^63-1"},
        {"big", 0, -65536, 65536,
         "sl_train_run: ckpt-000000100.json: big: 1.8446744073709552e+19 is not an integer in "
         "-2^16..2^16"},
        {"gone", 1, 0, 10, "sl_train_run: ckpt-000000100.json: gone: missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t v = 77;
        int rc = sl_json_get_int(j, cases[i].key, cases[i].required, cases[i].lo, cases[i].hi,
                                 &v, "sl_train_run", "ckpt-000000100.json");
        cr_assert_eq(rc, SL_ECORRUPT, "%s: rc %d", cases[i].key, rc);
        cr_assert_str_eq(sl_errmsg(), cases[i].want);
        cr_assert_eq(v, 77, "%s: *out changed on error", cases[i].key);
    }
    int64_t v = 77;
    cr_assert_eq(sl_json_get_int(j, "gone", 0, 0, 10, &v, "f", "x.json"), SL_OK);
    cr_assert_eq(v, 77, "an optional key left out keeps the default");
    cr_assert_eq(sl_json_get_int(j, "ok", 1, 0, 12, &v, "f", "x.json"), SL_OK);
    cr_assert_eq(v, 12);
    /* the item form names what the caller says */
    cr_assert_eq(sl_json_int(cJSON_GetObjectItem(j, "half"), 0, 5, &v, "sl_manifest_load",
                             "dataset.json", "field splits.train.records"), SL_ECORRUPT);
    cr_assert_str_eq(sl_errmsg(), "sl_manifest_load: dataset.json: field splits.train.records: "
                                  "2.5 is not an integer in 0..5");
    cJSON_Delete(j);
}

/* What sl_json_add_int writes reads back as the same integer, where
 * cJSON's own number printer (15 digits) would not. */
Test(common_json, add_int_writes_exact_text)
{
    static const int64_t v[] = {0, -1, 12, 999999999999999, 1000000000000001,
                                ((int64_t)1 << 53) - 1, (int64_t)1 << 53, -((int64_t)1 << 53)};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        cJSON *o = cJSON_CreateObject();
        cr_assert_not_null(sl_json_add_int(o, "n", v[i]));
        char *text = cJSON_PrintUnformatted(o);
        char want[64];
        snprintf(want, sizeof want, "{\"n\":%lld}", (long long)v[i]);
        cr_assert_str_eq(text, want);
        cJSON *back = cJSON_Parse(text);
        int64_t got = 0;
        cr_assert(sl_json_is_int(cJSON_GetObjectItem(back, "n"), INT64_MIN, INT64_MAX, &got));
        cr_assert_eq(got, v[i], "%lld read back as %lld", (long long)v[i], (long long)got);
        cJSON_Delete(back);
        cJSON_free(text);
        cJSON_Delete(o);
    }
}
