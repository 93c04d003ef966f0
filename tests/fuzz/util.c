/* tests/fuzz/util.c - see util.h. */
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fz_root[256];

static void rm_tree(const char *path, int keep_top)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_tree(sub, 0);
        }
        closedir(d);
        if (!keep_top)
            rmdir(path);
    } else if (!keep_top) {
        unlink(path);
    }
}

static void fz_cleanup(void)
{
    if (fz_root[0])
        rm_tree(fz_root, 0);
}

const char *fz_dir(void)
{
    if (!fz_root[0]) {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(fz_root, sizeof fz_root, "%s/sluice-fuzz-XXXXXX", base);
        if (!mkdtemp(fz_root)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fz_cleanup);
    }
    return fz_root;
}

const char *fz_path(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", fz_dir(), name);
    return buf;
}

void fz_write(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const uint8_t *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

void fz_clean(const char *dir)
{
    rm_tree(dir, 1);
}

void fz_split(const uint8_t *data, size_t n, const uint8_t **a, size_t *a_len,
              const uint8_t **b, size_t *b_len)
{
    if (n < 4) {
        *a = *b = data;
        *a_len = *b_len = 0;
        return;
    }
    size_t k = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 |
               (size_t)data[3] << 24;
    if (k > n - 4)
        k = n - 4;
    *a = data + 4;
    *a_len = k;
    *b = data + 4 + k;
    *b_len = n - 4 - k;
}

/* ------------------------------------------------ shared with seeds.c */
#include "pipeline/image/image.h" /* sl_crop, sl_plane_view, sl_rrc_geometry */
#include "records/records.h"

void fz_jpeg(int w, int h, unsigned seed, uint8_t **out, size_t *len)
{
    sl_transcoder *t = NULL;
    uint8_t *px = malloc((size_t)w * h * 3);
    if (!px || sl_transcoder_create(&t) != SL_OK)
        abort();
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w * 3; x++)
            px[(size_t)y * w * 3 + x] = (uint8_t)(x * 7 + y * 13 + seed * 31 + (x % 3) * 80);
    const uint8_t *j;
    size_t jl;
    if (sl_encode_jpeg_rgb(t, px, w, h, w * 3, 3, 90, &j, &jl) != SL_OK)
        abort();
    *out = malloc(jl);
    if (!*out)
        abort();
    memcpy(*out, j, jl);
    *len = jl;
    sl_transcoder_destroy(t);
    free(px);
}

void fz_example(const uint8_t *jpeg, size_t len, int64_t label, uint8_t **out, size_t *out_len)
{
    sl_example_builder b;
    sl_example_builder_init(&b);
    sl_image_example ex = {.image = jpeg, .image_len = len, .label = label, .height = 0,
                           .width = 0, .format = "JPEG", .format_len = 4,
                           .filename = "x.jpg", .filename_len = 5};
    const uint8_t *d;
    size_t n;
    if (sl_image_example_encode(&ex, &b) != SL_OK || sl_example_finish(&b, &d, &n) != SL_OK)
        abort();
    *out = malloc(n);
    if (!*out)
        abort();
    memcpy(*out, d, n);
    *out_len = n;
    sl_example_builder_fini(&b);
}

void fz_state_dataset(const char *dir, char *path, size_t cap)
{
    snprintf(path, cap, "%s/train-00000-of-00001.tfrecord", dir);
    sl_tfrecord_writer *w = NULL;
    if (sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w) != SL_OK)
        abort();
    for (int i = 0; i < FZ_STATE_RECORDS; i++) {
        uint8_t *j, *e;
        size_t jl, el;
        fz_jpeg(12 + i, 10 + 2 * i, (unsigned)i, &j, &jl);
        fz_example(j, jl, i % 3, &e, &el);
        if (sl_tfrecord_writer_write(w, e, el) != SL_OK)
            abort();
        free(j);
        free(e);
    }
    if (sl_tfrecord_writer_close(w) != SL_OK)
        abort();
}

void fz_state_config(sl_pipeline_config *cfg, const char *path)
{
    sl_pipeline_config c = SL_PIPELINE_CONFIG_INIT;
    c.data = path;
    c.split = "train";
    c.readers = 1;
    c.workers = 1;
    c.prefetch = 3;
    c.batch = 3;
    c.epochs = 2;
    c.shuffle_buffer = 4;
    c.height = 8;
    c.width = 8;
    c.seed = 7;
    c.label_offset = 0;
    *cfg = c;
}

/* ------------------------------- the planar decode targets (huff, seek) */
void fz_crop(unsigned k, int W, int H, sl_crop *c, int *ow, int *oh)
{
    *c = (sl_crop){0, 0, W, H};
    if (!(k & 128)) {
        sl_rng rng = sl_rng_for(k, 0, 0);
        sl_rrc_geometry(&rng, W, H, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, c);
    }
    *ow = 224;
    *oh = 224;
    if (k & 1) {
        *ow = c->w / 10 + 1;
        *oh = c->h / 10 + 1;
    }
}

int fz_same_planes(const sl_plane_view *a, int na, const sl_plane_view *b, int nb)
{
    if (na != nb)
        return 0;
    for (int p = 0; p < na; p++) {
        if (a[p].w != b[p].w || a[p].h != b[p].h)
            return 0;
        for (int y = 0; y < a[p].h; y++)
            if (memcmp(a[p].p + (size_t)y * a[p].pitch, b[p].p + (size_t)y * b[p].pitch,
                       (size_t)a[p].w) != 0)
                return 0;
    }
    return 1;
}
