/*
 * tests/fuzz/util.h - what the libFuzzer targets of tests/fuzz share.
 *
 * Parsers that only take a path get the fuzz input through a file in a
 * per-process scratch directory (on /dev/shm when it exists: no disk I/O
 * per execution), removed at exit.
 */
#ifndef SL_FUZZ_UTIL_H
#define SL_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The scratch directory of this process (created on first use). */
const char *fz_dir(void);
/* fz_dir()/name, in a static buffer per call site's choice (caller copies
 * when it needs two). */
const char *fz_path(const char *name, char *buf, size_t cap);
/* Replace the file path with data[0..n) (created 0644). Aborts on failure:
 * the harness, not the parser under test, is broken then. */
void fz_write(const char *path, const void *data, size_t n);
/* rm -rf path's contents except path itself. */
void fz_clean(const char *dir);
/* Split data at a little-endian u32 length prefix: the first part is the
 * *a_len bytes after the prefix (clamped to what is there), the rest is the
 * second part. Inputs shorter than 4 bytes give two empty parts. */
void fz_split(const uint8_t *data, size_t n, const uint8_t **a, size_t *a_len,
              const uint8_t **b, size_t *b_len);

#endif

/* ------------------------------------------------ shared with seeds.c */
struct sl_pipeline_config;
/* Write a small image JPEG (w x h, a gradient that depends on seed) into
 * *out (malloc'd, *len bytes). Aborts on failure. */
void fz_jpeg(int w, int h, unsigned seed, uint8_t **out, size_t *len);
/* The serialized image Example sluice's converter writes for jpeg, label. */
void fz_example(const uint8_t *jpeg, size_t len, int64_t label, uint8_t **out, size_t *out_len);
/* The resume-state target's dataset: dir/train-00000-of-00001.tfrecord (and
 * its index) of FZ_STATE_RECORDS records, and the pipeline configuration
 * over it that fuzz_resume_state.c and its seeds share (*cfg's data points
 * into path, which must outlive it). */
#define FZ_STATE_RECORDS 10
void fz_state_dataset(const char *dir, char *path, size_t cap);
void fz_state_config(struct sl_pipeline_config *cfg, const char *path);

/* ------------------------------- the planar decode targets (huff, seek) */
struct sl_crop;
struct sl_plane_view;
/* The crop picked by the input's first byte k for a W x H image: a
 * random-resized crop seeded by k, or the whole image when bit 7 is set;
 * the output 224 x 224, or for odd k a tenth of the crop (DCT scales
 * below 8/8). */
void fz_crop(unsigned k, int W, int H, struct sl_crop *c, int *ow, int *oh);
/* Do two decodes' planes (na and nb of them) hold the same pixels? */
int fz_same_planes(const struct sl_plane_view *a, int na, const struct sl_plane_view *b, int nb);
