/*
 * tests/fuzz/fuzz_lmdb.c - LMDB stores as sluice reads them: the store's
 * key checks at open (sl_lmdb_env_open: keys 0..count-1 at both ends), the
 * sequential walk (sl_lmdb_reader_next: each key the expected record
 * number), random access (sl_lmdb_reader_get) and each value decoded as
 * `sluice verify` and `inspect` do (sl_image_example_decode, then
 * sl_jpeg_scan of the image).
 *
 * LMDB's own page format is trusted (it is LMDB's file, written by LMDB):
 * the input is the store's content, which this harness writes with LMDB
 * itself into a fresh environment each time: a sequence of
 * [u8 key length][key][u16 LE value length][value] entries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lmdb.h>

#include "records/records.h"
#include "util.h"

static void make_store(const char *dir, const uint8_t *data, size_t size)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    fz_clean(dir);
    if (mdb_env_create(&env) || mdb_env_set_mapsize(env, (size_t)64 << 20) ||
        mdb_env_open(env, dir, MDB_NOSYNC, 0644) || mdb_txn_begin(env, NULL, 0, &txn) ||
        mdb_dbi_open(txn, NULL, 0, &dbi))
        abort();
    size_t i = 0;
    while (i < size) {
        size_t kl = data[i++];
        if (size - i < kl + 2)
            break;
        MDB_val k = {kl, (void *)(data + i)};
        i += kl;
        size_t vl = (size_t)data[i] | (size_t)data[i + 1] << 8;
        i += 2;
        if (vl > size - i)
            vl = size - i;
        MDB_val v = {vl, (void *)(data + i)};
        i += vl;
        (void)mdb_put(txn, dbi, &k, &v, 0); /* empty or long keys: refused, skipped */
    }
    if (mdb_txn_commit(txn))
        abort();
    mdb_env_close(env);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[512];
    fz_path("store.lmdb", dir, sizeof dir);
    static int made;
    if (!made) {
        if (mkdir(dir, 0755) != 0)
            abort();
        made = 1;
    }
    make_store(dir, data, size);

    sl_lmdb_env *env = NULL;
    sl_lmdb_reader *r = NULL;
    if (sl_lmdb_env_open(dir, &env) == SL_OK && sl_lmdb_reader_open(env, &r) == SL_OK) {
        const uint8_t *v;
        size_t len;
        uint64_t n = 0;
        while (sl_lmdb_reader_next(r, &v, &len) == SL_OK) {
            if (sl_lmdb_reader_record(r) != n++)
                abort();
            sl_image_example ex;
            if (sl_image_example_decode(v, len, &ex) == SL_OK)
                (void)sl_jpeg_scan(ex.image, ex.image_len, NULL);
        }
        uint64_t count = sl_lmdb_env_count(env);
        for (uint64_t k = 0; k < count + 2 && k < 64; k++)
            if (sl_lmdb_reader_get(r, k, &v, &len) == SL_OK && k >= count)
                abort(); /* a record past the count */
    }
    sl_lmdb_reader_close(r);
    sl_lmdb_env_close(env);
    sl_clear_error();
    return 0;
}
