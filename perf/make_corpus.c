/*
 * perf/make_corpus.c - build an ImageNet-like JPEG corpus from real photographs.
 *
 *   make_corpus --out DIR --n N [--seed S] [--classes K] [--threads T]
 *               [--style small|imagenet] SOURCE...
 *
 * perf/make-corpus (the wrapper) collects the SOURCE photographs from Debian's
 * opencv-doc and mate-backgrounds packages and calls this program. Each output
 * image is a random crop of one source photograph, downscaled (area/bilinear,
 * sl_resize_rgb_u8) so that its shorter side is 300..500 px and its aspect
 * ratio 3:4..4:3 - the shape of ImageNet's training JPEGs (median about
 * 500x375) - optionally mirrored, and encoded at quality 90 with 4:2:0 chroma
 * subsampling (what most cameras and ImageNet's JPEGs use).
 *
 * --style imagenet matches ImageNet's training JPEGs in file size too (about
 * 110 KB mean, where the default style gives about 40 KB): the longer side
 * is 500 px (as in most of ImageNet: 500x375, 500x333, 375x500 ...), aspect
 * 3:4..4:3, the whole source photograph downscaled (the most detail per
 * pixel these sources have), quality drawn from 90..95, 4:2:0, and camera-like
 * grain: Gaussian noise of GRAIN_SIGMA levels added to each pixel (luma) before
 * encoding (sigma 11, chosen so the mean lands near 110 KB). The sources
 * here are smooth (wallpapers, test photographs) where ImageNet's are
 * camera shots full of texture and sensor noise; the grain gives the
 * entropy decoder the bits per pixel such files give (without it these
 * sources encode to about 60 KB at the same sizes and qualities).
 *
 * Layout: DIR/class-XXX/img-XXXXXXX.jpg, class = source index mod K (default
 * 10), so the labels mean something (images of one class come from the same
 * few photographs). DIR/.make-corpus records how the corpus was made; it is
 * written last, so its presence means the corpus is complete.
 *
 * Determinism: image i is drawn from an RNG seeded by (seed, i) alone, and the
 * sources are sorted by path, so the same sources, N and seed give
 * byte-identical files whatever the thread count or timing.
 *
 * Threads: T workers claim image numbers from an atomic counter; the decoded
 * sources are shared read-only; each worker owns its TurboJPEG handle and
 * scratch buffers. Progress goes to stderr from whichever worker passes a
 * multiple of 100.
 *
 * Sources that are too small (under 400x300 px in both orientations) or not
 * in colour are skipped with a message. JPEGs larger than needed are decoded
 * with TurboJPEG's DCT scaling (shorter side kept >= 800 px) to save memory.
 */
#include <errno.h>
#include <math.h>
#include <png.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "records/records.h"

#define MIN_LONG 400   /* sources must be at least 400x300 (either orientation) */
#define MIN_SHORT 300
#define OUT_SHORT_MIN 300
#define OUT_SHORT_MAX 500
#define KEEP_SHORT 800 /* decode big JPEGs scaled down to about this short side */
#define QUALITY 90
/* --style imagenet (see above) */
#define IN_LONG 500
#define IN_QMIN 90
#define IN_QMAX 95
#define GRAIN_SIGMA 11.0

typedef struct source {
    const char *path;
    uint8_t *rgb; /* (h, w, 3) u8 */
    int w, h;
} source;

typedef struct job {
    const char *out;
    uint64_t n, seed;
    int classes;
    int imagenet;             /* --style imagenet */
    source *src;
    int nsrc;
    atomic_uint_fast64_t next;
    atomic_uint_fast64_t done;
    atomic_uint_fast64_t bytes;
    atomic_int failed;
} job;

static void die(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "make_corpus: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    exit(1);
}

/* splitmix64 (Steele et al., "Fast splittable pseudorandom number generators") */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53; }

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) != NULL &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)(n > 0 ? n : 0);
    return buf;
}

/* Decode a JPEG to RGB, scaled by the smallest TurboJPEG factor that keeps
 * the shorter side >= KEEP_SHORT. Returns a reason on failure. */
static const char *load_jpeg(const uint8_t *data, size_t len, source *s)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return "tjInitDecompress failed";
    const char *why = NULL;
    int w, h, subsamp, cs;
    if (tjDecompressHeader3(tj, data, (unsigned long)len, &w, &h, &subsamp, &cs) != 0) {
        why = "unreadable JPEG header";
        goto out;
    }
    if (cs == TJCS_GRAY || cs == TJCS_CMYK || cs == TJCS_YCCK) {
        why = "grey or CMYK";
        goto out;
    }
    int nf = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&nf);
    int sw = w, sh = h;
    for (int i = 0; sf && i < nf; i++) { /* factors come largest first */
        int tw = TJSCALED(w, sf[i]), th = TJSCALED(h, sf[i]);
        int tshort = tw < th ? tw : th;
        if (sf[i].num <= sf[i].denom && tshort >= KEEP_SHORT && tw * th < sw * sh) {
            sw = tw;
            sh = th;
        }
    }
    s->rgb = malloc((size_t)sw * (size_t)sh * 3);
    if (!s->rgb) {
        why = "out of memory";
        goto out;
    }
    if (tjDecompress2(tj, data, (unsigned long)len, s->rgb, sw, sw * 3, sh, TJPF_RGB, 0) != 0 &&
        tjGetErrorCode(tj) == TJERR_FATAL) {
        free(s->rgb);
        s->rgb = NULL;
        why = "JPEG decode failed";
        goto out;
    }
    s->w = sw;
    s->h = sh;
out:
    tjDestroy(tj);
    return why;
}

/* Decode a PNG to RGB with libpng's simplified API (alpha composited on a
 * mid-grey background, 16-bit reduced to 8). */
static const char *load_png(const uint8_t *data, size_t len, source *s)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, len))
        return "unreadable PNG header";
    if (!(img.format & PNG_FORMAT_FLAG_COLOR) || (img.format & PNG_FORMAT_FLAG_COLORMAP)) {
        png_image_free(&img);
        return "grey or palette";
    }
    img.format = PNG_FORMAT_RGB;
    s->rgb = malloc(PNG_IMAGE_SIZE(img));
    if (!s->rgb) {
        png_image_free(&img);
        return "out of memory";
    }
    png_color bg = {128, 128, 128};
    if (!png_image_finish_read(&img, &bg, s->rgb, 0, NULL)) {
        free(s->rgb);
        s->rgb = NULL;
        png_image_free(&img);
        return "PNG decode failed";
    }
    s->w = (int)img.width;
    s->h = (int)img.height;
    return NULL;
}

static const char *load_source(source *s)
{
    size_t len = 0;
    uint8_t *data = read_all(s->path, &len);
    if (!data)
        return "cannot read";
    const char *why = "neither JPEG nor PNG";
    if (len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
        why = load_jpeg(data, len, s);
    else if (len >= 8 && !memcmp(data, "\x89PNG\r\n\x1a\n", 8))
        why = load_png(data, len, s);
    free(data);
    if (!why) {
        int lo = s->w < s->h ? s->w : s->h, hi = s->w < s->h ? s->h : s->w;
        if (lo < MIN_SHORT || hi < MIN_LONG) {
            free(s->rgb);
            s->rgb = NULL;
            why = "smaller than 400x300";
        }
    }
    return why;
}

/* Geometry of image i: output size ow x oh, crop (cx, cy, cw, ch) of source. */
typedef struct geom {
    int src, flip, quality;
    uint64_t grain;           /* --style imagenet: the grain's RNG state */
    int ow, oh, cx, cy, cw, ch;
} geom;

static void choose(const job *jb, uint64_t i, geom *g)
{
    uint64_t st = jb->seed * 0xd1b54a32d192ed03ull ^ (i + 1) * 0x9e3779b97f4a7c15ull;
    rng_next(&st);
    g->src = (int)(rng_next(&st) % (uint64_t)jb->nsrc);
    const source *s = &jb->src[g->src];
    /* aspect w/h log-uniform in [3/4, 4/3] */
    double lo = 0.75, a = lo * exp(rng_unit(&st) * log(4.0 / 3.0 / lo));
    /* the largest crop of aspect a inside the source gives the largest output */
    double hmax = s->h < s->w / a ? s->h : s->w / a;
    double shortmax = a < 1 ? hmax * a : hmax;
    if (shortmax < OUT_SHORT_MIN) { /* turn to the source's orientation */
        double sa = (double)s->w / s->h;
        a = sa < 0.75 ? 0.75 : sa > 4.0 / 3.0 ? 4.0 / 3.0 : sa;
        hmax = s->h < s->w / a ? s->h : s->w / a;
        shortmax = a < 1 ? hmax * a : hmax;
    }
    double top = shortmax < OUT_SHORT_MAX ? shortmax : OUT_SHORT_MAX;
    double bot = OUT_SHORT_MIN < top ? OUT_SHORT_MIN : top;
    double sh = bot + rng_unit(&st) * (top - bot);
    if (jb->imagenet) /* the longer side 500 (or what the source allows) */
        sh = fmin(shortmax, a < 1 ? IN_LONG * a : IN_LONG / a);
    g->ow = (int)(a < 1 ? sh : sh * a);
    g->oh = (int)(a < 1 ? sh / a : sh);
    if (g->ow > s->w)
        g->ow = s->w;
    if (g->oh > s->h)
        g->oh = s->h;
    /* crop scale k >= 1 (never enlarge), log-uniform up to the whole source */
    double kmax = (double)s->w / g->ow < (double)s->h / g->oh ? (double)s->w / g->ow
                                                               : (double)s->h / g->oh;
    double k = exp(rng_unit(&st) * log(kmax));
    if (jb->imagenet) /* the whole photograph: the most detail per pixel */
        k = kmax;
    g->cw = (int)(g->ow * k);
    g->ch = (int)(g->oh * k);
    if (g->cw > s->w)
        g->cw = s->w;
    if (g->ch > s->h)
        g->ch = s->h;
    g->cx = (int)(rng_unit(&st) * (s->w - g->cw + 1));
    g->cy = (int)(rng_unit(&st) * (s->h - g->ch + 1));
    g->flip = (int)(rng_next(&st) & 1);
    g->quality = QUALITY;
    g->grain = 0;
    if (jb->imagenet) {
        g->quality = IN_QMIN + (int)(rng_next(&st) % (IN_QMAX - IN_QMIN + 1));
        g->grain = rng_next(&st);
    }
}

/* Camera-like grain: N(0, sigma) added to each pixel's three values alike
 * (luma grain: the chroma that 4:2:0 keeps stays clean), Box-Muller from
 * the image's own RNG state, rounded and clamped; (npx, 3) u8. */
static void add_grain(uint8_t *rgb, size_t npx, uint64_t st, double sigma)
{
    for (size_t i = 0; i < npx; i += 2) {
        double u1 = rng_unit(&st), u2 = rng_unit(&st);
        double r = sigma * sqrt(-2.0 * log(1.0 - u1)), t = 2.0 * M_PI * u2;
        double z[2] = {r * cos(t), r * sin(t)};
        for (size_t k = 0; k < 2 && i + k < npx; k++)
            for (int c = 0; c < 3; c++) {
                double v = floor(rgb[(i + k) * 3 + c] + z[k] + 0.5);
                rgb[(i + k) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    }
}

static int write_file(const char *path, const uint8_t *data, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void *worker(void *arg)
{
    job *jb = arg;
    tjhandle tj = tjInitCompress();
    uint8_t *out = NULL;
    size_t cap = 0;
    unsigned char *jpeg = NULL;
    unsigned long jcap = 0;
    if (!tj) {
        fprintf(stderr, "make_corpus: tjInitCompress failed\n");
        atomic_store(&jb->failed, 1);
        return NULL;
    }
    for (;;) {
        uint64_t i = atomic_fetch_add(&jb->next, 1);
        if (i >= jb->n || atomic_load(&jb->failed))
            break;
        geom g;
        choose(jb, i, &g);
        const source *s = &jb->src[g.src];
        size_t need = (size_t)g.ow * (size_t)g.oh * 3;
        if (need > cap) {
            uint8_t *p = realloc(out, need);
            if (!p) {
                fprintf(stderr, "make_corpus: out of memory\n");
                atomic_store(&jb->failed, 1);
                break;
            }
            out = p;
            cap = need;
        }
        const uint8_t *crop = s->rgb + ((size_t)g.cy * (size_t)s->w + (size_t)g.cx) * 3;
        sl_resize_rgb_u8(crop, g.cw, g.ch, s->w * 3, out, g.ow, g.oh, g.ow * 3);
        if (g.flip) {
            for (int y = 0; y < g.oh; y++) {
                uint8_t *row = out + (size_t)y * (size_t)g.ow * 3;
                for (int l = 0, r = g.ow - 1; l < r; l++, r--)
                    for (int c = 0; c < 3; c++) {
                        uint8_t t = row[l * 3 + c];
                        row[l * 3 + c] = row[r * 3 + c];
                        row[r * 3 + c] = t;
                    }
            }
        }
        if (jb->imagenet)
            add_grain(out, need / 3, g.grain, GRAIN_SIGMA);
        /* Our own worst-case buffer and NOREALLOC: TurboJPEG would otherwise
         * take *jpegSize as the size of a buffer it allocated earlier. */
        unsigned long jneed = tjBufSize(g.ow, g.oh, TJSAMP_420);
        if (jneed > jcap) {
            tjFree(jpeg);
            jpeg = tjAlloc((int)jneed);
            jcap = jpeg ? jneed : 0;
            if (!jpeg) {
                fprintf(stderr, "make_corpus: out of memory\n");
                atomic_store(&jb->failed, 1);
                break;
            }
        }
        unsigned long jlen = jcap;
        if (tjCompress2(tj, out, g.ow, g.ow * 3, g.oh, TJPF_RGB, &jpeg, &jlen, TJSAMP_420,
                        g.quality, TJFLAG_NOREALLOC) != 0) {
            fprintf(stderr, "make_corpus: image %llu: tjCompress2: %s\n", (unsigned long long)i,
                    tjGetErrorStr2(tj));
            atomic_store(&jb->failed, 1);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/class-%03d/img-%07llu.jpg", jb->out,
                 g.src % jb->classes, (unsigned long long)i);
        if (write_file(path, jpeg, jlen) != 0) {
            fprintf(stderr, "make_corpus: %s: %s\n", path, strerror(errno));
            atomic_store(&jb->failed, 1);
            break;
        }
        atomic_fetch_add(&jb->bytes, jlen);
        uint64_t d = atomic_fetch_add(&jb->done, 1) + 1;
        if (d % 100 == 0 || d == jb->n)
            fprintf(stderr, "\rmake_corpus: %llu/%llu images", (unsigned long long)d,
                    (unsigned long long)jb->n);
    }
    tjFree(jpeg);
    free(out);
    tjDestroy(tj);
    return NULL;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void usage(void)
{
    fprintf(stderr, "usage: make_corpus --out DIR --n N [--seed S] [--classes K] [--threads T] "
                    "[--style small|imagenet] SOURCE...\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    uint64_t n = 0, seed = 1;
    int classes = 10, imagenet = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char **paths = calloc((size_t)argc, sizeof *paths);
    int npaths = 0;
    if (!paths)
        die("%s%s", "out of memory", "");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--classes") && i + 1 < argc)
            classes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--style") && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "small") && strcmp(v, "imagenet"))
                usage();
            imagenet = !strcmp(v, "imagenet");
        }
        else if (argv[i][0] == '-')
            usage();
        else
            paths[npaths++] = argv[i];
    }
    if (!out || n == 0 || npaths == 0 || classes < 1 || n > 9999999)
        usage();
    if (threads < 1)
        threads = 1;
    qsort(paths, (size_t)npaths, sizeof *paths, cmp_str);

    source *src = calloc((size_t)npaths, sizeof *src);
    if (!src)
        die("%s%s", "out of memory", "");
    int nsrc = 0, nskip = 0;
    for (int i = 0; i < npaths; i++) {
        src[nsrc].path = paths[i];
        const char *why = load_source(&src[nsrc]);
        if (why) {
            const char *base = strrchr(paths[i], '/');
            fprintf(stderr, "%s%s (%s)", nskip++ ? ", " : "make_corpus: skipped ",
                    base ? base + 1 : paths[i], why);
        } else {
            nsrc++;
        }
    }
    if (nskip)
        fputc('\n', stderr);
    if (nsrc == 0)
        die("%s%s", "no usable source photographs", "");
    if (classes > nsrc)
        classes = nsrc;
    fprintf(stderr, "make_corpus: %d source photographs, %d classes, %llu images -> %s\n", nsrc,
            classes, (unsigned long long)n, out);

    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        die("%s: %s", out, strerror(errno));
    for (int c = 0; c < classes; c++) {
        char d[4096];
        snprintf(d, sizeof d, "%s/class-%03d", out, c);
        if (mkdir(d, 0755) != 0 && errno != EEXIST)
            die("%s: %s", d, strerror(errno));
    }

    job jb = {.out = out, .n = n, .seed = seed, .classes = classes, .imagenet = imagenet,
              .src = src, .nsrc = nsrc};
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    if (!tid)
        die("%s%s", "out of memory", "");
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, worker, &jb) != 0)
            break;
    if (started == 0)
        die("%s%s", "pthread_create failed", "");
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    fputc('\n', stderr);
    if (atomic_load(&jb.failed) || atomic_load(&jb.done) != n)
        die("%s%s", "failed", "");

    /* The marker last: it says the corpus is complete and how it was made. */
    char marker[4096];
    snprintf(marker, sizeof marker, "%s/.make-corpus", out);
    FILE *f = fopen(marker, "w");
    if (!f)
        die("%s: %s", marker, strerror(errno));
    fprintf(f, "n=%llu seed=%llu classes=%d %ssources=%d bytes=%llu\n", (unsigned long long)n,
            (unsigned long long)seed, classes, imagenet ? "style=imagenet " : "", nsrc,
            (unsigned long long)atomic_load(&jb.bytes));
    for (int i = 0; i < nsrc; i++)
        fprintf(f, "source %s %dx%d\n", src[i].path, src[i].w, src[i].h);
    if (fclose(f) != 0)
        die("%s: %s", marker, strerror(errno));
    fprintf(stderr, "make_corpus: wrote %llu images, %.1f MB\n", (unsigned long long)n,
            (double)atomic_load(&jb.bytes) / 1e6);
    for (int i = 0; i < nsrc; i++)
        free(src[i].rgb);
    free(src);
    free(tid);
    free(paths);
    return 0;
}
