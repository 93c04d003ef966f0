/* tests/webp_images.h - WebP files written by libwebp's own encoder (the
 * one cwebp and Pillow call): lossy and lossless, with and without alpha,
 * and an animation assembled by libwebpmux's WebPAnimEncoder (what
 * img2webp and gif2webp write). For tests/records/test_webp.c and the
 * fuzz seeds (tests/fuzz/seeds.c); only with SLUICE_WITH_WEBP.
 *
 * Header-only (static functions), no Criterion: the fuzz seeds' program
 * includes it too. Each returns malloc'd bytes (*len set), or NULL when the
 * encoder fails. */
#ifndef SL_TEST_WEBP_IMAGES_H
#define SL_TEST_WEBP_IMAGES_H

#if SLUICE_WITH_WEBP
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <webp/encode.h>
#include <webp/mux.h>

/* px: (h, w, ch) u8, ch 3 (RGB) or 4 (RGBA); quality q in 0..100 lossy,
 * q < 0 lossless. */
static inline uint8_t *wi_webp(const uint8_t *px, int w, int h, int ch, int q, size_t *len)
{
    uint8_t *out = NULL;
    int stride = w * ch;
    *len = 0;
    size_t n = ch == 4 ? (q < 0 ? WebPEncodeLosslessRGBA(px, w, h, stride, &out)
                                : WebPEncodeRGBA(px, w, h, stride, (float)q, &out))
                       : (q < 0 ? WebPEncodeLosslessRGB(px, w, h, stride, &out)
                                : WebPEncodeRGB(px, w, h, stride, (float)q, &out));
    uint8_t *c = n ? malloc(n) : NULL;
    if (c) {
        memcpy(c, out, n);
        *len = n;
    }
    WebPFree(out);
    return c;
}

/* An animation of `frames` w x h frames (a pattern that changes per
 * frame, 100 ms each), lossy at the encoder's default settings. */
static inline uint8_t *wi_webp_anim(int w, int h, int frames, size_t *len)
{
    WebPAnimEncoderOptions ao;
    WebPConfig wc;
    WebPPicture pic;
    WebPData d;
    uint8_t *c = NULL;
    *len = 0;
    WebPDataInit(&d);
    if (!WebPAnimEncoderOptionsInit(&ao) || !WebPConfigInit(&wc) || !WebPPictureInit(&pic))
        return NULL;
    WebPAnimEncoder *e = WebPAnimEncoderNew(w, h, &ao);
    pic.width = w;
    pic.height = h;
    pic.use_argb = 1;
    if (!e || !WebPPictureAlloc(&pic))
        goto out;
    for (int f = 0; f < frames; f++) {
        for (int i = 0; i < w * h; i++)
            pic.argb[i] = 0xff000000u | ((uint32_t)i * 40503u + (uint32_t)f * 0x5f3759u);
        if (!WebPAnimEncoderAdd(e, &pic, f * 100, &wc))
            goto out;
    }
    if (!WebPAnimEncoderAdd(e, NULL, frames * 100, NULL) || !WebPAnimEncoderAssemble(e, &d))
        goto out;
    if ((c = malloc(d.size))) {
        memcpy(c, d.bytes, d.size);
        *len = d.size;
    }
out:
    WebPDataClear(&d);
    WebPPictureFree(&pic);
    WebPAnimEncoderDelete(e);
    return c;
}
#endif

#endif
