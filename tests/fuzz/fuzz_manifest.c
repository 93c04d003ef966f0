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

/* What the converter does with a loaded manifest: update it and write it
 * back (sl_manifest_save). What was accepted saves, and loads again equal. */
static void round_trip(const sl_manifest *m)
{
    char dir[512];
    static int made;
    fz_path("ds2", dir, sizeof dir);
    if (!made) {
        if (mkdir(dir, 0755) != 0)
            abort();
        made = 1;
    }
    sl_manifest b;
    if (sl_manifest_save(dir, m) != SL_OK || sl_manifest_load(dir, &b) != SL_OK)
        abort();
    if (b.version != m->version || b.label_offset != m->label_offset ||
        b.num_classes != m->num_classes || !b.class_names != !m->class_names ||
        b.nsplits != m->nsplits || strcmp(b.created_by, m->created_by) != 0)
        abort();
    for (uint32_t i = 0; m->class_names && i < m->num_classes; i++)
        if (strcmp(b.class_names[i], m->class_names[i]) != 0)
            abort();
    for (size_t i = 0; i < m->nsplits; i++) {
        const sl_manifest_split *x = &m->splits[i], *y = &b.splits[i];
        if (strcmp(x->name, y->name) || x->format != y->format || x->records != y->records ||
            x->shards != y->shards || x->bytes != y->bytes || x->skipped != y->skipped ||
            strcmp(x->source, y->source))
            abort();
    }
    sl_manifest_fini(&b);
}

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
        round_trip(&m);
        sl_manifest_fini(&m);
    }
    sl_dataset ds;
    memset(&ds, 0, sizeof ds);
    (void)sl_dataset_resolve(dir, NULL, &ds);
    sl_dataset_fini(&ds);
    sl_clear_error();
    return 0;
}
