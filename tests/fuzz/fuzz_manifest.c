/*
 * tests/fuzz/fuzz_manifest.c - dataset.json: the manifest loader
 * (sl_manifest_load: version, label offset, class names, splits) and the
 * dataset resolver every command goes through (sl_dataset_resolve on the
 * folder that holds it: the splits it lists, their shard names). Input: the
 * dataset.json file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/records.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[512], path[560];
    fz_path("ds", dir, sizeof dir);
    static int made;
    if (!made) {
        /* Shards for the seeds' splits to find: train (2) and test (1). */
        static const char *const shards[] = {"train-00000-of-00002.tfrecord",
                                             "train-00001-of-00002.tfrecord",
                                             "test-00000-of-00001.tfrecord"};
        if (mkdir(dir, 0755) != 0)
            abort();
        for (size_t i = 0; i < sizeof shards / sizeof *shards; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, shards[i]);
            fz_write(path, "", 0);
        }
        made = 1;
    }
    snprintf(path, sizeof path, "%s/%s", dir, SL_MANIFEST_FILE);
    fz_write(path, data, size);

    sl_manifest m;
    if (sl_manifest_load(dir, &m) == SL_OK) {
        if (m.nsplits > SL_MANIFEST_MAX_SPLITS)
            abort();
        for (uint32_t i = 0; m.class_names && i < m.num_classes; i++)
            if (!m.class_names[i])
                abort();
        for (size_t i = 0; i < m.nsplits; i++)
            if (!memchr(m.splits[i].name, 0, sizeof m.splits[i].name))
                abort();
        /* What the converter does with a loaded manifest: write it back. */
        sl_manifest_fini(&m);
    }
    sl_dataset ds;
    memset(&ds, 0, sizeof ds);
    (void)sl_dataset_resolve(dir, NULL, &ds);
    sl_dataset_fini(&ds);
    sl_clear_error();
    return 0;
}
