/* tests/records/test_convert_inputs.c - enumerating conversion inputs: class
 * folders, list files, IDX files (made here with zlib, and the real
 * Fashion-MNIST test set when Debian's dataset-fashion-mnist is there). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "records/records_int.h"
#include "testutil.h"

static void write_n(const char *dir, const char *name, size_t n)
{
    char *p = tu_join(dir, name);
    char *buf = calloc(1, n ? n : 1);
    cr_assert_not_null(buf);
    cr_assert_eq(tu_write_file(p, buf, n), 0, "%s", p);
    free(buf);
    free(p);
}

static char *mkdir_in(const char *dir, const char *name)
{
    char *p = tu_join(dir, name);
    cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
    return p;
}

/* sl_inputs_load of a folder or list source. */
static int load(sl_source_kind source, const char *input, sl_input_list *l)
{
    sl_convert_config cfg = SL_CONVERT_CONFIG_INIT;
    cfg.source = source;
    cfg.input = input;
    return sl_inputs_load(&cfg, l);
}

/* Input i of l is the file path with this label and size. */
static void assert_item(const sl_input_list *l, size_t i, const char *path, int64_t label,
                        uint64_t size)
{
    cr_assert_lt(i, l->n);
    cr_assert_str_eq(l->items[i].path, path, "item %zu", i);
    cr_assert_eq(l->items[i].label, label, "item %zu: label", i);
    cr_assert_eq(l->items[i].size, size, "item %zu: size", i);
}

Test(source, folder_classes_sorted_hidden_skipped)
{
    char *root = tu_tmpdir();
    /* Created out of order; labels follow strcmp order: ant, bee, cat. */
    char *cat = mkdir_in(root, "cat"), *ant = mkdir_in(root, "ant"), *bee = mkdir_in(root, "bee");
    char *git = mkdir_in(root, ".git"); /* hidden: not a class */
    write_n(git, "x.jpg", 1);
    write_n(root, "README", 10);       /* files at the top are not inputs */
    write_n(cat, "b.jpg", 20);
    write_n(cat, "a.jpg", 10);
    write_n(cat, ".DS_Store", 5);
    char *nested = mkdir_in(cat, "nested"); /* any depth, after the folder's own files */
    write_n(nested, "deep.jpg", 7);
    char *thumbs = mkdir_in(cat, ".thumbs"); /* hidden: skipped at any depth */
    write_n(thumbs, "t.jpg", 2);
    write_n(ant, "z.png", 3);
    write_n(ant, "B.png", 4); /* 'B' < 'z' in strcmp */
    /* bee stays empty: still a class */

    sl_input_list l;
    cr_assert_eq(load(SL_SOURCE_FOLDER, root, &l), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(l.nclasses, 3);
    cr_assert_str_eq(l.classes[0], "ant");
    cr_assert_str_eq(l.classes[1], "bee");
    cr_assert_str_eq(l.classes[2], "cat");
    cr_assert_eq(l.n, 5);
    const char *names[] = {"ant/B.png", "ant/z.png", "cat/a.jpg", "cat/b.jpg",
                           "cat/nested/deep.jpg"};
    const int64_t labels[] = {0, 0, 2, 2, 2};
    const uint64_t sizes[] = {4, 3, 10, 20, 7};
    for (size_t i = 0; i < 5; i++) {
        char *want = tu_join(root, names[i]);
        assert_item(&l, i, want, labels[i], sizes[i]);
        free(want);
    }
    cr_assert_null(l.idx_pixels);
    sl_inputs_free(&l);
    cr_assert_eq(l.n, 0);
    cr_assert_null(l.items);
    sl_inputs_free(NULL);
    tu_rmrf(root);
    free(root);
    free(cat);
    free(ant);
    free(bee);
    free(git);
    free(nested);
    free(thumbs);
}

Test(source, folder_without_classes_is_einval)
{
    char *root = tu_tmpdir();
    write_n(root, "a.jpg", 3);
    char *hidden = mkdir_in(root, ".hidden");
    sl_input_list l;
    cr_assert_eq(load(SL_SOURCE_FOLDER, root, &l), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "no class subfolders in"), "%s", sl_errmsg());
    cr_assert(strstr(sl_errmsg(), root), "%s", sl_errmsg());
    cr_assert_eq(l.n, 0);
    char *missing = tu_join(root, "nope");
    cr_assert_eq(load(SL_SOURCE_FOLDER, missing, &l), SL_ENOENT);
    tu_rmrf(root);
    free(root);
    free(hidden);
    free(missing);
}

Test(source, list_relative_paths_and_comments)
{
    char *root = tu_tmpdir();
    char *sub = mkdir_in(root, "sub");
    char *img = mkdir_in(sub, "img");
    write_n(img, "a.jpg", 11);
    write_n(sub, "b.png", 22);
    char *abs = tu_join(root, "abs.jpg");
    write_n(root, "abs.jpg", 33);
    char *list = tu_join(sub, "list.txt");
    char text[1024];
    snprintf(text, sizeof text,
             "# path<TAB>label\n"
             "\n"
             "img/a.jpg\t3\n"
             "   \n"
             "%s\t0\r\n"
             "b.png\t1\n"
             "missing.jpg\t2", /* no final newline; missing file: size 0 */
             abs);
    cr_assert_eq(tu_write_file(list, text, strlen(text)), 0);

    sl_input_list l;
    cr_assert_eq(load(SL_SOURCE_LIST, list, &l), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(l.n, 4);
    cr_assert_eq(l.nclasses, 4);
    cr_assert_null(l.classes);
    char *a = tu_join(sub, "img/a.jpg"), *b = tu_join(sub, "b.png"), *m = tu_join(sub, "missing.jpg");
    assert_item(&l, 0, a, 3, 11);
    assert_item(&l, 1, abs, 0, 33);
    assert_item(&l, 2, b, 1, 22);
    assert_item(&l, 3, m, 2, 0); /* missing file: size 0 */
    sl_inputs_free(&l);
    tu_rmrf(root);
    free(a);
    free(b);
    free(m);
    free(abs);
    free(list);
    free(img);
    free(sub);
    free(root);
}

Test(source, list_bad_line_names_file_and_line)
{
    char *root = tu_tmpdir();
    char *list = tu_join(root, "bad.txt");
    static const char *bad[] = {
        "a.jpg 3\n",      /* no tab */
        "a.jpg\t-1\n",    /* negative */
        "a.jpg\tx\n",     /* not a number */
        "a.jpg\t\n",      /* empty label */
        "\t4\n",          /* empty path */
        "a.jpg\t99999999999\n", /* too large */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char text[256];
        snprintf(text, sizeof text, "# header\nok.jpg\t1\n%s", bad[k]);
        cr_assert_eq(tu_write_file(list, text, strlen(text)), 0);
        sl_input_list l;
        cr_assert_eq(load(SL_SOURCE_LIST, list, &l), SL_EINVAL, "case %zu", k);
        char want[512];
        snprintf(want, sizeof want, "%s:3:", list);
        cr_assert(strstr(sl_errmsg(), want), "case %zu: %s", k, sl_errmsg());
        cr_assert_eq(l.n, 0);
        cr_assert_null(l.items);
    }
    tu_rmrf(root);
    free(list);
    free(root);
}

/* ------------------------------------------------------------------- IDX */

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Write bytes as gzip (gz = 1) or plain. */
static void write_maybe_gz(const char *path, const uint8_t *d, size_t n, int gz)
{
    if (!gz) {
        cr_assert_eq(tu_write_file(path, d, n), 0);
        return;
    }
    gzFile g = gzopen(path, "wb");
    cr_assert_not_null(g);
    cr_assert_eq(gzwrite(g, d, (unsigned)n), (int)n);
    cr_assert_eq(gzclose(g), Z_OK);
}

/* images: n of r x c with pixel (i, k) = i * 7 + k; labels (i * 3) % 10.
 * drop_tail removes bytes from the end of the image payload, extra appends. */
static void write_idx(const char *dir, uint32_t n, uint32_t r, uint32_t c, int gz,
                      size_t drop_tail, size_t extra, uint32_t nlabels)
{
    size_t px = (size_t)r * c, isz = 16 + n * px + extra;
    uint8_t *im = calloc(1, isz), *lb = calloc(1, 8 + nlabels);
    cr_assert(im && lb);
    be32(im, 0x803);
    be32(im + 4, n);
    be32(im + 8, r);
    be32(im + 12, c);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < px; k++)
            im[16 + i * px + k] = (uint8_t)(i * 7 + k);
    be32(lb, 0x801);
    be32(lb + 4, nlabels);
    for (uint32_t i = 0; i < nlabels; i++)
        lb[8 + i] = (uint8_t)((i * 3) % 10);
    char *ip = tu_join(dir, "images.idx"), *lp = tu_join(dir, "labels.idx");
    write_maybe_gz(ip, im, isz - drop_tail, gz);
    write_maybe_gz(lp, lb, 8 + nlabels, gz);
    free(ip);
    free(lp);
    free(im);
    free(lb);
}

static int load_idx(const char *dir, sl_input_list *l)
{
    char *ip = tu_join(dir, "images.idx"), *lp = tu_join(dir, "labels.idx");
    sl_convert_config cfg = SL_CONVERT_CONFIG_INIT;
    cfg.source = SL_SOURCE_IDX;
    cfg.idx_images = ip;
    cfg.idx_labels = lp;
    int rc = sl_inputs_load(&cfg, l);
    free(ip);
    free(lp);
    return rc;
}

Test(source, idx_gzip_and_plain)
{
    for (int gz = 0; gz < 2; gz++) {
        char *dir = tu_tmpdir();
        write_idx(dir, 5, 3, 4, gz, 0, 0, 5);
        sl_input_list l;
        cr_assert_eq(load_idx(dir, &l), SL_OK, "%s", sl_errmsg());
        cr_assert_eq(l.n, 5);
        cr_assert_eq(l.idx_rows, 3);
        cr_assert_eq(l.idx_cols, 4);
        cr_assert_eq(l.nclasses, 10); /* labels 0 3 6 9 2: max 9 */
        cr_assert_null(l.classes);
        for (uint32_t i = 0; i < 5; i++) {
            cr_assert_null(l.items[i].path);
            cr_assert_eq(l.items[i].idx, i);
            cr_assert_eq(l.items[i].label, (i * 3) % 10);
            cr_assert_eq(l.items[i].size, 12);
            for (int k = 0; k < 12; k++)
                cr_assert_eq(l.idx_pixels[i * 12 + k], (uint8_t)(i * 7 + k));
        }
        sl_inputs_free(&l);
        tu_rmrf(dir);
        free(dir);
    }
}

Test(source, idx_corruption_is_ecorrupt)
{
    sl_input_list l;
    for (int gz = 0; gz < 2; gz++) {
        char *dir = tu_tmpdir();
        /* Truncated by half an image: names the file and the byte count the
         * header promised (16 + 5*12 = 76). */
        write_idx(dir, 5, 3, 4, gz, 6, 0, 5);
        cr_assert_eq(load_idx(dir, &l), SL_ECORRUPT);
        cr_assert(strstr(sl_errmsg(), "images.idx"), "%s", sl_errmsg());
        cr_assert(strstr(sl_errmsg(), "76 bytes"), "%s", sl_errmsg());
        cr_assert_eq(l.n, 0);
        cr_assert_null(l.idx_pixels);
        /* Truncated inside the header. */
        write_idx(dir, 0, 3, 4, gz, 5, 0, 0);
        cr_assert_eq(load_idx(dir, &l), SL_ECORRUPT);
        cr_assert(strstr(sl_errmsg(), "header"), "%s", sl_errmsg());
        /* Bytes after the last image. */
        write_idx(dir, 5, 3, 4, gz, 0, 3, 5);
        cr_assert_eq(load_idx(dir, &l), SL_ECORRUPT);
        /* Counts differ. */
        write_idx(dir, 5, 3, 4, gz, 0, 0, 4);
        cr_assert_eq(load_idx(dir, &l), SL_ECORRUPT);
        cr_assert(strstr(sl_errmsg(), "5 images"), "%s", sl_errmsg());
        /* A header that promises 4 billion images allocates nothing silly
         * and reports truncation. */
        write_idx(dir, 5, 3, 4, gz, 0, 0, 5);
        char *ip = tu_join(dir, "images.idx");
        uint8_t raw[16 + 60];
        be32(raw, 0x803);
        be32(raw + 4, 0xFFFFFFFFu);
        be32(raw + 8, 28);
        be32(raw + 12, 28);
        memset(raw + 16, 1, 60);
        write_maybe_gz(ip, raw, sizeof raw, gz);
        char *lp = tu_join(dir, "labels.idx");
        uint8_t lab[8];
        be32(lab, 0x801);
        be32(lab + 4, 0xFFFFFFFFu);
        write_maybe_gz(lp, lab, sizeof lab, gz);
        cr_assert_eq(load_idx(dir, &l), SL_ECORRUPT);
        cr_assert(strstr(sl_errmsg(), "truncated"), "%s", sl_errmsg());
        /* Wrong magic (labels given as images). */
        write_idx(dir, 5, 3, 4, gz, 0, 0, 5);
        sl_convert_config cfg = SL_CONVERT_CONFIG_INIT;
        cfg.source = SL_SOURCE_IDX;
        cfg.idx_images = lp;
        cfg.idx_labels = lp;
        cr_assert_eq(sl_inputs_load(&cfg, &l), SL_ECORRUPT);
        cr_assert(strstr(sl_errmsg(), "magic"), "%s", sl_errmsg());
        free(ip);
        free(lp);
        tu_rmrf(dir);
        free(dir);
    }
}

Test(source, idx_truncated_gzip_stream)
{
    char *dir = tu_tmpdir();
    write_idx(dir, 200, 28, 28, 1, 0, 0, 200);
    char *ip = tu_join(dir, "images.idx");
    size_t len;
    uint8_t *gz = tu_read_file(ip, &len);
    cr_assert_not_null(gz);
    cr_assert_gt(len, 100);
    cr_assert_eq(tu_write_file(ip, gz, len / 2), 0); /* cut the compressed stream */
    sl_input_list l;
    cr_assert_eq(load_idx(dir, &l), SL_ECORRUPT);
    cr_assert(strstr(sl_errmsg(), "images.idx"), "%s", sl_errmsg());
    /* A flipped byte in the deflate data or the CRC trailer. */
    gz[len - 6] ^= 0xFF;
    cr_assert_eq(tu_write_file(ip, gz, len), 0);
    cr_assert_eq(load_idx(dir, &l), SL_ECORRUPT);
    free(gz);
    free(ip);
    tu_rmrf(dir);
    free(dir);
}

Test(source, fashion_mnist_test_set)
{
    const char *fm = tu_fmnist_dir();
    if (!fm)
        cr_skip_test("dataset-fashion-mnist not installed");
    char *ip = tu_join(fm, "t10k-images-idx3-ubyte.gz");
    char *lp = tu_join(fm, "t10k-labels-idx1-ubyte.gz");
    sl_convert_config cfg = SL_CONVERT_CONFIG_INIT;
    cfg.source = SL_SOURCE_IDX;
    cfg.idx_images = ip;
    cfg.idx_labels = lp;
    sl_input_list l;
    cr_assert_eq(sl_inputs_load(&cfg, &l), SL_OK, "%s", sl_errmsg());
    cr_assert_eq(l.n, 10000);
    cr_assert_eq(l.idx_rows, 28);
    cr_assert_eq(l.idx_cols, 28);
    cr_assert_eq(l.nclasses, 10);

    /* Compare with the raw bytes, read independently. */
    static uint8_t raw_lab[8 + 10000];
    gzFile g = gzopen(lp, "rb");
    cr_assert_not_null(g);
    cr_assert_eq(gzread(g, raw_lab, sizeof raw_lab), (int)sizeof raw_lab);
    gzclose(g);
    int hist[10] = {0};
    for (size_t i = 0; i < l.n; i++) {
        cr_assert_eq(l.items[i].label, raw_lab[8 + i], "label %zu", i);
        cr_assert_lt(l.items[i].label, 10);
        hist[l.items[i].label]++;
    }
    for (int c = 0; c < 10; c++)
        cr_assert_eq(hist[c], 1000, "class %d has %d test images", c, hist[c]);
    uint8_t *raw_img = malloc(16 + 10000 * 784);
    cr_assert_not_null(raw_img);
    g = gzopen(ip, "rb");
    cr_assert_not_null(g);
    cr_assert_eq(gzread(g, raw_img, 16 + 10000 * 784), 16 + 10000 * 784);
    gzclose(g);
    cr_assert_arr_eq(l.idx_pixels, raw_img + 16, 10000 * 784);
    free(raw_img);
    sl_inputs_free(&l);
    free(ip);
    free(lp);
}
