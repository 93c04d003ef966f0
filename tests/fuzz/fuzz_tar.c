/*
 * tests/fuzz/fuzz_tar.c - the tar member parser (records/tar.c) and the
 * WebDataset sample decoder (sl_wds_sample_decode). Input: a tar archive
 * (whole-archive walk) that is also decoded as one sample span, with and
 * without a --label-key. What the parser accepts must hold what it
 * promises: members inside the input, data offsets on 512-byte blocks,
 * views of a decoded sample inside the span.
 */
#include <stdlib.h>
#include <string.h>

#include "records/wds.h"
#include "util.h"

static int inside(const uint8_t *p, size_t n, const uint8_t *base, size_t len)
{
    return !p || (p >= base && n <= len && (size_t)(p - base) <= len - n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_tar_iter it;
    static sl_tar_member m;
    sl_tar_iter_mem(&it, data, size, 0, "fuzz.tar");
    while (sl_tar_next(&it, &m) == SL_OK) {
        if (m.data_off % SL_TAR_BLOCK || m.data_off > size || m.size > size - m.data_off ||
            m.header_off >= m.data_off || !m.name[0])
            abort();
    }
    sl_image_example ex;
    const char *keys[] = {NULL, "label"};
    for (int k = 0; k < 2; k++)
        if (sl_wds_sample_decode(data, size, keys[k], &ex) == SL_OK &&
            (!ex.image || !inside(ex.image, ex.image_len, data, size) ||
             !inside((const uint8_t *)ex.filename, ex.filename_len, data, size)))
            abort();
    sl_clear_error();
    return 0;
}
