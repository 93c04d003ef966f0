/* tests/pipeline/photos.h - the camera JPEGs of tests/data/photos for the
 * decode tests (test_decode_yuv.c, test_huff.c): read one, or transcode
 * one losslessly (tjTransform: progressive, gray); and synthetic images
 * encoded. Fail the test on error. */
#ifndef SL_TEST_PHOTOS_H
#define SL_TEST_PHOTOS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <turbojpeg.h>

#include "testutil.h"

/* tests/data/photos/name, malloc'd. */
static inline uint8_t *read_photo(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/photos/%s", SLUICE_SOURCE_DIR, name);
    uint8_t *p = tu_read_file(path, len);
    cr_assert_not_null(p, "%s: cannot read", path);
    return p;
}

/* Lossless transcode with TJXOPT_* options (progressive, gray); tjFree it. */
static inline unsigned char *transcode(const uint8_t *jpeg, size_t len, int options,
                                       unsigned long *out)
{
    tjhandle tj = tjInitTransform();
    cr_assert_not_null(tj);
    tjtransform xf;
    memset(&xf, 0, sizeof xf);
    xf.op = TJXOP_NONE;
    xf.options = options;
    unsigned char *dst = NULL;
    *out = 0;
    cr_assert_eq(tjTransform(tj, jpeg, (unsigned long)len, 1, &dst, out, &xf, 0), 0, "%s",
                 tjGetErrorStr2(tj));
    tjDestroy(tj);
    return dst;
}

/* rgb (W x H x 3) as a JPEG (tjCompress2) at chroma sampling samp
 * (TJSAMP_*), quality q, TJFLAG_* flags; tjFree it. */
static inline unsigned char *encode_rgb(const uint8_t *rgb, int W, int H, int samp, int q,
                                        int flags, unsigned long *len)
{
    tjhandle tj = tjInitCompress();
    cr_assert_not_null(tj);
    unsigned char *jpeg = NULL;
    *len = 0;
    cr_assert_eq(tjCompress2(tj, rgb, W, W * 3, H, TJPF_RGB, &jpeg, len, samp, q, flags), 0, "%s",
                 tjGetErrorStr2(tj));
    tjDestroy(tj);
    return jpeg;
}

#endif
