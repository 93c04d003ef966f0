/*
 * tests/fuzz/fuzz_seek.c - the restart-interval seek (pipeline/image/huff.c's
 * sl_huff_seek, issue 41), a differential target: the planar path's
 * planes of one crop from three decoders of the same bytes:
 *   [0] huff.c reading only the intervals the crop needs,
 *   [1] libjpeg's decoder with the same seek (SLUICE_HUFF=libjpeg),
 *   [2] libjpeg's decoder from the start (SLUICE_SEEK=off: no seek).
 * Where [1] fails, [0] must fail (huff.c may fail where libjpeg silently
 * decodes: a code no table holds); where [0] decodes, [1] must give the
 * same bytes; where [2] decodes, [0] must decode the same bytes ([2] reads
 * every interval before the crop's end, the seek only some, so the seek
 * may decode a crop that [2] fails on: damage in an interval it skips),
 * or refuse bytes left over before a restart marker: huff.c always does
 * (libjpeg's "extraneous bytes" warning), libjpeg only when its bit
 * buffer had not already swallowed them, which depends on where the
 * interval lies in its buffer (huff.c's file comment). Anything else, a
 * crash or a sanitizer report, aborts.
 *
 * Input: one byte that picks the crop (a random-resized crop from the
 * byte as seed, or the whole image when bit 7 is set; output 224 or, for
 * odd bytes, a tenth of the crop: DCT scales below 8/8), then the JPEG.
 * The seeds (fuzz_seeds) are files with restart markers at several
 * intervals; the mutations make missing, extra, renumbered and displaced
 * markers and damaged intervals. Images over 2^22 pixels are skipped.
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline/image/image.h"
#include "util.h"

static sl_decoder *decs[3];

static sl_decoder *make(const char *var, const char *val)
{
    sl_decoder *d;
    unsetenv("SLUICE_DECODE");
    unsetenv("SLUICE_HUFF");
    unsetenv("SLUICE_SEEK");
    if (var)
        setenv(var, val, 1);
    if (sl_decoder_create(&d) != SL_OK)
        abort();
    if (var)
        unsetenv(var);
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (!decs[0]) {
        decs[0] = make(NULL, NULL);
        decs[1] = make("SLUICE_HUFF", "libjpeg");
        decs[2] = make("SLUICE_SEEK", "off");
    }
    unsigned k = data[0];
    size_t len = size - 1;
    uint8_t *jpeg = malloc(len);
    if (!jpeg)
        abort();
    memcpy(jpeg, data + 1, len);
    int W, H, W1, H1;
    int rh = sl_decoder_header(decs[0], jpeg, len, &W, &H, NULL);
    for (int i = 1; i < 3; i++) /* the structure check is the same for all */
        if ((sl_decoder_header(decs[i], jpeg, len, &W1, &H1, NULL) == SL_OK) != (rh == SL_OK))
            abort();
    if (rh != SL_OK || (uint64_t)W * (uint64_t)H > (1u << 22)) {
        sl_clear_error();
        free(jpeg);
        return 0;
    }
    sl_crop c;
    int ow, oh;
    fz_crop(k, W, H, &c, &ow, &oh);
    /* One decoder's planes stay valid until its next call: [0] is
     * decoded again after [1] and after [2]. */
    sl_plane_view a[3], b[3];
    int na = 0, nb = 0;
    int r1 = sl_decode_crop_planes(decs[1], jpeg, len, &c, ow, oh, b, &nb);
    int r0 = sl_decode_crop_planes(decs[0], jpeg, len, &c, ow, oh, a, &na);
    if (r1 != SL_OK && r0 == SL_OK)
        abort(); /* libjpeg's seek fails, huff.c's decodes */
    if (r0 == SL_OK && !fz_same_planes(a, na, b, nb))
        abort(); /* the two seeks differ */
    int r2 = sl_decode_crop_planes(decs[2], jpeg, len, &c, ow, oh, b, &nb);
    if (r2 == SL_OK) {
        r0 = sl_decode_crop_planes(decs[0], jpeg, len, &c, ow, oh, a, &na);
        if (r0 != SL_OK && !strstr(sl_errmsg(), "extraneous bytes"))
            abort(); /* the seek fails where the decode from the start does not */
        if (r0 == SL_OK && !fz_same_planes(a, na, b, nb))
            abort(); /* the seek differs from the decode from the start */
    }
    sl_clear_error();
    free(jpeg);
    return 0;
}
