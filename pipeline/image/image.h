/*
 * pipeline/image/image.h - the image room of pipeline/: one JPEG record to
 * one sample of a batch, below the graph (which calls it from its map
 * workers) and calling nothing of it.
 *
 *   geometry.c    random-resized-crop and eval center-crop geometry
 *   decode.c      ROI JPEG decode (libjpeg API) of a crop, resized
 *   decode_yuv.c  the crop as raw Y/Cb/Cr planes (sl_decode_crop_sample's
 *                 default path; resample_planes.c's sl_resample_planes
 *                 finishes it)
 *   huff.c        the planar path's entropy decoder
 *   sample.c      flip + normalize + layout into a batch slot
 *   resample.c    resize + flip + normalize + layout in one pass (the map
 *                 workers' path: decode.c's sl_decode_crop_sample) from an
 *                 RGB strip; resample_planes.c the same from Y/Cb/Cr planes
 *                 (resample_int.h: what the two share)
 *   gdec_*.c/.cu  the GPU decode stage (gdec_int.h), nvjpeg_* its loader
 *
 * Threading: everything here is reentrant on distinct objects; objects are
 * used by one thread at a time unless said otherwise.
 */
#ifndef SL_IMAGE_H
#define SL_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/pipeline.h"
#include "pipeline/rng.h"
#include "records/records.h"

/* ---------------------------------------------------------------- geometry */
typedef struct sl_crop {
    int x, y, w, h;           /* in source pixels; w, h >= 1, inside the image */
} sl_crop;

/* torchvision RandomResizedCrop.get_params: up to 10 tries of area
 * a = W*H*U(smin, smax), ratio r = exp(U(log rmin, log rmax)), w =
 * round(sqrt(a*r)), h = round(sqrt(a/r)); first that fits gives x = U{0..W-w},
 * y = U{0..H-h}; otherwise a center crop with the ratio clamped to
 * [rmin, rmax]. Draws come from rng. */
void sl_rrc_geometry(sl_rng *rng, int W, int H, float smin, float smax, float rmin, float rmax,
                     sl_crop *out);
/* Eval: the region that "resize shorter side to round(max(oh,ow)/crop_fraction),
 * then center crop oh x ow" takes from a W x H source. */
void sl_eval_geometry(int W, int H, int oh, int ow, float crop_fraction, sl_crop *out);

/* ------------------------------------------------------------- output spec */
/* Where and how one sample is written, in one argument (TurboJPEG's dstBuf
 * + pitch + pixel format, for a batch's sample): w x h pixels at dst,
 * packed in layout (NHWC u8: rows of 3w bytes; NHWC f32: rows of 3w
 * floats; NCHW f32: three planes of h x w floats), mirrored left-right
 * when flip; f32 layouts store (v - mean[c]) / std[c], u8 ignores mean and
 * std (they may be NULL). Every function below that writes a sample takes
 * one. */
typedef struct sl_out_spec {
    int w, h;
    int flip;
    sl_layout layout;
    const float *mean, *std;  /* [3] each */
    void *dst;
} sl_out_spec;

/* ------------------------------------------------------------------ decode */
/* A JPEG decoder (libjpeg API of libjpeg-turbo) with its scratch memory;
 * one per worker thread. */
typedef struct sl_decoder sl_decoder;
int sl_decoder_create(sl_decoder **out);
void sl_decoder_destroy(sl_decoder *d);
/* Refuse (SL_EIMAGE, from the header, before libjpeg allocates anything of
 * the image's size) JPEGs of more than n pixels; 0 = SL_MAX_PIXELS_DEFAULT
 * (records.h), the default of a new decoder. */
void sl_decoder_set_max_pixels(sl_decoder *d, uint64_t n);
/* Check the stream's structure and tables (sl_jpeg_scan) and read its
 * header: image size and components (1 gray, 3 color; CMYK is SL_EIMAGE);
 * *flags (may be NULL) gets sl_jpeg_scan's SL_JPEG_* bits. Every stream is
 * read by a fresh libjpeg object: nothing of an earlier image (its tables)
 * reaches it. The parsed header stays in d for the next sl_decode_* call
 * if that call gets the same jpeg pointer and len, whose bytes must not
 * change in between (the map worker's header, geometry, decode); any
 * other call reads its stream afresh. */
int sl_decoder_header(sl_decoder *d, const uint8_t *jpeg, size_t len, int *w, int *h,
                      unsigned *flags);
/* Decode region crop of the image and resize it to ow x oh RGB u8 into dst
 * (row pitch `pitch` bytes). ROI path: the smallest DCT scale M/8 (M = 1, 2,
 * 4, 8: the fast ones, see decode.c) at which the scaled crop still covers
 * ow x oh, jpeg_crop_scanline for the
 * columns, jpeg_skip_scanlines above the crop, stop after its last row
 * (jpeg_abort_decompress). Grayscale is expanded to RGB. Environment
 * SLUICE_DECODE=full forces the plain path (full-size decode, then crop and
 * resize) for tests and comparisons. Corrupt data: SL_EIMAGE with libjpeg's
 * message; warnings (corrupt entropy data) are errors too. */
int sl_decode_crop(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop, int ow,
                   int oh, uint8_t *dst, int pitch);
/* One sample: the crop resized to out's w x h, mirrored when flip,
 * normalized and laid out at its dst. By default on the planar path (decode_yuv.c below:
 * Y/Cb/Cr planes, RGB at the output size; RGB-transform JPEGs take the RGB
 * path). With SLUICE_DECODE=rgb (or full) sl_decode_crop's decode finished
 * by sl_resample_sample instead of the u8 resize: what sl_store_sample
 * would write from sl_decode_crop's output (f32 values come from the
 * unrounded resize, see resample.c); the reference of the planar path. */
int sl_decode_crop_sample(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop,
                          const sl_out_spec *out);

/* One plane of a decoded crop strip for sl_resample_planes: pixels
 * [0, w) x [0, h) of u8 rows pitch bytes apart, and the crop's window in
 * that plane's pixel coordinates (edges, need not be whole pixels):
 * [x0, x0 + cw) x [y0, y0 + ch), inside [0, w] x [0, h]. */
typedef struct sl_plane_view {
    const uint8_t *p;
    int w, h, pitch;
    double x0, y0, cw, ch;
} sl_plane_view;
/* The planar path (decode_yuv.c): the crop's rows decoded to Y/Cb/Cr
 * planes with libjpeg's raw-data output, each plane resized at its own
 * resolution, RGB made only at the output size (sl_resample_planes).
 * Called by decode.c's sl_decode_crop_sample under its libjpeg error guard
 * with the header already read into ci (a libjpeg error longjmps out of
 * here); buf is the decoder's scratch (grows, freed by the caller).
 * SL_ENOTSUP when the file is not YCbCr or gray (the caller then takes the
 * RGB path); other codes as sl_decode_crop_sample. */
struct jpeg_decompress_struct;
/* huff.c: the planar path's entropy decoder in place of libjpeg's
 * (baseline single-scan files without restarts; see its comment).
 * sl_huff_install, after jpeg_start_decompress and before the first
 * jpeg_read_raw_data: SL_OK installed; SL_ENOTSUP (no message) not such a
 * file, libjpeg's decoder stays; SL_ENOMEM. *h is the decoder's state,
 * allocated on first use. */
typedef struct sl_huff sl_huff;
int sl_huff_install(struct jpeg_decompress_struct *ci, sl_huff **h);
void sl_huff_free(sl_huff *h);
/* Files with restart markers (huff.c, "restart intervals"): decode only
 * the intervals that hold MCU rows [row0, row1) x MCU columns [col0,
 * col1] (iMCU rows and columns, as decode_yuv.c's strip; the columns the
 * coefficient controller IDCTs), with huff.c's decoder or, libjpeg = 1,
 * around libjpeg's. base/len: the stream (the memory source's bytes);
 * rst: sl_jpeg_scan_restarts' intervals of it. After
 * jpeg_start_decompress; SL_OK: installed, and the caller must start
 * reading at iMCU row *first_row (libjpeg's row counters moved past the
 * rows before it, see decode_yuv.c); SL_ENOTSUP: not such a file (no
 * restart interval, not baseline single-scan, offsets that do not match),
 * nothing changed; SL_ENOMEM. */
typedef struct sl_huff_plan {
    const uint8_t *base;
    size_t len;
    const struct sl_jpeg_restarts *rst;
    unsigned row0, row1, col0, col1;
} sl_huff_plan;
int sl_huff_seek(struct jpeg_decompress_struct *ci, sl_huff **h, const sl_huff_plan *plan,
                 int libjpeg, unsigned *first_row);
typedef struct sl_yuv_buf {
    uint8_t *p;
    size_t cap;
    sl_huff *huff;            /* huff.c's state (NULL until first used) */
    int libjpeg_huff;         /* SLUICE_HUFF=libjpeg: keep libjpeg's entropy decoder */
    int no_seek;              /* SLUICE_SEEK=off: restart files decoded from the start, by libjpeg */
    const uint8_t *jpeg;      /* the stream being decoded and its restart intervals */
    size_t len;               /* (decode.c sets them before each call) */
    const struct sl_jpeg_restarts *rst;
} sl_yuv_buf;
int sl_decode_yuv(struct jpeg_decompress_struct *ci, sl_yuv_buf *buf, const sl_crop *crop,
                  const sl_out_spec *out, const char *fn);
/* Its first half: the planes of the crop's strip and the crop's window in
 * each, *np of them (3 or 1), views into buf (valid until buf is used
 * again), ready for sl_resample_planes. */
int sl_decode_yuv_planes(struct jpeg_decompress_struct *ci, sl_yuv_buf *buf, const sl_crop *crop,
                         int ow, int oh, sl_plane_view pv[3], int *np, const char *fn);
/* sl_decode_yuv_planes under sl_decoder's guard (decode.c), for benchmarks
 * and tests that time or check the two halves apart: the JPEG's structure
 * checked, its header read, the planes decoded into the decoder's scratch
 * (valid until the decoder's next call). SL_ENOTSUP: not YCbCr or gray. */
int sl_decode_crop_planes(sl_decoder *d, const uint8_t *jpeg, size_t len, const sl_crop *crop,
                          int ow, int oh, sl_plane_view pv[3], int *np);

/* ------------------------------------------------------------------ sample */
/* Write one sample from RGB u8 (out->h x out->w, packed rows) as out
 * says: u8 NHWC copies; f32 layouts store (v - mean[c]) / std[c]. */
void sl_store_sample(const uint8_t *rgb, const sl_out_spec *out);
/* Resize src (sh x sw RGB u8, row pitch sp bytes) to out's w x h with
 * records/resize.c's filter and store it as sl_store_sample would, in one
 * pass (pipeline/image/resample.c): u8 bit-identical to sl_resize_rgb_u8 then
 * sl_store_sample; f32 normalizes the unrounded resized value, so it
 * differs from that path by at most 0.5/std[c]. mean/std may be NULL for
 * u8. Invalid arguments leave dst untouched. */
void sl_resample_sample(const uint8_t *src, int sw, int sh, int sp, const sl_out_spec *out);
/* Resize np planes (3: Y, Cb, Cr of JFIF YCbCr; 1: gray) each over its
 * own window to out's w x h, convert to RGB at that size (clamped to 0..255),
 * mirror when flip, and store as sl_store_sample would (u8 rounded; f32
 * (v - mean[c]) / std[c] from the unrounded value). resample_planes.c's
 * DESIGN comment gives the filter. SL_EINVAL for bad arguments,
 * SL_ENOMEM when a large output's scratch cannot be had; dst is then
 * untouched. */
int sl_resample_planes(const sl_plane_view *pl, int np, const sl_out_spec *out);
/* Bytes of one sample in a layout. */
size_t sl_sample_bytes(int h, int w, sl_layout layout);

#endif /* SL_IMAGE_H */
