/*
 * tests/tools/test_wds_cli.c - WebDataset shards end to end through the
 * sluice binary (records/wds.h; issue 30).
 *
 *   digest     convert --to wds and convert (TFRecord) of the same folder
 *              with the same flags give the same `profile --digest`
 *   index      `sluice index` writes "<shard>.tar.idx" beside a tar made by
 *              Python's tarfile; profile reads it, also with --label-key
 *   bad        a sample whose .cls is not a number is a bad record named by
 *              shard and key under --on-error skip, and fails the run
 *              under --on-error fail
 *   verify     `sluice verify` / `inspect` of .tar shards: clean counts and
 *              labels; a flipped header byte, a truncation, a sample
 *              without image, a non-numeric .cls, an index that disagrees
 *              are exit 1 naming shard, sample (key) and member
 *
 * Suite "wds_cli" (not pipeline*): it runs the binary.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char *dir;

static void setup(void) { dir = tu_tmpdir(); }
static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

TestSuite(wds_cli, .init = setup, .fini = teardown);

/* DIR/in/<class>/<n>.jpg: the test photos, 3 classes of 4. */
static void make_folder(void)
{
    char *out = NULL;
    int rc = tu_run(&out,
                    "set -e; cd '%s'; for c in a b c; do mkdir -p in/$c; i=0; "
                    "for p in '%s'/tests/data/photos/*.jpg; do i=$((i+1)); cp \"$p\" in/$c/$i.jpg; "
                    "cp \"$p\" in/$c/x$i.jpg; done; done",
                    dir, SLUICE_SOURCE_DIR);
    cr_assert_eq(rc, 0, "%s", out ? out : "");
    free(out);
}

static char *digest(const char *data, const char *extra)
{
    char *out = NULL;
    int rc = tu_run(&out, "'%s' profile --data '%s/%s' --image-size 32 --batch 4 --epochs 2 "
                    "--shuffle buffer:8 --seed 5 --digest %s",
                    tu_sluice(), dir, data, extra);
    cr_assert_eq(rc, 0, "profile %s: %s", data, out);
    char *d = strstr(out, "digest: ");
    cr_assert_not_null(d, "%s", out);
    char *r = strndup(d + 8, 32);
    free(out);
    return r;
}

Test(wds_cli, digest_matches_tfrecord)
{
    make_folder();
    char *out = NULL;
    cr_assert_eq(tu_run(&out, "'%s' convert --from folder '%s/in' --out '%s/tf' --name train "
                        "--shards 3 --threads 2 --label-offset 1", tu_sluice(), dir, dir),
                 0, "%s", out);
    free(out);
    cr_assert_eq(tu_run(&out, "'%s' convert --from folder '%s/in' --out '%s/wds' --name train "
                        "--shards 3 --threads 2 --label-offset 1 --to wds", tu_sluice(), dir, dir),
                 0, "%s", out);
    free(out);
    cr_assert_eq(tu_run(&out, "ls '%s/wds'; grep -c wds '%s/wds/dataset.json'", dir, dir), 0);
    cr_assert(strstr(out, "train-00002-of-00003.tar\ntrain-00002-of-00003.tar.idx"), "%s", out);
    free(out);
    char *a = digest("tf", ""), *b = digest("wds", "");
    cr_assert_str_eq(a, b, "TFRecord and WebDataset converts give different batches");
    char *g = digest("wds", "--shuffle global --readers 2");
    char *h = digest("tf", "--shuffle global --readers 2");
    cr_assert_str_eq(g, h, "global shuffle: TFRecord and WebDataset differ");
    /* without the index files: the shards are scanned, same batches */
    cr_assert_eq(tu_run(NULL, "rm '%s'/wds/*.idx", dir), 0);
    char *c = digest("wds", "");
    cr_assert_str_eq(a, c, "a scanned tar gives other batches than its index");
    /* one .tar, a glob of them */
    cr_assert_eq(tu_run(&out, "'%s' profile --data '%s/wds/train-00001-of-00003.tar' "
                        "--image-size 32 --batch 2 --epochs 1", tu_sluice(), dir), 0, "%s", out);
    free(out);
    cr_assert_eq(tu_run(&out, "'%s' profile --data '%s/wds/train-0000[01]*.tar' "
                        "--image-size 32 --batch 2 --epochs 1", tu_sluice(), dir), 0, "%s", out);
    free(out);
    free(a), free(b), free(c), free(g), free(h);
}

Test(wds_cli, index_foreign_tar)
{
    char *out = NULL;
    cr_assert_eq(tu_run(&out,
                        "cd '%s' && mkdir d && python3 -c \"\n"
                        "import io, tarfile\n"
                        "imgs = ['%s/tests/data/photos/' + n for n in ('building.jpg', 'fruits.jpg')]\n"
                        "with tarfile.open('d/shard-000000.tar', 'w', format=tarfile.PAX_FORMAT) as t:\n"
                        "    for k in range(6):\n"
                        "        for ext, data in (('jpg', open(imgs[k %% 2], 'rb').read()),\n"
                        "                          ('cls', str(k %% 3).encode()),\n"
                        "                          ('json', ('{\\\"y\\\": %%d}' %% k).encode())):\n"
                        "            i = tarfile.TarInfo('s%%02d.%%s' %% (k, ext)); i.size = len(data)\n"
                        "            t.addfile(i, io.BytesIO(data))\n"
                        "\"",
                        dir, SLUICE_SOURCE_DIR),
                 0, "%s", out);
    free(out);
    cr_assert_eq(tu_run(&out, "'%s' index '%s/d'", tu_sluice(), dir), 0, "%s", out);
    cr_assert(strstr(out, "wrote 1 index file"), "%s", out);
    free(out);
    cr_assert_eq(tu_run(&out, "head -c 7 '%s/d/shard-000000.tar.idx'", dir), 0);
    cr_assert_str_eq(out, "v1.2 6\n");
    free(out);
    /* loose .tar files of a folder are split "*": name the file */
    char *a = digest("d/shard-000000.tar", ""), *b = digest("d/shard-000000.tar", "--label-key y");
    cr_assert_str_neq(a, b, "--label-key y gives other labels than .cls");
    free(a), free(b);
    cr_assert_neq(tu_run(&out, "'%s' profile --data '%s/d/shard-000000.tar' --image-size 32 "
                         "--batch 2 --epochs 1 "
                         "--label-key nope --on-error fail", tu_sluice(), dir), 0);
    cr_assert(strstr(out, "shard-000000.tar: record ") && strstr(out, "sample 's0") &&
                  strstr(out, "nope"),
              "%s", out);
    free(out);
}

Test(wds_cli, bad_sample_skip_and_fail)
{
    make_folder();
    char *out = NULL;
    cr_assert_eq(tu_run(&out, "'%s' convert --from folder '%s/in' --out '%s/w' --name train "
                        "--shards 1 --to wds --no-shuffle", tu_sluice(), dir, dir), 0, "%s", out);
    free(out);
    /* sample 0000000001's .cls: its one data byte becomes 'z' (header intact) */
    cr_assert_eq(tu_run(&out,
                        "cd '%s/w' && off=$(awk 'NR==3 {print $6}' train-00000-of-00001.tar.idx) && "
                        "printf z | dd of=train-00000-of-00001.tar bs=1 seek=$off conv=notrunc "
                        "2>/dev/null",
                        dir),
                 0, "%s", out);
    free(out);
    cr_assert_eq(tu_run(&out, "'%s' profile --data '%s/w' --image-size 32 --batch 2 --epochs 1",
                        tu_sluice(), dir), 0, "%s", out);
    cr_assert(strstr(out, "bad records: 1"), "%s", out);
    cr_assert(strstr(out, "train-00000-of-00001.tar") && strstr(out, "sample '0000000001'"),
              "names shard and key: %s", out);
    free(out);
    cr_assert_neq(tu_run(&out, "'%s' profile --data '%s/w' --image-size 32 --batch 2 --epochs 1 "
                         "--on-error fail", tu_sluice(), dir), 0);
    cr_assert(strstr(out, "sample '0000000001'"), "%s", out);
    free(out);
}

/* DIR/w: 18 samples in 2 .tar shards (9 each, labels 0..2) with indexes. */
static void make_wds_dataset(void)
{
    char *out = NULL;
    make_folder();
    cr_assert_eq(tu_run(&out, "'%s' convert --from folder '%s/in' --out '%s/w' --name train "
                        "--shards 2 --to wds --no-shuffle", tu_sluice(), dir, dir), 0, "%s", out);
    free(out);
}

/* Run a shell command (a printf format run in DIR) and return its output;
 * assert its exit status is want. */
static char *sh(int want, const char *fmt, const char *arg)
{
    char *out = NULL, cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, arg);
    int rc = tu_run(&out, "cd '%s' && S='%s' && %s", dir, tu_sluice(), cmd);
    cr_assert_eq(rc, want, "%s: exit %d, want %d:\n%s", cmd, rc, want, out ? out : "");
    return out;
}

static void has(const char *out, const char *what)
{
    cr_assert(strstr(out, what), "expected \"%s\" in:\n%s", what, out);
}

#define SHARD0 "train-00000-of-00002.tar"

Test(wds_cli, verify_inspect_clean)
{
    make_wds_dataset();
    char *out = sh(0, "\"$S\" verify w%s", "");
    has(out, "ok: 18 records in 2 files");
    free(out);
    out = sh(0, "\"$S\" inspect --json w | python3 -c \"import json, sys; d = json.load(sys.stdin); "
             "t = d['splits']['train']; print(d['records'], d['shards'], sorted(d['labels'].items()), "
             "t['format'], d['formats'], d['warnings'], d['width']['min'] > 0)\"%s", "");
    has(out, "18 2 [('0', 6), ('1', 6), ('2', 6)] wds {'jpeg': 18} [] True");
    free(out);
    /* one shard, and the shards without their index files */
    out = sh(0, "\"$S\" verify w/" SHARD0 "%s", "");
    has(out, "ok: 9 records in 1 file");
    free(out);
    out = sh(0, "rm w/*.idx && \"$S\" verify w%s", "");
    has(out, "ok: 18 records in 2 files");
    has(out, "2 shards have no index file");
    free(out);
}

/* Copy w to w2, run the damage script (in w2) and return verify --all's
 * output (exit 1). */
static char *verify_damaged(const char *damage)
{
    char *out = sh(0, "rm -rf w2 && cp -r w w2 && cd w2 && %s", damage);
    free(out);
    return sh(1, "\"$S\" verify --all w2%s", "");
}

Test(wds_cli, verify_flipped_member_header)
{
    make_wds_dataset();
    /* a byte of the name of sample 1's .cls header (its data offset - 512: the index) */
    char *out = verify_damaged("h=$(awk 'NR==3 {print $6 - 512}' " SHARD0 ".idx) && "
                               "printf Q | dd of=" SHARD0 " bs=1 seek=$((h + 20)) conv=notrunc "
                               "2>/dev/null && echo $h > ../hdr");
    char *h = sh(0, "cat hdr%s", ""), want[256];
    h[strcspn(h, "\n")] = 0;
    snprintf(want, sizeof want, "member '0000000001.cls' @ %s: header checksum mismatch", h);
    has(out, "w2/" SHARD0 ": sample 1 '0000000001' @ ");
    has(out, want);
    /* reported once; the walk goes on with the next shard */
    has(out, "1 problem in 10 records in 2 files");
    free(out);
    out = sh(2, "\"$S\" inspect w2%s", "");
    has(out, want);
    free(out);
    free(h);
}

Test(wds_cli, verify_truncated_tar)
{
    make_wds_dataset();
    /* cut inside sample 2's .jpg data; without the index the scan finds it */
    char *out = verify_damaged("j=$(awk 'NR==4 {print $2}' " SHARD0 ".idx) && "
                               "truncate -s $((j + 1000)) " SHARD0 " && rm " SHARD0 ".idx");
    has(out, "w2/" SHARD0 ": sample 2 @ ");
    has(out, "member '0000000002.jpg' @ ");
    has(out, "run past the end");
    free(out);
    /* with the index: the index no longer fits the tar, named */
    out = verify_damaged("truncate -s 200000 " SHARD0);
    has(out, SHARD0 ".idx: bad index file");
    has(out, "runs past the end of the tar");
    free(out);
}

Test(wds_cli, verify_sample_without_image_and_bad_cls)
{
    char *out = NULL;
    cr_assert_eq(tu_run(&out,
                        "cd '%s' && mkdir d && python3 -c \"\n"
                        "import io, tarfile\n"
                        "img = open('%s/tests/data/photos/building.jpg', 'rb').read()\n"
                        "with tarfile.open('d/shard-000000.tar', 'w', format=tarfile.GNU_FORMAT) as t:\n"
                        "    for k, members in enumerate(((('jpg', img), ('cls', b'0')),\n"
                        "                                 (('cls', b'1'), ('json', b'{}')),\n"
                        "                                 (('jpg', img), ('cls', b'one')))):\n"
                        "        for ext, data in members:\n"
                        "            i = tarfile.TarInfo('s%%02d.%%s' %% (k, ext)); i.size = len(data)\n"
                        "            t.addfile(i, io.BytesIO(data))\n"
                        "\"",
                        dir, SLUICE_SOURCE_DIR),
                 0, "%s", out);
    free(out);
    out = sh(1, "\"$S\" verify --all d/shard-000000.tar%s", "");
    has(out, "d/shard-000000.tar: sample 1 's01' @ ");
    has(out, "no image member");
    has(out, "d/shard-000000.tar: sample 2 's02' @ ");
    has(out, "s02.cls: \"one\" is not an integer label");
    has(out, "2 problems in 3 records in 1 file");
    free(out);
    out = sh(1, "\"$S\" verify d/shard-000000.tar%s", ""); /* the first problem only */
    cr_assert_null(strstr(out, "s02"), "%s", out);
    free(out);
    out = sh(2, "\"$S\" inspect d/shard-000000.tar%s", "");
    has(out, "sample 1 's01' @ ");
    free(out);
}

Test(wds_cli, verify_index_disagrees)
{
    make_wds_dataset();
    /* the index says sample 0's .cls has 2 bytes */
    char *out = verify_damaged("awk 'NR==2 {$7 = 2} {print}' " SHARD0 ".idx > i && "
                               "mv i " SHARD0 ".idx");
    has(out, "w2/" SHARD0 ": sample 0 '0000000000' @ 0: index file ");
    has(out, "says member '0000000000.cls' @ ");
    has(out, " size 2, the tar has '0000000000.cls' @ ");
    cr_assert(strstr(out, " size 1\n"), "%s", out);
    has(out, "1 problem in 18 records");
    free(out);
}

/* ------------------------------------------------------------ issue 39 */

/* Run cmd (sh's format with one "%s" for arg) in DIR, want its exit
 * status, and each of the NULL-ended strings after it in its output. */
static void sh_has(int want, const char *cmd, const char *arg, ...)
{
    char *out = sh(want, cmd, arg);
    va_list ap;
    va_start(ap, arg);
    for (const char *w; (w = va_arg(ap, const char *));)
        has(out, w);
    va_end(ap);
    free(out);
}

/* DIR/SUB/NAME: a tar written by Python's tarfile, k samples of KEY.jpg (or
 * KEY.png for the sample `png`, -1: none), KEY.cls (k % 3) and KEY.json
 * ({"y": k}). */
static void py_tar(const char *sub, const char *name, int k, int png)
{
    char *out = NULL;
    int rc = tu_run(&out,
                    "cd '%s' && mkdir -p '%s' && python3 -c \"\n"
                    "import io, tarfile, zlib, struct\n"
                    "def png(w, h):\n"
                    "    raw = b''.join(b'\\\\0' + bytes(3 * w) for y in range(h))\n"
                    "    c = lambda t, d: struct.pack('>I', len(d)) + t + d + "
                    "struct.pack('>I', zlib.crc32(t + d))\n"
                    "    return (b'\\\\x89PNG\\\\r\\\\n\\\\x1a\\\\n' + c(b'IHDR', struct.pack('>IIBBBBB', "
                    "w, h, 8, 2, 0, 0, 0)) + c(b'IDAT', zlib.compress(raw)) + c(b'IEND', b''))\n"
                    "imgs = ['%s/tests/data/photos/' + n for n in ('building.jpg', 'fruits.jpg')]\n"
                    "with tarfile.open('%s/%s', 'w', format=tarfile.PAX_FORMAT) as t:\n"
                    "    for k in range(%d):\n"
                    "        img = ('png', png(16, 16)) if k == %d else ('jpg', open(imgs[k %% 2], 'rb').read())\n"
                    "        for ext, data in (img, ('cls', str(k %% 3).encode()),\n"
                    "                          ('json', ('{\\\"y\\\": %%d}' %% k).encode())):\n"
                    "            i = tarfile.TarInfo('s%%02d.%%s' %% (k, ext)); i.size = len(data)\n"
                    "            t.addfile(i, io.BytesIO(data))\n"
                    "\"",
                    dir, sub, SLUICE_SOURCE_DIR, sub, name, k, png);
    cr_assert_eq(rc, 0, "%s", out ? out : "");
    free(out);
}

/* A folder of WebDataset tars named as WebDataset users name them, no
 * dataset.json: read without --split (it said "no split 'train' (the
 * folder has: *)"). A name pattern gives the split; a folder whose tars
 * form one set is that set; a folder of validation tars is not taken for
 * the training set. */
Test(wds_cli, folder_of_tars_needs_no_split)
{
    py_tar("t", "train-000000.tar", 4, -1);
    py_tar("t", "train-000001.tar", 4, -1);
    py_tar("s", "shard-000000.tar", 4, -1);
    py_tar("s", "shard-000001.tar", 4, -1);
    py_tar("v", "validation-000000.tar", 4, -1);
    const char *run = "\"$S\" profile --data %s --image-size 32 --batch 2 --epochs 1 --warmup 0";
    sh_has(0, run, "t", "(split train): 8 records", NULL);
    sh_has(0, run, "s", "(split train): 8 records", NULL);
    sh_has(2, run, "v", "no split 'train'", "validation", NULL);
    sh_has(0, "\"$S\" inspect %s", "t", "train [wds]: 8 records in 2 shards", NULL);
}

/* .tar.gz shards (read as TFRecord before: CRC errors, and profile ended
 * 0 after 0 records) are refused by name, whatever reads them; a gzip
 * stream named .tar too. */
Test(wds_cli, compressed_tars_refused_by_name)
{
    py_tar("d", "train-000000.tar", 3, -1);
    sh_has(0, "mkdir z && gzip -c d/train-000000.tar > z/train-000000.tar.gz && "
           "mkdir y && cp z/train-000000.tar.gz y/train-000000.tar%s", "", NULL);
    const char *cmds[] = {"\"$S\" inspect z/train-000000.tar.gz", "\"$S\" inspect z",
                          "\"$S\" verify z", "\"$S\" index z",
                          "\"$S\" profile --data z --image-size 32 --batches 1",
                          "\"$S\" profile --data z/train-000000.tar.gz --image-size 32 --batches 1"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        sh_has(2, "%s", cmds[i], "train-000000.tar.gz", "gzip-compressed", NULL);
    sh_has(2, "\"$S\" profile --data %s --image-size 32 --batches 1", "y",
           "y/train-000000.tar: a gzip-compressed tar", NULL);
    sh_has(2, "\"$S\" inspect %s", "y", "gzip-compressed tar", NULL);
}

/* inspect and verify take --label-key (the error suggested it). */
Test(wds_cli, inspect_verify_label_key)
{
    static const char labels[] = "\"$S\" inspect --json d %s | python3 -c \"import json, sys; "
                                 "print(sorted(json.load(sys.stdin)['labels'].items()))\"";
    py_tar("d", "shard-000000.tar", 6, -1);
    sh_has(0, labels, "--label-key y",
           "[('0', 1), ('1', 1), ('2', 1), ('3', 1), ('4', 1), ('5', 1)]", NULL);
    sh_has(0, labels, "", "[('0', 2), ('1', 2), ('2', 2)]", NULL);
    sh_has(0, "\"$S\" verify d %s", "--label-key=y", "ok: 6 records", NULL);
    sh_has(1, "\"$S\" verify d %s", "--label-key nope", "\"nope\" is not an integer", NULL);
    sh_has(0, "\"$S\" %s --help", "inspect", "--label-key NAME", NULL);
    sh_has(0, "\"$S\" %s --help", "verify", "--label-key NAME", NULL);
}

/* DALI's wds2idx writes X.idx beside X.tar by default: read when there is
 * no X.tar.idx (it was ignored: "no index file"), and named when damaged. */
Test(wds_cli, dali_index_name_read)
{
    py_tar("d", "shard-000000.tar", 6, -1);
    for (int verify = 0; verify < 2; verify++) {
        char *out = sh(0, verify ? "\"$S\" verify d%s"
                                 : "\"$S\" index d && mv d/shard-000000.tar.idx "
                                   "d/shard-000000.idx && \"$S\" inspect d%s", "");
        cr_assert_null(strstr(out, "no index file"), "X.idx not found: %s", out);
        free(out);
    }
    sh_has(1, "awk 'NR==2 {$3 = 2} {print}' d/shard-000000.idx > i && mv i d/shard-000000.idx "
           "&& \"$S\" verify d%s", "", "shard-000000.idx", NULL);
}

/* An index that declares a 3 GiB sample (over a sparse tar that holds one)
 * is refused, naming it, before anything of that size is allocated; the
 * scan of the tar without it too. */
Test(wds_cli, index_sample_size_capped)
{
    sh_has(0, "mkdir d && python3 -c \"\n"
           "import tarfile\n"
           "i = tarfile.TarInfo('a.jpg'); i.size = 3 << 30\n"
           "h = i.tobuf(format=tarfile.GNU_FORMAT)\n"
           "with open('d/big-000000.tar', 'wb') as f:\n"
           "    f.write(h); f.truncate(len(h) + (3 << 30) + 1024)\n"
           "open('d/big-000000.tar.idx', 'w').write('v1.2 1\\\\njpg %%d %%d a.jpg\\\\n' %% "
           "(len(h), 3 << 30))\n"
           "\"%s", "", NULL);
    const char *run = "\"$S\" profile --data d --image-size 32 --batches 1 %s";
    sh_has(2, run, "", "big-000000.tar.idx", "256 MiB", NULL);
    sh_has(0, "rm %s", "d/big-000000.tar.idx", NULL);
    sh_has(2, run, "--on-error fail", "big-000000.tar: member 'a.jpg' @ 512", "256 MiB", NULL);
    sh_has(1, "\"$S\" verify %s", "d", "256 MiB", NULL); /* the scan: a problem of the shard */
}

/* A PNG member reaches the JPEG decoder: the bad record says what it is
 * ("not a JPEG file (no SOI marker)" said nothing of why). */
Test(wds_cli, png_member_says_why)
{
    py_tar("d", "shard-000000.tar", 6, 2);
    sh_has(0, "\"$S\" profile --data %s --image-size 32 --batch 2 --epochs 1 --warmup 0",
           "d/shard-000000.tar", "bad records: 1", "shard-000000.tar: record 2 @ ", "a PNG image",
           "decodes JPEG only", NULL);
}
