/*
 * tests/pipeline/test_map_record.c - sl_map_record, one record into one
 * sample of a batch slot (the map worker's per-record path, and the entry
 * point of tests/fuzz/fuzz_roi.c): its output is the decode of the crop its
 * geometry names, its label the stored one less the offset, and a bad record
 * is SL_ECORRUPT / SL_EIMAGE with the slot and label left alone.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "pipeline/pipeline_int.h"
#include "records/records.h"

/* A W x H gradient JPEG in an image Example with the given label. */
static uint8_t *make_record(int W, int H, int64_t label, const char *image, size_t image_len,
                            size_t *len, uint8_t **jpeg, size_t *jpeg_len)
{
    sl_transcoder *t;
    cr_assert_eq(sl_transcoder_create(&t), SL_OK);
    uint8_t *px = malloc((size_t)W * H * 3);
    for (int i = 0; i < W * H * 3; i++)
        px[i] = (uint8_t)(i * 7 + i / (W * 3) * 5);
    const uint8_t *j;
    size_t jl;
    cr_assert_eq(sl_encode_jpeg_rgb(t, px, W, H, W * 3, 3, 90, &j, &jl), SL_OK);
    *jpeg = malloc(jl);
    memcpy(*jpeg, j, jl);
    *jpeg_len = jl;
    sl_example_builder b;
    sl_example_builder_init(&b);
    sl_image_example ex = {.image = image ? (const uint8_t *)image : *jpeg,
                           .image_len = image ? image_len : jl, .label = label,
                           .format = "JPEG", .format_len = 4};
    const uint8_t *d;
    size_t n;
    cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK);
    cr_assert_eq(sl_example_finish(&b, &d, &n), SL_OK);
    uint8_t *rec = malloc(n);
    memcpy(rec, d, n);
    *len = n;
    sl_example_builder_fini(&b);
    sl_transcoder_destroy(t);
    free(px);
    return rec;
}

static void config(sl_pipeline_config *c, sl_transform_mode mode)
{
    sl_pipeline_config d = SL_PIPELINE_CONFIG_INIT;
    d.transform = mode;
    d.height = 12;
    d.width = 16;
    d.layout = SL_LAYOUT_NHWC_F32;
    d.seed = 11;
    *c = d;
}

Test(pipeline_map_record, eval_is_the_center_crop_and_label_less_offset)
{
    sl_decoder *dec;
    cr_assert_eq(sl_decoder_create(&dec), SL_OK);
    uint8_t *jpeg;
    size_t len, jl;
    uint8_t *rec = make_record(60, 44, 7, NULL, 0, &len, &jpeg, &jl);
    sl_pipeline_config c;
    config(&c, SL_TRANSFORM_EVAL);
    size_t bytes = sl_sample_bytes(c.height, c.width, c.layout);
    uint8_t *got = malloc(bytes), *want = malloc(bytes);
    int32_t label = -1;
    cr_assert_eq(sl_map_record(&c, 2, dec, rec, len, 0, 3, got, &label), SL_OK, "%s",
                 sl_errmsg());
    cr_expect_eq(label, 5);
    sl_crop crop;
    sl_eval_geometry(60, 44, c.height, c.width, c.crop_fraction, &crop);
    cr_assert_eq(sl_decode_crop_sample(dec, jpeg, jl, &crop, &(sl_out_spec){.w = c.width,
                                                                            .h = c.height,
                                                                            .flip = 0,
                                                                            .layout = c.layout,
                                                                            .mean = c.mean,
                                                                            .std = c.std,
                                                                            .dst = want}),
                 SL_OK);
    cr_expect(memcmp(got, want, bytes) == 0, "eval sample differs from its center crop's decode");
    sl_decoder_destroy(dec);
    free(rec);
    free(jpeg);
    free(got);
    free(want);
}

Test(pipeline_map_record, train_crop_and_flip_come_from_seed_epoch_and_id)
{
    sl_decoder *dec;
    cr_assert_eq(sl_decoder_create(&dec), SL_OK);
    uint8_t *jpeg;
    size_t len, jl;
    uint8_t *rec = make_record(80, 64, 1, NULL, 0, &len, &jpeg, &jl);
    sl_pipeline_config c;
    config(&c, SL_TRANSFORM_TRAIN);
    size_t bytes = sl_sample_bytes(c.height, c.width, c.layout);
    uint8_t *got = malloc(bytes), *want = malloc(bytes);
    int differs = 0;
    for (uint64_t id = 0; id < 8; id++) {
        int32_t label = -1;
        cr_assert_eq(sl_map_record(&c, 0, dec, rec, len, 2, id, got, &label), SL_OK);
        cr_expect_eq(label, 1);
        /* The reference: the draws in the documented order. */
        sl_rng rng = sl_rng_for(c.seed, 2, id);
        sl_crop crop;
        sl_rrc_geometry(&rng, 80, 64, c.scale_min, c.scale_max, c.ratio_min, c.ratio_max, &crop);
        int flip = c.flip && sl_rng_uniform(&rng) < 0.5f;
        cr_assert_eq(sl_decode_crop_sample(dec, jpeg, jl, &crop, &(sl_out_spec){.w = c.width,
                                                                                .h = c.height,
                                                                                .flip = flip,
                                                                                .layout = c.layout,
                                                                                .mean = c.mean,
                                                                                .std = c.std,
                                                                                .dst = want}),
                     SL_OK);
        cr_expect(memcmp(got, want, bytes) == 0, "id %llu: sample differs from its crop's decode",
                  (unsigned long long)id);
        if (id && memcmp(got, want, bytes) == 0) {
            uint8_t *again = malloc(bytes);
            cr_assert_eq(sl_map_record(&c, 0, dec, rec, len, 2, id - 1, again, &label), SL_OK);
            differs += memcmp(again, got, bytes) != 0;
            free(again);
        }
    }
    cr_expect_gt(differs, 0, "every id gave the same crop");
    sl_decoder_destroy(dec);
    free(rec);
    free(jpeg);
    free(got);
    free(want);
}

Test(pipeline_map_record, bad_records_leave_slot_and_label_alone)
{
    sl_decoder *dec;
    cr_assert_eq(sl_decoder_create(&dec), SL_OK);
    sl_pipeline_config c;
    config(&c, SL_TRANSFORM_EVAL);
    size_t bytes = sl_sample_bytes(c.height, c.width, c.layout);
    uint8_t *slot = malloc(bytes);
    uint8_t *jpeg;
    size_t len, jl;
    struct {
        int64_t label, offset;
        const char *image;
        size_t cut; /* bytes cut off the record's end */
        int rc;
    } cases[] = {
        {INT64_MIN, 1, NULL, 0, SL_ECORRUPT},          /* label - offset overflows */
        {(int64_t)INT32_MAX + 1, 0, NULL, 0, SL_ECORRUPT}, /* outside int32 */
        {3, 0, "GIF89a not a jpeg", 0, SL_EIMAGE},
        {3, 0, NULL, 9, SL_ECORRUPT},                  /* truncated Example */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *img = cases[i].image;
        uint8_t *rec = make_record(20, 20, cases[i].label, img, img ? strlen(img) : 0, &len, &jpeg,
                                   &jl);
        memset(slot, 0xA5, bytes);
        int32_t label = -77;
        int rc = sl_map_record(&c, cases[i].offset, dec, rec, len - cases[i].cut, 0, 0, slot,
                               &label);
        cr_expect_eq(rc, cases[i].rc, "case %zu: rc %d (%s)", i, rc, sl_errmsg());
        cr_expect_eq(label, -77, "case %zu: label written", i);
        int untouched = 1;
        for (size_t k = 0; k < bytes; k++)
            untouched &= slot[k] == 0xA5;
        cr_expect(untouched, "case %zu: slot written", i);
        free(rec);
        free(jpeg);
    }
    sl_decoder_destroy(dec);
    free(slot);
}
