/*
 * tests/fuzz/fuzz_huff.c - pipeline/image/huff.c's Huffman decoder against
 * libjpeg's (SLUICE_HUFF=libjpeg), a differential target: the planar
 * path's planes of one crop (sl_decode_crop_planes) by both decoders.
 * Where huff.c decodes, libjpeg's must decode the same bytes; where
 * libjpeg's fails, huff.c's must fail too (it may fail where libjpeg's
 * silently decodes: a code no table holds). Anything else aborts.
 *
 * Input: one byte that picks the crop (a random-resized crop from the
 * byte as seed, or the whole image when bit 7 is set; output 224 or, for
 * odd bytes, a tenth of the crop: DCT scales below 8/8), then the JPEG.
 * Images over 2^22 pixels are skipped (execution time; --max-pixels is
 * issue 16's item 2).
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline/image/image.h"
#include "util.h"

/* [0] huff.c, [1] libjpeg's decoder */
static sl_decoder *decs[2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (!decs[0]) {
        unsetenv("SLUICE_DECODE");
        unsetenv("SLUICE_HUFF");
        if (sl_decoder_create(&decs[0]) != SL_OK)
            abort();
        setenv("SLUICE_HUFF", "libjpeg", 1);
        if (sl_decoder_create(&decs[1]) != SL_OK)
            abort();
        unsetenv("SLUICE_HUFF");
    }
    unsigned k = data[0];
    size_t len = size - 1;
    uint8_t *jpeg = malloc(len);
    if (!jpeg)
        abort();
    memcpy(jpeg, data + 1, len);
    /* Both decoders read every header: libjpeg keeps a file's DHT and DQT
     * tables in the decompress object for later files that lack them, so
     * the two must see the same files in the same order. */
    int W, H, W1, H1;
    int rh = sl_decoder_header(decs[0], jpeg, len, &W, &H, NULL);
    if ((sl_decoder_header(decs[1], jpeg, len, &W1, &H1, NULL) == SL_OK) != (rh == SL_OK))
        abort();
    if (rh != SL_OK || (uint64_t)W * (uint64_t)H > (1u << 22)) {
        sl_clear_error();
        free(jpeg);
        return 0;
    }
    sl_crop c;
    int ow, oh;
    fz_crop(k, W, H, &c, &ow, &oh);
    sl_plane_view a[3], b[3];
    int na = 0, nb = 0;
    int ra = sl_decode_crop_planes(decs[0], jpeg, len, &c, ow, oh, a, &na);
    int rb = sl_decode_crop_planes(decs[1], jpeg, len, &c, ow, oh, b, &nb);
    if (rb != SL_OK && ra == SL_OK)
        abort(); /* libjpeg's fails, huff.c's decodes */
    if (ra == SL_OK && !fz_same_planes(a, na, b, nb))
        abort(); /* different coefficients */
    sl_clear_error();
    free(jpeg);
    return 0;
}
