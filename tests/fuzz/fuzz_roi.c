/*
 * tests/fuzz/fuzz_roi.c - one record into one sample of a batch slot, as a
 * pipeline map worker does it (sl_map_record, pipeline/map.c): the Example
 * decode, the JPEG header, the crop geometry (train random-resized-crop
 * with its flip, or the eval center crop), the ROI decode and the fused
 * resize / normalize / layout into the slot.
 *
 * Input: one byte that picks the configuration, then the record (a
 * serialized image Example). The byte: bit 0 train / eval, bits 1-2 the
 * layout, bits 3-5 the output size (8 << (bits % 4) on a side, width and
 * height differing when bit 5 is set), bit 6 planar or RGB decode path
 * (SLUICE_DECODE=rgb), bit 7 the crop seed. The slot is a malloc of exactly
 * the sample's bytes, so a write past it is an ASan error.
 *
 * Images claiming more than 2^24 pixels are skipped: the pixel bound on
 * hostile images is issue 16's item 2 (--max-pixels), and without it a
 * 65535 x 65535 header makes each execution seconds long.
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline_int.h"
#include "records/records.h"

/* [0] the default planar path, [1] SLUICE_DECODE=rgb (read at creation). */
static sl_decoder *decs[2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!decs[0]) {
        unsetenv("SLUICE_DECODE");
        if (sl_decoder_create(&decs[0]) != SL_OK)
            abort();
        setenv("SLUICE_DECODE", "rgb", 1);
        if (sl_decoder_create(&decs[1]) != SL_OK)
            abort();
        unsetenv("SLUICE_DECODE");
    }
    unsigned k = data[0];
    const uint8_t *rec = data + 1;
    size_t len = size - 1;

    sl_image_example ex;
    sl_image_info info;
    if (sl_image_example_decode(rec, len, &ex) == SL_OK &&
        sl_image_probe(ex.image, ex.image_len, &info) == SL_OK &&
        (uint64_t)info.width * (uint64_t)info.height > (1u << 24))
        return 0;

    sl_pipeline_config c = SL_PIPELINE_CONFIG_INIT;
    c.transform = (k & 1) ? SL_TRANSFORM_EVAL : SL_TRANSFORM_TRAIN;
    c.layout = (sl_layout)(((k >> 1) & 3) % 3);
    int side = 8 << ((k >> 3) & 3);
    c.height = side;
    c.width = (k & 32) ? side + 5 : side;
    c.seed = (k >> 7) + 1;
    sl_decoder *dec = decs[(k >> 6) & 1];

    size_t bytes = sl_sample_bytes(c.height, c.width, c.layout);
    uint8_t *slot = malloc(bytes);
    uint8_t *copy = malloc(len ? len : 1);
    if (!slot || !copy)
        abort();
    memcpy(copy, rec, len);
    int32_t label = -1;
    (void)sl_map_record(&c, 0, dec, copy, len, (int32_t)(k & 3), k, slot, &label);
    sl_clear_error();
    free(copy);
    free(slot);
    return 0;
}
