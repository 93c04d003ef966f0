/*
 * tests/fuzz/fuzz_tfrecord.c - TFRecord framing: the buffered reader
 * (sl_tfrecord_reader_next), the shard scan that builds an index
 * (sl_index_build), reads by position through that index
 * (sl_tfrecord_read_at) and the in-memory frame check. Input: a shard file.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "records/records.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fz_path("shard.tfrecord", path, sizeof path);
    fz_write(path, data, size);

    sl_tfrecord_reader *r = NULL;
    if (sl_tfrecord_reader_open(path, &r) == SL_OK) {
        const uint8_t *rec;
        size_t len;
        int rc;
        while ((rc = sl_tfrecord_reader_next(r, &rec, &len)) == SL_OK)
            if (len && rec[0] == 0xff && rec[len - 1] == 0xff) /* touch both ends */
                sl_clear_error();
        sl_tfrecord_reader_close(r);
    }

    sl_index_entry *e = NULL;
    size_t n = 0;
    if (sl_index_build(path, &e, &n) == SL_OK) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        for (size_t i = 0; fd >= 0 && i < n; i++) {
            size_t cap = (size_t)e[i].size, got = 0;
            uint8_t *buf = malloc(cap ? cap : 1);
            if (buf && sl_tfrecord_read_at(fd, e[i].offset, e[i].size, buf, cap, &got, path, i))
                abort(); /* the scan accepted it: reading it back must work */
            free(buf);
            if (sl_tfrecord_frame_check(data + e[i].offset, e[i].size) != SL_FRAME_OK)
                abort();
        }
        if (fd >= 0)
            close(fd);
    }
    free(e);
    (void)sl_tfrecord_frame_check(data, size);
    sl_clear_error();
    return 0;
}
