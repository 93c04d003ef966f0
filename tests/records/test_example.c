/* tests/records/test_example.c - tf.train.Example encode (example_encode.c)
 * and zero-copy decode (example_decode.c): golden bytes worked out by hand
 * from the protobuf encoding rules, round trips, unpacked lists, unknown
 * fields at every level, truncations and random corruption. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "testutil.h"

/* ------------------------------------------------------------ helpers */

/* A tiny independent protobuf writer, to hand-make messages the library's
 * encoder would never produce (unpacked lists, unknown fields, bad bytes). */
typedef struct tb {
    uint8_t b[8192];
    size_t n;
} tb;

static void tb_raw(tb *t, const void *p, size_t n)
{
    cr_assert_leq(t->n + n, sizeof t->b);
    memcpy(t->b + t->n, p, n);
    t->n += n;
}
static void tb_byte(tb *t, uint8_t x) { tb_raw(t, &x, 1); }
static void tb_varint(tb *t, uint64_t v)
{
    while (v >= 0x80) {
        tb_byte(t, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    tb_byte(t, (uint8_t)v);
}
static void tb_tag(tb *t, uint32_t field, unsigned wt) { tb_varint(t, (uint64_t)field << 3 | wt); }
/* field (LEN) holding sub */
static void tb_msg(tb *t, uint32_t field, const tb *sub)
{
    tb_tag(t, field, 2);
    tb_varint(t, sub->n);
    tb_raw(t, sub->b, sub->n);
}
static void tb_str(tb *t, uint32_t field, const char *s)
{
    tb_tag(t, field, 2);
    tb_varint(t, strlen(s));
    tb_raw(t, s, strlen(s));
}
static void tb_f32(tb *t, uint32_t field, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    tb_tag(t, field, 5);
    for (int i = 0; i < 4; i++)
        tb_byte(t, (uint8_t)(u >> (8 * i)));
}
/* One unknown field of each skippable wire type (0, 1, 2, 5), numbered so
 * they collide with nothing the decoder knows. */
static void tb_unknowns(tb *t)
{
    tb_tag(t, 90, 0);
    tb_varint(t, UINT64_MAX);
    tb_tag(t, 91, 1);
    tb_raw(t, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    tb_str(t, 92, "unknown\x0a\x01");
    tb_tag(t, 93, 5);
    tb_raw(t, "\xff\xff\xff\xff", 4);
}

/* Wrap one map entry (key, Feature) as Example { features { feature {...} } }. */
static void tb_example1(tb *out, const tb *entry)
{
    tb features = {0};
    out->n = 0;
    tb_msg(&features, 1, entry);
    tb_msg(out, 1, &features);
}

static uint8_t *dup_exact(const void *p, size_t n)
{
    /* An exactly-sized heap copy, so ASan catches any read past the end. */
    uint8_t *d = malloc(n ? n : 1);
    cr_assert_not_null(d);
    if (n)
        memcpy(d, p, n);
    return d;
}

static void assert_bytes(const uint8_t *got, size_t got_len, const uint8_t *want, size_t want_len)
{
    cr_assert_eq(got_len, want_len, "length %zu, want %zu", got_len, want_len);
    for (size_t i = 0; i < want_len; i++)
        cr_assert_eq(got[i], want[i], "byte %zu: 0x%02x, want 0x%02x", i, got[i], want[i]);
}

static int64_t get_i64(const uint8_t *rec, size_t len, const char *name, size_t i)
{
    sl_feature_view f;
    int64_t v = 0;
    cr_assert_eq(sl_example_find(rec, len, name, &f), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_feature_int64(&f, i, &v), SL_OK, "%s", sl_errmsg());
    return v;
}

/* ------------------------------------------------------- golden bytes */

/* features {"a": int64 [1], "b": bytes ["xy"]}, worked out by hand:
 *   entry a = 0a 01 'a'            key (1, LEN) "a"
 *             12 05                value (2, LEN) Feature of 5 bytes
 *               1a 03              Feature.int64_list (3, LEN) of 3 bytes
 *                 0a 01 01         Int64List.value packed (1, LEN): varint 1
 *   entry b = 0a 01 'b' 12 06 0a 04 0a 02 'x' 'y'   bytes_list (1), value "xy"
 *   Features = 0a 0a <entry a: 10 bytes> 0a 0b <entry b: 11 bytes>  = 25 bytes
 *   Example  = 0a 19 <Features>                                     = 27 bytes */
static const uint8_t golden_ab[] = {
    0x0a, 0x19,                                     /* Example.features, 25 bytes */
    0x0a, 0x0a,                                     /* Features.feature, 10 bytes */
    0x0a, 0x01, 'a',                                /*   key "a" */
    0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x01,       /*   value: int64_list [1] */
    0x0a, 0x0b,                                     /* Features.feature, 11 bytes */
    0x0a, 0x01, 'b',                                /*   key "b" */
    0x12, 0x06, 0x0a, 0x04, 0x0a, 0x02, 'x', 'y',   /*   value: bytes_list ["xy"] */
};

/* features {"f": float [1.5], "n": int64 [-1]}:
 *   1.5f = 0x3fc00000, little-endian 00 00 c0 3f; FloatList packed 0a 04 <4 bytes>;
 *   Feature 12 06 <FloatList>; entry 0a 01 'f' 12 08 <Feature> = 13 bytes.
 *   -1 as int64 is the 10-byte varint ff ff ff ff ff ff ff ff ff 01;
 *   Int64List 0a 0a <10>; Feature 1a 0c <12>; entry 0a 01 'n' 12 0e <14> = 19.
 *   Features 0a 0d <13> 0a 13 <19> = 36; Example 0a 24 <36> = 38 bytes. */
static const uint8_t golden_fn[] = {
    0x0a, 0x24,
    0x0a, 0x0d, 0x0a, 0x01, 'f', 0x12, 0x08, 0x12, 0x06, 0x0a, 0x04, 0x00, 0x00, 0xc0, 0x3f,
    0x0a, 0x13, 0x0a, 0x01, 'n', 0x12, 0x0e, 0x1a, 0x0c, 0x0a, 0x0a,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
};

Test(example, golden_int64_and_bytes)
{
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    int64_t one = 1;

    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_add_int64(&b, "a", &one, 1), SL_OK);
    cr_assert_eq(sl_example_add_bytes(&b, "b", "xy", 2), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    assert_bytes(d, n, golden_ab, sizeof golden_ab);

    /* and the decoder reads the golden bytes back */
    sl_feature_view f;
    const uint8_t *p;
    size_t len, cnt;
    cr_assert_eq(get_i64(golden_ab, sizeof golden_ab, "a", 0), 1);
    cr_assert_eq(sl_example_find(golden_ab, sizeof golden_ab, "b", &f), SL_OK);
    cr_assert_eq(f.kind, SL_FEATURE_BYTES);
    cr_assert_eq(sl_feature_count(&f, &cnt), SL_OK);
    cr_assert_eq(cnt, 1);
    cr_assert_eq(sl_feature_bytes(&f, 0, &p, &len), SL_OK);
    cr_assert_eq(len, 2);
    cr_assert_eq(p, golden_ab + 25, "view must point into the record (zero copy)");
    cr_assert_eq(sl_example_find(golden_ab, sizeof golden_ab, "c", &f), SL_ENOENT);
    sl_example_builder_fini(&b);
}

Test(example, golden_float_and_negative_int64)
{
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    float f15 = 1.5f;
    int64_t m1 = -1;
    float got;

    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_add_float(&b, "f", &f15, 1), SL_OK);
    cr_assert_eq(sl_example_add_int64(&b, "n", &m1, 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    assert_bytes(d, n, golden_fn, sizeof golden_fn);

    sl_feature_view f;
    cr_assert_eq(sl_example_find(golden_fn, sizeof golden_fn, "f", &f), SL_OK);
    cr_assert_eq(sl_feature_float(&f, 0, &got), SL_OK);
    cr_assert_eq(got, 1.5f);
    cr_assert_eq(get_i64(golden_fn, sizeof golden_fn, "n", 0), -1);
    sl_example_builder_fini(&b);
}

Test(example, golden_empty_lists_and_empty_example)
{
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    /* no features: Example.features present and empty */
    static const uint8_t want_none[] = {0x0a, 0x00};
    /* empty int64, float, bytes lists: the oneof member is set, its list empty;
     * bytes_list with one empty value is 0a 00 inside the list */
    static const uint8_t want_empty[] = {
        0x0a, 0x1d,
        0x0a, 0x07, 0x0a, 0x01, 'i', 0x12, 0x02, 0x1a, 0x00,             /* i: int64 [] */
        0x0a, 0x07, 0x0a, 0x01, 'f', 0x12, 0x02, 0x12, 0x00,             /* f: float [] */
        0x0a, 0x09, 0x0a, 0x01, 'e', 0x12, 0x04, 0x0a, 0x02, 0x0a, 0x00, /* e: bytes [""] */
    };

    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    assert_bytes(d, n, want_none, sizeof want_none);
    cr_assert_eq(sl_example_add_int64(&b, "i", NULL, 0), SL_OK);
    cr_assert_eq(sl_example_add_float(&b, "f", NULL, 0), SL_OK);
    cr_assert_eq(sl_example_add_bytes(&b, "e", NULL, 0), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    assert_bytes(d, n, want_empty, sizeof want_empty);

    /* finish twice gives the same bytes; reset forgets the features */
    const uint8_t *d2;
    size_t n2;
    cr_assert_eq(sl_example_finish(&b, &d2, &n2), SL_OK);
    assert_bytes(d2, n2, want_empty, sizeof want_empty);
    sl_example_builder_reset(&b);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    assert_bytes(d, n, want_none, sizeof want_none);

    /* decode: the empty lists count 0 and index 0 is out of range */
    sl_feature_view f;
    size_t cnt = 99;
    int64_t v;
    const uint8_t *p;
    size_t len = 99;
    cr_assert_eq(sl_example_find(want_empty, sizeof want_empty, "i", &f), SL_OK);
    cr_assert_eq(f.kind, SL_FEATURE_INT64);
    cr_assert_eq(sl_feature_count(&f, &cnt), SL_OK);
    cr_assert_eq(cnt, 0);
    cr_assert_eq(sl_feature_int64(&f, 0, &v), SL_ENOENT);
    cr_assert_eq(sl_example_find(want_empty, sizeof want_empty, "e", &f), SL_OK);
    cr_assert_eq(sl_feature_bytes(&f, 0, &p, &len), SL_OK);
    cr_assert_eq(len, 0);
    /* the empty message and an empty record decode to no features */
    cr_assert_eq(sl_example_find(want_none, sizeof want_none, "i", &f), SL_ENOENT);
    cr_assert_eq(sl_example_find(NULL, 0, "i", &f), SL_ENOENT);
    sl_example_builder_fini(&b);
}

/* ------------------------------------------------------------ round trips */

Test(example, roundtrip_lists)
{
    enum { N = 3000 };
    static int64_t iv[N];
    static float fv[N];
    static const void *bp[N];
    static size_t bl[N];
    static uint8_t blob[N * 8];
    uint64_t seed = 7;
    sl_example_builder b;
    const uint8_t *d;
    size_t n;

    static const int64_t edge[] = {INT64_MIN, -1, 0, 1, 127, 128, 16383, 16384, INT64_MAX,
                                   -128, (int64_t)1 << 62};
    for (size_t i = 0; i < N; i++) {
        iv[i] = i < sizeof edge / sizeof *edge ? edge[i] : (int64_t)tu_rand(&seed);
        uint32_t u = (uint32_t)tu_rand(&seed);
        memcpy(&fv[i], &u, 4); /* any bit pattern, NaNs included */
        bl[i] = i == 0 ? 0 : tu_rand(&seed) % 9;
        bp[i] = blob + 8 * i;
    }
    fv[0] = -0.0f;
    fv[1] = INFINITY;
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (uint8_t)tu_rand(&seed);

    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_add_int64(&b, "ints", iv, N), SL_OK);
    cr_assert_eq(sl_example_add_float(&b, "floats", fv, N), SL_OK);
    cr_assert_eq(sl_example_add_bytes_list(&b, "blobs", bp, bl, N), SL_OK);
    cr_assert_eq(sl_example_add_int64(&b, "", iv, 1), SL_OK); /* empty name */
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    uint8_t *rec = dup_exact(d, n);

    sl_feature_view fi, ff, fb, fe;
    size_t cnt;
    cr_assert_eq(sl_example_find(rec, n, "ints", &fi), SL_OK);
    cr_assert_eq(sl_example_find(rec, n, "floats", &ff), SL_OK);
    cr_assert_eq(sl_example_find(rec, n, "blobs", &fb), SL_OK);
    cr_assert_eq(sl_example_find(rec, n, "", &fe), SL_OK);
    cr_assert_eq(sl_feature_count(&fi, &cnt), SL_OK);
    cr_assert_eq(cnt, N);
    cr_assert_eq(sl_feature_count(&ff, &cnt), SL_OK);
    cr_assert_eq(cnt, N);
    cr_assert_eq(sl_feature_count(&fb, &cnt), SL_OK);
    cr_assert_eq(cnt, N);
    for (size_t i = 0; i < N; i++) {
        int64_t v;
        float x;
        const uint8_t *p;
        size_t len;
        cr_assert_eq(sl_feature_int64(&fi, i, &v), SL_OK);
        cr_assert_eq(v, iv[i], "int %zu", i);
        cr_assert_eq(sl_feature_float(&ff, i, &x), SL_OK);
        cr_assert_eq(memcmp(&x, &fv[i], 4), 0, "float %zu bits", i);
        cr_assert_eq(sl_feature_bytes(&fb, i, &p, &len), SL_OK);
        cr_assert_eq(len, bl[i], "bytes %zu", i);
        cr_assert(len == 0 || memcmp(p, bp[i], len) == 0);
        cr_assert(p >= rec && p + len <= rec + n);
    }
    int64_t v;
    float x;
    const uint8_t *p;
    size_t len;
    cr_assert_eq(get_i64(rec, n, "", 0), INT64_MIN);
    cr_assert_eq(sl_feature_int64(&fi, N, &v), SL_ENOENT);
    cr_assert_eq(sl_feature_float(&ff, N, &x), SL_ENOENT);
    cr_assert_eq(sl_feature_bytes(&fb, N, &p, &len), SL_ENOENT);
    /* kind mismatch */
    cr_assert_eq(sl_feature_float(&fi, 0, &x), SL_EINVAL);
    cr_assert_eq(sl_feature_bytes(&ff, 0, &p, &len), SL_EINVAL);
    cr_assert_eq(sl_feature_int64(&fb, 0, &v), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "blobs"), "%s", sl_errmsg());
    free(rec);
    sl_example_builder_fini(&b);
}

typedef struct visit {
    int calls;
    int stop_after;
    char names[8][32];
} visit;

static int visit_cb(const sl_feature_view *f, void *arg)
{
    visit *v = arg;
    if (v->calls < 8)
        snprintf(v->names[v->calls], sizeof v->names[0], "%.*s", (int)f->name_len, f->name);
    v->calls++;
    return v->stop_after && v->calls == v->stop_after ? 42 : 0;
}

Test(example, foreach_order_early_stop_and_last_wins)
{
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    int64_t one = 1, two = 2, three = 3;

    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_add_int64(&b, "x", &one, 1), SL_OK);
    cr_assert_eq(sl_example_add_int64(&b, "y", &two, 1), SL_OK);
    cr_assert_eq(sl_example_add_int64(&b, "x", &three, 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);

    visit v = {0};
    cr_assert_eq(sl_example_foreach(d, n, visit_cb, &v), SL_OK);
    cr_assert_eq(v.calls, 3);
    cr_assert_str_eq(v.names[0], "x");
    cr_assert_str_eq(v.names[1], "y");
    cr_assert_str_eq(v.names[2], "x");
    visit s = {.stop_after = 2};
    cr_assert_eq(sl_example_foreach(d, n, visit_cb, &s), 42);
    cr_assert_eq(s.calls, 2);
    /* a repeated map key: the last entry wins, as in protobuf */
    cr_assert_eq(get_i64(d, n, "x", 0), 3);

    /* two Example.features fields merge: concatenated messages are one */
    uint8_t *cat = malloc(2 * n);
    cr_assert_not_null(cat);
    memcpy(cat, d, n);
    memcpy(cat + n, golden_ab, sizeof golden_ab);
    visit w = {0};
    cr_assert_eq(sl_example_foreach(cat, n + sizeof golden_ab, visit_cb, &w), SL_OK);
    cr_assert_eq(w.calls, 5);
    cr_assert_str_eq(w.names[4], "b");
    free(cat);
    sl_example_builder_fini(&b);
}

/* --------------------------------------------- hand-made wire variants */

Test(example, unpacked_lists_decode_like_packed)
{
    tb i64 = {0}, f32 = {0}, feat = {0}, entry = {0}, ex = {0};
    static const int64_t want_i[] = {5, -1, 300, INT64_MIN, 7, 8};
    static const float want_f[] = {1.5f, -2.0f, 3.25f, 0.5f};

    /* Int64List: unpacked 5, -1, 300 (wire type 0 each), then a packed run
     * [INT64_MIN, 7], then unpacked 8 again: all one list in wire order. */
    tb_tag(&i64, 1, 0), tb_varint(&i64, 5);
    tb_tag(&i64, 1, 0), tb_varint(&i64, UINT64_MAX);
    tb_tag(&i64, 1, 0), tb_varint(&i64, 300);
    tb run = {0};
    tb_varint(&run, (uint64_t)INT64_MIN);
    tb_varint(&run, 7);
    tb_msg(&i64, 1, &run);
    tb_tag(&i64, 1, 0), tb_varint(&i64, 8);
    tb_msg(&feat, 3, &i64);
    tb_str(&entry, 1, "ints");
    tb_msg(&entry, 2, &feat);
    tb_example1(&ex, &entry);

    sl_feature_view f;
    size_t cnt;
    cr_assert_eq(sl_example_find(ex.b, ex.n, "ints", &f), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_feature_count(&f, &cnt), SL_OK);
    cr_assert_eq(cnt, 6);
    for (size_t i = 0; i < 6; i++)
        cr_assert_eq(get_i64(ex.b, ex.n, "ints", i), want_i[i], "value %zu", i);

    /* FloatList: fixed32 each (wire type 5), then a packed run of two */
    feat.n = entry.n = 0;
    tb_f32(&f32, 1, want_f[0]);
    tb_f32(&f32, 1, want_f[1]);
    tb frun = {0};
    for (int k = 2; k < 4; k++) {
        uint32_t u;
        memcpy(&u, &want_f[k], 4);
        for (int j = 0; j < 4; j++)
            tb_byte(&frun, (uint8_t)(u >> (8 * j)));
    }
    tb_msg(&f32, 1, &frun);
    tb_msg(&feat, 2, &f32);
    tb_str(&entry, 1, "floats");
    tb_msg(&entry, 2, &feat);
    tb_example1(&ex, &entry);
    cr_assert_eq(sl_example_find(ex.b, ex.n, "floats", &f), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_feature_count(&f, &cnt), SL_OK);
    cr_assert_eq(cnt, 4);
    for (size_t i = 0; i < 4; i++) {
        float x;
        cr_assert_eq(sl_feature_float(&f, i, &x), SL_OK);
        cr_assert_eq(x, want_f[i], "value %zu", i);
    }

    /* the packed encoding of the same floats reads the same */
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_add_float(&b, "floats", want_f, 4), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_example_find(d, n, "floats", &f), SL_OK);
    for (size_t i = 0; i < 4; i++) {
        float x;
        cr_assert_eq(sl_feature_float(&f, i, &x), SL_OK);
        cr_assert_eq(x, want_f[i]);
    }
    /* a packed float run that is not a multiple of 4 bytes is corrupt */
    tb bad = {0}, bfeat = {0}, bentry = {0}, bex = {0};
    tb_tag(&bad, 1, 2), tb_varint(&bad, 3), tb_raw(&bad, "abc", 3);
    tb_msg(&bfeat, 2, &bad);
    tb_str(&bentry, 1, "x");
    tb_msg(&bentry, 2, &bfeat);
    tb_example1(&bex, &bentry);
    cr_assert_eq(sl_example_find(bex.b, bex.n, "x", &f), SL_OK);
    cr_assert_eq(sl_feature_count(&f, &cnt), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "multiple of 4"), "%s", sl_errmsg());
    sl_example_builder_fini(&b);
}

Test(example, unknown_fields_skipped_at_every_level)
{
    tb list = {0}, feat = {0}, entry = {0}, features = {0}, ex = {0};

    tb_unknowns(&list);
    tb_tag(&list, 1, 0), tb_varint(&list, 11);
    tb_unknowns(&list);
    tb_tag(&list, 1, 5), tb_raw(&list, "\0\0\0\0", 4); /* field 1, wrong wire type: skipped */
    tb_tag(&list, 2, 0), tb_varint(&list, 99);           /* field 2 of a list: unknown */
    tb_tag(&list, 1, 0), tb_varint(&list, 12);

    tb_unknowns(&feat);
    tb_tag(&feat, 3, 0), tb_varint(&feat, 1); /* int64_list with a varint wire type */
    tb_msg(&feat, 3, &list);
    tb_unknowns(&feat);
    tb_tag(&feat, 4, 2), tb_varint(&feat, 0); /* field 4 of Feature: unknown */

    tb_unknowns(&entry);
    tb_str(&entry, 1, "k");
    tb_unknowns(&entry);
    tb_msg(&entry, 2, &feat);
    tb_unknowns(&entry);

    tb_unknowns(&features);
    tb_tag(&features, 1, 0), tb_varint(&features, 5); /* feature map with wire type 0 */
    tb_msg(&features, 1, &entry);
    tb_unknowns(&features);

    tb_unknowns(&ex);
    tb_tag(&ex, 1, 5), tb_raw(&ex, "abcd", 4); /* Example.features as fixed32 */
    tb_msg(&ex, 1, &features);
    tb_unknowns(&ex);

    visit v = {0};
    cr_assert_eq(sl_example_foreach(ex.b, ex.n, visit_cb, &v), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(v.calls, 1);
    cr_assert_str_eq(v.names[0], "k");
    sl_feature_view f;
    size_t cnt;
    cr_assert_eq(sl_example_find(ex.b, ex.n, "k", &f), SL_OK);
    cr_assert_eq(f.kind, SL_FEATURE_INT64);
    cr_assert_eq(sl_feature_count(&f, &cnt), SL_OK);
    cr_assert_eq(cnt, 2);
    cr_assert_eq(get_i64(ex.b, ex.n, "k", 0), 11);
    cr_assert_eq(get_i64(ex.b, ex.n, "k", 1), 12);

    /* a TensorFlow-style image record with bbox and synset features the
     * image decoder does not know */
    tb e2 = {0}, fl = {0}, ff = {0}, feats = {0}, out = {0};
    static const struct { const char *name; int kind; const char *val; } feats_tf[] = {
        {"image/object/bbox/xmin", 2, NULL}, {"image/class/synset", 1, "n01440764"},
        {"image/encoded", 1, "JPEGDATA"},   {"image/object/bbox/label", 3, NULL},
        {"image/class/label", 3, NULL},     {"image/colorspace", 1, "RGB"},
    };
    for (size_t i = 0; i < sizeof feats_tf / sizeof *feats_tf; i++) {
        fl.n = ff.n = e2.n = 0;
        if (feats_tf[i].kind == 1)
            tb_str(&fl, 1, feats_tf[i].val);
        else if (feats_tf[i].kind == 2)
            tb_f32(&fl, 1, 0.25f);
        else
            tb_tag(&fl, 1, 0), tb_varint(&fl, 417);
        tb_msg(&ff, (uint32_t)feats_tf[i].kind, &fl);
        tb_str(&e2, 1, feats_tf[i].name);
        tb_msg(&e2, 2, &ff);
        tb_msg(&feats, 1, &e2);
        tb_unknowns(&feats);
    }
    tb_msg(&out, 1, &feats);
    sl_image_example ie;
    cr_assert_eq(sl_image_example_decode(out.b, out.n, &ie), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(ie.label, 417);
    cr_assert_eq(ie.image_len, 8);
    cr_assert_eq(memcmp(ie.image, "JPEGDATA", 8), 0);
    cr_assert_null(ie.format);
    cr_assert_eq(ie.height, 0);
}

/* A single-entry Example whose Feature body is `feat`. */
static void one_feature(tb *ex, const tb *feat)
{
    tb entry = {0};
    tb_str(&entry, 1, "z");
    tb_msg(&entry, 2, feat);
    tb_example1(ex, &entry);
}

Test(example, bad_wire_types_and_varints_rejected)
{
    sl_feature_view f;
    tb ex = {0}, feat = {0}, list = {0};

    /* groups (3, 4) and the non-existent wire types 6, 7, at the top level */
    for (unsigned wt = 3; wt <= 7; wt++) {
        if (wt == 5)
            continue;
        tb t = {0};
        tb_raw(&t, golden_ab, sizeof golden_ab);
        tb_tag(&t, 15, wt);
        tb_byte(&t, 0);
        cr_assert_eq(sl_example_find(t.b, t.n, "a", &f), SL_ECORRUPT, "wire type %u", wt);
        cr_assert(strstr(sl_errmsg(), "@ byte 27"), "%s", sl_errmsg());
    }
    /* inside a Feature */
    tb_tag(&feat, 9, 3);
    one_feature(&ex, &feat);
    cr_assert_eq(sl_example_find(ex.b, ex.n, "z", &f), SL_ECORRUPT);
    /* inside a list: found, but counting it fails */
    feat.n = 0;
    tb_tag(&list, 1, 0), tb_varint(&list, 4);
    tb_tag(&list, 2, 7);
    tb_msg(&feat, 3, &list);
    one_feature(&ex, &feat);
    cr_assert_eq(sl_example_find(ex.b, ex.n, "z", &f), SL_OK);
    size_t cnt;
    int64_t v;
    cr_assert_eq(sl_feature_count(&f, &cnt), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "feature 'z'"), "%s", sl_errmsg());
    cr_assert_eq(sl_feature_int64(&f, 0, &v), SL_OK); /* value 0 comes before the damage */
    cr_assert_eq(v, 4);
    cr_assert_eq(sl_feature_int64(&f, 1, &v), SL_ECORRUPT);

    /* field number 0 */
    static const uint8_t zero_field[] = {0x00, 0x00};
    cr_assert_eq(sl_example_find(zero_field, sizeof zero_field, "a", &f), SL_ECORRUPT);
    /* an 11-byte varint (value of an unknown varint field) */
    static const uint8_t long_varint[] = {0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                          0x80, 0x80, 0x80, 0x80, 0x00};
    cr_assert_eq(sl_example_find(long_varint, sizeof long_varint, "a", &f), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "varint"), "%s", sl_errmsg());
    /* the 10-byte maximum is fine */
    cr_assert_eq(sl_example_find(long_varint + 1, 0, "a", &f), SL_ENOENT);
    static const uint8_t ten[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    cr_assert_eq(sl_example_find(ten, sizeof ten, "a", &f), SL_ENOENT);
    /* a packed int64 run with an overlong varint */
    feat.n = list.n = 0;
    tb run = {0};
    tb_raw(&run, long_varint + 1, sizeof long_varint - 1);
    tb_msg(&list, 1, &run);
    tb_msg(&feat, 3, &list);
    one_feature(&ex, &feat);
    cr_assert_eq(sl_example_find(ex.b, ex.n, "z", &f), SL_OK);
    cr_assert_eq(sl_feature_count(&f, &cnt), SL_ECORRUPT);
}

Test(example, length_past_end_names_byte_offset)
{
    uint8_t rec[sizeof golden_ab];
    sl_feature_view f;

    /* byte 17 is the key length of entry "b": claim 127 bytes */
    memcpy(rec, golden_ab, sizeof rec);
    rec[17] = 0x7f;
    cr_assert_eq(sl_example_find(rec, sizeof rec, "a", &f), SL_ECORRUPT);
    cr_assert_str_eq(sl_errmsg(),
                     "sl_example_find: bad protobuf @ byte 17: length 127 past end of message");
    /* byte 1, the Example.features length: one more than there is */
    memcpy(rec, golden_ab, sizeof rec);
    rec[1] = 0x1a;
    visit v = {0};
    cr_assert_eq(sl_example_foreach(rec, sizeof rec, visit_cb, &v), SL_ECORRUPT);
    cr_assert_str_eq(sl_errmsg(),
                     "sl_example_foreach: bad protobuf @ byte 1: length 26 past end of message");
    cr_assert_eq(v.calls, 0);
    /* sl_feature_* count offsets from the start of the list body: byte 12 of
     * the record is byte 1 of a's Int64List, the packed run's length */
    memcpy(rec, golden_ab, sizeof rec);
    rec[12] = 0x05;
    cr_assert_eq(sl_example_find(rec, sizeof rec, "a", &f), SL_OK);
    int64_t x;
    cr_assert_eq(sl_feature_int64(&f, 0, &x), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "feature 'a': int64 list: bad protobuf @ byte 1: length 5 past "
                                  "end of message"), "%s", sl_errmsg());

    /* the image decoder knows the record, so it names the record offset */
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    sl_image_example ie = {.image = (const uint8_t *)"jpeg", .image_len = 4, .label = 3,
                           .height = 2, .width = 2};
    sl_example_builder_init(&b);
    cr_assert_eq(sl_image_example_encode(&ie, &b), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    uint8_t *img = dup_exact(d, n);
    cr_assert_eq(sl_example_find(img, n, "image/class/label", &f), SL_OK);
    size_t at = (size_t)(f.list - img) + 1; /* the run length inside the label list */
    cr_assert_eq(img[at], 1);
    img[at] = 0x05;
    cr_assert_eq(sl_image_example_decode(img, n, &ie), SL_ECORRUPT);
    char want[128];
    snprintf(want, sizeof want, "image/class/label: bad protobuf @ byte %zu: length 5 past end", at);
    cr_assert(strstr(sl_errmsg(), want), "%s (want %s)", sl_errmsg(), want);
    free(img);
    sl_example_builder_fini(&b);
}

Test(example, split_lists_are_not_supported)
{
    tb feat = {0}, l1 = {0}, l2 = {0}, ex = {0};
    sl_feature_view f;
    tb_tag(&l1, 1, 0), tb_varint(&l1, 1);
    tb_tag(&l2, 1, 0), tb_varint(&l2, 2);
    tb_msg(&feat, 3, &l1);
    tb_msg(&feat, 3, &l2);
    one_feature(&ex, &feat);
    cr_assert_eq(sl_example_find(ex.b, ex.n, "z", &f), SL_ENOTSUP);
    /* a later list of another kind replaces the earlier one (oneof) */
    feat.n = 0;
    tb bl = {0};
    tb_str(&bl, 1, "s");
    tb_msg(&feat, 3, &l1);
    tb_msg(&feat, 1, &bl);
    one_feature(&ex, &feat);
    cr_assert_eq(sl_example_find(ex.b, ex.n, "z", &f), SL_OK);
    cr_assert_eq(f.kind, SL_FEATURE_BYTES);
}

/* ---------------------------------------------------------- image records */

static void encode_image(sl_example_builder *b, const sl_image_example *ex, const uint8_t **d,
                         size_t *n)
{
    cr_assert_eq(sl_image_example_encode(ex, b), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_example_finish(b, d, n), SL_OK, "%s", sl_errmsg());
}

Test(example, image_roundtrip)
{
    static uint8_t jpeg[5000];
    uint64_t seed = 3;
    for (size_t i = 0; i < sizeof jpeg; i++)
        jpeg[i] = (uint8_t)tu_rand(&seed);
    sl_image_example in = {
        .image = jpeg, .image_len = sizeof jpeg, .label = 7, .height = 480, .width = 640,
        .format = "JPEG", .format_len = 4, .filename = "n01/img_0001.JPEG", .filename_len = 17,
        .text = "tench", .text_len = 5,
    };
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    sl_image_example out;

    sl_example_builder_init(&b);
    encode_image(&b, &in, &d, &n);
    uint8_t *rec = dup_exact(d, n);
    cr_assert_eq(sl_image_example_decode(rec, n, &out), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(out.image_len, sizeof jpeg);
    cr_assert_eq(memcmp(out.image, jpeg, sizeof jpeg), 0);
    cr_assert(out.image >= rec && out.image + out.image_len <= rec + n, "zero copy");
    cr_assert_eq(out.label, 7);
    cr_assert_eq(out.height, 480);
    cr_assert_eq(out.width, 640);
    cr_assert_eq(out.format_len, 4);
    cr_assert_eq(memcmp(out.format, "JPEG", 4), 0);
    cr_assert_eq(out.filename_len, 17);
    cr_assert_eq(memcmp(out.filename, "n01/img_0001.JPEG", 17), 0);
    cr_assert_eq(out.text_len, 5);
    cr_assert_eq(memcmp(out.text, "tench", 5), 0);
    /* the same bytes through the generic API, with TF's feature names */
    cr_assert_eq(get_i64(rec, n, "image/class/label", 0), 7);
    cr_assert_eq(get_i64(rec, n, "image/height", 0), 480);
    free(rec);

    /* optional fields absent, negative label, empty image */
    sl_image_example min = {.image = jpeg, .image_len = 0, .label = -3};
    encode_image(&b, &min, &d, &n);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(out.label, -3);
    cr_assert_eq(out.image_len, 0);
    cr_assert_not_null(out.image);
    cr_assert_null(out.format);
    cr_assert_null(out.filename);
    cr_assert_null(out.text);
    cr_assert_eq(out.height, 0);
    cr_assert_eq(out.width, 0);
    visit v = {0};
    cr_assert_eq(sl_example_foreach(d, n, visit_cb, &v), SL_OK);
    cr_assert_eq(v.calls, 2, "only label and encoded are written");

    /* image is required to encode */
    sl_image_example none = {.label = 1};
    cr_assert_eq(sl_image_example_encode(&none, &b), SL_EINVAL);
    sl_example_builder_fini(&b);
}

/* TensorFlow Datasets' Examples: the FeaturesDict's keys, "image" (encoded
 * bytes), "label" (a ClassLabel's int64), "file_name", as tfds writes them
 * (tests/interop/tfds_write.py checks the same against tfds itself). */
Test(example, tfds_keys_stand_in_for_imagenet_keys)
{
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    sl_image_example out;
    int64_t label = 7, other = 3;

    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_add_bytes(&b, "file_name", "cat.1.jpg", 9), SL_OK);
    cr_assert_eq(sl_example_add_bytes(&b, "image", "\xff\xd8jpeg", 6), SL_OK);
    cr_assert_eq(sl_example_add_int64(&b, "label", &label, 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(out.image_len, 6);
    cr_assert(!memcmp(out.image, "\xff\xd8jpeg", 6));
    cr_assert_eq(out.label, 7);
    cr_assert_eq(out.filename_len, 9);
    cr_assert(!memcmp(out.filename, "cat.1.jpg", 9));

    /* the ImageNet keys win where a record has both */
    cr_assert_eq(sl_example_add_bytes(&b, "image/encoded", "JJ", 2), SL_OK);
    cr_assert_eq(sl_example_add_int64(&b, "image/class/label", &other, 1), SL_OK);
    cr_assert_eq(sl_example_add_bytes(&b, "image/filename", "f", 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_OK, "%s", sl_errmsg());
    cr_assert(out.image_len == 2 && !memcmp(out.image, "JJ", 2));
    cr_assert_eq(out.label, 3);
    cr_assert(out.filename_len == 1 && out.filename[0] == 'f');
    sl_example_builder_fini(&b);
}

Test(example, image_missing_or_mistyped_required_features)
{
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    sl_image_example out;
    int64_t label = 1;
    float fl = 1;

    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_add_int64(&b, "image/class/label", &label, 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "missing feature image/encoded"), "%s", sl_errmsg());

    sl_example_builder_reset(&b);
    cr_assert_eq(sl_example_add_bytes(&b, "image/encoded", "x", 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "missing feature image/class/label"), "%s", sl_errmsg());

    /* neither key: the message lists the keys the record has; a record of
     * many keys is cut, not overrun */
    sl_example_builder_reset(&b);
    cr_assert_eq(sl_example_add_bytes(&b, "img", "x", 1), SL_OK);
    cr_assert_eq(sl_example_add_int64(&b, "label", &label, 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "missing feature image/encoded (the record has: img, label;") &&
                  strstr(sl_errmsg(), "TensorFlow Datasets' image and label"), "%s", sl_errmsg());
    /* a label of the wrong kind under TFDS's key is named by that key */
    sl_example_builder_reset(&b);
    cr_assert_eq(sl_example_add_bytes(&b, "image", "x", 1), SL_OK);
    cr_assert_eq(sl_example_add_bytes(&b, "label", "cat", 3), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "feature label is bytes"), "%s", sl_errmsg());
    sl_example_builder_reset(&b);
    for (int i = 0; i < 60; i++) {
        char key[32];
        snprintf(key, sizeof key, "feature_number_%02d", i);
        cr_assert_eq(sl_example_add_int64(&b, key, &label, 1), SL_OK);
    }
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "feature_number_00, feature_number_01") &&
                  strstr(sl_errmsg(), ", ...; sluice reads"), "%s", sl_errmsg());
    sl_example_builder_reset(&b);
    cr_assert_eq(sl_example_add_bytes(&b, "image/encoded", "x", 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);

    /* label present but empty, or of the wrong kind */
    cr_assert_eq(sl_example_add_int64(&b, "image/class/label", NULL, 0), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "image/class/label has no value"), "%s", sl_errmsg());
    sl_example_builder_reset(&b);
    cr_assert_eq(sl_example_add_bytes(&b, "image/encoded", "x", 1), SL_OK);
    cr_assert_eq(sl_example_add_float(&b, "image/class/label", &fl, 1), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    cr_assert_eq(sl_image_example_decode(d, n, &out), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "image/class/label is float"), "%s", sl_errmsg());
    /* an empty record */
    cr_assert_eq(sl_image_example_decode(d, 0, &out), SL_ECORRUPT);
    sl_example_builder_fini(&b);
}

/* ------------------------------------------------- truncation, corruption */

static int count_cb(const sl_feature_view *f, void *arg)
{
    (void)f;
    (*(int *)arg)++;
    return 0;
}

Test(example, every_truncation_is_corrupt_or_a_valid_prefix)
{
    static uint8_t img[300];
    sl_example_builder b;
    const uint8_t *d;
    size_t n1, n2;
    float fv[3] = {1, 2, 3};
    int64_t iv[3] = {-1, 5, INT64_MIN};

    sl_image_example ex = {.image = img, .image_len = sizeof img, .label = 9, .height = 3,
                           .width = 4, .format = "JPEG", .format_len = 4,
                           .filename = "f.jpg", .filename_len = 5};
    sl_example_builder_init(&b);
    encode_image(&b, &ex, &d, &n1);
    /* Two serialized Examples back to back are one valid message (protobuf
     * merges them), so the valid prefixes are exactly 0, n1 and n1 + n2. */
    uint8_t *full = malloc(n1 + 200);
    cr_assert_not_null(full);
    memcpy(full, d, n1);
    sl_example_builder_reset(&b);
    cr_assert_eq(sl_example_add_float(&b, "floats", fv, 3), SL_OK);
    cr_assert_eq(sl_example_add_int64(&b, "ints", iv, 3), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n2), SL_OK);
    cr_assert_leq(n2, 200);
    memcpy(full + n1, d, n2);
    size_t total = n1 + n2;

    for (size_t cut = 0; cut <= total; cut++) {
        uint8_t *rec = dup_exact(full, cut);
        int calls = 0;
        int rc = sl_example_foreach(rec, cut, count_cb, &calls);
        int valid = cut == 0 || cut == n1 || cut == total;
        if (valid)
            cr_assert_eq(rc, SL_OK, "cut %zu: %s", cut, sl_errmsg());
        else
            cr_assert_eq(rc, SL_ECORRUPT, "cut %zu must be corrupt, got %d", cut, rc);
        if (valid)
            cr_assert_eq(calls, cut == 0 ? 0 : cut == n1 ? 6 : 8, "cut %zu", cut);
        sl_image_example out;
        rc = sl_image_example_decode(rec, cut, &out);
        cr_assert(rc == SL_OK ? cut >= n1 && valid : rc == SL_ECORRUPT, "cut %zu: rc %d", cut, rc);
        if (rc == SL_OK)
            cr_assert_eq(out.label, 9);
        free(rec);
    }
    free(full);
    sl_example_builder_fini(&b);
}

/* Touch every value of every feature the walk hands out. */
static int deep_cb(const sl_feature_view *f, void *arg)
{
    size_t n = 0;
    (void)arg;
    if (sl_feature_count(f, &n) != SL_OK)
        return 0;
    for (size_t i = 0; i < n && i < 64; i++) {
        int64_t v;
        float x;
        const uint8_t *p;
        size_t len;
        volatile uint8_t sink = 0;
        if (f->kind == SL_FEATURE_INT64)
            cr_assert_eq(sl_feature_int64(f, i, &v), SL_OK);
        else if (f->kind == SL_FEATURE_FLOAT)
            cr_assert_eq(sl_feature_float(f, i, &x), SL_OK);
        else if (f->kind == SL_FEATURE_BYTES) {
            cr_assert_eq(sl_feature_bytes(f, i, &p, &len), SL_OK);
            for (size_t k = 0; k < len; k++)
                sink ^= p[k]; /* ASan checks the view is inside the record */
        }
        (void)sink;
    }
    return 0;
}

Test(example, random_byte_flips_never_crash)
{
    static uint8_t img[200];
    sl_example_builder b;
    const uint8_t *d;
    size_t n;
    uint64_t seed = 12345;
    float fv[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    int ok = 0, corrupt = 0;

    for (size_t i = 0; i < sizeof img; i++)
        img[i] = (uint8_t)tu_rand(&seed);
    sl_image_example ex = {.image = img, .image_len = sizeof img, .label = 2, .height = 10,
                           .width = 20, .format = "JPEG", .format_len = 4,
                           .filename = "a/b.jpg", .filename_len = 7, .text = "cat", .text_len = 3};
    sl_example_builder_init(&b);
    cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK);
    cr_assert_eq(sl_example_add_float(&b, "bbox", fv, 4), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);

    for (int iter = 0; iter < 20000; iter++) {
        uint8_t *rec = dup_exact(d, n);
        int flips = 1 + (int)(tu_rand(&seed) % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = tu_rand(&seed) % n;
            /* favour the small header area, where the structure is */
            if (k == 0 && (iter & 1))
                at = tu_rand(&seed) % (n - sizeof img < 64 ? n - sizeof img : 64);
            rec[at] ^= (uint8_t)(1 + tu_rand(&seed) % 255);
        }
        sl_image_example out;
        int rc = sl_image_example_decode(rec, n, &out);
        cr_assert(rc == SL_OK || rc == SL_ECORRUPT || rc == SL_ENOTSUP, "rc %d", rc);
        if (rc == SL_OK) {
            ok++;
            cr_assert(out.image >= rec && out.image + out.image_len <= rec + n);
        } else {
            corrupt++;
            cr_assert_neq(sl_errmsg()[0], '\0');
        }
        rc = sl_example_foreach(rec, n, deep_cb, NULL);
        cr_assert(rc == SL_OK || rc == SL_ECORRUPT || rc == SL_ENOTSUP, "rc %d", rc);
        free(rec);
    }
    cr_assert_gt(ok, 0);
    cr_assert_gt(corrupt, 0);
    sl_example_builder_fini(&b);
}

Test(example, builder_argument_errors)
{
    sl_example_builder b;
    int64_t v = 1;
    const uint8_t *d;
    size_t n;
    sl_example_builder_init(&b);
    cr_assert_eq(sl_example_add_int64(&b, NULL, &v, 1), SL_EINVAL);
    cr_assert_eq(sl_example_add_int64(&b, "x", NULL, 1), SL_EINVAL);
    cr_assert_eq(sl_example_add_bytes(&b, "x", NULL, 3), SL_EINVAL);
    /* argument errors do not poison the builder */
    cr_assert_eq(sl_example_add_int64(&b, "a", &v, 1), SL_OK);
    cr_assert_eq(sl_example_add_bytes(&b, "b", "xy", 2), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    assert_bytes(d, n, golden_ab, sizeof golden_ab);
    /* a remembered allocation failure is reported by finish */
    b.err = SL_ENOMEM;
    cr_assert_eq(sl_example_add_int64(&b, "a", &v, 1), SL_ENOMEM);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_ENOMEM);
    sl_example_builder_reset(&b);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    sl_example_builder_fini(&b);
    sl_example_builder_fini(&b); /* twice is harmless */
}
