/*
 * perf/dnnl_conv.c - ResNet-50's convolutions (every distinct shape, batch
 * 16, 224 px: one replica's share of batch 32 on 2 cores) in bf16 NHWC,
 * forward, backward-data and backward-weights (f32 dw, as conv_dnnl.c asks),
 * each through the implementation oneDNN picks with weights "any", timed
 * best of --reps after one warm-up on the calling thread's OpenMP team.
 * Compiled against oneDNN 2.x (Debian's 2.6) or 3.x (PyPI's
 * onednn-cpu-gomp) by perf/dnnl-versions: the same program, one #if for
 * the two APIs' primitive descriptors (3.x dropped the operation
 * descriptors), so the two libraries run the same convolutions side by side.
 *
 *   dnnl_conv [reps] [--demo] [--all]
 *
 * One line per shape and pass, then TOTAL per pass (each distinct shape
 * once) and NETWORK (each shape times its uses in the network: what one
 * training step's convolutions take, to set beside SLUICE_TRAIN_PROFILE's
 * conv times), and the 1x1 convolutions' backward-weights alone, to set
 * beside perf/bwd_1x1.c's. --demo: ResNet-20 at
 * width 8 on 28 px (the demo's net: 3-32 channels, batch 32, one replica's
 * share of 64) instead of ResNet-50. --all: every implementation oneDNN
 * offers for each pass (its iterator on 2.x, next_impl on 3.x; the
 * reference ones left out), the one it picks first marked '*'; TOTAL then
 * adds each pass's first. conv_dnnl.c's choices (BRG_MIN_C) come from it.
 */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                \
    do {                                                                                     \
        dnnl_status_t s_ = (x);                                                              \
        if (s_) {                                                                            \
            fprintf(stderr, "dnnl_conv: %s: status %d\n", #x, (int)s_);                    \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

#if DNNL_VERSION_MAJOR >= 3
typedef const_dnnl_memory_desc_t md_ref;
#else
typedef const dnnl_memory_desc_t *md_ref;
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *zalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (p)
        memset(p, 0, n);
    return p;
}

/* h, c, k, r, stride (square), uses: ResNet-50 v1.5's distinct
 * convolutions and how many of each the network has (53 in all) */
static const int shapes[][6] = {
    {224, 3, 64, 7, 2, 1},    {56, 64, 64, 1, 1, 1},    {56, 64, 64, 3, 1, 3},
    {56, 64, 256, 1, 1, 4},   {56, 256, 64, 1, 1, 2},   {56, 256, 128, 1, 1, 1},
    {56, 128, 128, 3, 2, 1},  {28, 128, 512, 1, 1, 4},  {56, 256, 512, 1, 2, 1},
    {28, 512, 128, 1, 1, 3},  {28, 128, 128, 3, 1, 3},  {28, 512, 256, 1, 1, 1},
    {28, 256, 256, 3, 2, 1},  {14, 256, 1024, 1, 1, 6}, {28, 512, 1024, 1, 2, 1},
    {14, 1024, 256, 1, 1, 5}, {14, 256, 256, 3, 1, 5},  {14, 1024, 512, 1, 1, 1},
    {14, 512, 512, 3, 2, 1},  {7, 512, 2048, 1, 1, 3},  {14, 1024, 2048, 1, 2, 1},
    {7, 2048, 512, 1, 1, 2},  {7, 512, 512, 3, 1, 2}};

/* h, c, k, r, stride, uses: ResNet-20 at width 8 on 28 px (the demo; 21
 * convolutions) */
static const int demo_shapes[][6] = {{28, 3, 8, 3, 1, 1},   {28, 8, 8, 3, 1, 6},
                                     {28, 8, 16, 3, 2, 1},  {28, 8, 16, 1, 2, 1},
                                     {14, 16, 16, 3, 1, 5}, {14, 16, 32, 3, 2, 1},
                                     {14, 16, 32, 1, 2, 1}, {7, 32, 32, 3, 1, 5}};

/* The three passes' primitive descriptors of one shape; with it[] non-NULL
 * also what walks each pass's implementations: on 2.x an iterator per
 * pass, on 3.x a second forward descriptor in it[0]. */
static int make_pds(dnnl_engine_t eng, int n, const int *s, md_ref *xmd, md_ref *ymd,
                    dnnl_primitive_desc_t pd[3], void *it[3])
{
    int h = s[0], c = s[1], k = s[2], r = s[3], sd = s[4], pad = r / 2;
    int p = (h + 2 * pad - r) / sd + 1;
    dnnl_dims_t xd = {n, c, h, h}, yd = {n, k, p, p}, wd = {k, c, r, r};
    dnnl_dims_t strides = {sd, sd}, pads = {pad, pad};
#if DNNL_VERSION_MAJOR >= 3
    dnnl_dims_t dil = {0, 0};
    dnnl_memory_desc_t x, y, wany, wanyf;
    CK(dnnl_memory_desc_create_with_tag(&x, 4, xd, dnnl_bf16, dnnl_nhwc));
    CK(dnnl_memory_desc_create_with_tag(&y, 4, yd, dnnl_bf16, dnnl_nhwc));
    CK(dnnl_memory_desc_create_with_tag(&wany, 4, wd, dnnl_bf16, dnnl_format_tag_any));
    CK(dnnl_memory_desc_create_with_tag(&wanyf, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_convolution_forward_primitive_desc_create(&pd[0], eng, dnnl_forward_training,
                                                      dnnl_convolution_direct, x, wany, NULL, y,
                                                      strides, dil, pads, pads, NULL));
    CK(dnnl_convolution_backward_data_primitive_desc_create(&pd[1], eng,
                                                            dnnl_convolution_direct, x, wany, y,
                                                            strides, dil, pads, pads, pd[0],
                                                            NULL));
    CK(dnnl_convolution_backward_weights_primitive_desc_create(
        &pd[2], eng, dnnl_convolution_direct, x, wanyf, NULL, y, strides, dil, pads, pads, pd[0],
        NULL));
    /* --all walks forward's implementations on a descriptor of its own
     * (next_impl changes it in place; pd[0] stays the backward passes'
     * hint; a clone of pd[0] does not walk: it has no implementation list) */
    if (it)
        CK(dnnl_convolution_forward_primitive_desc_create(
            (dnnl_primitive_desc_t *)&it[0], eng, dnnl_forward_training, dnnl_convolution_direct,
            x, wany, NULL, y, strides, dil, pads, pads, NULL));
    *xmd = x, *ymd = y; /* kept for the run; the process ends after */
#else
    static dnnl_memory_desc_t x, y;
    dnnl_memory_desc_t wany, wanyf;
    static dnnl_convolution_desc_t cd[3]; /* the iterators keep pointers to them */
    CK(dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_bf16, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_bf16, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_bf16, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&wanyf, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_convolution_forward_desc_init(&cd[0], dnnl_forward_training, dnnl_convolution_direct,
                                          &x, &wany, NULL, &y, strides, pads, pads));
    CK(dnnl_primitive_desc_create(&pd[0], &cd[0], NULL, eng, NULL));
    if (it)
        CK(dnnl_primitive_desc_iterator_create((dnnl_primitive_desc_iterator_t *)&it[0], &cd[0],
                                               NULL, eng, NULL));
    CK(dnnl_convolution_backward_data_desc_init(&cd[1], dnnl_convolution_direct, &x, &wany, &y,
                                                strides, pads, pads));
    CK(dnnl_primitive_desc_create(&pd[1], &cd[1], NULL, eng, pd[0]));
    if (it)
        CK(dnnl_primitive_desc_iterator_create((dnnl_primitive_desc_iterator_t *)&it[1], &cd[1],
                                               NULL, eng, pd[0]));
    CK(dnnl_convolution_backward_weights_desc_init(&cd[2], dnnl_convolution_direct, &x, &wanyf,
                                                   NULL, &y, strides, pads, pads));
    CK(dnnl_primitive_desc_create(&pd[2], &cd[2], NULL, eng, pd[0]));
    if (it)
        CK(dnnl_primitive_desc_iterator_create((dnnl_primitive_desc_iterator_t *)&it[2], &cd[2],
                                               NULL, eng, pd[0]));
    *xmd = &x, *ymd = &y;
#endif
    return 0;
}

/* The next implementation of a pass after *pd (destroyed), or NULL. */
static dnnl_primitive_desc_t next_impl(dnnl_primitive_desc_t pd, void *it)
{
#if DNNL_VERSION_MAJOR >= 3
    (void)it;
    if (dnnl_primitive_desc_next_impl(pd) == dnnl_success)
        return pd;
    dnnl_primitive_desc_destroy(pd);
    return NULL;
#else
    dnnl_primitive_desc_destroy(pd);
    if (dnnl_primitive_desc_iterator_next(it) != dnnl_success)
        return NULL;
    return dnnl_primitive_desc_iterator_fetch(it);
#endif
}

/* The best of reps runs of pd's primitive (after one warm-up), seconds. */
static int time_pd(dnnl_engine_t eng, dnnl_stream_t st, dnnl_primitive_desc_t pd, int ps,
                   md_ref xmd, md_ref ymd, int reps, double *best)
{
    dnnl_primitive_t prim;
    CK(dnnl_primitive_create(&prim, pd));
    md_ref wm = dnnl_primitive_desc_query_md(
        pd, ps == 2 ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    md_ref sm = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t nb[4] = {dnnl_memory_desc_get_size(xmd), dnnl_memory_desc_get_size(ymd),
                    dnnl_memory_desc_get_size(wm), sm ? dnnl_memory_desc_get_size(sm) : 0};
    void *buf[4] = {zalloc(nb[0]), zalloc(nb[1]), zalloc(nb[2]), nb[3] ? zalloc(nb[3]) : NULL};
    dnnl_memory_t mx, my, mw, ms = NULL;
    CK(dnnl_memory_create(&mx, xmd, eng, buf[0]));
    CK(dnnl_memory_create(&my, ymd, eng, buf[1]));
    CK(dnnl_memory_create(&mw, wm, eng, buf[2]));
    if (nb[3])
        CK(dnnl_memory_create(&ms, sm, eng, buf[3]));
    dnnl_exec_arg_t a[4] = {{ps == 1 ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC, mx},
                            {ps == 2 ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS, mw},
                            {ps == 0 ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST, my},
                            {DNNL_ARG_SCRATCHPAD, ms}};
    *best = 1e30;
    for (int rep = 0; rep <= reps; rep++) {
        double t0 = now();
        CK(dnnl_primitive_execute(prim, st, ms ? 4 : 3, a));
        CK(dnnl_stream_wait(st));
        double t = now() - t0;
        if (rep && t < *best)
            *best = t;
    }
    dnnl_memory_destroy(mx);
    dnnl_memory_destroy(my);
    dnnl_memory_destroy(mw);
    dnnl_memory_destroy(ms);
    dnnl_primitive_destroy(prim);
    for (int i = 0; i < 4; i++)
        free(buf[i]);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const pass[] = {"fwd", "bwd-data", "bwd-weights"};
    int reps = 3, n = 16, all = 0;
    const int(*sh)[6] = shapes;
    size_t nsh = sizeof shapes / sizeof *shapes;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--demo"))
            sh = demo_shapes, nsh = sizeof demo_shapes / sizeof *demo_shapes, n = 32;
        else if (!strcmp(argv[i], "--all"))
            all = 1;
        else
            reps = atoi(argv[i]);
    }
    dnnl_engine_t eng;
    dnnl_stream_t st;
    double tot[3] = {0, 0, 0}, net[3] = {0, 0, 0}, net1x1 = 0;
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d\n", v->major, v->minor, v->patch);
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    for (size_t i = 0; i < nsh; i++) {
        const int *s = sh[i];
        md_ref xmd, ymd;
        dnnl_primitive_desc_t pd[3];
        void *it[3] = {NULL, NULL, NULL};
        if (make_pds(eng, n, s, &xmd, &ymd, pd, all ? it : NULL))
            return 1;
        for (int ps = 0; ps < 3; ps++) {
            dnnl_primitive_desc_t cur = pd[ps];
#if DNNL_VERSION_MAJOR < 3
            if (all) /* the iterator's own descriptors; pd[ps] stays the hint */
                cur = dnnl_primitive_desc_iterator_fetch(it[ps]);
#else
            if (all && ps == 0) /* make_pds's own forward descriptor; pd[0] is the hint */
                cur = it[0];
#endif
            for (int k = 0; cur; k++) {
                const char *impl = "?";
                dnnl_primitive_desc_query(cur, dnnl_query_impl_info_str, 0, &impl);
                if (!k || !strstr(impl, "ref")) {
                    double best;
                    if (time_pd(eng, st, cur, ps, xmd, ymd, reps, &best))
                        return 1;
                    if (!k) {
                        tot[ps] += best;
                        /* the first conv's input is the image: no backward-data */
                        net[ps] += ps == 1 && i == 0 ? 0 : best * s[5];
                        net1x1 += ps == 2 && s[3] == 1 ? best * s[5] : 0;
                    }
                    printf("%-11s h%-3d c%-4d k%-4d %dx%d/%d %c%-40s %8.3f ms\n", pass[ps],
                           s[0], s[1], s[2], s[3], s[3], s[4], all && !k ? '*' : ' ', impl,
                           best * 1e3);
                }
                if (!all)
                    break;
                cur = next_impl(cur, it[ps]);
            }
        }
    }
    printf("TOTAL fwd %.1f bwd-data %.1f bwd-weights %.1f all %.1f ms\n", tot[0] * 1e3,
           tot[1] * 1e3, tot[2] * 1e3, (tot[0] + tot[1] + tot[2]) * 1e3);
    printf("NETWORK fwd %.1f bwd-data %.1f bwd-weights %.1f all %.1f ms (each shape x its uses "
           "in the net: one step's convolutions)\n", net[0] * 1e3, net[1] * 1e3, net[2] * 1e3,
           (net[0] + net[1] + net[2]) * 1e3);
    printf("NETWORK 1x1 bwd-weights %.1f ms (perf/bwd_1x1.c times sluice's kernel for them)\n",
           net1x1 * 1e3);
    return 0;
}
