/*
 * tests/fuzz/fuzz_example.c - the tf.train.Example decoder: the feature walk
 * (sl_example_foreach), every value of every feature (sl_feature_count /
 * _int64 / _float / _bytes), lookups by name and the image record decode
 * the pipeline and `sluice verify` use. Input: one serialized Example.
 */
#include <stdlib.h>
#include <string.h>

#include "records/records.h"

static int visit(const sl_feature_view *f, void *arg)
{
    size_t n = 0, *total = arg;
    if (f->name_len && f->name[0] == 0 && f->name[f->name_len - 1] == 0)
        ++*total; /* touch the name's bytes */
    if (sl_feature_count(f, &n) != SL_OK)
        return 0;
    for (size_t i = 0; i < n && i < 4096; i++) {
        int64_t v;
        float x;
        const uint8_t *p;
        size_t len;
        switch (f->kind) {
        case SL_FEATURE_INT64:
            if (sl_feature_int64(f, i, &v) != SL_OK)
                abort(); /* counted, so it must be there */
            break;
        case SL_FEATURE_FLOAT:
            if (sl_feature_float(f, i, &x) != SL_OK)
                abort();
            break;
        case SL_FEATURE_BYTES:
            if (sl_feature_bytes(f, i, &p, &len) != SL_OK)
                abort();
            if (len)
                *total += p[0] + p[len - 1];
            break;
        default:
            break;
        }
    }
    if (f->kind != SL_FEATURE_NONE) {
        int64_t v;
        (void)sl_feature_int64(f, n, &v); /* one past the end: SL_ENOENT or SL_EINVAL */
    }
    return 0;
}

static int same(const void *a, size_t an, const void *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* What the decoder accepted, encoded again, decodes to the same fields (the
 * converter's writer and the readers agree). */
static void round_trip(const sl_image_example *ex)
{
    sl_example_builder b;
    sl_example_builder_init(&b);
    const uint8_t *d;
    size_t n;
    sl_image_example back;
    if (sl_image_example_encode(ex, &b) != SL_OK || sl_example_finish(&b, &d, &n) != SL_OK ||
        sl_image_example_decode(d, n, &back) != SL_OK)
        abort();
    if (!same(ex->image, ex->image_len, back.image, back.image_len) || ex->label != back.label ||
        (ex->height > 0 && ex->height != back.height) ||
        (ex->width > 0 && ex->width != back.width) ||
        !same(ex->format, ex->format_len, back.format, back.format_len) ||
        !same(ex->filename, ex->filename_len, back.filename, back.filename_len) ||
        !same(ex->text, ex->text_len, back.text, back.text_len))
        abort();
    sl_example_builder_fini(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes: ASan sees any read past the record. */
    uint8_t *rec = malloc(size ? size : 1);
    if (!rec)
        return 0;
    memcpy(rec, data, size);
    size_t total = 0;
    (void)sl_example_foreach(rec, size, visit, &total);
    sl_feature_view f;
    if (sl_example_find(rec, size, "image/class/label", &f) == SL_OK)
        (void)visit(&f, &total);
    sl_image_example ex;
    if (sl_image_example_decode(rec, size, &ex) == SL_OK) {
        if (!ex.image || ex.image + ex.image_len > rec + size || ex.image < rec)
            abort();
        if (ex.filename_len && (const uint8_t *)ex.filename + ex.filename_len > rec + size)
            abort();
        round_trip(&ex);
    }
    sl_clear_error();
    free(rec);
    return 0;
}
