/*
 * tests/fuzz/fuzz_idx_mnist.c - the IDX (MNIST) reader of the converter
 * (sl_inputs_load with SL_SOURCE_IDX: magic, dimensions, counts, gzip or
 * plain through zlib, truncation and trailing bytes).
 *
 * Input: a little-endian u32 n, then n bytes of the images file, then the
 * labels file (tests/fuzz/util.h's fz_split); either may be gzip.
 */
#include <stdlib.h>

#include "records/records_int.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *img, *lab;
    size_t ni, nl;
    fz_split(data, size, &img, &ni, &lab, &nl);
    char ipath[512], lpath[512];
    fz_write(fz_path("images-idx3-ubyte", ipath, sizeof ipath), img, ni);
    fz_write(fz_path("labels-idx1-ubyte", lpath, sizeof lpath), lab, nl);

    sl_convert_config cfg = SL_CONVERT_CONFIG_INIT;
    cfg.source = SL_SOURCE_IDX;
    cfg.idx_images = ipath;
    cfg.idx_labels = lpath;
    sl_input_list l;
    if (sl_inputs_load(&cfg, &l) == SL_OK) {
        uint64_t px = (uint64_t)l.idx_rows * l.idx_cols;
        if (l.n && (!l.idx_pixels || !px))
            abort();
        volatile uint8_t sink = 0;
        if (l.n) /* the last image's last pixel is inside the buffer */
            sink ^= l.idx_pixels[l.n * px - 1];
        (void)sink;
        for (size_t i = 0; i < l.n; i++)
            if (l.items[i].label < 0 || (uint64_t)l.items[i].label >= l.nclasses)
                abort();
    }
    sl_inputs_free(&l);
    sl_clear_error();
    return 0;
}
