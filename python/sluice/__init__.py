"""sluice: record shards in, decoded and augmented batches out, from Python.

    import sluice, torch
    pipe = sluice.Pipeline("data/imagenet", image_size=224, batch=256, workers=8)
    for images, labels in pipe:
        x, y = torch.from_dlpack(images), torch.from_dlpack(labels)
        ...

The pipeline is sluice's C engine (DESIGN.md section 4) behind a small
extension module on the stable ABI; Python never enters the library. Batches
are DLPack tensors: torch.from_dlpack, numpy.from_dlpack and
jax.dlpack.from_dlpack take them without a copy.

Lifetime of a batch: its images are the pipeline's own batch slot, lent to
you until `hold` more batches have been taken (hold=1 on the CPU: until the
next step of the loop; hold=2 with a device), then the slot is refilled with
a later batch. Its memory stays valid as long as any tensor over it lives
(even after close()), but its content changes: a tensor kept past that point
shows another batch. Pass copy=True to keep batches (each gets memory of its
own). labels, record_ids and epochs are always small copies of their own.

Errors are sluice.Error subclasses whose message names the file and record
(sluice.CorruptError: "train-00003-of-00016.tfrecord: record 41 @ 9123: data
CRC mismatch").
"""

import json
import os

from ._sluice import (  # noqa: F401  (re-exported)
    ConfigError,
    CanceledError,
    CorruptError,
    DeviceError,
    Error,
    ExistsError,
    ImageError,
    NotFoundError,
    NotSupportedError,
    OutOfMemoryError,
    SystemIOError,
    Tensor,
    __version__,
    _convert,
    _error,
    _inspect,
    _Pipeline,
    _verify,
)

__all__ = [
    "Pipeline", "Batch", "Tensor", "convert", "verify", "inspect", "Error", "ConfigError", "CanceledError",
    "CorruptError", "DeviceError", "ExistsError", "ImageError", "NotFoundError",
    "NotSupportedError", "OutOfMemoryError", "SystemIOError",
]

# pipeline.h's enums, by name
_SHUFFLE = {"none": 0, "buffer": 1, "global": 2}
_LAYOUT = {"nhwc-u8": 0, "nhwc-f32": 1, "nchw-f32": 2}
_ON_ERROR = {"skip": 0, "fail": 1}
_RANK_SPLIT = {"files": 0, "records": 1}


class Batch(tuple):
    """(images, labels), plus .index (batch number in the run), .record_ids
    (int64: which record filled each slot) and .epochs (int32). All are
    sluice.Tensor objects (DLPack)."""

    def __new__(cls, index, images, labels, record_ids, epochs):
        self = tuple.__new__(cls, (images, labels))
        self.index = index
        self.record_ids = record_ids
        self.epochs = epochs
        return self

    @property
    def images(self):
        return self[0]

    @property
    def labels(self):
        return self[1]


def _device_index(device):
    if device is None or device == "cpu":
        return -1
    if isinstance(device, int):
        return device
    text = str(device)
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ConfigError(f"sluice.Pipeline: device={device!r}: None, 'cpu', 'cuda' or 'cuda:N'")


def _shuffle(shuffle):
    """'none' | 'global' | 'buffer' | 'buffer:N' -> (mode, buffer or None)."""
    text = str(shuffle)
    if text in ("none", "global", "buffer"):
        return _SHUFFLE[text], None
    if text.startswith("buffer:") and text[7:].isdigit() and int(text[7:]) > 0:
        return _SHUFFLE["buffer"], int(text[7:])
    raise ConfigError(f"sluice.Pipeline: shuffle={shuffle!r}: 'none', 'buffer:N' or 'global'")


def _pick(table, what, value):
    if value not in table:
        raise ConfigError(f"sluice.Pipeline: {what}={value!r}: one of {', '.join(table)}")
    return table[value]


class Pipeline:
    """An iterator of Batch (images, labels) read from record shards.

    data: a dataset directory (dataset.json or NAME-*-of-*.tfrecord shards),
        a glob of shard files, or one .tfrecord file.
    image_size: S or (H, W) of the output images.
    batch: samples per batch (the last may be smaller unless drop_remainder).
    shuffle: 'buffer:N' (tf.data's shuffle buffer of N records), 'global' (a
        permutation of all records per epoch) or 'none'; default 'buffer:10000'
        for training, 'none' (and a fixed file order) with train=False.
    workers: decode/augment threads, 0 = one per core.
    seed: seeds shuffles and augmentation: the same seed gives the same bytes,
        whatever the numbers of threads.
    train: random-resized-crop + flip (True) or resize + center crop (False).
    layout: 'nchw-f32' (normalized, torch's order), 'nhwc-f32', or 'nhwc-u8'
        (raw pixels, for normalization on the GPU).
    device: None (host batches) or 'cuda:N': images land in device memory
        through the pipeline's pinned ring and copy stream (the consumer's
        stream waits on the copy; no host sync).
    rank, world: this process's part of the data (torchrun's RANK and
        WORLD_SIZE); rank_split='files' gives rank r the shards i % world == r,
        'records' every world-th record (pipeline.h, sl_rank_split).
    label_offset: subtracted from stored labels (TensorFlow's ImageNet shards
        store 1..1000: pass 1); None takes dataset.json's (0 without one).
    epochs: passes over the data in one fused stream (0 = forever); each
        sample's epoch is in batch.epochs.
    copy: give each batch memory of its own (for batches kept past the next
        step); otherwise images are lent (see the module's doc).
    hold: batches lent at once (default 1 on the CPU, 2 with a device).
    Others: split, readers, prefetch, cycle, block, drop_remainder, on_error
        ('skip' refills a bad record's slot and lists it in stats()['bad'];
        'fail' raises), max_bad, max_pixels (a JPEG whose header claims more
        pixels is a bad record, refused before decoding; default 2**26),
        scale, ratio, flip, crop_fraction, mean, std (0..255 units).

    Errors: sluice.NotFoundError for missing data, sluice.ConfigError for bad
    settings, sluice.CorruptError naming file and record, at creation or
    from next(). Ctrl-C while waiting raises KeyboardInterrupt within 0.1 s.
    """

    def __init__(self, data, image_size=224, batch=256, shuffle=None, workers=0, seed=0,
                 train=True, layout="nchw-f32", device=None, rank=0, world=1,
                 label_offset=None, *, split="train", epochs=1, readers=0, prefetch=0,
                 cycle=0, block=0, drop_remainder=False, on_error="skip", max_bad=0, max_pixels=0,
                 rank_split="files", scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=True,
                 crop_fraction=0.875, mean=(123.675, 116.28, 103.53),
                 std=(58.395, 57.12, 57.375), copy=False, hold=None):
        if isinstance(image_size, int):
            height = width = image_size
        else:
            height, width = image_size
        dev = _device_index(device)
        cfg = {
            "data": os.fspath(data), "split": split, "height": int(height), "width": int(width),
            "batch": int(batch), "workers": int(workers), "seed": int(seed),
            "transform": 0 if train else 1, "layout": _pick(_LAYOUT, "layout", layout),
            "device": dev, "rank": int(rank), "world": int(world), "epochs": int(epochs),
            "readers": int(readers), "cycle": int(cycle), "block": int(block),
            "drop_remainder": int(bool(drop_remainder)),
            "on_error": _pick(_ON_ERROR, "on_error", on_error), "max_bad": int(max_bad),
            "max_pixels": int(max_pixels),
            "rank_split": _pick(_RANK_SPLIT, "rank_split", rank_split),
            "scale_min": float(scale[0]), "scale_max": float(scale[1]),
            "ratio_min": float(ratio[0]), "ratio_max": float(ratio[1]),
            "flip": int(bool(flip)), "crop_fraction": float(crop_fraction),
            "label_offset": -1 if label_offset is None else int(label_offset),
        }
        for i in range(3):
            cfg[f"mean{i}"] = float(mean[i])
            cfg[f"std{i}"] = float(std[i])
        if shuffle is None and not train:
            shuffle = "none"  # eval reads in order (the CLI's --eval)
            cfg["shuffle_files"] = 0
        mode, size = _shuffle("buffer:10000" if shuffle is None else shuffle)
        cfg["shuffle"] = mode
        if size is not None:
            cfg["shuffle_buffer"] = size
        self._hold = int(hold) if hold is not None else (1 if dev < 0 else 2)
        if prefetch == 0 and self._hold > 1:
            # pipeline.c's automatic ring (one batch with the consumer, one
            # filling, what the workers straddle) plus the extra batches held
            w = int(workers) or os.cpu_count() or 1
            prefetch = 2 + max(1, -(-2 * w // int(batch))) + self._hold - 1
        cfg["prefetch"] = int(prefetch)
        self._cfg = cfg
        self._copy = bool(copy)
        self._c = _Pipeline(cfg, None, self._hold, self._copy)

    def __iter__(self):
        return self

    def __next__(self):
        t = self._c.next()
        if t is None:
            raise StopIteration
        return Batch(*t)

    def close(self):
        """Stop the threads and give back the held batches. Tensors taken
        before stay readable and the held batches keep their bytes (their
        memory lives while any tensor over it does); next() then raises
        sluice.CanceledError."""
        self._c.close()

    @property
    def closed(self):
        return self._c.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def state_dict(self):
        """The position after the last batch taken (no data): save it with a
        checkpoint; load_state_dict on a Pipeline made with the same settings
        continues with exactly the batches this one would give next."""
        return {"version": 1, "pipeline": self._c.state()}

    def load_state_dict(self, state):
        """Continue from state_dict()'s position: the pipeline is made anew
        (threads and ring), the data settings must be those it was saved
        with (checked: sluice.ConfigError names what differs); workers,
        readers and prefetch may change."""
        if not isinstance(state, dict) or state.get("version") != 1 or "pipeline" not in state:
            raise ConfigError("sluice.Pipeline.load_state_dict: not a sluice state_dict "
                              "(a dict with version 1 and 'pipeline')")
        new = _Pipeline(self._cfg, str(state["pipeline"]), self._hold, self._copy)
        old, self._c = self._c, new
        old.close()

    def stats(self):
        """Figures since the pipeline was made: batches, samples, elapsed_s,
        records_per_epoch, shuffle_buffer, bad_records and the first bad
        records' messages ('bad'), and per stage ('read', 'shuffle', 'map',
        'load'): threads, items, bytes, busy_s, wait_in_s, wait_out_s,
        queue_fill."""
        return self._c.stats()


def convert(out, *, folder=None, list=None, idx_images=None, idx_labels=None, name="train",
            shards=0, format="tfrecord", threads=0, quality=95, resize_short=0, shuffle=True,
            seed=0, resume=False, strict=False, label_offset=0, class_names=None,
            fsync=True, max_pixels=0, progress=None):
    """Convert images into record shards in `out` (the library's converter,
    as `sluice convert`): one of folder=DIR (DIR/<class>/<image>, classes
    sorted by name), list=FILE (lines "path<TAB>label") or idx_images= and
    idx_labels= (MNIST IDX files, gzip or plain). Shards are written
    atomically with their index files and dataset.json; resume=True keeps
    the shards of an earlier run. progress(done, total, bytes) is called a
    few times a second.

    Returns a dict: inputs, records, skipped, bytes, passthrough, reencoded,
    shards, shards_kept, and skipped_inputs, a list of (input, reason) for
    every undecodable input (strict=True makes the first one an error).
    A KeyboardInterrupt or an exception from progress is raised once the
    conversion is over (shards already written are whole; resume=True
    finishes the job).
    """
    sources = [s for s, given in (("folder", folder is not None), ("list", list is not None),
                                  ("idx", idx_images is not None or idx_labels is not None))
               if given]
    if len(sources) != 1:
        raise ConfigError("sluice.convert: give exactly one of folder=, list= or "
                          "idx_images= with idx_labels=")
    if sources[0] == "idx" and (idx_images is None or idx_labels is None):
        raise ConfigError("sluice.convert: idx_images= and idx_labels= go together")
    if format not in ("tfrecord", "lmdb"):
        raise ConfigError(f"sluice.convert: format={format!r}: 'tfrecord' or 'lmdb'")
    cfg = {
        "source": sources[0], "out_dir": os.fspath(out), "name": name, "shards": int(shards),
        "format": format, "threads": int(threads), "quality": int(quality),
        "resize_short": int(resize_short), "shuffle": int(bool(shuffle)), "seed": int(seed),
        "resume": int(bool(resume)), "strict": int(bool(strict)),
        "label_offset": int(label_offset), "fsync": int(bool(fsync)),
        "max_pixels": int(max_pixels),
    }
    if folder is not None:
        cfg["input"] = os.fspath(folder)
    if list is not None:
        cfg["input"] = os.fspath(list)
    if idx_images is not None:
        cfg["idx_images"] = os.fspath(idx_images)
        cfg["idx_labels"] = os.fspath(idx_labels)
    if class_names is not None:
        cfg["class_names"] = [str(c) for c in class_names]
    return _convert(cfg, progress)


def verify(data, *, split=None, all=False, label_range=None, raise_on_problem=True,
           progress=None):
    """Read every record of a dataset and check what a training run would
    trip over later (the library's check, as `sluice verify`): both TFRecord
    CRCs, the Example (image/encoded and image/class/label), the JPEG
    (marker structure whole, not CMYK, its size equal to image/height x
    image/width), the label range (label_range=(lo, hi) of stored labels,
    default from dataset.json's num_classes and label_offset), the shards'
    index files where they have one, dataset.json's counts.

    data: a dataset directory (dataset.json, or NAME-NNNNN-of-NNNNN shards
    as TensorFlow writes them), a glob, one shard, or an LMDB store. split:
    only that split. all: go on past problems and list them all (else stop
    at the first). progress(records, files_done, files_total, bytes) is
    called a few times a second on long reads; Ctrl-C stops the read.

    Returns a dict: ok, records, files, shards_without_index, and problems,
    a list of dicts (file, record, offset: None when the problem is with the
    file as a whole or the record has no offset (LMDB); split, status,
    what, and message: "FILE: record N @ OFFSET: what"). With
    raise_on_problem (the default) a problem raises instead: the
    sluice.Error subclass of the first problem's status (CorruptError,
    ImageError, NotFoundError for a missing shard) with its message, the
    report in e.report. A PATH that cannot be opened at all raises
    sluice.NotFoundError (or ConfigError) whatever raise_on_problem says.
    """
    rng = None
    if label_range is not None:
        lo, hi = label_range
        rng = (int(lo), int(hi))
    rep = _verify(os.fspath(data), split, bool(all), rng, progress)
    rep = dict(ok=not rep["problems"], **rep)
    if rep["problems"] and raise_on_problem:
        first = rep["problems"][0]
        e = _error(first["code"], first["message"])
        e.report = rep
        raise e
    return rep


def inspect(data, *, split=None, progress=None):
    """What is in a dataset (the library's summary, as `sluice inspect
    --json`), from reading every record once (CRCs checked): a dict with
    path, records, shards, bytes, mean_record_bytes, labels ({stored label:
    records}), width and height ({min, max, mean} of image/width and
    image/height, or the JPEG header's), formats ({image/format: records}),
    unknown_size (records of unreadable size, when any); num_classes,
    label_offset and class_names from dataset.json when it has them;
    splits: {name: the same per split, with format ('tfrecord' or 'lmdb'),
    shards_without_index, and listed (dataset.json's records, shards,
    bytes)}; warnings: where dataset.json's counts differ from what was read.

    data and split as for verify; progress(records, files_done, files_total,
    bytes). A record that cannot be read raises sluice.CorruptError (or the
    reader's error) naming file, record and offset.
    """
    out = json.loads(_inspect(os.fspath(data), split, progress))

    def int_labels(d):
        d["labels"] = {int(k): int(v) for k, v in d["labels"].items()}

    int_labels(out)
    for sp in out["splits"].values():
        int_labels(sp)
    return out
