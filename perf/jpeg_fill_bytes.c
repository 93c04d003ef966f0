/*
 * perf/jpeg_fill_bytes.c - how libjpeg-turbo reads fill bytes before a
 * stuffed zero (FF FF 00) in a scan, against the same stream without the
 * fill byte, and what sluice does with such a stream (issue 26; the story
 * is in records/jpeg_scan.c and pipeline/image/huff.c).
 *
 *   jpeg_fill_bytes [--quality 92] [--size 256x192] [--places 300]
 *
 * A noisy RGB image (4:2:0, TurboJPEG's standard tables) is encoded; then,
 * for each of the first `places` stuffed FF 00 pairs of its entropy-coded
 * data, a copy with one 0xFF put before the pair is decoded by TurboJPEG
 * (tjDecompress2, a memory source) and by sluice's pipeline decode
 * (sl_decoder_header + sl_decode_crop_sample, whole image, NHWC u8).
 * Prints how many copies TurboJPEG decodes to other pixels than the
 * original (and the largest difference, in levels) and how many sluice
 * refuses. A measurement of a dependency's behaviour, not a speed.
 */
#define BENCH_NAME "jpeg_fill_bytes"
#include <string.h>
#include <turbojpeg.h>
#include <jconfig.h> /* LIBJPEG_TURBO_VERSION_NUMBER */

#include "bench_util.h"
#include "pipeline/image/image.h"

static uint64_t rng = 9;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv)
{
    int W = 256, H = 192, q = 92, places = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quality") && i + 1 < argc)
            q = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc &&
                 sscanf(argv[i + 1], "%dx%d", &W, &H) == 2)
            i++;
        else if (!strcmp(argv[i], "--places") && i + 1 < argc)
            places = atoi(argv[++i]);
        else
            die("usage: jpeg_fill_bytes [--quality Q] [--size WxH] [--places N]");
    }
    if (W < 16 || H < 16 || W > 8192 || H > 8192 || q < 1 || q > 100 || places < 1)
        die("bad arguments");
    uint8_t *px = malloc((size_t)W * H * 3), *ref = malloc((size_t)W * H * 3),
            *out = malloc((size_t)W * H * 3);
    if (!px || !ref || !out)
        die("out of memory");
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                int v = ((x / (5 + c) + y / 9) & 1 ? 180 : 50) + (int)(next() % 81) - 40;
                px[((size_t)y * W + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    tjhandle tc = tjInitCompress(), td = tjInitDecompress();
    unsigned char *j = NULL;
    unsigned long n = 0;
    if (!tc || !td || tjCompress2(tc, px, W, 0, H, TJPF_RGB, &j, &n, TJSAMP_420, q, 0) != 0 ||
        tjDecompress2(td, j, n, ref, W, 0, H, TJPF_RGB, 0) != 0)
        die("TurboJPEG: %s", tjGetErrorStr2(NULL));
    sl_decoder *d;
    if (sl_decoder_create(&d) != SL_OK)
        die("%s", sl_errmsg());
    uint8_t *f = malloc(n + 1);
    if (!f)
        die("out of memory");
    int tried = 0, differ = 0, failed = 0, refused = 0, maxd = 0;
    /* past the headers: the first SOS */
    size_t at = 2;
    while (at + 3 < n && !(j[at] == 0xFF && j[at + 1] == 0xDA))
        at++;
    for (; tried < places; at += 2, tried++) {
        while (at + 1 < n && !(j[at] == 0xFF && j[at + 1] == 0x00))
            at++;
        if (at + 1 >= n)
            break;
        memcpy(f, j, at);
        f[at] = 0xFF;
        memcpy(f + at + 1, j + at, n - at);
        if (tjDecompress2(td, f, n + 1, out, W, 0, H, TJPF_RGB, 0) != 0) {
            failed++;
        } else {
            int md = 0;
            for (size_t i = 0; i < (size_t)W * H * 3; i++) {
                int e = abs((int)out[i] - (int)ref[i]);
                md = e > md ? e : md;
            }
            differ += md > 0;
            maxd = md > maxd ? md : maxd;
        }
        int w, h;
        sl_crop c = {0, 0, W, H};
        if (sl_decoder_header(d, f, n + 1, &w, &h, NULL) != SL_OK ||
            sl_decode_crop_sample(d, f, n + 1, &c, &(sl_out_spec){.w = W, .h = H, .flip = 0,
                                                                  .layout = SL_LAYOUT_NHWC_U8,
                                                                  .mean = NULL, .std = NULL,
                                                                  .dst = out}) != SL_OK)
            refused++;
    }
    printf("%dx%d q%d 4:2:0, %lu bytes: FF FF 00 at %d places of the scan\n", W, H, q, n, tried);
    printf("  libjpeg-turbo %d.%d.%d (tjDecompress2): %d decode to other pixels than the file "
           "without the fill byte (max %d levels), %d fail\n", LIBJPEG_TURBO_VERSION_NUMBER / 1000000,
           LIBJPEG_TURBO_VERSION_NUMBER / 1000 % 1000, LIBJPEG_TURBO_VERSION_NUMBER % 1000, differ,
           maxd, failed);
    printf("  sluice (sl_decoder_header + sl_decode_crop_sample): %d refused\n", refused);
    sl_decoder_destroy(d);
    free(f);
    tjFree(j);
    tjDestroy(tc);
    tjDestroy(td);
    free(px);
    free(ref);
    free(out);
    return 0;
}
