/*
 * tests/tools/test_convert.c - `sluice convert` end to end: the real binary
 * (tu_sluice()) is run, its output read back with the records API.
 *
 *   fmnist      Fashion-MNIST test split (10,000): labels, pixels, manifest
 *   determinism same seed, different --threads -> byte-identical shards
 *   folder/list a small tree: passthrough JPEG bytes, PNG/gray -> RGB JPEG,
 *               corrupt and truncated files skipped and listed, --strict
 *   lmdb        same payloads as TFRecord, in order
 *   resume      kill -9 mid-run, --resume, compare with an uninterrupted run
 *   cli         --help, bad values, missing options
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <png.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include "records/records.h"
#include "testutil.h"

#define FM_IMAGES "t10k-images-idx3-ubyte.gz"
#define FM_LABELS "t10k-labels-idx1-ubyte.gz"
#define FM_N 10000
#define FM_PX 784

static const char *fm_classes[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                     "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

/* ------------------------------------------------------------ helpers */
typedef struct rec {
    uint8_t *data;
    size_t len;
} rec;

typedef struct recs {
    rec *r;
    size_t n;
} recs;

static void recs_push(recs *rs, const uint8_t *d, size_t len)
{
    rs->r = realloc(rs->r, (rs->n + 1) * sizeof *rs->r);
    cr_assert_not_null(rs->r);
    rs->r[rs->n].data = malloc(len ? len : 1);
    cr_assert_not_null(rs->r[rs->n].data);
    memcpy(rs->r[rs->n].data, d, len);
    rs->r[rs->n].len = len;
    rs->n++;
}

static void recs_free(recs *rs)
{
    for (size_t i = 0; i < rs->n; i++)
        free(rs->r[i].data);
    free(rs->r);
    rs->r = NULL;
    rs->n = 0;
}

static char *shard_path(const char *dir, const char *name, unsigned s, unsigned n)
{
    char buf[4096];
    cr_assert_eq(sl_shard_path(buf, sizeof buf, dir, name, s, n), SL_OK);
    return strdup(buf);
}

/* Every record of shards 0..n-1 in order; each shard's .idx must list them. */
static void read_split(const char *dir, const char *name, unsigned nshards, recs *out)
{
    for (unsigned s = 0; s < nshards; s++) {
        char *p = shard_path(dir, name, s, nshards);
        sl_tfrecord_reader *r;
        cr_assert_eq(sl_tfrecord_reader_open(p, &r), SL_OK, "%s: %s", p, sl_errmsg());
        const uint8_t *d;
        size_t len, before = out->n;
        int rc;
        while ((rc = sl_tfrecord_reader_next(r, &d, &len)) == SL_OK)
            recs_push(out, d, len);
        cr_assert_eq(rc, SL_EOF, "%s: %s", p, sl_errmsg());
        sl_tfrecord_reader_close(r);
        char idx[4200];
        snprintf(idx, sizeof idx, "%s.idx", p);
        sl_index_entry *ent;
        size_t ne;
        cr_assert_eq(sl_index_load(idx, &ent, &ne), SL_OK, "%s: %s", idx, sl_errmsg());
        cr_assert_eq(ne, out->n - before, "%s lists %zu records, shard has %zu", idx, ne, out->n - before);
        free(ent);
        free(p);
    }
}

static void read_lmdb(const char *dir, const char *name, recs *out)
{
    char p[4096];
    cr_assert_eq(sl_lmdb_path(p, sizeof p, dir, name), SL_OK);
    sl_lmdb_env *env;
    sl_lmdb_reader *r;
    cr_assert_eq(sl_lmdb_env_open(p, &env), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(sl_lmdb_reader_open(env, &r), SL_OK, "%s", sl_errmsg());
    const uint8_t *d;
    size_t len;
    int rc;
    while ((rc = sl_lmdb_reader_next(r, &d, &len)) == SL_OK)
        recs_push(out, d, len);
    cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
    sl_lmdb_reader_close(r);
    sl_lmdb_env_close(env);
}

/* Count directory entries whose name contains sub. */
static int count_files(const char *dir, const char *sub)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, sub) != NULL;
    closedir(d);
    return n;
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    uint8_t *da = tu_read_file(a, &la), *db = tu_read_file(b, &lb);
    int same = da && db && la == lb && !memcmp(da, db, la);
    free(da);
    free(db);
    return same;
}

/* IDX file (gzip) body after its header. */
static uint8_t *read_idx_gz(const char *path, size_t header, size_t body)
{
    gzFile f = gzopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    uint8_t *buf = malloc(header + body);
    cr_assert_not_null(buf);
    cr_assert_eq(gzread(f, buf, (unsigned)(header + body)), (int)(header + body), "%s", path);
    gzclose(f);
    memmove(buf, buf + header, body);
    return buf;
}

/* JPEG -> RGB pixels (malloc'd). */
static uint8_t *decode_rgb(const uint8_t *jpeg, size_t len, int *w, int *h, int *subsamp, int *cs)
{
    tjhandle tj = tjInitDecompress();
    cr_assert_not_null(tj);
    cr_assert_eq(tjDecompressHeader3(tj, jpeg, len, w, h, subsamp, cs), 0, "%s", tjGetErrorStr2(tj));
    uint8_t *px = malloc((size_t)*w * *h * 3);
    cr_assert_not_null(px);
    cr_assert_eq(tjDecompress2(tj, jpeg, len, px, *w, 0, *h, TJPF_RGB, 0), 0, "%s", tjGetErrorStr2(tj));
    tjDestroy(tj);
    return px;
}

static int str_is(const char *s, size_t len, const char *want)
{
    return s && len == strlen(want) && !memcmp(s, want, len);
}

static const char *fm_dir_or_skip(void)
{
    const char *d = tu_fmnist_dir();
    if (!d)
        cr_skip_test("Fashion-MNIST not installed (Debian package dataset-fashion-mnist)");
    return d;
}

static char *write_fm_classes(const char *dir)
{
    char *p = tu_join(dir, "classes.txt");
    char buf[256] = "";
    for (int i = 0; i < 10; i++)
        strcat(strcat(buf, fm_classes[i]), "\n");
    cr_assert_eq(tu_write_file(p, buf, strlen(buf)), 0);
    return p;
}

/* sluice convert of the Fashion-MNIST test split into out, extra options. */
static int convert_fm(const char *fm, const char *out, char **log, const char *extra)
{
    return tu_run(log, "'%s' convert --from idx --images '%s/" FM_IMAGES "' --labels '%s/" FM_LABELS
                       "' --out '%s' --name test --no-fsync %s",
                  tu_sluice(), fm, fm, out, extra);
}

/* ------------------------------------------------------------ fmnist */
Test(convert, fmnist_labels_pixels_manifest)
{
    const char *fm = fm_dir_or_skip();
    char *tmp = tu_tmpdir(), *out = tu_join(tmp, "out"), *classes = write_fm_classes(tmp), *log;
    char extra[4200];
    snprintf(extra, sizeof extra, "--threads 2 --shards 4 --shuffle-seed 7 --class-names '%s'", classes);
    int st = convert_fm(fm, out, &log, extra);
    cr_assert_eq(st, 0, "convert failed (%d):\n%s", st, log);
    cr_assert(strstr(log, "10000 inputs -> 10000 records in 4 shards"), "summary: %s", log);

    char ip[4096], lp[4096];
    snprintf(ip, sizeof ip, "%s/%s", fm, FM_IMAGES);
    snprintf(lp, sizeof lp, "%s/%s", fm, FM_LABELS);
    uint8_t *pix = read_idx_gz(ip, 16, (size_t)FM_N * FM_PX), *lab = read_idx_gz(lp, 8, FM_N);

    recs rs = {0};
    read_split(out, "test", 4, &rs);
    cr_assert_eq(rs.n, FM_N);
    uint8_t *seen = calloc(FM_N, 1);
    double abs_sum = 0;
    int max_err = 0, max_gray = 0;
    size_t in_place = 0;
    for (size_t i = 0; i < rs.n; i++) {
        sl_image_example ex;
        cr_assert_eq(sl_image_example_decode(rs.r[i].data, rs.r[i].len, &ex), SL_OK, "%s", sl_errmsg());
        unsigned idx;
        char fname[128];
        cr_assert(ex.filename_len < sizeof fname);
        memcpy(fname, ex.filename, ex.filename_len);
        fname[ex.filename_len] = '\0';
        cr_assert_eq(sscanf(fname, FM_IMAGES "[%u]", &idx), 1, "filename '%s'", fname);
        cr_assert(idx < FM_N && !seen[idx], "image %u twice or out of range", idx);
        seen[idx] = 1;
        in_place += idx == i;
        cr_assert_eq(ex.label, lab[idx], "image %u: label %lld, IDX says %d", idx, (long long)ex.label, lab[idx]);
        cr_assert(str_is(ex.text, ex.text_len, fm_classes[lab[idx]]), "image %u: class text", idx);
        cr_assert(str_is(ex.format, ex.format_len, "JPEG"));
        cr_assert_eq(ex.width, 28);
        cr_assert_eq(ex.height, 28);
        int w, h, ss, cs;
        uint8_t *rgb = decode_rgb(ex.image, ex.image_len, &w, &h, &ss, &cs);
        cr_assert(w == 28 && h == 28, "image %u is %dx%d", idx, w, h);
        cr_assert_neq(cs, TJCS_GRAY, "image %u stored as a gray JPEG", idx);
        for (int p = 0; p < FM_PX; p++) {
            const uint8_t *q = rgb + 3 * p;
            int g = abs(q[0] - q[1]) > abs(q[2] - q[1]) ? abs(q[0] - q[1]) : abs(q[2] - q[1]);
            max_gray = g > max_gray ? g : max_gray;
            int e = abs(q[1] - pix[(size_t)idx * FM_PX + p]);
            abs_sum += e;
            max_err = e > max_err ? e : max_err;
        }
        free(rgb);
    }
    double mae = abs_sum / ((double)FM_N * FM_PX);
    cr_assert(mae < 4.0, "mean abs error %.2f", mae);
    cr_assert(max_err < 96, "max abs error %d", max_err);
    cr_assert(max_gray <= 8, "R, G, B differ by up to %d in a gray image", max_gray);
    cr_assert(in_place < 50, "%zu records at their source position: not shuffled", in_place);

    sl_manifest m;
    cr_assert_eq(sl_manifest_load(out, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_split *sp = sl_manifest_split_find(&m, "test");
    cr_assert_not_null(sp);
    cr_assert_eq(sp->records, FM_N);
    cr_assert_eq(sp->shards, 4);
    cr_assert_eq(sp->skipped, 0);
    cr_assert_eq(sp->format, SL_FORMAT_TFRECORD);
    cr_assert_eq(m.num_classes, 10);
    cr_assert_not_null(m.class_names);
    cr_assert_str_eq(m.class_names[9], "Ankle boot");
    uint64_t bytes = 0;
    for (size_t i = 0; i < rs.n; i++)
        bytes += rs.r[i].len;
    cr_assert_eq(sp->bytes, bytes);
    sl_manifest_fini(&m);
    cr_assert_eq(count_files(out, ".tmp"), 0);
    cr_assert_eq(count_files(out, ".plan"), 0, "plan file left after success");

    free(seen);
    free(pix);
    free(lab);
    recs_free(&rs);
    free(log);
    tu_rmrf(tmp);
    free(out);
    free(classes);
    free(tmp);
}

Test(convert, same_seed_same_bytes_any_threads)
{
    const char *fm = fm_dir_or_skip();
    char *tmp = tu_tmpdir(), *log;
    const char *runs[3][2] = {{"a", "--threads 1 --shards 3 --shuffle-seed 11"},
                              {"b", "--threads 3 --shards 3 --shuffle-seed 11"},
                              {"c", "--threads 2 --shards 3 --shuffle-seed 12"}};
    for (int i = 0; i < 3; i++) {
        char *out = tu_join(tmp, runs[i][0]);
        int st = convert_fm(fm, out, &log, runs[i][1]);
        cr_assert_eq(st, 0, "%s", log);
        free(log);
        free(out);
    }
    int differs_c = 0;
    for (unsigned s = 0; s < 3; s++) {
        char *a = tu_join(tmp, "a"), *b = tu_join(tmp, "b"), *c = tu_join(tmp, "c");
        char *pa = shard_path(a, "test", s, 3), *pb = shard_path(b, "test", s, 3), *pc = shard_path(c, "test", s, 3);
        cr_assert(same_file(pa, pb), "shard %u differs between 1 and 3 threads", s);
        char ia[4200], ib[4200];
        snprintf(ia, sizeof ia, "%s.idx", pa);
        snprintf(ib, sizeof ib, "%s.idx", pb);
        cr_assert(same_file(ia, ib), "index %u differs between 1 and 3 threads", s);
        differs_c += !same_file(pa, pc);
        free(a), free(b), free(c), free(pa), free(pb), free(pc);
    }
    cr_assert_eq(differs_c, 3, "another seed must give other shard contents");
    tu_rmrf(tmp);
    free(tmp);
}

/* ------------------------------------------------------- folder / list */
/* w x h RGB gradient (smooth, so JPEG error stays small). */
static uint8_t *gradient(int w, int h, int seed)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    cr_assert_not_null(px);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + 3 * ((size_t)y * w + x);
            p[0] = (uint8_t)(x * 255 / w);
            p[1] = (uint8_t)(y * 255 / h);
            p[2] = (uint8_t)((x + y + seed * 40) & 255);
        }
    return px;
}

static void write_jpeg(const char *path, int w, int h, int gray, int seed, uint8_t **bytes, size_t *len)
{
    uint8_t *px = gradient(w, h, seed);
    if (gray)
        for (int i = 0; i < w * h; i++)
            px[i] = px[3 * i];
    tjhandle tj = tjInitCompress();
    unsigned char *jpeg = NULL;
    unsigned long jl = 0;
    cr_assert_eq(tjCompress2(tj, px, w, 0, h, gray ? TJPF_GRAY : TJPF_RGB, &jpeg, &jl,
                             gray ? TJSAMP_GRAY : TJSAMP_420, 90, 0), 0, "%s", tjGetErrorStr2(tj));
    cr_assert_eq(tu_write_file(path, jpeg, jl), 0);
    if (bytes) {
        *bytes = malloc(jl);
        memcpy(*bytes, jpeg, jl);
        *len = jl;
    }
    tjFree(jpeg);
    tjDestroy(tj);
    free(px);
}

static void write_png(const char *path, int w, int h)
{
    uint8_t *px = gradient(w, h, 3);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = PNG_FORMAT_RGB;
    cr_assert(png_image_write_to_file(&img, path, 0, px, 0, NULL), "%s", img.message);
    free(px);
}

/* in/cat/{a.jpg,b.png} in/dog/{bad.jpg,c.jpg,gray.jpg,trunc.jpg}. */
typedef struct tree {
    char *root, *in;
    uint8_t *a, *c;
    size_t a_len, c_len;
} tree;

static void make_tree(tree *t)
{
    char p[4096];
    t->root = tu_tmpdir();
    t->in = tu_join(t->root, "in");
    cr_assert_eq(mkdir(t->in, 0755), 0);
    snprintf(p, sizeof p, "%s/cat", t->in);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/dog", t->in);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/cat/a.jpg", t->in);
    write_jpeg(p, 64, 48, 0, 1, &t->a, &t->a_len);
    snprintf(p, sizeof p, "%s/cat/b.png", t->in);
    write_png(p, 40, 30);
    snprintf(p, sizeof p, "%s/dog/c.jpg", t->in);
    write_jpeg(p, 33, 57, 0, 2, &t->c, &t->c_len);
    snprintf(p, sizeof p, "%s/dog/gray.jpg", t->in);
    write_jpeg(p, 50, 20, 1, 0, NULL, NULL);
    uint8_t junk[600];
    uint64_t s = 5;
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)tu_rand(&s);
    snprintf(p, sizeof p, "%s/dog/bad.jpg", t->in);
    cr_assert_eq(tu_write_file(p, junk, sizeof junk), 0);
    /* A JPEG cut halfway through its scan: the header still parses (so the
     * probe calls it a passthrough JPEG), the entropy data ends early. */
    size_t sos = 2;
    while (sos + 1 < t->a_len && !(t->a[sos] == 0xFF && t->a[sos + 1] == 0xDA))
        sos++;
    cr_assert(sos + 1 < t->a_len, "no SOS marker");
    snprintf(p, sizeof p, "%s/dog/trunc.jpg", t->in);
    cr_assert_eq(tu_write_file(p, t->a, sos + (t->a_len - sos) / 2), 0);
}

static void free_tree(tree *t)
{
    tu_rmrf(t->root);
    free(t->root);
    free(t->in);
    free(t->a);
    free(t->c);
}

/* Find the record whose image/filename is fname. */
static int find_rec(const recs *rs, const char *fname, sl_image_example *ex)
{
    for (size_t i = 0; i < rs->n; i++) {
        cr_assert_eq(sl_image_example_decode(rs->r[i].data, rs->r[i].len, ex), SL_OK);
        if (str_is(ex->filename, ex->filename_len, fname))
            return 1;
    }
    return 0;
}

/* The four good images of the tree, as convert must store them. */
static void check_tree_records(const tree *t, const recs *rs, const int labels[4], int with_text)
{
    cr_assert_eq(rs->n, 4);
    sl_image_example ex;
    cr_assert(find_rec(rs, "a.jpg", &ex));
    cr_assert(ex.image_len == t->a_len && !memcmp(ex.image, t->a, t->a_len), "a.jpg not stored byte for byte");
    cr_assert_eq(ex.label, labels[0]);
    cr_assert(!with_text || str_is(ex.text, ex.text_len, "cat"));
    cr_assert(ex.width == 64 && ex.height == 48);
    cr_assert(find_rec(rs, "c.jpg", &ex));
    cr_assert(ex.image_len == t->c_len && !memcmp(ex.image, t->c, t->c_len), "c.jpg not stored byte for byte");
    cr_assert_eq(ex.label, labels[1]);
    cr_assert(!with_text || str_is(ex.text, ex.text_len, "dog"));

    int w, h, ss, cs;
    cr_assert(find_rec(rs, "b.png", &ex));
    cr_assert_eq(ex.label, labels[2]);
    cr_assert(str_is(ex.format, ex.format_len, "JPEG"));
    uint8_t *rgb = decode_rgb(ex.image, ex.image_len, &w, &h, &ss, &cs);
    cr_assert(w == 40 && h == 30 && ex.width == 40 && ex.height == 30, "b.png -> %dx%d", w, h);
    cr_assert_eq(cs, TJCS_YCbCr);
    uint8_t *want = gradient(40, 30, 3);
    double err = 0;
    for (int i = 0; i < 40 * 30 * 3; i++)
        err += abs(rgb[i] - want[i]);
    cr_assert(err / (40 * 30 * 3) < 6.0, "b.png: mean abs error %.2f", err / (40 * 30 * 3));
    free(rgb);
    free(want);

    cr_assert(find_rec(rs, "gray.jpg", &ex));
    cr_assert_eq(ex.label, labels[3]);
    rgb = decode_rgb(ex.image, ex.image_len, &w, &h, &ss, &cs);
    cr_assert(w == 50 && h == 20);
    cr_assert(cs == TJCS_YCbCr && ss != TJSAMP_GRAY, "gray.jpg stored as a 1-channel JPEG");
    free(rgb);
}

Test(convert, folder_passthrough_transcode_skip)
{
    tree t;
    make_tree(&t);
    char *out = tu_join(t.root, "out"), *log;
    int st = tu_run(&log, "'%s' convert --from folder '%s' --out '%s' --name train --shards 2 --no-fsync",
                    tu_sluice(), t.in, out);
    cr_assert_eq(st, 0, "skips must not fail the run (%d):\n%s", st, log);
    cr_assert(strstr(log, "skipped: ") && strstr(log, "dog/bad.jpg: "), "bad.jpg not listed:\n%s", log);
    cr_assert(strstr(log, "dog/trunc.jpg: "), "truncated JPEG not listed:\n%s", log);
    cr_assert(strstr(log, "6 inputs -> 4 records in 2 shards") && strstr(log, "2 skipped"), "%s", log);
    recs rs = {0};
    read_split(out, "train", 2, &rs);
    check_tree_records(&t, &rs, (int[]){0, 1, 0, 1}, 1);

    sl_manifest m;
    cr_assert_eq(sl_manifest_load(out, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_split *sp = sl_manifest_split_find(&m, "train");
    cr_assert(sp && sp->records == 4 && sp->skipped == 2 && sp->shards == 2);
    cr_assert(m.num_classes == 2 && m.class_names && !strcmp(m.class_names[1], "dog"));
    sl_manifest_fini(&m);
    recs_free(&rs);
    free(log);

    /* --strict: the first skip in output order (no shuffle: dog/bad.jpg) is fatal. */
    char *strict = tu_join(t.root, "strict");
    st = tu_run(&log, "'%s' convert --from folder '%s' --out '%s' --name train --shards 1 --no-shuffle "
                      "--strict --no-fsync", tu_sluice(), t.in, strict);
    cr_assert_eq(st, 1, "--strict with a bad input: exit %d\n%s", st, log);
    cr_assert(strstr(log, "bad.jpg"), "the error must name the input:\n%s", log);
    cr_assert_eq(count_files(strict, ".tfrecord"), 0, "no shard may appear:\n%s", log);
    free(log);
    free(strict);
    free(out);
    free_tree(&t);
}

/* A second split from a folder takes the labels of the class names the
 * first one recorded, not its own folders' sorted order: a validation
 * folder without "ant" (train's label 0) keeps "cat" at 1 and "dog" at 2,
 * where sorting its own two folders gave 0 and 1 (every label shifted, with
 * no error, and a model trained on train scored on the wrong classes). A
 * folder of a class train never had is refused, naming it, before a shard
 * is written; dataset.json keeps train's classes. */
Test(convert, second_split_labels_by_class_name)
{
    char *root = tu_tmpdir(), p[4096];
    const char *train[] = {"ant", "cat", "dog"}, *val[] = {"cat", "dog"};
    for (int c = 0; c < 3; c++) {
        snprintf(p, sizeof p, "%s/train/%s", root, train[c]);
        cr_assert_eq(tu_run(NULL, "mkdir -p '%s'", p), 0);
        snprintf(p, sizeof p, "%s/train/%s/%d.jpg", root, train[c], c);
        write_jpeg(p, 32, 24, 0, c, NULL, NULL);
    }
    for (int c = 0; c < 2; c++) {
        snprintf(p, sizeof p, "%s/val/%s", root, val[c]);
        cr_assert_eq(tu_run(NULL, "mkdir -p '%s'", p), 0);
        snprintf(p, sizeof p, "%s/val/%s/v%d.jpg", root, val[c], c);
        write_jpeg(p, 32, 24, 0, 5 + c, NULL, NULL);
    }
    char *out = tu_join(root, "out"), *log;
    int st = tu_run(&log, "'%s' convert --from folder '%s/train' --out '%s' --name train "
                    "--no-fsync", tu_sluice(), root, out);
    cr_assert_eq(st, 0, "%s", log);
    free(log);
    st = tu_run(&log, "'%s' convert --from folder '%s/val' --out '%s' --name validation "
                "--no-fsync", tu_sluice(), root, out);
    cr_assert_eq(st, 0, "%s", log);
    free(log);
    recs rs = {0};
    read_split(out, "validation", 1, &rs);
    sl_image_example ex;
    cr_assert(find_rec(&rs, "v0.jpg", &ex));
    cr_assert_eq(ex.label, 1, "cat: label %lld, train's is 1", (long long)ex.label);
    cr_assert(str_is(ex.text, ex.text_len, "cat"));
    cr_assert(find_rec(&rs, "v1.jpg", &ex));
    cr_assert_eq(ex.label, 2, "dog: label %lld, train's is 2", (long long)ex.label);
    cr_assert(str_is(ex.text, ex.text_len, "dog"));
    recs_free(&rs);

    /* a class train never had */
    snprintf(p, sizeof p, "%s/test/emu", root);
    cr_assert_eq(tu_run(NULL, "mkdir -p '%s' '%s/test/cat'", p, root), 0);
    snprintf(p, sizeof p, "%s/test/emu/e.jpg", root);
    write_jpeg(p, 32, 24, 0, 9, NULL, NULL);
    snprintf(p, sizeof p, "%s/test/cat/c.jpg", root);
    write_jpeg(p, 32, 24, 0, 8, NULL, NULL);
    st = tu_run(&log, "'%s' convert --from folder '%s/test' --out '%s' --name test --no-fsync",
                tu_sluice(), root, out);
    cr_assert_neq(st, 0, "%s", log);
    cr_assert(strstr(log, "class folder 'emu' is not one of the 3 classes") &&
                  strstr(log, "'ant', 'cat', 'dog'") && strstr(log, "(train, validation)"),
              "%s", log);
    cr_assert_eq(count_files(out, "test-"), 0, "a shard was written:\n%s", log);
    free(log);
    sl_manifest m;
    cr_assert_eq(sl_manifest_load(out, &m), SL_OK, "%s", sl_errmsg());
    cr_assert(m.num_classes == 3 && m.class_names && !strcmp(m.class_names[0], "ant"));
    cr_assert_null(sl_manifest_split_find(&m, "test"));
    sl_manifest_fini(&m);
    free(out);
    tu_rmrf(root);
    free(root);
}

/* Folders under a class folder are read at any depth (torchvision's
 * ImageFolder does; tests/python/test_convert.py compares the two), a
 * symlink back to a folder being walked is not entered again (no loop, no
 * record twice), and a link to a folder elsewhere is followed. */
Test(convert, class_folders_nested_and_linked)
{
    char *root = tu_tmpdir(), p[4096];
    snprintf(p, sizeof p, "%s/in/a/2019/raw", root);
    cr_assert_eq(tu_run(NULL, "mkdir -p '%s' '%s/in/b' '%s/elsewhere'", p, root, root), 0);
    const char *files[] = {"in/a/x.jpg", "in/a/2019/y.jpg", "in/a/2019/raw/z.jpg",
                           "in/b/w.jpg", "elsewhere/v.jpg"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", root, files[i]);
        write_jpeg(p, 24, 16, 0, i, NULL, NULL);
    }
    cr_assert_eq(tu_run(NULL, "ln -s .. '%s/in/a/2019/raw/up' && ln -s ../../elsewhere "
                        "'%s/in/b/linked'", root, root), 0);
    char *out = tu_join(root, "out"), *log;
    int st = tu_run(&log, "'%s' convert --from folder '%s/in' --out '%s' --name train "
                    "--no-fsync", tu_sluice(), root, out);
    cr_assert_eq(st, 0, "%s", log);
    cr_assert(strstr(log, "5 inputs -> 5 records"), "%s", log);
    free(log);
    recs rs = {0};
    read_split(out, "train", 1, &rs);
    sl_image_example ex;
    const char *names[] = {"x.jpg", "y.jpg", "z.jpg", "w.jpg", "v.jpg"};
    const int labels[] = {0, 0, 0, 1, 1};
    for (int i = 0; i < 5; i++) {
        cr_assert(find_rec(&rs, names[i], &ex), "%s not converted", names[i]);
        cr_assert_eq(ex.label, labels[i], "%s: label %lld", names[i], (long long)ex.label);
    }
    recs_free(&rs);
    free(out);
    tu_rmrf(root);
    free(root);
}

Test(convert, list_source)
{
    tree t;
    make_tree(&t);
    char *list = tu_join(t.in, "list.txt"), *out = tu_join(t.root, "out"), *log, text[4096];
    snprintf(text, sizeof text, "# path<TAB>label\ncat/a.jpg\t3\ndog/c.jpg\t0\n\n%s/cat/b.png\t7\n"
                                "dog/gray.jpg\t5\ndog/bad.jpg\t1\n", t.in);
    cr_assert_eq(tu_write_file(list, text, strlen(text)), 0);
    int st = tu_run(&log, "'%s' convert --from list '%s' --out '%s' --name val --shards 1 --no-fsync",
                    tu_sluice(), list, out);
    cr_assert_eq(st, 0, "%s", log);
    cr_assert(strstr(log, "skipped: ") && strstr(log, "bad.jpg"), "%s", log);
    recs rs = {0};
    read_split(out, "val", 1, &rs);
    check_tree_records(&t, &rs, (int[]){3, 0, 7, 5}, 0);
    sl_manifest m;
    cr_assert_eq(sl_manifest_load(out, &m), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(m.num_classes, 8, "labels 0..7 make 8 classes");
    sl_manifest_fini(&m);
    recs_free(&rs);
    free(log);
    free(list);
    free(out);
    free_tree(&t);
}

Test(convert, lmdb_same_payloads_as_tfrecord)
{
    tree t;
    make_tree(&t);
    char *tf = tu_join(t.root, "tf"), *lm = tu_join(t.root, "lm"), *log;
    int st = tu_run(&log, "'%s' convert --from folder '%s' --out '%s' --name train --shards 1 "
                          "--shuffle-seed 9 --label-offset 1 --no-fsync", tu_sluice(), t.in, tf);
    cr_assert_eq(st, 0, "%s", log);
    free(log);
    st = tu_run(&log, "'%s' convert --from folder '%s' --out '%s' --name train --format lmdb "
                      "--shuffle-seed 9 --label-offset 1 --no-fsync", tu_sluice(), t.in, lm);
    cr_assert_eq(st, 0, "%s", log);
    cr_assert(strstr(log, "train.lmdb"), "%s", log);
    free(log);
    recs a = {0}, b = {0};
    read_split(tf, "train", 1, &a);
    read_lmdb(lm, "train", &b);
    cr_assert_eq(a.n, b.n);
    for (size_t i = 0; i < a.n; i++)
        cr_assert(a.r[i].len == b.r[i].len && !memcmp(a.r[i].data, b.r[i].data, a.r[i].len),
                  "record %zu differs", i);
    check_tree_records(&t, &b, (int[]){1, 2, 1, 2}, 1);
    sl_manifest m;
    cr_assert_eq(sl_manifest_load(lm, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_split *sp = sl_manifest_split_find(&m, "train");
    cr_assert(sp && sp->format == SL_FORMAT_LMDB && sp->records == 4 && sp->shards == 1);
    cr_assert_eq(m.label_offset, 1);
    sl_manifest_fini(&m);
    /* An existing store is not overwritten. */
    st = tu_run(&log, "'%s' convert --from folder '%s' --out '%s' --name train --format lmdb --no-fsync",
                tu_sluice(), t.in, lm);
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "--resume"), "%s", log);
    free(log);
    recs_free(&a);
    recs_free(&b);
    free(tf);
    free(lm);
    free_tree(&t);
}

/* ------------------------------------------------------------ resume */
#define RS_SHARDS 20
#define RS_OPTS "--shards 20 --shuffle-seed 3"

static int final_shards(const char *dir)
{
    int n = 0;
    for (unsigned s = 0; s < RS_SHARDS; s++) {
        char *p = shard_path(dir, "test", s, RS_SHARDS);
        n += access(p, F_OK) == 0;
        free(p);
    }
    return n;
}

static int lmdb_state(const char *dir, int *tmp_exists)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/test.lmdb.tmp", dir);
    *tmp_exists = access(p, F_OK) == 0;
    snprintf(p, sizeof p, "%s/test.lmdb", dir);
    return access(p, F_OK) == 0;
}

/* Start a one-thread convert and kill -9 it mid-run: for TFRecord once some
 * but not all shards are final (returns how many, 0 < n < 20), for LMDB
 * while the store is still being built (returns 1). -1 when the run
 * finished before it could be caught. */
static int convert_and_kill(const char *fm, const char *out, int lmdb)
{
    char images[4096], labels[4096];
    snprintf(images, sizeof images, "%s/" FM_IMAGES, fm);
    snprintf(labels, sizeof labels, "%s/" FM_LABELS, fm);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        if (lmdb)
            execl(tu_sluice(), "sluice", "convert", "--from", "idx", "--images", images, "--labels", labels,
                  "--out", out, "--name", "test", "--format", "lmdb", "--shuffle-seed", "3", "--threads", "1",
                  "--no-fsync", (char *)NULL);
        else
            execl(tu_sluice(), "sluice", "convert", "--from", "idx", "--images", images, "--labels", labels,
                  "--out", out, "--name", "test", "--shards", "20", "--shuffle-seed", "3", "--threads", "1",
                  "--no-fsync", (char *)NULL);
        _exit(127);
    }
    int n = 0, status, tmp = 0;
    for (int i = 0; i < 200000; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return -1; /* finished or died on its own */
        if (lmdb ? (lmdb_state(out, &tmp), tmp) : (n = final_shards(out)) > 0)
            break;
        nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    if (lmdb) /* let it write a few transactions' worth first */
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    kill(pid, SIGKILL);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    if (lmdb)
        return lmdb_state(out, &tmp) ? -1 : 1;
    n = final_shards(out);
    return n > 0 && n < RS_SHARDS ? n : -1;
}

Test(convert, kill_and_resume)
{
    const char *fm = fm_dir_or_skip();
    char *tmp = tu_tmpdir(), *out = tu_join(tmp, "killed"), *ref = tu_join(tmp, "ref"), *log;
    int kept = -1;
    for (int attempt = 0; attempt < 4 && kept < 0; attempt++) {
        tu_rmrf(out);
        kept = convert_and_kill(fm, out, 0);
    }
    cr_assert(kept > 0, "could not interrupt a conversion between shards");
    cr_log_info("killed with %d of %d shards final", kept, RS_SHARDS);

    struct stat before[RS_SHARDS];
    int was_final[RS_SHARDS];
    for (unsigned s = 0; s < RS_SHARDS; s++) {
        char *p = shard_path(out, "test", s, RS_SHARDS);
        was_final[s] = stat(p, &before[s]) == 0;
        free(p);
    }

    /* Without --resume: refused, with a hint. */
    int st = convert_fm(fm, out, &log, RS_OPTS);
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "--resume") && strstr(log, "already holds"), "%s", log);
    free(log);
    /* --resume with other options: refused, naming what changed. */
    st = convert_fm(fm, out, &log, "--shards 20 --shuffle-seed 4 --resume");
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "different inputs or options") && strstr(log, "seed"), "%s", log);
    free(log);
    cr_assert_eq(final_shards(out), kept, "a refused run must not touch the shards");

    st = convert_fm(fm, out, &log, RS_OPTS " --threads 2 --resume");
    cr_assert_eq(st, 0, "%s", log);
    cr_assert(strstr(log, "10000 inputs -> 10000 records in 20 shards"), "%s", log);
    cr_assert(strstr(log, "kept from the interrupted run"), "%s", log);
    free(log);
    cr_assert_eq(count_files(out, ".tmp"), 0, "temp files left");
    cr_assert_eq(count_files(out, ".plan"), 0, "plan left");

    st = convert_fm(fm, ref, &log, RS_OPTS " --threads 2");
    cr_assert_eq(st, 0, "%s", log);
    free(log);
    for (unsigned s = 0; s < RS_SHARDS; s++) {
        char *p = shard_path(out, "test", s, RS_SHARDS), *q = shard_path(ref, "test", s, RS_SHARDS);
        cr_assert(same_file(p, q), "shard %u differs from the uninterrupted run", s);
        char pi[4200], qi[4200];
        snprintf(pi, sizeof pi, "%s.idx", p);
        snprintf(qi, sizeof qi, "%s.idx", q);
        cr_assert(same_file(pi, qi), "index %u differs from the uninterrupted run", s);
        if (was_final[s]) {
            struct stat now;
            cr_assert_eq(stat(p, &now), 0);
            cr_assert(now.st_ino == before[s].st_ino && now.st_mtim.tv_sec == before[s].st_mtim.tv_sec &&
                          now.st_mtim.tv_nsec == before[s].st_mtim.tv_nsec,
                      "kept shard %u was rewritten", s);
        }
        free(p);
        free(q);
    }
    sl_manifest m;
    cr_assert_eq(sl_manifest_load(out, &m), SL_OK, "%s", sl_errmsg());
    sl_manifest_split *sp = sl_manifest_split_find(&m, "test");
    cr_assert(sp && sp->records == FM_N && sp->shards == RS_SHARDS && sp->skipped == 0);
    sl_manifest_fini(&m);
    tu_rmrf(tmp);
    free(out);
    free(ref);
    free(tmp);
}

/* Many records, several writer threads, several LMDB transactions: same
 * payloads as TFRecord. Then a killed LMDB build is restarted by --resume
 * (a half-built store lives only in test.lmdb.tmp) and ends identical. */
Test(convert, lmdb_fmnist_kill_and_resume)
{
    const char *fm = fm_dir_or_skip();
    char *tmp = tu_tmpdir(), *tf = tu_join(tmp, "tf"), *lm = tu_join(tmp, "lm"), *killed = tu_join(tmp, "k"), *log;
    int st = convert_fm(fm, tf, &log, "--shards 1 --shuffle-seed 3 --threads 2");
    cr_assert_eq(st, 0, "%s", log);
    free(log);
    st = convert_fm(fm, lm, &log, "--format lmdb --shuffle-seed 3 --threads 3");
    cr_assert_eq(st, 0, "%s", log);
    free(log);
    recs a = {0}, b = {0};
    read_split(tf, "test", 1, &a);
    read_lmdb(lm, "test", &b);
    cr_assert_eq(a.n, FM_N);
    cr_assert_eq(b.n, FM_N);
    for (size_t i = 0; i < a.n; i++)
        cr_assert(a.r[i].len == b.r[i].len && !memcmp(a.r[i].data, b.r[i].data, a.r[i].len),
                  "record %zu differs", i);
    recs_free(&b);

    int caught = -1;
    for (int attempt = 0; attempt < 4 && caught < 0; attempt++) {
        tu_rmrf(killed);
        caught = convert_and_kill(fm, killed, 1);
    }
    cr_assert_eq(caught, 1, "could not interrupt an LMDB conversion");
    st = convert_fm(fm, killed, &log, "--format lmdb --shuffle-seed 3 --threads 2 --resume");
    cr_assert_eq(st, 0, "%s", log);
    free(log);
    cr_assert_eq(count_files(killed, ".tmp"), 0);
    read_lmdb(killed, "test", &b);
    cr_assert_eq(b.n, FM_N);
    for (size_t i = 0; i < a.n; i++)
        cr_assert(a.r[i].len == b.r[i].len && !memcmp(a.r[i].data, b.r[i].data, a.r[i].len),
                  "record %zu differs after resume", i);
    recs_free(&a);
    recs_free(&b);
    tu_rmrf(tmp);
    free(tf);
    free(lm);
    free(killed);
    free(tmp);
}

/* ------------------------------------------------------------ cli */
Test(convert, help_mentions_every_option)
{
    char *log;
    int st = tu_run(&log, "'%s' convert --help", tu_sluice());
    cr_assert_eq(st, 0, "%s", log);
    const char *opts[] = {"--from", "folder", "list", "idx", "--images", "--labels", "--out", "--name",
                          "--shards", "--format", "--threads", "--quality", "--resize-short",
                          "--shuffle-seed", "--no-shuffle", "--label-offset", "--class-names",
                          "--resume", "--strict", "--no-fsync", "--quiet", "example"};
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++)
        cr_assert(strstr(log, opts[i]), "--help does not mention %s", opts[i]);
    free(log);
}

Test(convert, bad_values_exit_2_naming_the_option)
{
    const char *cases[][2] = {
        {"--quality 101", "--quality"},     {"--quality x", "--quality"},
        {"--threads -1", "--threads"},      {"--shards many", "--shards"},
        {"--format png", "--format"},       {"--shuffle-seed -3", "--shuffle-seed"},
        {"--resize-short 1e3", "--resize-short"}, {"--label-offset z", "--label-offset"},
        {"--bogus", "--bogus"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *log;
        int st = tu_run(&log, "'%s' convert --from folder /nonexistent --out /tmp/x --name t %s", tu_sluice(),
                        cases[i][0]);
        cr_assert_eq(st, 2, "%s: exit %d\n%s", cases[i][0], st, log);
        cr_assert(strstr(log, cases[i][1]), "%s: message does not name the option:\n%s", cases[i][0], log);
        free(log);
    }
    const char *missing[][2] = {
        {"--out /tmp/x --name t", "--from"},
        {"--from folder /nonexistent --name t", "--out"},
        {"--from folder /nonexistent --out /tmp/x", "--name"},
        {"--from idx --out /tmp/x --name t", "--images"},
        {"--from folder --out /tmp/x --name t", "input"},
    };
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        char *log;
        int st = tu_run(&log, "'%s' convert %s", tu_sluice(), missing[i][0]);
        cr_assert_eq(st, 2, "%s: exit %d\n%s", missing[i][0], st, log);
        cr_assert(strstr(log, missing[i][1]), "%s: message should say %s:\n%s", missing[i][0], missing[i][1], log);
        free(log);
    }
    /* A source that does not exist is a runtime error naming it. */
    char *tmp = tu_tmpdir(), *log;
    int st = tu_run(&log, "'%s' convert --from folder /nonexistent/in --out '%s/o' --name t", tu_sluice(), tmp);
    cr_assert_eq(st, 2, "%s", log);
    cr_assert(strstr(log, "/nonexistent/in"), "%s", log);
    free(log);
    tu_rmrf(tmp);
    free(tmp);
}
