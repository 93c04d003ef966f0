/* tests/pipeline/test_source.c - the shards a rank reads: index files loaded
 * or built, record ids, rank/world splits, stale indexes refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/pipeline_int.h"
#include "records/wds.h"
#include "testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tu_tmpdir(); }

static void teardown(void)
{
    tu_rmrf(g_dir);
    free(g_dir);
}

TestSuite(pipeline_source, .init = setup, .fini = teardown);

#define NSH 6
/* Records per shard; 0-record shards included. */
static const uint64_t k_counts[NSH] = {4, 0, 7, 1, 5, 3};

static char *shard_path(unsigned i, unsigned n)
{
    char buf[4096];
    cr_assert_eq(sl_shard_path(buf, sizeof buf, g_dir, "train", i, n), SL_OK);
    return strdup(buf);
}

/* Payload of record r of shard i: its length varies, its bytes say who it is. */
static size_t payload(unsigned i, uint64_t r, uint8_t *buf)
{
    size_t len = (size_t)((i * 37 + r * 101) % 300);
    for (size_t k = 0; k < len; k++)
        buf[k] = (uint8_t)(i * 7 + r + k);
    return len;
}

/* Write the NSH shards (with index files) and, when label_offset >= 0, a
 * manifest listing them. Returns the largest framed record. */
static uint64_t make_dataset(int label_offset)
{
    uint8_t buf[512];
    uint64_t max_rec = 0;
    for (unsigned i = 0; i < NSH; i++) {
        char *p = shard_path(i, NSH);
        sl_tfrecord_writer *w;
        cr_assert_eq(sl_tfrecord_writer_open(p, SL_TFW_INDEX | SL_TFW_NOSYNC, &w), SL_OK);
        for (uint64_t r = 0; r < k_counts[i]; r++) {
            size_t len = payload(i, r, buf);
            cr_assert_eq(sl_tfrecord_writer_write(w, buf, len), SL_OK);
            if (16 + len > max_rec)
                max_rec = 16 + len;
        }
        cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
        free(p);
    }
    if (label_offset >= 0) {
        sl_manifest m;
        sl_manifest_init(&m);
        m.label_offset = label_offset;
        m.num_classes = 10;
        sl_manifest_split sp = {.format = SL_FORMAT_TFRECORD, .shards = NSH};
        strcpy(sp.name, "train");
        for (unsigned i = 0; i < NSH; i++)
            sp.records += k_counts[i];
        cr_assert_eq(sl_manifest_split_put(&m, &sp), SL_OK);
        cr_assert_eq(sl_manifest_save(g_dir, &m), SL_OK, "%s", sl_errmsg());
        sl_manifest_fini(&m);
    }
    return max_rec;
}

static uint64_t file_size(const char *p)
{
    struct stat st;
    cr_assert_eq(stat(p, &st), 0, "%s", p);
    return (uint64_t)st.st_size;
}

/* Check s as rank/world of the dataset: which shards, counts, ids, index
 * entries equal to a fresh scan, locate at every id and boundary, and the
 * whole dataset's ids of its records (issue 38 item 2: world_first,
 * world_total, sl_source_set_world_ids: the ids of world 1). */
static void check_set(const sl_source_set *s, unsigned rank, unsigned world)
{
    uint64_t id = 0, bytes = 0, all = 0;
    size_t k = 0;
    for (unsigned i = 0; i < NSH; i++)
        all += k_counts[i];
    cr_assert_eq(s->world_total, all, "every rank's shards counted");
    for (unsigned i = rank; i < NSH; i += world, k++) {
        cr_assert_lt(k, s->n);
        const sl_shard_info *sh = &s->shards[k];
        char *p = shard_path(i, NSH);
        cr_assert_str_eq(sh->path, p);
        cr_assert_eq(sh->nrec, k_counts[i]);
        cr_assert_eq(sh->first_id, id, "shard %zu", k);
        uint64_t before = 0;
        for (unsigned j = 0; j < i; j++)
            before += k_counts[j];
        cr_assert_eq(sh->world_first, before, "shard %u: world 1's first id", i);
        cr_assert_eq(sh->bytes, file_size(p));
        sl_index_entry *e;
        size_t n;
        cr_assert_eq(sl_index_build(p, &e, &n), SL_OK);
        cr_assert_eq(n, sh->nrec);
        if (n)
            cr_assert(memcmp(e, sh->idx, n * sizeof *e) == 0);
        free(e);
        free(p);
        for (uint64_t r = 0; r < sh->nrec; r++, id++) {
            uint32_t got_shard;
            uint64_t got_rec;
            cr_assert_eq(sl_source_set_locate(s, id, &got_shard, &got_rec), SL_OK);
            cr_assert(got_shard == k && got_rec == r, "id %llu -> (%u, %llu), want (%zu, %llu)",
                      (unsigned long long)id, got_shard, (unsigned long long)got_rec, k,
                      (unsigned long long)r);
            uint64_t w = id;
            sl_source_set_world_ids(s, &w, 1);
            cr_assert_eq(w, before + r, "id %llu of rank %u of %u", (unsigned long long)id,
                         rank, world);
        }
        bytes += sh->bytes;
    }
    cr_assert_eq(s->n, k);
    cr_assert_eq(s->total, id);
    cr_assert_eq(s->total_bytes, bytes);
    uint32_t a;
    uint64_t b;
    cr_assert_eq(sl_source_set_locate(s, s->total, &a, &b), SL_EINVAL);
    cr_assert_eq(sl_source_set_locate(s, UINT64_MAX, &a, &b), SL_EINVAL);
}

Test(pipeline_source, with_index_and_manifest)
{
    uint64_t max_rec = make_dataset(1);
    sl_source_set s;
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_OK, "%s", sl_errmsg());
    check_set(&s, 0, 1);
    cr_assert_eq(s.total, 20);
    cr_assert_eq(s.label_offset, 1);
    cr_assert_eq(s.max_record, max_rec);
    /* The boundaries, spelled out: shard 1 is empty, so id 4 is shard 2's. */
    const uint64_t ids[] = {0, 3, 4, 10, 11, 12, 16, 17, 19};
    const uint32_t want_shard[] = {0, 0, 2, 2, 3, 4, 4, 5, 5};
    const uint64_t want_rec[] = {0, 3, 0, 6, 0, 0, 4, 0, 2};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        uint32_t sh;
        uint64_t r;
        cr_assert_eq(sl_source_set_locate(&s, ids[i], &sh, &r), SL_OK);
        cr_assert(sh == want_shard[i] && r == want_rec[i], "id %llu", (unsigned long long)ids[i]);
    }
    sl_source_set_close(&s);
    cr_assert_eq(s.n, 0);
    cr_assert_null(s.shards);
    sl_source_set_close(&s); /* twice is fine */
    sl_source_set_close(NULL);
}

Test(pipeline_source, without_index_files)
{
    make_dataset(-1); /* no manifest: label_offset 0, shards by listing */
    for (unsigned i = 0; i < NSH; i++) {
        char *p = shard_path(i, NSH), *idx;
        cr_assert_geq(asprintf(&idx, "%s.idx", p), 0);
        if (i % 2 == 0) /* some shards keep theirs */
            cr_assert_eq(unlink(idx), 0);
        free(idx);
        free(p);
    }
    sl_source_set s;
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_OK, "%s", sl_errmsg());
    check_set(&s, 0, 1);
    cr_assert_eq(s.label_offset, 0);
    sl_source_set_close(&s);
    /* Nothing was written back. */
    char *p = shard_path(0, NSH), *idx;
    cr_assert_geq(asprintf(&idx, "%s.idx", p), 0);
    cr_assert_neq(access(idx, F_OK), 0);
    free(idx);
    free(p);
}

Test(pipeline_source, single_file)
{
    make_dataset(1);
    char *p = shard_path(2, NSH);
    sl_source_set s;
    cr_assert_eq(sl_source_set_open(p, NULL, 0, 1, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.total, k_counts[2]);
    cr_assert_eq(s.label_offset, 1); /* its directory's manifest */
    cr_assert_str_eq(s.shards[0].path, p);
    sl_source_set_close(&s);
    /* One shard, two ranks: rank 1 gets nothing, and is told to split the
     * records instead (issue 38 item 2). */
    cr_assert_eq(sl_source_set_open(p, NULL, 1, 2, &s), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "rank 1 of 2: only 1 shard,"), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "SL_SPLIT_RECORDS"), "%s", sl_errmsg());
    /* One file is a shard whatever its name (TensorFlow's have no suffix)
     * when it opens with a record header; a file that does not is refused
     * before it is read, naming what it is and what was expected (issue 38
     * item 3: dataset.json, an .idx or an image gave an empty pipeline). */
    struct {
        const char *name, *bytes;
        size_t len;
        const char *says;
    } others[] = {
        {"notes.txt", "x", 1, "its first 12 bytes are no TFRecord record header"},
        {"dataset.json", "{\"version\": 1, \"splits\": {}}", 28, "the dataset's manifest"},
        {"train-00002-of-00006.tfrecord.idx", "0 40\n40 47\n", 11, "an index file"},
        {"cat.jpg", "\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00", 15, "an image"},
        {"data.mdb", "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16, "an LMDB store"},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        char *sub = tu_join(g_dir, "others"), *other;
        mkdir(sub, 0755);
        other = tu_join(sub, others[i].name);
        cr_assert_eq(tu_write_file(other, others[i].bytes, others[i].len), 0);
        cr_assert_eq(sl_source_set_open(other, "train", 0, 1, &s), SL_EINVAL, "%s", other);
        cr_assert(strstr(sl_errmsg(), other), "%s", sl_errmsg());
        cr_assert(strstr(sl_errmsg(), "not a record shard"), "%s", sl_errmsg());
        cr_assert(strstr(sl_errmsg(), others[i].says), "%s", sl_errmsg());
        cr_assert(strstr(sl_errmsg(), "dataset directory"), "%s", sl_errmsg());
        free(other);
        free(sub);
    }
    /* an empty file is an empty shard */
    char *empty = tu_join(g_dir, "empty.tfrecord");
    cr_assert_eq(tu_write_file(empty, "", 0), 0);
    cr_assert_eq(sl_source_set_open(empty, "train", 0, 1, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(s.total, 0);
    sl_source_set_close(&s);
    free(empty);
    free(p);
}

Test(pipeline_source, glob_pattern)
{
    make_dataset(1);
    char pat[4096];
    sl_source_set s;
    /* Shards 2..5 of 6 ("train-0000[2-5]-of-00006.tfrecord"), sorted. */
    snprintf(pat, sizeof pat, "%s/train-0000[2-5]-of-*.tfrecord", g_dir);
    cr_assert_eq(sl_source_set_open(pat, NULL, 0, 1, &s), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(s.n, 4);
    uint64_t total = 0;
    for (unsigned i = 0; i < 4; i++) {
        char *want = shard_path(i + 2, NSH);
        cr_assert_str_eq(s.shards[i].path, want);
        cr_assert_eq(s.shards[i].nrec, k_counts[i + 2]);
        cr_assert_eq(s.shards[i].first_id, total);
        total += k_counts[i + 2];
        free(want);
    }
    cr_assert_eq(s.total, total);
    cr_assert_eq(s.label_offset, 1); /* the manifest beside the matches */
    sl_source_set_close(&s);
    /* Nothing matches: SL_ENOENT naming the pattern. */
    snprintf(pat, sizeof pat, "%s/test-*.tfrecord", g_dir);
    cr_assert_eq(sl_source_set_open(pat, NULL, 0, 1, &s), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), "no file matches"), "%s", sl_errmsg());
    /* A match that is a directory is refused. */
    char *sub = tu_join(g_dir, "train-dir.tfrecord");
    cr_assert_eq(mkdir(sub, 0755), 0);
    snprintf(pat, sizeof pat, "%s/train-*.tfrecord", g_dir);
    cr_assert_eq(sl_source_set_open(pat, NULL, 0, 1, &s), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "not a shard file"), "%s", sl_errmsg());
    free(sub);
}

Test(pipeline_source, rank_world_split)
{
    make_dataset(0);
    for (unsigned world = 1; world <= NSH + 2; world++) {
        int seen[NSH] = {0};
        for (unsigned rank = 0; rank < world; rank++) {
            sl_source_set s;
            int rc = sl_source_set_open(g_dir, "train", rank, world, &s);
            if (rank >= NSH) {
                cr_assert_eq(rc, SL_EINVAL, "rank %u of %u", rank, world);
                cr_assert(strstr(sl_errmsg(), "only 6 shards"), "%s", sl_errmsg());
                cr_assert_eq(s.n, 0);
                continue;
            }
            cr_assert_eq(rc, SL_OK, "%s", sl_errmsg());
            check_set(&s, rank, world);
            for (size_t k = 0; k < s.n; k++)
                for (unsigned i = 0; i < NSH; i++) {
                    char *p = shard_path(i, NSH);
                    if (strcmp(p, s.shards[k].path) == 0)
                        seen[i]++;
                    free(p);
                }
            sl_source_set_close(&s);
        }
        for (unsigned i = 0; i < NSH; i++)
            cr_assert_eq(seen[i], 1, "world %u: shard %u read %d times", world, i, seen[i]);
    }
    sl_source_set s;
    cr_assert_eq(sl_source_set_open(g_dir, "train", 2, 2, &s), SL_EINVAL);
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 0, &s), SL_EINVAL);
}

/* An index that does not end where the shard ends is refused, naming it. */
Test(pipeline_source, stale_index)
{
    make_dataset(1);
    char *p = shard_path(2, NSH), *idx;
    cr_assert_geq(asprintf(&idx, "%s.idx", p), 0);
    size_t len;
    uint8_t *orig = tu_read_file(p, &len);
    cr_assert_not_null(orig);
    sl_source_set s;

    /* The shard grew (a copy of its valid record 0 appended): the index is
     * short. */
    uint8_t scratch[512];
    size_t r0 = 16 + payload(2, 0, scratch);
    FILE *f = fopen(p, "ab");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(orig, 1, r0, f), r0);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), idx) && strstr(sl_errmsg(), "index covers"), "%s",
              sl_errmsg());
    cr_assert_eq(s.n, 0);

    /* The shard was truncated: the index runs past its end. */
    cr_assert_eq(tu_write_file(p, orig, len - 3), 0);
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), idx), "%s", sl_errmsg());

    /* The shard is intact but the index lost its last line. */
    cr_assert_eq(tu_write_file(p, orig, len), 0);
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_OK, "%s", sl_errmsg());
    sl_source_set_close(&s);
    size_t ilen;
    char *text = (char *)tu_read_file(idx, &ilen);
    cr_assert_not_null(text);
    cr_assert(ilen > 1 && text[ilen - 1] == '\n');
    size_t cut = ilen - 1;
    while (cut > 0 && text[cut - 1] != '\n')
        cut--;
    cr_assert_eq(tu_write_file(idx, text, cut), 0);
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), idx), "%s", sl_errmsg());

    /* A garbled index is the index parser's SL_ECORRUPT, passed on. */
    cr_assert_eq(tu_write_file(idx, "0 x\n", 4), 0);
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), idx), "%s", sl_errmsg());

    /* Without the index, a damaged shard fails the scan. */
    cr_assert_eq(unlink(idx), 0);
    cr_assert_eq(tu_write_file(p, orig, len - 3), 0);
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), p), "%s", sl_errmsg());
    free(text);
    free(orig);
    free(idx);
    free(p);
}

/* Issue 28: a truncated shard names the file and the record as verify
 * does ("truncated record"), with or without its index; under the skip
 * policy its whole records are kept and the lost ones counted. */
Test(pipeline_source, truncated_shard_skip)
{
    make_dataset(1);
    char *p = shard_path(2, NSH), *idx;
    cr_assert_geq(asprintf(&idx, "%s.idx", p), 0);
    size_t len;
    uint8_t *orig = tu_read_file(p, &len);
    cr_assert_not_null(orig);
    sl_source_set s, whole;
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &whole), SL_OK, "%s", sl_errmsg());
    uint64_t n2 = whole.shards[2].nrec;
    cr_assert_geq(n2, 2);

    /* with the index: fail names file, record, "truncated record" */
    cr_assert_eq(tu_write_file(p, orig, len - 3), 0);
    cr_assert_eq(sl_source_set_open_policy(g_dir, "train", 0, 1, SL_ON_ERROR_FAIL, &s),
                 SL_ECORRUPT);
    char want[512];
    snprintf(want, sizeof want, "%s: record %llu @ ", p, (unsigned long long)(n2 - 1));
    cr_assert(strstr(sl_errmsg(), want) && strstr(sl_errmsg(), "truncated record") &&
              !strstr(sl_errmsg(), "stale"), "%s", sl_errmsg());
    /* skip: the records before the cut, one bad record named */
    cr_assert_eq(sl_source_set_open_policy(g_dir, "train", 0, 1, SL_ON_ERROR_SKIP, &s), SL_OK,
                 "%s", sl_errmsg());
    cr_assert_eq(s.shards[2].nrec, n2 - 1);
    cr_assert_eq(s.total, whole.total - 1);
    cr_assert_eq(s.bad, 1);
    cr_assert_eq(s.nbad_msgs, 1);
    cr_assert(strstr(s.bad_msgs[0], want) && strstr(s.bad_msgs[0], "truncated record"), "%s",
              s.bad_msgs[0]);
    sl_source_set_close(&s);

    /* without the index: the scan's message under fail; its prefix under skip */
    cr_assert_eq(unlink(idx), 0);
    cr_assert_eq(sl_source_set_open_policy(g_dir, "train", 0, 1, SL_ON_ERROR_FAIL, &s),
                 SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), p), "%s", sl_errmsg());
    cr_assert_eq(sl_source_set_open_policy(g_dir, "train", 0, 1, SL_ON_ERROR_SKIP, &s), SL_OK,
                 "%s", sl_errmsg());
    cr_assert_eq(s.shards[2].nrec, n2 - 1);
    cr_assert_eq(s.bad, 1);
    cr_assert(strstr(s.bad_msgs[0], p), "%s", s.bad_msgs[0]);
    sl_source_set_close(&s);

    /* a stale index (the shard grew) is an error under skip too */
    cr_assert_eq(tu_write_file(p, orig, len), 0);
    uint8_t extra[64] = {0};
    FILE *f = fopen(p, "ab");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(extra, 1, sizeof extra, f), sizeof extra);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(sl_index_write(idx, whole.shards[2].idx, n2), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_source_set_open_policy(g_dir, "train", 0, 1, SL_ON_ERROR_SKIP, &s),
                 SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "stale index"), "%s", sl_errmsg());
    cr_assert_eq(tu_write_file(p, orig, len), 0);
    sl_source_set_close(&whole);
    free(orig);
    free(idx);
    free(p);
}

/* A WebDataset shard of nsamples samples "sNN.jpg" (100 bytes, not an
 * image: the source set does not decode) + "sNN.cls", no index file, into
 * path; the data offset of each member into off[2 * i + k]. */
static void make_wds(const char *path, unsigned nsamples, uint64_t *off)
{
    size_t cap = (size_t)nsamples * 4 * SL_TAR_BLOCK + 2 * SL_TAR_BLOCK, n = 0;
    uint8_t *buf = calloc(1, cap);
    cr_assert_not_null(buf);
    for (unsigned i = 0; i < nsamples; i++)
        for (unsigned k = 0; k < 2; k++) {
            char name[32];
            snprintf(name, sizeof name, "s%02u.%s", i, k ? "cls" : "jpg");
            size_t len = k ? 1 : 100;
            cr_assert_eq(sl_tar_header(buf + n, name, len), SL_OK, "%s", sl_errmsg());
            n += SL_TAR_BLOCK;
            off[2 * i + k] = n;
            memset(buf + n, k ? '0' + (int)i % 10 : 0xA5, len);
            n += SL_TAR_BLOCK;
        }
    cr_assert_eq(tu_write_file(path, buf, n + 2 * SL_TAR_BLOCK), 0);
    free(buf);
}

/* Issue 30: a .tar whose scan meets a damaged header or a truncation keeps
 * the samples before the damage under skip, the rest one bad record naming
 * shard, member and offset; under fail the open fails naming them. */
Test(pipeline_source, wds_damaged_scan_skip)
{
    char *p = tu_join(g_dir, "train-00000-of-00001.tar"), want[512];
    uint64_t off[12];
    sl_source_set s;
    make_wds(p, 6, off);
    cr_assert_eq(sl_source_set_open_policy(p, NULL, 0, 1, SL_ON_ERROR_SKIP, &s), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(s.total, 6);
    cr_assert_eq(s.bad, 0);
    sl_source_set_close(&s);

    /* a flipped byte in the name of sample 4's first header */
    size_t len;
    uint8_t *orig = tu_read_file(p, &len), *bad = malloc(len);
    cr_assert(orig && bad);
    memcpy(bad, orig, len);
    bad[off[8] - SL_TAR_BLOCK] ^= 0x01; /* "s04.jpg" reads "r04.jpg" */
    cr_assert_eq(tu_write_file(p, bad, len), 0);
    snprintf(want, sizeof want, "%s: member 'r04.jpg' @ %llu: header checksum mismatch", p,
             (unsigned long long)(off[8] - SL_TAR_BLOCK));
    cr_assert_eq(sl_source_set_open_policy(p, NULL, 0, 1, SL_ON_ERROR_FAIL, &s), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), want), "%s", sl_errmsg());
    cr_assert_eq(sl_source_set_open_policy(p, NULL, 0, 1, SL_ON_ERROR_SKIP, &s), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(s.total, 4);
    cr_assert_eq(s.shards[0].nrec, 4);
    cr_assert_eq(s.shards[0].bytes, off[7] + SL_TAR_BLOCK); /* sample 3's end */
    cr_assert_eq(s.bad, 1);
    cr_assert_eq(s.nbad_msgs, 1);
    cr_assert(strstr(s.bad_msgs[0], want) && strstr(s.bad_msgs[0], "rest of the file"), "%s",
              s.bad_msgs[0]);
    sl_source_set_close(&s);

    /* truncated inside sample 2's .cls data: samples 0, 1 and what of 2 was read */
    cr_assert_eq(tu_write_file(p, orig, (size_t)off[5] + 100), 0);
    cr_assert_eq(sl_source_set_open_policy(p, NULL, 0, 1, SL_ON_ERROR_FAIL, &s), SL_ECORRUPT);
    snprintf(want, sizeof want, "%s: member 's02.cls' @ %llu", p,
             (unsigned long long)(off[5] - SL_TAR_BLOCK));
    cr_assert(strstr(sl_errmsg(), want) && strstr(sl_errmsg(), "run past the end"), "%s",
              sl_errmsg());
    cr_assert_eq(sl_source_set_open_policy(p, NULL, 0, 1, SL_ON_ERROR_SKIP, &s), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(s.total, 3); /* sample 2 kept with its .jpg: the decoder judges it */
    cr_assert_eq(s.bad, 1);
    cr_assert(strstr(s.bad_msgs[0], want), "%s", s.bad_msgs[0]);
    sl_source_set_close(&s);

    /* damage at the first header: nothing kept, still not an error under skip */
    memcpy(bad, orig, len);
    bad[148] ^= 0x01;
    cr_assert_eq(tu_write_file(p, bad, len), 0);
    cr_assert_eq(sl_source_set_open_policy(p, NULL, 0, 1, SL_ON_ERROR_SKIP, &s), SL_OK, "%s",
                 sl_errmsg());
    cr_assert_eq(s.total, 0);
    cr_assert_eq(s.bad, 1);
    sl_source_set_close(&s);
    free(orig);
    free(bad);
    free(p);
}

Test(pipeline_source, missing_data)
{
    sl_source_set s;
    char *nope = tu_join(g_dir, "nope");
    cr_assert_eq(sl_source_set_open(nope, "train", 0, 1, &s), SL_ENOENT);
    cr_assert(strstr(sl_errmsg(), nope), "%s", sl_errmsg());
    free(nope);
    /* An empty directory has no shards of the split. */
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_ENOENT);
    make_dataset(1);
    cr_assert_eq(sl_source_set_open(g_dir, "val", 0, 1, &s), SL_ENOENT);
    /* A shard the manifest promises is gone. */
    char *p = shard_path(3, NSH);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(sl_source_set_open(g_dir, "train", 0, 1, &s), SL_ENOENT);
    free(p);
    cr_assert_eq(sl_source_set_open(NULL, "train", 0, 1, &s), SL_EINVAL);
}
