/*
 * pipeline/image/gdec_int.h - the GPU decode stage (`--decode gpu`): the hooks
 * the graph calls. gdec_cuda.cu implements it with nvJPEG (loaded at run
 * time, nvjpeg_api.h) and a crop-resize kernel; gdec_nocuda.c is the
 * build without CUDA (gpu: SL_ENOTSUP; auto: the CPU path).
 *
 * How a batch goes through it (DESIGN.md section 4's graph, unchanged
 * up to the map workers):
 *   - a map worker claims sample s (same shuffle, same numbering, same
 *     crop and flip draws from sl_rng_for(seed, epoch, id) as the CPU
 *     path: map.c's transform computes them before this hook), then calls
 *     sl_gdec_stage: when nvJPEG can decode the JPEG (the hardware
 *     backend: nvjpegJpegStreamParse + nvjpegDecodeBatchedSupported; the
 *     hybrid one: nvjpegGetImageInfo, 1 or 3 components), its bytes are
 *     copied into the slot's staging entry and the sample is done;
 *     otherwise (progressive for the hardware decoder, CMYK, what nvJPEG
 *     rejects, and a baseline file without DHT, which leaves its Huffman
 *     tables to the standard ones as libjpeg-turbo allows and nvJPEG is
 *     not known to) SL_ENOTSUP and the worker decodes it on the CPU path
 *     into the host slot, as without this stage;
 *   - the worker that completes batch b in order calls sl_gdec_submit
 *     (instead of sl_loader_submit, without p->mu; one at a time): the
 *     host-decoded samples are copied to the device slot, the staged JPEGs
 *     decoded with one nvjpegDecodeBatched to full-size RGB in device
 *     memory, and one kernel crops, resizes (records/resize.c's filter:
 *     area averaging when shrinking by 2 or more, else bilinear with
 *     half-pixel centres), mirrors, normalizes and lays them out into the
 *     device slot; the slot's event is recorded after. If nvJPEG fails the
 *     batch, its images are decoded on the CPU there instead.
 * The device batch (sl_batch.d_data) is then the batch; the host slot
 * (sl_batch.data) holds only the CPU-decoded samples.
 *
 * Threading: stage is called by the map workers concurrently, each on its
 * own (slot, position) entry and its own worker index; submit by one
 * thread at a time (map.c's submit_busy) for a slot whose samples are all
 * staged (p->mu orders the two); describe from any thread.
 */
#ifndef SL_GDEC_INT_H
#define SL_GDEC_INT_H

#include "pipeline/pipeline_int.h"

typedef struct sl_gdec sl_gdec;

/* Resolve cfg->decode for a pipeline of `workers` workers and `nslots`
 * ring slots: *out NULL means the CPU path (SL_DECODE_CPU, or
 * SL_DECODE_AUTO without a device batch, a CUDA device or libnvjpeg, or
 * when anything of the stage fails to start). SL_DECODE_GPU without them fails: SL_EINVAL (device < 0), SL_ENOTSUP
 * ("--decode gpu: libnvjpeg not found: ...", no CUDA in the build),
 * SL_ECUDA. src (records' files, for messages) must outlive the stage. */
int sl_gdec_create(const sl_pipeline_config *cfg, unsigned workers, unsigned nslots,
                   const sl_source_set *src, sl_gdec **out);
/* After the pipeline's threads are joined (waits for its stream). */
void sl_gdec_destroy(sl_gdec *g);
/* Stage sample k of ring slot `slot` (see above); jflags are the JPEG's
 * sl_jpeg_scan flags (SL_JPEG_STD_HUFF: the CPU). SL_OK: staged for the
 * GPU; SL_ENOTSUP: decode it on the CPU (the entry is marked so); other
 * codes are fatal (out of memory). */
int sl_gdec_stage(sl_gdec *g, unsigned worker, unsigned slot, unsigned k, uint64_t id,
                  const uint8_t *jpeg, size_t len, unsigned jflags, int W, int H,
                  const sl_crop *crop, int flip);
/* Position `from` of the slot's entries becomes position `to` (swapped):
 * a batch whose left-out samples are closed up (map.c) moves each staged
 * entry with its host sample before sl_gdec_submit. Same caller as submit. */
void sl_gdec_move(sl_gdec *g, unsigned slot, unsigned from, unsigned to);
/* Batch of n samples in `slot` into dev (the loader's device slot), then
 * cudaEventRecord(event) on the stage's stream. host is the slot's pinned
 * host batch. */
int sl_gdec_submit(sl_gdec *g, unsigned slot, unsigned n, void *host, void *dev, void *event);
/* "gpu: nvJPEG 12.4 hardware backend (libnvjpeg.so.12); 6200 images on
 * the GPU, 38 on the CPU" */
void sl_gdec_describe(sl_gdec *g, char *buf, size_t cap);

#endif /* SL_GDEC_INT_H */
