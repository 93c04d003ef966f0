/*
 * tests/fuzz/seeds.c - write the seed corpora of the fuzz targets:
 *
 *   fuzz_seeds OUTDIR      ->  OUTDIR/<target>/<seed>  (tools/dev fuzz)
 *
 * Each seed is made the way the tests make their inputs: by sluice's own
 * writers (TFRecord shards and their index, Examples, LMDB entries,
 * dataset.json, safetensors checkpoints of a small model with their JSON
 * sidecar, TensorBoard event files, pipeline resume states) and from the
 * tests' photos (tests/data/photos, shrunk to a few dozen pixels so an
 * execution stays short), plus small PNG / BMP / PPM / PGM images and, with
 * libwebp, WebP files from its own encoder (lossy, lossless, alpha, an
 * animation libwebpmux assembles, which the transcoder refuses). Nothing
 * here is checked in: the seeds follow the formats as the code changes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <png.h>
#include <zlib.h>

#include "pipeline/pipeline.h"
#include "records/records.h"
#include "records/wds.h"
#include "train/train.h"
#include "util.h"
#include "webp_images.h"

static const char *out_dir;
static unsigned nseeds;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_seeds: %s: %s\n", what, sl_errmsg());
    exit(1);
}

/* A failed system call: errno's reason (sl_errmsg has none). */
static void die_errno(const char *what)
{
    fprintf(stderr, "fuzz_seeds: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void seed(const char *target, const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out_dir, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die_errno(path);
    snprintf(path, sizeof path, "%s/%s/%s", out_dir, target, name);
    fz_write(path, data, len);
    nseeds++;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die_errno(path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n)
        die(path);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* Seed a file of the scratch directory under the target. */
static void seed_file(const char *target, const char *name, const char *path)
{
    size_t n;
    uint8_t *p = slurp(path, &n);
    seed(target, name, p, n);
    free(p);
}

/* --------------------------------------------------------------- images */
typedef struct img {
    const char *name;
    uint8_t *p;
    size_t n;
} img;
static img imgs[24];
static int nimgs;

static void add_img(const char *name, uint8_t *p, size_t n)
{
    imgs[nimgs++] = (img){name, p, n};
}

static void make_png(const char *name, int w, int h, uint32_t format)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = format;
    size_t stride = PNG_IMAGE_ROW_STRIDE(im), bytes = PNG_IMAGE_BUFFER_SIZE(im, stride);
    uint8_t *px = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        px[i] = (uint8_t)(i * 37 + i / 5);
    png_alloc_size_t n = 0;
    if (!png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL))
        die("png size");
    uint8_t *out = malloc(n);
    if (!png_image_write_to_memory(&im, out, &n, 0, px, 0, NULL))
        die("png write");
    free(px);
    add_img(name, out, n);
}

static void put_le(uint8_t *p, uint32_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void make_bmp(const char *name, int w, int h, int bpp, int top_down)
{
    size_t row = ((size_t)w * (bpp / 8) + 3) & ~(size_t)3;
    size_t pal = bpp == 8 ? 256 * 4 : 0, off = 14 + 40 + pal, n = off + row * h;
    uint8_t *p = calloc(1, n);
    p[0] = 'B';
    p[1] = 'M';
    put_le(p + 2, (uint32_t)n, 4);
    put_le(p + 10, (uint32_t)off, 4);
    put_le(p + 14, 40, 4);
    put_le(p + 18, (uint32_t)w, 4);
    put_le(p + 22, (uint32_t)(top_down ? -h : h), 4);
    put_le(p + 26, 1, 2);
    put_le(p + 28, (uint32_t)bpp, 2);
    if (bpp == 8)
        put_le(p + 46, 256, 4);
    for (size_t i = 54; i < n; i++)
        p[i] = (uint8_t)(i * 11);
    add_img(name, p, n);
}

static void make_pnm(const char *name, int ch, int w, int h, unsigned maxval)
{
    char hdr[64];
    int hl = snprintf(hdr, sizeof hdr, "P%d\n# sluice\n%d %d\n%u\n", ch == 1 ? 5 : 6, w, h,
                      maxval);
    size_t bps = maxval > 255 ? 2 : 1, n = (size_t)hl + (size_t)w * h * ch * bps;
    uint8_t *p = malloc(n);
    memcpy(p, hdr, (size_t)hl);
    for (size_t i = (size_t)hl; i < n; i++)
        p[i] = (uint8_t)(i * 5 % (maxval < 255 ? maxval + 1 : 256));
    add_img(name, p, n);
}

#if SLUICE_WITH_WEBP
/* A w x h WebP of a pattern (tests/webp_images.h): lossy at quality q, or
 * lossless when q < 0; with alpha when ch == 4. */
static void make_webp(const char *name, int w, int h, int ch, int q)
{
    uint8_t *px = malloc((size_t)w * h * ch);
    size_t n = 0;
    for (size_t i = 0; i < (size_t)w * h * ch; i++)
        px[i] = (uint8_t)(i * 29 + i / 7);
    uint8_t *c = wi_webp(px, w, h, ch, q, &n);
    if (!c)
        die(name);
    free(px);
    add_img(name, c, n);
}
#endif

static void make_images(sl_transcoder *t)
{
    static const char *const photos[] = {"building.jpg", "fruits.jpg", "messi5.jpg"};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/data/photos/%s", SLUICE_SOURCE_DIR, photos[i]);
        size_t n;
        uint8_t *p = slurp(path, &n);
        const uint8_t *j;
        size_t jl;
        int w, h;
        if (sl_transcode_jpeg(t, p, n, 80, 24 + 8 * i, &j, &jl, &w, &h) != SL_OK)
            die(path);
        uint8_t *c = malloc(jl);
        memcpy(c, j, jl);
        add_img(photos[i], c, jl);
        free(p);
    }
    uint8_t *j;
    size_t jl;
    fz_jpeg(17, 9, 1, &j, &jl);
    add_img("gradient.jpg", j, jl);
    make_png("rgb.png", 9, 7, PNG_FORMAT_RGB);
    make_png("rgba.png", 5, 6, PNG_FORMAT_RGBA);
    make_png("gray16.png", 6, 5, PNG_FORMAT_LINEAR_Y);
    make_bmp("bgr24.bmp", 7, 5, 24, 0);
    make_bmp("bgrx32-topdown.bmp", 4, 3, 32, 1);
    make_bmp("pal8.bmp", 6, 4, 8, 0);
    make_pnm("rgb.ppm", 3, 5, 4, 255);
    make_pnm("gray.pgm", 1, 6, 3, 255);
    make_pnm("rgb16.ppm", 3, 3, 2, 1000);
#if SLUICE_WITH_WEBP
    make_webp("lossy.webp", 11, 7, 3, 70);
    make_webp("lossless.webp", 6, 5, 3, -1);
    make_webp("alpha-lossless.webp", 5, 6, 4, -1);
    make_webp("alpha-lossy.webp", 7, 4, 4, 60);
    size_t an = 0;
    uint8_t *anim = wi_webp_anim(4, 4, 2, &an);
    if (!anim)
        die("animated.webp");
    add_img("animated.webp", anim, an);
#endif
}

/* ------------------------------------------------------------ records */
static void records_seeds(const char *tmp)
{
    char path[1024];
    /* Examples: each image as sluice writes it, and one with every kind of
     * list (packed int64 and float, several bytes values). */
    uint8_t *ex[16];
    size_t exn[16];
    for (int i = 0; i < nimgs; i++) {
        if (memcmp(imgs[i].p, "\xff\xd8", 2) != 0)
            continue;
        fz_example(imgs[i].p, imgs[i].n, i, &ex[i], &exn[i]);
        char name[64];
        snprintf(name, sizeof name, "%s.example", imgs[i].name);
        seed("fuzz_example", name, ex[i], exn[i]);
        for (unsigned k = 0; k < 256; k += 37) { /* a few configurations of fuzz_roi */
            uint8_t *r = malloc(exn[i] + 1);
            r[0] = (uint8_t)(k + (unsigned)i);
            memcpy(r + 1, ex[i], exn[i]);
            snprintf(name, sizeof name, "%s.%u.roi", imgs[i].name, k);
            seed("fuzz_roi", name, r, exn[i] + 1);
            free(r);
        }
    }
    sl_example_builder b;
    sl_example_builder_init(&b);
    int64_t iv[] = {0, -1, 1ll << 40, 7};
    float fv[] = {0.5f, -2.0f, 1e30f};
    const void *bv[] = {"a", "", "xyz"};
    size_t bl[] = {1, 0, 3};
    const uint8_t *d = NULL;
    size_t dn = 0;
    if (sl_example_add_int64(&b, "image/class/label", iv, 4) ||
        sl_example_add_float(&b, "f", fv, 3) || sl_example_add_bytes_list(&b, "b", bv, bl, 3) ||
        sl_example_add_bytes(&b, "image/encoded", "\xff\xd8\xff\xd9", 4) ||
        sl_example_finish(&b, &d, &dn))
        die("example");
    seed("fuzz_example", "lists.example", d, dn);
    seed("fuzz_example", "empty.example", "", 0);
    sl_example_builder_fini(&b);

    /* A shard of the JPEG Examples, its DALI index, and an empty shard. */
    snprintf(path, sizeof path, "%s/s.tfrecord", tmp);
    sl_tfrecord_writer *w;
    if (sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w))
        die("shard");
    for (int i = 0, k = 0; i < nimgs && k < 3; i++)
        if (memcmp(imgs[i].p, "\xff\xd8", 2) == 0 && exn[i] < 4096) {
            if (sl_tfrecord_writer_write(w, ex[i], exn[i]))
                die("shard");
            k++;
        }
    if (sl_tfrecord_writer_write(w, "", 0) || sl_tfrecord_writer_close(w))
        die("shard");
    seed_file("fuzz_tfrecord", "three.tfrecord", path);
    seed("fuzz_tfrecord", "empty.tfrecord", "", 0);
    char idx[1100];
    snprintf(idx, sizeof idx, "%s.idx", path);
    seed_file("fuzz_dali_idx", "three.idx", idx);
    seed("fuzz_dali_idx", "one.idx", "0 20\n", 5);
    seed("fuzz_dali_idx", "tabs-nonl.idx", "0\t16\n16\t32", 11);

    /* WebDataset: a shard of two samples from our writer (fuzz_tar), its
     * index and DALI's v1.1 form (fuzz_wds_index). */
    {
        char tar[1100], tidx[1110];
        snprintf(tar, sizeof tar, "%s/train-00000-of-00001.tar", tmp);
        snprintf(tidx, sizeof tidx, "%s.idx", tar);
        sl_wds_writer *ww;
        sl_example_builder wb;
        sl_example_builder_init(&wb);
        if (sl_wds_writer_open(tar, SL_TFW_NOSYNC, &ww))
            die("wds shard");
        for (int i = 0; i < 2; i++) {
            static const uint8_t jpg[] = {0xff, 0xd8, 0xff, 0xd9};
            sl_image_example ex = {.image = jpg, .image_len = sizeof jpg, .label = i,
                                   .filename = "a.jpg", .filename_len = 5};
            const uint8_t *rec;
            size_t len;
            char key[8] = {'k', (char)('0' + i), 0};
            if (sl_image_example_encode(&ex, &wb) || sl_example_finish(&wb, &rec, &len) ||
                sl_wds_writer_write_example(ww, key, rec, len))
                die("wds sample");
        }
        sl_example_builder_fini(&wb);
        if (sl_wds_writer_close(ww))
            die("wds close");
        seed_file("fuzz_tar", "two.tar", tar);
        seed_file("fuzz_wds_index", "two.idx", tidx);
        seed("fuzz_wds_index", "v11.idx", "v1.1 2\njpg 512 100 cls 1536 1\njpg 2560 3\n", 41);
    }

    /* LMDB entries ([u8 klen][key][u16 vlen][value]): records 0..2, then a
     * store with a gap. */
    uint8_t lm[16384];
    size_t ln = 0;
    for (int i = 0, k = 0; i < nimgs && k < 3; i++) {
        if (memcmp(imgs[i].p, "\xff\xd8", 2) != 0 || exn[i] > 4000)
            continue;
        lm[ln++] = SL_LMDB_KEY_DIGITS;
        ln += (size_t)sprintf((char *)lm + ln, "%010d", k++);
        lm[ln++] = (uint8_t)exn[i];
        lm[ln++] = (uint8_t)(exn[i] >> 8);
        memcpy(lm + ln, ex[i], exn[i]);
        ln += exn[i];
    }
    seed("fuzz_lmdb", "three", lm, ln);
    static const char gap[] = "\x0a" "0000000000" "\x01\x00" "x" "\x0a" "0000000002" "\x01\x00" "y";
    seed("fuzz_lmdb", "gap", gap, sizeof gap - 1);
    for (int i = 0; i < nimgs; i++)
        if (memcmp(imgs[i].p, "\xff\xd8", 2) == 0)
            free(ex[i]);

    /* dataset.json as the converter writes it. */
    sl_manifest m;
    sl_manifest_init(&m);
    const char *const names[] = {"cat", "dog", "bird \"quoted\""};
    if (sl_manifest_set_classes(&m, names, 3))
        die("manifest");
    m.label_offset = 1;
    sl_manifest_split tr = {.name = "train", .format = SL_FORMAT_TFRECORD, .records = 10,
                            .shards = 2, .bytes = 1234, .skipped = 1,
                            .source = "folder /data/img"};
    sl_manifest_split te = {.name = "test", .format = SL_FORMAT_TFRECORD, .records = 3,
                            .shards = 1, .bytes = 99, .source = "idx t10k"};
    sl_manifest_split lmdb = {.name = "val", .format = SL_FORMAT_LMDB, .records = 3, .shards = 1,
                              .bytes = 99, .source = "list l.txt"};
    snprintf(m.created_by, sizeof m.created_by, "sluice fuzz");
    if (sl_manifest_split_put(&m, &tr) || sl_manifest_split_put(&m, &te) || sl_manifest_save(tmp, &m))
        die("manifest");
    snprintf(path, sizeof path, "%s/%s", tmp, SL_MANIFEST_FILE);
    seed_file("fuzz_manifest", "two-splits.json", path);
    if (sl_manifest_split_put(&m, &lmdb) || sl_manifest_save(tmp, &m))
        die("manifest");
    seed_file("fuzz_manifest", "with-lmdb.json", path);
    sl_manifest_fini(&m);

    /* IDX: 3 images of 4 x 5 and their labels, plain and gzip. */
    uint8_t im[16 + 60], lb[8 + 3];
    memcpy(im, "\x00\x00\x08\x03\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05", 16);
    for (int i = 0; i < 60; i++)
        im[16 + i] = (uint8_t)(i * 4);
    memcpy(lb, "\x00\x00\x08\x01\x00\x00\x00\x03\x02\x00\x09", 11);
    uint8_t both[4 + sizeof im + sizeof lb];
    put_le(both, sizeof im, 4);
    memcpy(both + 4, im, sizeof im);
    memcpy(both + 4 + sizeof im, lb, sizeof lb);
    seed("fuzz_idx_mnist", "plain", both, sizeof both);
    uLongf zi = compressBound(sizeof im) + 32, zl = compressBound(sizeof lb) + 32;
    uint8_t gz[1024];
    /* gzip framing through zlib's gzwrite into the scratch folder */
    snprintf(path, sizeof path, "%s/i.gz", tmp);
    gzFile g = gzopen(path, "wb");
    gzwrite(g, im, sizeof im);
    gzclose(g);
    size_t gin;
    uint8_t *gi = slurp(path, &gin);
    g = gzopen(path, "wb");
    gzwrite(g, lb, sizeof lb);
    gzclose(g);
    size_t gln;
    uint8_t *gl = slurp(path, &gln);
    (void)zi;
    (void)zl;
    put_le(gz, (uint32_t)gin, 4);
    memcpy(gz + 4, gi, gin);
    memcpy(gz + 4 + gin, gl, gln);
    seed("fuzz_idx_mnist", "gzip", gz, 4 + gin + gln);
    free(gi);
    free(gl);
}

/* -------------------------------------------------------------- train */
static void train_seeds(const char *tmp)
{
    char prefix[1024], path[1100];
    sl_model_config mc = SL_MODEL_CONFIG_INIT;
    mc.arch = SL_ARCH_RESNET20;
    mc.classes = 10;
    mc.width = 4;
    sl_model *model;
    if (sl_model_create(&mc, 1, 8, 8, &model))
        die("model");
    snprintf(prefix, sizeof prefix, "%s/ckpt-000000012", tmp);
    if (sl_checkpoint_save(prefix, model, NULL, 8,
                           "{\"step\":12,\"epoch\":0,\"pipeline\":{\"v\":1,\"seed\":\"7\"},"
                           "\"rng\":\"0123456789abcdef\",\"lr\":[0.1,1e-3]}"))
        die("checkpoint");
    snprintf(path, sizeof path, "%s.json", prefix);
    seed_file("fuzz_ckpt_json", "ckpt.json", path);
    /* The state as the trainer writes it (io/resume.c state_json), which its
     * resume reads (sl_resume_info_read): one replica, two, and an old one
     * with step and pipeline only. */
    static const char *const trainer_states[][2] = {
        {"trainer.json",
         "{\"step\":12,\"epoch\":1,\"steps_per_epoch\":12,\"total_steps\":24,"
         "\"schedule\":\"cosine\",\"peak_lr\":0.025,\"warmup_steps\":6,\"batch\":8,"
         "\"world\":1,\"strategy\":\"single\",\"rank_split\":\"files\","
         "\"model\":\"resnet20\",\"pipeline\":\"{\\\"v\\\":1,\\\"seed\\\":\\\"11\\\"}\"}"},
        {"trainer-world2.json",
         "{\"step\":10,\"epoch\":0,\"steps_per_epoch\":12,\"total_steps\":20,"
         "\"schedule\":\"cosine\",\"peak_lr\":0.025,\"warmup_steps\":6,\"batch\":8,"
         "\"world\":2,\"strategy\":\"mirrored\",\"rank_split\":\"records\","
         "\"model\":\"resnet20\",\"pipeline\":\"{}\"}"},
        {"trainer-old.json", "{\"step\":3,\"pipeline\":\"{}\"}"},
    };
    for (size_t k = 0; k < sizeof trainer_states / sizeof *trainer_states; k++) {
        snprintf(prefix, sizeof prefix, "%s/trainer-%zu", tmp, k);
        if (sl_checkpoint_save(prefix, model, NULL, 8, trainer_states[k][1]))
            die("checkpoint");
        snprintf(path, sizeof path, "%s.json", prefix);
        seed_file("fuzz_ckpt_json", trainer_states[k][0], path);
    }
    sl_model_destroy(model);
    snprintf(path, sizeof path, "%s/ckpt-000000012.safetensors", tmp);
    seed_file("fuzz_safetensors", "resnet20-w4.safetensors", path);
    static const char odd[] = "{\"state\" : {\"a\":\"}\\\"{\"} , \"format\":1, \"weights\":\"w\"}";
    seed("fuzz_ckpt_json", "reordered.json", odd, sizeof odd - 1);

    float f[6] = {1, 2, 3, 4, 5, 6};
    int64_t l[2] = {-1, 1ll << 50};
    sl_st_tensor t[3] = {{.name = "w", .dtype = SL_T_F32, .ndim = 2, .shape = {2, 3}, .data = f},
                         {.name = "n", .dtype = SL_T_I64, .ndim = 1, .shape = {2}, .data = l},
                         {.name = "s", .dtype = SL_T_F32, .ndim = 0, .data = f}};
    const char *const meta[] = {"format", "pt", "sluice.arch", "resnet20"};
    snprintf(path, sizeof path, "%s/small.safetensors", tmp);
    if (sl_safetensors_write(path, t, 3, meta, 2))
        die("safetensors");
    seed_file("fuzz_safetensors", "small.safetensors", path);

    char logdir[1100];
    snprintf(logdir, sizeof logdir, "%s/logs", tmp);
    sl_summary *s;
    if (sl_summary_open(logdir, &s))
        die("summary");
    const char *const tags[] = {"loss", "lr", "acc/top1"};
    const double v1[] = {2.5, 0.1, 0.25}, v2[] = {1.5, 0.05, 0.5};
    if (sl_summary_scalars(s, 1, tags, v1, 3, NULL) || sl_summary_scalars(s, 100, tags, v2, 3, NULL))
        die("summary");
    snprintf(path, sizeof path, "%s", sl_summary_path(s));
    if (sl_summary_close(s))
        die("summary");
    seed_file("fuzz_events", "two-steps.tfevents", path);
    size_t n;
    uint8_t *p = slurp(path, &n);
    seed("fuzz_events", "cut.tfevents", p, n - 7); /* a record still being written */
    free(p);
}

/* --------------------------------------------------------- pipeline */
static void state_seeds(const char *tmp)
{
    char path[1024];
    fz_state_dataset(tmp, path, sizeof path);
    sl_pipeline_config cfg;
    fz_state_config(&cfg, path);
    sl_pipeline *p;
    if (sl_pipeline_create(&cfg, &p))
        die("pipeline");
    for (int k = 0;; k++) {
        char st[4096], name[32];
        size_t len;
        if (sl_pipeline_state_save(p, st, sizeof st, &len))
            die("state");
        snprintf(name, sizeof name, "after-%d.json", k);
        seed("fuzz_resume_state", name, st, len);
        sl_batch *b;
        int rc = sl_pipeline_next(p, &b);
        if (rc == SL_EOF)
            break;
        if (rc)
            die("pipeline");
        sl_pipeline_release(p, b);
    }
    sl_pipeline_destroy(p);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds OUTDIR\n");
        return 2;
    }
    out_dir = argv[1];
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        die_errno(out_dir);
    sl_transcoder *t;
    if (sl_transcoder_create(&t))
        die("transcoder");
    make_images(t);
    sl_transcoder_destroy(t);
    for (int i = 0; i < nimgs; i++) {
        seed("fuzz_jpeg_probe", imgs[i].name, imgs[i].p, imgs[i].n);
        seed("fuzz_transcode", imgs[i].name, imgs[i].p, imgs[i].n);
        size_t nl = strlen(imgs[i].name);
        if (nl > 4 && strcmp(imgs[i].name + nl - 4, ".jpg") == 0)
            for (unsigned k = 0; k < 256; k += 85) { /* fuzz_huff: a crop byte, the JPEG */
                uint8_t *s = malloc(imgs[i].n + 1);
                if (!s)
                    die("out of memory");
                s[0] = (uint8_t)k;
                memcpy(s + 1, imgs[i].p, imgs[i].n);
                char name[96];
                snprintf(name, sizeof name, "%s.%u", imgs[i].name, k);
                seed("fuzz_huff", name, s, imgs[i].n + 1);
                free(s);
            }
    }
    /* fuzz_seek: the JPEGs with restart markers at several intervals
     * (records/restart.c), a crop byte first */
    sl_jpeg_restarter *rs;
    if (sl_jpeg_restarter_create(&rs))
        die("restarter");
    static const unsigned ivs[][2] = {{1, 0}, {3, 0}, {SL_RESTART_AUTO, 0}, {0, 1}};
    for (int i = 0; i < nimgs; i++) {
        size_t nl = strlen(imgs[i].name);
        if (nl <= 4 || strcmp(imgs[i].name + nl - 4, ".jpg") != 0)
            continue;
        for (unsigned v = 0; v < 4; v++) {
            const uint8_t *o;
            size_t ol;
            sl_restart_info info;
            if (sl_jpeg_restart(rs, imgs[i].p, imgs[i].n, ivs[v][0], ivs[v][1], &o, &ol, &info) ||
                !info.rewritten)
                die("sl_jpeg_restart");
            uint8_t *s = malloc(ol + 1);
            if (!s)
                die("out of memory");
            s[0] = (uint8_t)(v * 85 | (v == 3 ? 128 : 0));
            memcpy(s + 1, o, ol);
            char name[96];
            snprintf(name, sizeof name, "%s.rst%u", imgs[i].name, v);
            seed("fuzz_seek", name, s, ol + 1);
            free(s);
        }
    }
    sl_jpeg_restarter_destroy(rs);
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", fz_dir());
    records_seeds(tmp);
    train_seeds(tmp);
    fz_clean(tmp);
    state_seeds(tmp);
    for (int i = 0; i < nimgs; i++)
        free(imgs[i].p);
    printf("fuzz_seeds: %u seeds in %s\n", nseeds, out_dir);
    return 0;
}
