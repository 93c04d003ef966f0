/*
 * tests/fuzz/fuzz_jpeg_probe.c - the JPEG marker walk (sl_jpeg_scan) and the
 * header probe of every image type the converter takes (sl_image_probe:
 * JPEG through TurboJPEG, PNG's IHDR, BMP and Netpbm headers). Input: an
 * image file.
 */
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "records/records_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *img = malloc(size ? size : 1);
    if (!img)
        return 0;
    memcpy(img, data, size);
    (void)sl_jpeg_scan(img, size, NULL);
    sl_image_info info;
    if (sl_image_probe(img, size, &info) == SL_OK) {
        if (info.width < 1 || info.height < 1 || info.width > SL_IMAGE_MAX_DIM ||
            info.height > SL_IMAGE_MAX_DIM || info.channels < 1 || info.channels > 4)
            abort(); /* the probe promised a usable header */
    }
    sl_bmp_header bh;
    (void)sl_bmp_parse_header(img, size, &bh);
    sl_pnm_header ph;
    (void)sl_pnm_parse_header(img, size, &ph);
    (void)sl_png_parse_header(img, size, &info);
    sl_clear_error();
    free(img);
    return 0;
}
