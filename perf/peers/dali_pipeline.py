#!/usr/bin/env python3
"""perf/peers/dali_pipeline.py - NVIDIA DALI's CPU pipeline, a peer of perf/pipeline-compare.

    dali_pipeline.py --data DIR [--split train] [--image-size 224] [--batch 64]
                     [--workers W] [--shuffle 10000] [--seed 1]
                     [--seconds T | --batches N] [--warmup 3]

The same job as `sluice profile` (train transform, 224x224, batch 64), written
as DALI's ResNet-50 training examples write it, with every operator on the
CPU (device_id=None: no GPU is needed or touched), over the same shards and
their .idx files (DALI's own index format, which sluice writes):

    fn.readers.tfrecord(path=shards, index_path=.idx files,
                        random_shuffle=True, initial_fill=10000)
    -> fn.decoders.image_random_crop(device="cpu": libjpeg-turbo, ROI decode
                        of the random crop; area 0.08-1, aspect 3/4-4/3,
                        10 attempts)
    -> fn.resize(224x224, INTERP_LINEAR, antialias: bilinear when enlarging,
                 a triangle filter as wide as the shrink when shrinking)
    -> fn.crop_mirror_normalize(FLOAT, CHW, ImageNet mean/std in 0..255
                 units, mirror = fn.random.coin_flip(0.5))

Output per batch: images (64, 3, 224, 224) float32, labels (64, 1) int64:
sluice's default layout and type.

Resize filter: sluice resizes bilinearly when the crop shrinks by less than
2 and by area averaging (a box filter) from 2 up; DALI has no area filter,
its antialiased linear filter is the nearest (the same bilinear up to a
shrink of 1, a triangle of the shrink's width beyond). On the 500x375-like
corpora most crops shrink by less than 2, where the two differ least.

Threads: num_threads = --workers (0 = one per core), DALI's CPU worker
pool; DALI adds its executor's and the reader's own threads, as sluice adds
its readers. prefetch_queue_depth 2 (DALI's default).

Timing: as the other peers (peer_timing.py): --warmup batches (the shuffle
buffer fills), then batches for --seconds T or exactly --batches N, and one
JSON line {"system":"dali","images_per_sec":X,"batches":B,"seconds":S,...}.
"""
import glob
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import parse_args, time_batches  # noqa: E402

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def shards_of(data, split):
    """The split's shards and their DALI index files (sluice writes them)."""
    files = sorted(glob.glob(os.path.join(data, f"{split}-*-of-*.tfrecord")))
    if not files:
        sys.exit(f"dali_pipeline: no {split}-*-of-*.tfrecord in {data}")
    idx = [f + ".idx" for f in files]
    missing = [i for i in idx if not os.path.exists(i)]
    if missing:
        sys.exit(f"dali_pipeline: index file missing: {missing[0]}")
    return files, idx


def make_pipeline(files, idx, batch, threads, seed, size, shuffle):
    """The built CPU pipeline; run() gives (images (N, 3, size, size)
    float32, labels (N, 1) int64). Also perf/peers/torch_loader_train.py's
    --loader dali."""
    from nvidia.dali import fn, pipeline_def, types
    import nvidia.dali.tfrecord as tfrec

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=seed,
                  prefetch_queue_depth=2)
    def train_pipe():
        rec = fn.readers.tfrecord(
            path=files, index_path=idx, random_shuffle=True, initial_fill=shuffle,
            features={
                "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
            }, name="Reader")
        img = fn.decoders.image_random_crop(
            rec["image/encoded"], device="cpu", output_type=types.RGB,
            random_aspect_ratio=[3.0 / 4.0, 4.0 / 3.0], random_area=[0.08, 1.0], num_attempts=10)
        img = fn.resize(img, resize_x=size, resize_y=size, interp_type=types.INTERP_LINEAR,
                        antialias=True)
        img = fn.crop_mirror_normalize(img, dtype=types.FLOAT, output_layout="CHW", mean=MEAN,
                                       std=STD, mirror=fn.random.coin_flip(probability=0.5))
        return img, rec["image/class/label"]

    pipe = train_pipe()
    pipe.build()
    return pipe


def main():
    args = parse_args(__doc__, "0 = one per core", lambda ap: ap.add_argument(
        "--shuffle", type=int, default=10000, help="reader shuffle buffer (initial_fill) in records"))

    import numpy as np

    files, idx = shards_of(args.data, args.split)
    threads = args.workers if args.workers > 0 else os.cpu_count()
    size = args.image_size
    pipe = make_pipeline(files, idx, args.batch, threads, args.seed, size, args.shuffle)

    def batches():
        while True:
            img, lab = pipe.run()
            yield img, lab

    def shape_of(img):
        a = np.asarray(img.as_tensor())
        return a.shape, a.dtype == np.float32

    import nvidia.dali as dali
    expect = (args.batch, 3, size, size)
    time_batches(batches(), args, "dali", shape_of, expect, {
        "workers": threads,
        "cores": os.cpu_count(),
        "dali": dali.__version__,
    })


if __name__ == "__main__":
    main()
