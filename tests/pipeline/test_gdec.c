/* tests/pipeline/test_gdec.c - `--decode gpu` (pipeline/image/gdec_cuda.cu): the
 * same samples, labels, epochs and order as the CPU path from the same
 * seed, pixels within a bound of it (the GPU crop-resize of nvJPEG's
 * full-size RGB against the CPU's planar path), the CPU fallback per image
 * (progressive JPEGs under the hardware backend: byte-identical to the CPU
 * path; so are baseline JPEGs without DHT, whose standard Huffman tables
 * nvJPEG is not known to supply: issue 26) and per failed batch (every
 * sample byte-identical), the hybrid
 * backend, thread-count independence, and the refusals (no device batch,
 * no libnvjpeg, no CUDA) and auto's fallback to the CPU.
 *
 * The GPU cases need a CUDA device and libnvjpeg: on this project's
 * machines, the CUDA emulator and its fake libnvjpeg (tests/cuda-emu/run.sh
 * sets SLUICE_NVJPEG; lane pipeline_gdec of `run.sh ci`); on a GPU machine
 * the real library. Elsewhere they skip.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "hostile_images.h"
#include "pipeline/pipeline.h"
#include "records/records.h"
#include "testutil.h"

#if SLUICE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define GD_N 48
#define GD_SIDE 40

static int gpu_count(void)
{
#if SLUICE_WITH_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

/* Record i: a JPEG of 64..200 px a side, a strong horizontal gradient (a
 * mirrored or shifted crop shows) and a vertical one, mild noise; every
 * 5th progressive, every 7th grayscale, a few baseline ones without DHT
 * (the standard tables). Label i % 10. The progressive and DHT-less ones
 * are decoded on the CPU. */
static int is_progressive(uint64_t i) { return i % 5 == 2; }
static int is_bare(uint64_t i) { return i % 11 == 6 && !is_progressive(i); }
static int on_cpu(uint64_t i) { return is_progressive(i) || is_bare(i); }

/* Records whose id % junk_mod == 4 (junk_mod 0: none) hold no JPEG:
 * bad records found before staging (test eval_leaves_bad_records_out). */
static int junk_mod;
static int is_junk(uint64_t i) { return junk_mod && i % (uint64_t)junk_mod == 4; }

/* Record `cut` (-1: none) keeps its headers and 16 bytes of entropy data. */
static char *make_data_cut(int64_t cut)
{
    char *dir = tu_tmpdir();
    char path[600];
    cr_assert_eq(sl_shard_path(path, sizeof path, dir, "train", 0, 1), SL_OK);
    sl_tfrecord_writer *w;
    cr_assert_eq(sl_tfrecord_writer_open(path, SL_TFW_INDEX | SL_TFW_NOSYNC, &w), SL_OK, "%s",
                 sl_errmsg());
    sl_example_builder b;
    sl_example_builder_init(&b);
    uint64_t rng = 99;
    for (uint64_t i = 0; i < GD_N; i++) {
        int W = 64 + (int)(tu_rand(&rng) % 137), H = 64 + (int)(tu_rand(&rng) % 137);
        int gray = i % 7 == 3, ch = gray ? 1 : 3;
        unsigned char *px = malloc((size_t)W * H * ch);
        cr_assert_not_null(px);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < ch; c++)
                    px[((size_t)y * W + x) * ch + c] =
                        (unsigned char)(20 + x * 180 / W * (c != 2) + y * 50 / H +
                                        (int)(i * 7 % 20) + (int)(tu_rand(&rng) % 6));
        unsigned char *jpeg = NULL;
        unsigned long len = 0;
        int flags = is_progressive(i) ? TJFLAG_PROGRESSIVE : 0;
        /* A handle per image: TurboJPEG 2.1.5 (Debian 12) writes corrupt
         * entropy data (bad Huffman codes past the first rows) for baseline
         * images compressed on a handle that made a progressive one. */
        tjhandle tj = tjInitCompress();
        cr_assert_not_null(tj);
        cr_assert_eq(tjCompress2(tj, px, W, 0, H, gray ? TJPF_GRAY : TJPF_RGB, &jpeg, &len,
                                 gray ? TJSAMP_GRAY : TJSAMP_420, 92, flags),
                     0, "%s", tjGetErrorStr2(tj));
        free(px);
        tjDestroy(tj);
        sl_image_example ex = {.image = jpeg, .image_len = len, .label = (int64_t)(i % 10),
                               .format = "JPEG", .format_len = 4};
        size_t blen = 0;
        uint8_t *bare = is_bare(i) ? hi_strip(jpeg, len, 0xC4, &blen) : NULL;
        if (bare) {
            ex.image = bare;
            ex.image_len = blen;
        }
        static const char junk[] = "not an image at all";
        if (is_junk(i)) {
            ex.image = (const uint8_t *)junk;
            ex.image_len = sizeof junk;
        }
        if ((int64_t)i == cut) {
            size_t sos = 0;
            while (sos + 4 < len && !(jpeg[sos] == 0xFF && jpeg[sos + 1] == 0xDA))
                sos++;
            cr_assert(sos + 4 < len);
            ex.image_len = sos + 2 + ((size_t)jpeg[sos + 2] << 8 | jpeg[sos + 3]) + 16;
        }
        const uint8_t *rec;
        size_t rlen;
        cr_assert_eq(sl_image_example_encode(&ex, &b), SL_OK);
        cr_assert_eq(sl_example_finish(&b, &rec, &rlen), SL_OK);
        cr_assert_eq(sl_tfrecord_writer_write(w, rec, rlen), SL_OK);
        tjFree(jpeg);
        free(bare);
    }
    cr_assert_eq(sl_tfrecord_writer_close(w), SL_OK, "%s", sl_errmsg());
    sl_example_builder_fini(&b);
    return dir;
}

static char *make_data(void)
{
    return make_data_cut(-1);
}

static sl_pipeline_config config(const char *dir, sl_layout layout, int device,
                                 sl_decode_mode decode)
{
    sl_pipeline_config c = SL_PIPELINE_CONFIG_INIT;
    c.data = dir;
    c.batch = 8;
    c.height = c.width = GD_SIDE;
    c.readers = 1;
    c.workers = 2;
    c.shuffle_buffer = 16;
    c.seed = 7;
    c.epochs = 2;
    c.layout = layout;
    c.device = device;
    c.decode = decode;
    c.label_offset = 0;
    return c;
}

/* A whole run: every sample's id, label, epoch and bytes (from d_data when
 * the pipeline has a device, else data). */
typedef struct run {
    size_t ns, sample_bytes;
    uint64_t ids[2 * GD_N];
    int32_t labels[2 * GD_N], epochs[2 * GD_N];
    uint8_t *data;
    char decoder[256];
} run;

static void collect_n(const sl_pipeline_config *c, run *r, size_t want)
{
    memset(r, 0, sizeof *r);
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(c, &p), SL_OK, "%s", sl_errmsg());
    r->sample_bytes = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        cr_assert(r->ns + b->n <= 2 * GD_N);
        if (!r->data) {
            r->sample_bytes = b->sample_bytes;
            r->data = malloc(2 * GD_N * b->sample_bytes);
            cr_assert_not_null(r->data);
        }
        uint8_t *dst = r->data + r->ns * r->sample_bytes;
        if (c->device >= 0) {
#if SLUICE_WITH_CUDA
            cr_assert_not_null(b->d_data);
            cr_assert_eq(cudaEventSynchronize((cudaEvent_t)b->ready_event), cudaSuccess);
            cr_assert_eq(cudaMemcpy(dst, b->d_data, b->n * b->sample_bytes,
                                    cudaMemcpyDeviceToHost),
                         cudaSuccess);
#endif
        } else {
            memcpy(dst, b->data, b->n * b->sample_bytes);
        }
        for (unsigned i = 0; i < b->n; i++) {
            r->ids[r->ns + i] = b->record_ids[i];
            r->labels[r->ns + i] = b->labels[i];
            r->epochs[r->ns + i] = b->epochs[i];
        }
        r->ns += b->n;
        sl_pipeline_release(p, b);
    }
    cr_assert_eq(rc, SL_EOF, "%s", sl_errmsg());
    sl_pipeline_decoder(p, r->decoder, sizeof r->decoder);
    sl_pipeline_destroy(p);
    cr_assert_eq(r->ns, want);
}

static void collect(const sl_pipeline_config *c, run *r)
{
    collect_n(c, r, 2 * GD_N);
}

/* The same samples in the same order: ids, labels, epochs. */
static void same_stream(const run *a, const run *b)
{
    cr_assert_eq(a->ns, b->ns);
    for (size_t s = 0; s < a->ns; s++) {
        cr_assert_eq(a->ids[s], b->ids[s], "sample %zu: id %llu vs %llu", s,
                     (unsigned long long)a->ids[s], (unsigned long long)b->ids[s]);
        cr_assert_eq(a->labels[s], b->labels[s]);
        cr_assert_eq(a->epochs[s], b->epochs[s]);
    }
}

/* Per sample: mean and max absolute difference in levels (u8 layout),
 * and the max away from the output's 1-pixel border (*inner). */
static void diff_u8(const run *a, const run *b, size_t s, double *mean, int *max, int *inner)
{
    const uint8_t *x = a->data + s * a->sample_bytes, *y = b->data + s * b->sample_bytes;
    double sum = 0;
    *max = *inner = 0;
    for (size_t i = 0; i < a->sample_bytes; i++) {
        int d = abs((int)x[i] - (int)y[i]);
        size_t row = i / 3 / GD_SIDE, col = i / 3 % GD_SIDE;
        sum += d;
        if (d > *max)
            *max = d;
        if (row > 0 && col > 0 && row + 1 < GD_SIDE && col + 1 < GD_SIDE && d > *inner)
            *inner = d;
    }
    *mean = sum / (double)a->sample_bytes;
}

static int have_gpu_decode(const char *dir)
{
    if (gpu_count() < 1)
        return 0;
    sl_pipeline_config c = config(dir, SL_LAYOUT_NHWC_U8, 0, SL_DECODE_GPU);
    sl_pipeline *p;
    int rc = sl_pipeline_create(&c, &p);
    sl_pipeline_destroy(p);
    return rc == SL_OK;
}

#define NEED_GPU_DECODE(dir)                                                                       \
    do {                                                                                           \
        if (!have_gpu_decode(dir)) {                                                               \
            tu_rmrf(dir);                                                                          \
            free(dir);                                                                             \
            cr_skip_test("no CUDA device or no libnvjpeg (tests/cuda-emu/run.sh sets "             \
                         "SLUICE_NVJPEG to its fake)");                                            \
        }                                                                                          \
    } while (0)

/* The hardware backend: order, labels and crops as the CPU path's;
 * progressive JPEGs take the CPU path (byte-identical), the others are
 * within a few levels. */
Test(pipeline_gdec, matches_cpu_order_and_pixels)
{
    char *dir = make_data();
    NEED_GPU_DECODE(dir);
    sl_pipeline_config cc = config(dir, SL_LAYOUT_NHWC_U8, -1, SL_DECODE_CPU);
    sl_pipeline_config gc = config(dir, SL_LAYOUT_NHWC_U8, 0, SL_DECODE_GPU);
    static run cpu, gpu;
    collect(&cc, &cpu);
    collect(&gc, &gpu);
    same_stream(&cpu, &gpu);
    cr_assert_str_eq(cpu.decoder, "cpu");
    cr_assert(strstr(gpu.decoder, "hardware backend"), "%s", gpu.decoder);
    size_t prog = 0, other = 0;
    double worst_mean = 0, sum_mean = 0;
    int worst_max = 0, worst_inner = 0;
    for (size_t s = 0; s < cpu.ns; s++) {
        double mean;
        int max, inner;
        diff_u8(&cpu, &gpu, s, &mean, &max, &inner);
        if (on_cpu(cpu.ids[s])) {
            cr_assert_eq(max, 0, "sample %zu (id %llu, %s): the CPU fallback differs from the "
                         "CPU path by up to %d", s, (unsigned long long)cpu.ids[s],
                         is_bare(cpu.ids[s]) ? "no DHT" : "progressive", max);
            prog++;
            continue;
        }
        other++;
        sum_mean += mean;
        if (mean > worst_mean)
            worst_mean = mean;
        if (max > worst_max)
            worst_max = max;
        if (inner > worst_inner)
            worst_inner = inner;
    }
    /* Measured on the emulator (libjpeg-turbo's full decode + this
     * kernel against the planar CPU path, 40x40 outputs): mean 0.28 levels,
     * worst sample 0.39, worst pixel 36 on the output's border (the edge
     * of a small upscaled crop: the CPU resizes 4:2:0 chroma at its own
     * resolution, clamped at the crop's window; nvJPEG upsamples it first)
     * and 7 inside it. A mirrored crop, or one shifted by a pixel, gives
     * several levels on average. */
    cr_assert(sum_mean / (double)other < 1.0, "mean difference %.2f levels", sum_mean / other);
    cr_assert(worst_mean < 1.5, "a sample differs by %.2f levels on average", worst_mean);
    cr_assert(worst_inner <= 16, "a pixel off the border differs by %d levels", worst_inner);
    cr_assert(worst_max <= 64, "a pixel differs by %d levels", worst_max);
    cr_assert(prog > 0 && other > 0);
    char want[64];
    snprintf(want, sizeof want, "%zu images on the GPU, %zu on the CPU", other, prog);
    cr_assert(strstr(gpu.decoder, want), "want '%s' in '%s'", want, gpu.decoder);
    cr_log_info("gpu vs cpu: mean %.3f, worst sample %.3f, worst pixel %d (%d off the border) "
                "levels; %s", sum_mean / (double)other, worst_mean, worst_max, worst_inner,
                gpu.decoder);
    free(cpu.data);
    free(gpu.data);
    tu_rmrf(dir);
    free(dir);
}

/* The eval transform leaves a bad record out (pipeline/map.c closes the
 * hole up before the GPU decode): the staged entries move with their
 * samples, so the device batch holds the CPU path's samples, in its
 * order, with none left out twice or decoded stale. */
Test(pipeline_gdec, eval_leaves_bad_records_out)
{
    junk_mod = 9; /* ids 4, 13, 22, 31, 40: in 5 of the 6 batches of 8 */
    char *dir = make_data();
    junk_mod = 0;
    NEED_GPU_DECODE(dir);
    sl_pipeline_config cc = config(dir, SL_LAYOUT_NHWC_U8, -1, SL_DECODE_CPU);
    sl_pipeline_config gc = config(dir, SL_LAYOUT_NHWC_U8, 0, SL_DECODE_GPU);
    cc.transform = gc.transform = SL_TRANSFORM_EVAL;
    cc.shuffle = gc.shuffle = SL_SHUFFLE_NONE;
    cc.epochs = gc.epochs = 1;
    static run cpu, gpu;
    collect_n(&cc, &cpu, GD_N - 5);
    collect_n(&gc, &gpu, GD_N - 5);
    same_stream(&cpu, &gpu);
    for (size_t s = 0; s < cpu.ns; s++) {
        cr_assert(!is_junk(cpu.ids[s]) && (s == 0 || cpu.ids[s] > cpu.ids[s - 1]),
                  "sample %zu: id %llu", s, (unsigned long long)cpu.ids[s]);
        double mean;
        int max, inner;
        diff_u8(&cpu, &gpu, s, &mean, &max, &inner);
        /* the bounds of matches_cpu_order_and_pixels (a stale or shifted
         * sample is tens of levels off on average) */
        cr_assert(on_cpu(cpu.ids[s]) ? max == 0 : mean < 1.5 && inner <= 16,
                  "sample %zu (id %llu): mean %.2f, max %d, inner %d levels", s,
                  (unsigned long long)cpu.ids[s], mean, max, inner);
    }
    free(cpu.data);
    free(gpu.data);
    tu_rmrf(dir);
    free(dir);
}

/* f32 layouts: the kernel's normalization and NCHW / NHWC writes agree
 * with the CPU path (within the same bound, in units of std). */
Test(pipeline_gdec, f32_layouts)
{
    char *dir = make_data();
    NEED_GPU_DECODE(dir);
    static const sl_layout ls[] = {SL_LAYOUT_NCHW_F32, SL_LAYOUT_NHWC_F32};
    for (int li = 0; li < 2; li++) {
        sl_pipeline_config cc = config(dir, ls[li], -1, SL_DECODE_CPU);
        sl_pipeline_config gc = config(dir, ls[li], 0, SL_DECODE_GPU);
        cc.epochs = gc.epochs = 2;
        static run cpu, gpu;
        collect(&cc, &cpu);
        collect(&gc, &gpu);
        same_stream(&cpu, &gpu);
        double sum = 0;
        size_t n = 0;
        for (size_t s = 0; s < cpu.ns; s++) {
            const float *x = (const float *)(cpu.data + s * cpu.sample_bytes);
            const float *y = (const float *)(gpu.data + s * gpu.sample_bytes);
            for (size_t i = 0; i < cpu.sample_bytes / 4; i++) {
                cr_assert(isfinite(y[i]));
                sum += fabs((double)x[i] - y[i]);
                n++;
            }
        }
        /* 1 level / std 57 (the u8 case measures 0.28) */
        cr_assert(sum / (double)n < 1.0 / 57.0, "layout %d: mean difference %g", (int)ls[li],
                  sum / (double)n);
        free(cpu.data);
        free(gpu.data);
    }
    tu_rmrf(dir);
    free(dir);
}

/* Which worker stages a sample and when changes nothing. */
Test(pipeline_gdec, independent_of_workers)
{
    char *dir = make_data();
    NEED_GPU_DECODE(dir);
    sl_pipeline_config a = config(dir, SL_LAYOUT_NHWC_U8, 0, SL_DECODE_GPU);
    sl_pipeline_config b = a;
    a.workers = 1;
    b.workers = 3;
    b.readers = 2;
    static run ra, rb;
    collect(&a, &ra);
    collect(&b, &rb);
    same_stream(&ra, &rb);
    cr_assert_eq(memcmp(ra.data, rb.data, ra.ns * ra.sample_bytes), 0);
    free(ra.data);
    free(rb.data);
    tu_rmrf(dir);
    free(dir);
}

/* nvJPEG failing a batch: its images go through the CPU path at submit,
 * so every sample is the CPU path's, byte for byte. */
Test(pipeline_gdec, failed_batch_falls_back_to_cpu)
{
    char *dir = make_data();
    NEED_GPU_DECODE(dir);
    cr_assert_eq(setenv("EMU_NVJPEG_FAIL", "1", 1), 0);
    sl_pipeline_config cc = config(dir, SL_LAYOUT_NCHW_F32, -1, SL_DECODE_CPU);
    sl_pipeline_config gc = config(dir, SL_LAYOUT_NCHW_F32, 0, SL_DECODE_GPU);
    static run cpu, gpu;
    collect(&cc, &cpu);
    collect(&gc, &gpu);
    unsetenv("EMU_NVJPEG_FAIL");
    same_stream(&cpu, &gpu);
    if (!strstr(gpu.decoder, "on the GPU, 96 on the CPU")) {
        free(cpu.data);
        free(gpu.data);
        tu_rmrf(dir);
        free(dir);
        cr_skip_test("the library did not fail the batches (a real libnvjpeg): %s", gpu.decoder);
    }
    cr_assert_eq(memcmp(cpu.data, gpu.data, cpu.ns * cpu.sample_bytes), 0);
    free(cpu.data);
    free(gpu.data);
    tu_rmrf(dir);
    free(dir);
}

/* A GPU without the JPEG engine: the hybrid backend decodes everything it
 * parses, progressive too; not the baseline files without DHT (is_bare). */
Test(pipeline_gdec, hybrid_backend)
{
    char *dir = make_data();
    NEED_GPU_DECODE(dir);
    cr_assert_eq(setenv("EMU_NVJPEG_HW", "0", 1), 0);
    sl_pipeline_config cc = config(dir, SL_LAYOUT_NHWC_U8, -1, SL_DECODE_CPU);
    sl_pipeline_config gc = config(dir, SL_LAYOUT_NHWC_U8, 0, SL_DECODE_GPU);
    static run cpu, gpu;
    collect(&cc, &cpu);
    collect(&gc, &gpu);
    unsetenv("EMU_NVJPEG_HW");
    same_stream(&cpu, &gpu);
    if (!strstr(gpu.decoder, "GPU hybrid")) {
        free(cpu.data);
        free(gpu.data);
        tu_rmrf(dir);
        free(dir);
        cr_skip_test("the hardware backend is there (a real libnvjpeg): %s", gpu.decoder);
    }
    cr_assert(strstr(gpu.decoder, "90 images on the GPU, 6 on the CPU"), "%s", gpu.decoder);
    for (size_t s = 0; s < cpu.ns; s++) {
        double mean;
        int max, inner;
        diff_u8(&cpu, &gpu, s, &mean, &max, &inner);
        /* progressive ones too here: up to 26 levels off the border measured
         * (libjpeg's block smoothing of progressive scans at the CPU's DCT scale) */
        cr_assert(mean < 1.5 && inner <= 40, "sample %zu: %.2f levels, %d off the border", s,
                  mean, inner);
    }
    free(cpu.data);
    free(gpu.data);
    tu_rmrf(dir);
    free(dir);
}

/* A JPEG whose entropy data is cut short passes every header check, so it
 * is staged for nvJPEG; when nvJPEG and then the CPU path fail it at batch
 * decode, --decode gpu stops with the file and record (it does not refill
 * there, where --decode cpu skips and refills it: gdec_int.h). Not a
 * silent drop either way. */
Test(pipeline_gdec, bad_jpeg_at_batch_decode_names_the_record)
{
    char *dir = make_data_cut(11);
    NEED_GPU_DECODE(dir);
    static run cpu;
    sl_pipeline_config cc = config(dir, SL_LAYOUT_NHWC_U8, -1, SL_DECODE_CPU);
    collect(&cc, &cpu); /* the CPU path skips and refills it */
    free(cpu.data);
    for (size_t s = 0; s < cpu.ns; s++)
        cr_assert_neq(cpu.ids[s], 11);
    sl_pipeline_config gc = config(dir, SL_LAYOUT_NHWC_U8, 0, SL_DECODE_GPU);
    sl_pipeline *p;
    cr_assert_eq(sl_pipeline_create(&gc, &p), SL_OK, "%s", sl_errmsg());
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK)
        sl_pipeline_release(p, b);
    char d[256];
    sl_pipeline_decoder(p, d, sizeof d);
    sl_pipeline_destroy(p);
    if (rc == SL_EOF) { /* a library that decodes it (the hardware may, into garbage) */
        tu_rmrf(dir);
        free(dir);
        cr_skip_test("the library did not fail the cut JPEG: %s", d);
    }
    cr_assert_eq(rc, SL_EIMAGE, "rc %d: %s", rc, sl_errmsg());
    cr_assert(strstr(sl_errmsg(), "train-00000-of-00001") &&
                  strstr(sl_errmsg(), ": record 11 @ ") && strstr(sl_errmsg(), "(id 11)"),
              "%s", sl_errmsg());
    tu_rmrf(dir);
    free(dir);
}

/* ------------------------------------------------ refusals and auto */

/* gpu without a device batch, without CUDA, or without libnvjpeg fails at
 * create saying which; auto runs the CPU path then. */
Test(pipeline_gdec, refusals_and_auto)
{
    char *dir = make_data();
    sl_pipeline *p = NULL;
    sl_pipeline_config c = config(dir, SL_LAYOUT_NHWC_U8, -1, SL_DECODE_GPU);
    int rc = sl_pipeline_create(&c, &p);
    cr_assert(rc == SL_EINVAL || rc == SL_ENOTSUP, "rc %d", rc);
    cr_assert(strstr(sl_errmsg(), "--decode gpu"), "%s", sl_errmsg());
    cr_assert_null(p);

    c.decode = (sl_decode_mode)7;
    cr_assert_eq(sl_pipeline_create(&c, &p), SL_EINVAL);
    cr_assert(strstr(sl_errmsg(), "decode"), "%s", sl_errmsg());

    /* auto without a device batch: the CPU path, the same bytes */
    static run cpu, aut;
    sl_pipeline_config cc = config(dir, SL_LAYOUT_NHWC_U8, -1, SL_DECODE_CPU);
    sl_pipeline_config ac = config(dir, SL_LAYOUT_NHWC_U8, -1, SL_DECODE_AUTO);
    collect(&cc, &cpu);
    collect(&ac, &aut);
    cr_assert_str_eq(aut.decoder, "cpu");
    same_stream(&cpu, &aut);
    cr_assert_eq(memcmp(cpu.data, aut.data, cpu.ns * cpu.sample_bytes), 0);
    free(cpu.data);
    free(aut.data);

    if (gpu_count() > 0) {
        /* no libnvjpeg: gpu fails naming it, auto decodes on the CPU */
        cr_assert_eq(setenv("SLUICE_NVJPEG", "/nonexistent/libnvjpeg.so.13", 1), 0);
        c = config(dir, SL_LAYOUT_NHWC_U8, 0, SL_DECODE_GPU);
        cr_assert_eq(sl_pipeline_create(&c, &p), SL_ENOTSUP);
        cr_assert(strstr(sl_errmsg(), "--decode gpu: libnvjpeg not found: "), "%s",
                  sl_errmsg());
        c.decode = SL_DECODE_AUTO;
        cr_assert_eq(sl_pipeline_create(&c, &p), SL_OK, "%s", sl_errmsg());
        char d[256];
        sl_pipeline_decoder(p, d, sizeof d);
        cr_assert_str_eq(d, "cpu");
        sl_pipeline_destroy(p);
    }
    tu_rmrf(dir);
    free(dir);
}

/* The CLI: --decode is parsed, checked and documented. */
Test(pipeline_gdec, cli_flag)
{
    char *out = NULL;
    int rc = tu_run(&out, "%s profile --help", tu_sluice());
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "--decode MODE"), "%s", out);
    free(out);
    rc = tu_run(&out, "%s profile --data /nonexistent --decode fast", tu_sluice());
    cr_assert_neq(rc, 0);
    cr_assert(strstr(out, "--decode: bad value 'fast' (want cpu, gpu or auto)"), "%s", out);
    free(out);
}
