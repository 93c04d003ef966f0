/*
 * tests/fuzz/fuzz_transcode.c - the converter's re-encode of any supported
 * image (sl_transcode_jpeg: JPEG in any colour space through TurboJPEG, PNG
 * through libpng, BMP and PPM/PGM parsed here, WebP through libwebp when
 * the build has it: its seeds are libwebp's lossy, lossless, alpha and an
 * animated file, tests/fuzz/seeds.c), with and without the
 * shrink to a shorter side. Input: an image file.
 *
 * Images claiming more than 2^24 pixels are skipped: the pixel bound on
 * hostile images is issue 16's item 2, and the transcoder's own cap (2^28
 * pixels, 768 MiB) is above libFuzzer's memory limit.
 */
#include <stdlib.h>
#include <string.h>

#include "records/records.h"

static sl_transcoder *tc;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tc && sl_transcoder_create(&tc) != SL_OK)
        abort();
    sl_image_info info;
    if (sl_image_probe(data, size, &info) == SL_OK &&
        (uint64_t)info.width * (uint64_t)info.height > (1u << 24))
        return 0;
    uint8_t *img = malloc(size ? size : 1);
    if (!img)
        abort();
    memcpy(img, data, size);
    const uint8_t *jpeg;
    size_t jlen;
    int w, h;
    int resize = size ? (data[size - 1] & 1 ? 7 : 0) : 0;
    if (sl_transcode_jpeg(tc, img, size, 75, resize, &jpeg, &jlen, &w, &h) == SL_OK) {
        /* The output must be a well-formed JPEG of the size reported. */
        if (w < 1 || h < 1 || sl_jpeg_scan(jpeg, jlen, NULL) != SL_OK)
            abort();
        if (sl_image_probe(jpeg, jlen, &info) != SL_OK || info.width != w || info.height != h)
            abort();
    }
    sl_clear_error();
    free(img);
    return 0;
}
