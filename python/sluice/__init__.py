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
CRC mismatch"), or the URL of a remote shard (sluice.NotFoundError for a
404, sluice.PermissionDeniedError, a PermissionError, for a 401/403).
"""

import json as _json
import math as _math
import operator as _operator
import os as _os

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
    PermissionDeniedError,
    SystemIOError,
    Tensor,
    __version__,
    _convert,
    _error,
    _inspect,
    _io_configure,
    _io_opts,
    _Pipeline,
    _verify,
)

__all__ = [
    "Pipeline", "Batch", "Tensor", "convert", "verify", "inspect", "Error", "ConfigError", "CanceledError",
    "CorruptError", "DeviceError", "ExistsError", "ImageError", "NotFoundError",
    "NotSupportedError", "OutOfMemoryError", "PermissionDeniedError", "SystemIOError",
]

# pipeline.h's enums, by name
_SHUFFLE = {"none": 0, "buffer": 1, "global": 2}
_LAYOUT = {"nhwc-u8": 0, "nhwc-f32": 1, "nchw-f32": 2}
_ON_ERROR = {"skip": 0, "fail": 1}
_RANK_SPLIT = {"files": 0, "records": 1}

_U64 = 2**64 - 1
_I63 = 2**63 - 1


def _max_threads():
    """Threads a setting may ask for: 8 per core (at least 16); more only
    thrash (and 1000 threads on 2 cores is a typo, not a plan)."""
    return max(16, 8 * (_os.cpu_count() or 1))


# Argument checks: every setting is checked against its meaning and its C
# field's range here, and a wrong type or value raises ConfigError naming the
# setting (never a bare TypeError/OverflowError, never a value cut to 32 bits).
def _int(where, name, value, lo, hi, meaning=""):
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise ConfigError(f"{where}: {name}={value!r}: an integer{meaning}, not "
                          f"{type(value).__name__}")
    v = _operator.index(value)
    if not lo <= v <= hi:
        raise ConfigError(f"{where}: {name}={v}: out of range, {lo} to {hi}{meaning}")
    return v


def _float(where, name, value, ok, meaning):
    if isinstance(value, (bool, str, bytes)):
        raise ConfigError(f"{where}: {name}={value!r}: a number{meaning}")
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where}: {name}={value!r}: a number{meaning}") from None
    if not _math.isfinite(v) or not ok(v):
        raise ConfigError(f"{where}: {name}={value!r}: out of range{meaning}")
    return v


def _pair(where, name, value, ok, meaning):
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {name}={value!r}: a pair (lo, hi){meaning}") from None
    lo = _float(where, name, lo, lambda v: True, meaning)
    hi = _float(where, name, hi, lambda v: True, meaning)
    if not ok(lo, hi):
        raise ConfigError(f"{where}: {name}={value!r}: out of range{meaning}")
    return lo, hi


def _triple(where, name, value, ok, meaning):
    try:
        items = list(value)
    except TypeError:
        items = []
    if len(items) != 3:
        raise ConfigError(f"{where}: {name}={value!r}: three numbers (R, G, B){meaning}")
    return [_float(where, name, v, ok, meaning) for v in items]


def _bool(where, name, value):
    if value is True or value is False or (type(value) is int and value in (0, 1)):
        return bool(value)
    if type(value).__name__ == "bool_":  # numpy.bool_
        return bool(value)
    raise ConfigError(f"{where}: {name}={value!r}: True or False")


def _path(where, name, value):
    try:
        p = _os.fspath(value)
    except TypeError:
        raise ConfigError(f"{where}: {name}={value!r}: a path (str, bytes or os.PathLike)") from None
    if not p:
        raise ConfigError(f"{where}: {name}: an empty path")
    return p  # str or bytes: the extension takes both (os.fsencode's bytes)


def _str(where, name, value):
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {name}={value!r}: a non-empty str")
    return value


class Batch(tuple):
    """(images, labels), plus .index (batch number in the run), .record_ids
    (int64: which record filled each slot) and .epochs (int32: each sample's
    epoch; the shuffle buffer mixes the end of one epoch with the start of
    the next, so use .epoch / .epoch_end to count epochs). All tensors are
    sluice.Tensor objects (DLPack; numpy.asarray takes host ones).

    .epoch: the epoch this step counts towards: sample positions
    index*batch*world onwards over records_per_epoch, the same on every rank.
    .epoch_end: True on the step in which an epoch's worth of samples is
    complete (and on the last batch of the run): evaluate and checkpoint
    there, once per epoch."""

    def __new__(cls, index, images, labels, record_ids, epochs, epoch=0, epoch_end=False):
        self = tuple.__new__(cls, (images, labels))
        self.index = index
        self.record_ids = record_ids
        self.epochs = epochs
        self.epoch = epoch
        self.epoch_end = epoch_end
        return self

    @property
    def images(self):
        """The images: (N, 3, H, W) float32, (N, H, W, 3) float32 or uint8."""
        return self[0]

    @property
    def labels(self):
        """The labels: (N,) int64."""
        return self[1]


def _device_index(device):
    if device is None:
        return -1
    if isinstance(device, int) and not isinstance(device, bool):
        return _int("sluice.Pipeline", "device", device, 0, 1023)
    text = str(device) if type(device).__name__ == "device" else device  # torch.device
    if text == "cpu":
        return -1
    if text == "cuda":
        return 0
    if isinstance(text, str) and text.startswith("cuda:") and text[5:].isdigit():
        return _int("sluice.Pipeline", "device", int(text[5:]), 0, 1023)
    raise ConfigError(f"sluice.Pipeline: device={device!r}: None, 'cpu', 'cuda' or 'cuda:N'")


def _shuffle(shuffle):
    """'none' | 'global' | 'buffer' | 'buffer:N' -> (mode, buffer or None)."""
    if isinstance(shuffle, str):
        if shuffle in ("none", "global", "buffer"):
            return _SHUFFLE[shuffle], None
        if shuffle.startswith("buffer:") and shuffle[7:].isdigit():
            n = int(shuffle[7:])
            if 1 <= n <= 2**40:
                return _SHUFFLE["buffer"], n
    raise ConfigError(f"sluice.Pipeline: shuffle={shuffle!r}: 'none', 'buffer:N' "
                      f"(N from 1 to 2**40 records) or 'global'")


def _pick(table, what, value):
    if not isinstance(value, str) or value not in table:
        raise ConfigError(f"sluice.Pipeline: {what}={value!r}: one of {', '.join(table)}")
    return table[value]


def _restore(kwargs, state):
    """Unpickle a Pipeline: made anew in this process at the pickled one's
    position (what multiprocessing's spawn and forkserver contexts do)."""
    p = Pipeline.__new__(Pipeline)
    p._setup(kwargs, state)
    return p


class Pipeline:
    """An iterator of Batch (images, labels) read from record shards.

    data: a dataset directory (dataset.json, or NAME-*-of-*.tfrecord or
        NAME-*-of-*.tar shards), a glob of shard files, or one .tfrecord or
        .tar (WebDataset) file (str, bytes or os.PathLike; names that are not
        UTF-8 work as os.fsencode gives them). Remote data: the same as a URL,
        https://host/dir or http://host/dir (read through its dataset.json)
        or s3://bucket/prefix (listed; credentials from AWS_ACCESS_KEY_ID,
        AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; AWS_REGION,
        AWS_ENDPOINT_URL for other S3 stores), read with ranged GETs.
    image_size: S or (H, W) of the output images, 1 to 16384.
    batch: samples per batch (the last may be smaller unless drop_remainder).
    shuffle: 'buffer:N' (tf.data's shuffle buffer of N records), 'global' (a
        permutation of all records per epoch) or 'none'; default 'buffer:10000'
        for training, 'none' (and a fixed file order) with train=False.
    workers: decode/augment threads, 0 = one per core (at most 8 per core).
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
        batch says which epoch its step counts towards (batch.epoch) and
        whether an epoch ends in it (batch.epoch_end); len(pipeline) is the
        number of batches of the run.
    copy: give each batch memory of its own (for batches kept past the next
        step); otherwise images are lent (see the module's doc).
    hold: batches lent at once (default 1 on the CPU, 2 with a device).
    label_key: WebDataset shards only: the label is the integer field
        label_key of each sample's .json member; None (default) reads the
        .cls member.
    io_retries, io_timeout, io_inflight: remote data only: at most this
        many tries after the first for a timeout, a reset, a 5xx or a 429
        (0 to 100; 0 = no retry; default: no count, a failed read is retried
        for 60 s from its first try, SLUICE_IO_RETRY_MS), seconds to connect
        and of a stall (1 to 3600; default 30) and ranged GETs in flight per
        reader (1 to 64; default 8). These are
        PROCESS-WIDE, as the CLI's --io-retries and friends: each one given
        applies to every remote read in this process from then on (other
        Pipelines, convert, verify, inspect included); None leaves that
        setting as it is (the default, or SLUICE_IO_RETRIES,
        SLUICE_IO_TIMEOUT_MS, SLUICE_IO_INFLIGHT from the environment,
        unless an earlier Pipeline set it).
    Others: split, readers, prefetch, cycle, block, drop_remainder, on_error
        ('skip' refills a bad record's slot and lists it in stats()['bad'];
        'fail' raises), max_bad, max_pixels (a JPEG whose header claims more
        pixels is a bad record, refused before decoding; default 2**26),
        scale, ratio, flip, crop_fraction, mean, std (0..255 units).

    Errors: sluice.NotFoundError for missing data (a URL's 404 too),
    sluice.ConfigError naming the setting for a bad value or type,
    sluice.CorruptError naming file and record, sluice.PermissionDeniedError
    (a PermissionError) when a remote store refuses (401/403), at creation
    or from next(); a remote shard that cannot be read after the retries
    raises naming its URL (without a password or signature), byte range,
    last HTTP status, the tries and the time. Ctrl-C while waiting raises
    KeyboardInterrupt within 0.1 s.

    Processes: a Pipeline belongs to the process that made it. In a child of
    fork() (multiprocessing's fork context, DataLoader workers) the
    inherited one can be closed and dropped, and next() raises
    sluice.NotSupportedError; make a new one there. Pickled (spawn and
    forkserver contexts), it is made anew at its state_dict() position.
    """

    def __init__(self, data, image_size=224, batch=256, shuffle=None, workers=0, seed=0,
                 train=True, layout="nchw-f32", device=None, rank=0, world=1,
                 label_offset=None, *, split="train", epochs=1, readers=0, prefetch=0,
                 cycle=0, block=0, drop_remainder=False, on_error="skip", max_bad=0, max_pixels=0,
                 rank_split="files", scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=True,
                 crop_fraction=0.875, mean=(123.675, 116.28, 103.53),
                 std=(58.395, 57.12, 57.375), copy=False, hold=None, label_key=None,
                 io_retries=None, io_timeout=None, io_inflight=None):
        kwargs = dict(locals())
        del kwargs["self"]
        self._setup(kwargs, None)

    @staticmethod
    def _io(w, kw):
        """(retries, timeout_ms, inflight) for _io_configure (None: as is);
        kwargs pickled by an older sluice have none of them."""
        retries, timeout, inflight = (kw.get(k) for k in ("io_retries", "io_timeout",
                                                          "io_inflight"))
        if retries is not None:
            retries = _int(w, "io_retries", retries, 0, 100,
                           " tries after the first (0 = no retry)")
        if timeout is not None:
            timeout = round(1000 * _float(w, "io_timeout", timeout, lambda v: 1 <= v <= 3600,
                                          " (seconds per request, 1 to 3600)"))
        if inflight is not None:
            inflight = _int(w, "io_inflight", inflight, 1, 64, " ranged GETs per reader")
        return retries, timeout, inflight

    def _setup(self, kw, state):
        w = "sluice.Pipeline"
        self._kwargs = kw
        image_size = kw["image_size"]
        if isinstance(image_size, (tuple, list)):
            if len(image_size) != 2:
                raise ConfigError(f"{w}: image_size={image_size!r}: S or (H, W)")
            height, width = image_size
        else:
            height = width = image_size
        side = " pixels"
        height = _int(w, "image_size", height, 1, 16384, side)
        width = _int(w, "image_size", width, 1, 16384, side)
        dev = _device_index(kw["device"])
        train = _bool(w, "train", kw["train"])
        world = _int(w, "world", kw["world"], 1, 65536, " processes")
        rank = _int(w, "rank", kw["rank"], 0, world - 1, f" (world={world})")
        batch = _int(w, "batch", kw["batch"], 1, 2**20, " samples")
        nthreads = _max_threads()
        workers = _int(w, "workers", kw["workers"], 0, nthreads,
                       f" threads (0 = one per core; {_os.cpu_count()} cores here)")
        readers = _int(w, "readers", kw["readers"], 0, nthreads, " threads (0 = 2)")
        label_offset = kw["label_offset"]
        cfg = {
            "data": _path(w, "data", kw["data"]), "split": _str(w, "split", kw["split"]),
            "height": height, "width": width, "batch": batch, "workers": workers,
            "seed": _int(w, "seed", kw["seed"], 0, _U64),
            "transform": 0 if train else 1, "layout": _pick(_LAYOUT, "layout", kw["layout"]),
            "device": dev, "rank": rank, "world": world,
            "epochs": _int(w, "epochs", kw["epochs"], 0, _I63, " (0 = forever)"),
            "readers": readers,
            "cycle": _int(w, "cycle", kw["cycle"], 0, 65536, " files (0 = 4)"),
            "block": _int(w, "block", kw["block"], 0, 2**20, " records (0 = 16)"),
            "drop_remainder": int(_bool(w, "drop_remainder", kw["drop_remainder"])),
            "on_error": _pick(_ON_ERROR, "on_error", kw["on_error"]),
            "max_bad": _int(w, "max_bad", kw["max_bad"], 0, _I63, " (0 = 1000)"),
            "max_pixels": _int(w, "max_pixels", kw["max_pixels"], 0, _I63, " (0 = 2**26)"),
            "rank_split": _pick(_RANK_SPLIT, "rank_split", kw["rank_split"]),
            "flip": int(_bool(w, "flip", kw["flip"])),
            "label_offset": -1 if label_offset is None else
            _int(w, "label_offset", label_offset, 0, 2**31 - 1, " (None = dataset.json's)"),
        }
        cfg["scale_min"], cfg["scale_max"] = _pair(w, "scale", kw["scale"],
                                                   lambda a, b: 0 < a <= b <= 1,
                                                   " (0 < lo <= hi <= 1)")
        cfg["ratio_min"], cfg["ratio_max"] = _pair(w, "ratio", kw["ratio"],
                                                   lambda a, b: 0 < a <= b, " (0 < lo <= hi)")
        cfg["crop_fraction"] = _float(w, "crop_fraction", kw["crop_fraction"],
                                      lambda v: 0 < v <= 1, " (0 < f <= 1)")
        mean = _triple(w, "mean", kw["mean"], lambda v: True, " (0..255 units)")
        std = _triple(w, "std", kw["std"], lambda v: v > 0, " (0..255 units, > 0)")
        for i in range(3):
            cfg[f"mean{i}"] = mean[i]
            cfg[f"std{i}"] = std[i]
        shuffle = kw["shuffle"]
        if shuffle is None and not train:
            shuffle = "none"  # eval reads in order (the CLI's --eval)
            cfg["shuffle_files"] = 0
        mode, size = _shuffle("buffer:10000" if shuffle is None else shuffle)
        cfg["shuffle"] = mode
        if size is not None:
            cfg["shuffle_buffer"] = size
        hold = kw["hold"]
        self._hold = (1 if dev < 0 else 2) if hold is None else _int(w, "hold", hold, 1, 64,
                                                                      " batches")
        prefetch = _int(w, "prefetch", kw["prefetch"], 0, 4096, " batches (0 = automatic)")
        if prefetch == 1:
            raise ConfigError(f"{w}: prefetch=1: 0 (automatic) or 2 to 4096 batches")
        if prefetch == 0 and self._hold > 1:
            # pipeline.c's automatic ring (one batch with the consumer, one
            # filling, what the workers straddle) plus the extra batches held
            nw = workers or _os.cpu_count() or 1
            prefetch = 2 + max(1, -(-2 * nw // batch)) + self._hold - 1
        cfg["prefetch"] = prefetch
        label_key = kw.get("label_key")
        if label_key is not None:
            cfg["label_key"] = _str(w, "label_key", label_key)
        self._cfg = cfg
        self._copy = _bool(w, "copy", kw["copy"])
        self._epoch = None
        self._io_opts = self._io(w, kw)  # checked with the rest, applied just before
        _io_configure(*self._io_opts)
        self._c = _Pipeline(cfg, state, self._hold, self._copy)

    def __reduce__(self):
        return _restore, (self._kwargs, self._c.state())

    def __iter__(self):
        """The pipeline is its own iterator (one pass over the run)."""
        return self

    def __next__(self):
        """The next Batch (images, labels); StopIteration after the run's
        last batch. Waits for it with the GIL released (Ctrl-C raises
        KeyboardInterrupt within 0.1 s). The images are lent until `hold`
        more batches are taken (copy=True: yours)."""
        t = self._c.next()
        if t is None:
            raise StopIteration
        epoch, end = self._epoch_of(t[0])
        return Batch(*t, epoch, end)

    def _epoch_plan(self):
        """(N, P, T, batches): records per epoch and sample positions per
        step, both counted over all ranks where the ranks agree on them
        (world 1, or rank_split='records'); positions of the whole run (None
        when endless) and this rank's batches in it (None when endless)."""
        if self._epoch is None:
            c = self._cfg
            st = self._c.stats()
            world, batch = c["world"], c["batch"]
            n = st["records_per_epoch_world"]
            if n > 0:
                per_step = batch * world
            else:  # rank_split='files' with world > 1: this rank's own shards
                n, per_step, world = st["records_per_epoch"], batch, 1
            total = batches = None
            if c["epochs"] > 0:
                total = c["epochs"] * n
                if c["drop_remainder"]:
                    total = total // per_step * per_step
                    batches = total // per_step
                else:
                    rank = c["rank"] if world > 1 else 0
                    mine = -(-(total - rank) // world) if total > rank else 0
                    batches = -(-mine // batch)
            self._epoch = (n, per_step, total, batches)
        return self._epoch

    def _epoch_of(self, index):
        n, per_step, total, batches = self._epoch_plan()
        if n == 0:
            return 0, False
        start = index * per_step
        end = (index + 1) * per_step if total is None else min((index + 1) * per_step, total)
        last = batches is not None and index == batches - 1
        return start // n, last or end // n > start // n

    @property
    def records_per_epoch(self):
        """Records in one epoch: over all ranks with world 1 or
        rank_split='records' (what batch.epoch counts in), else this rank's."""
        return self._epoch_plan()[0]

    def __len__(self):
        """Batches of the whole run on this rank (batch.index goes from 0 to
        len - 1; a pipeline resumed with load_state_dict has fewer left).
        TypeError with epochs=0 (endless)."""
        batches = self._epoch_plan()[3]
        if batches is None:
            raise TypeError("sluice.Pipeline: epochs=0 runs forever: no len()")
        return batches

    def close(self):
        """Stop the threads and give back the held batches. Tensors taken
        before stay readable and the held batches keep their bytes (their
        memory lives while any tensor over it does); next() then raises
        sluice.CanceledError, state_dict() still gives the position reached."""
        self._c.close()

    @property
    def closed(self):
        """True after close()."""
        return self._c.closed

    def __enter__(self):
        """`with sluice.Pipeline(...) as pipe:` closes it at the end of the
        block (state_dict() still works after it)."""
        return self

    def __exit__(self, *exc):
        """Close the pipeline (see close())."""
        self.close()

    def state_dict(self):
        """The position after the last batch taken (no data): save it with a
        checkpoint; load_state_dict on a Pipeline made with the same settings
        continues with exactly the batches this one would give next. Works
        after close() too (the position when it was closed)."""
        return {"version": 1, "pipeline": self._c.state()}

    def load_state_dict(self, state):
        """Continue from state_dict()'s position: the pipeline is made anew
        (threads and ring), the data settings must be those it was saved
        with (checked: sluice.ConfigError names what differs); workers,
        readers and prefetch may change."""
        if not isinstance(state, dict) or state.get("version") != 1 or \
                not isinstance(state.get("pipeline"), str):
            raise ConfigError("sluice.Pipeline.load_state_dict: not a sluice state_dict "
                              "(a dict with version 1 and 'pipeline')")
        _io_configure(*self._io_opts)
        new = _Pipeline(self._cfg, state["pipeline"], self._hold, self._copy)
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
    the whole shards of an earlier, interrupted run with the same inputs and
    options and writes the rest. progress(done, total, bytes) is called a
    few times a second. Paths are str, bytes or os.PathLike.

    format: 'tfrecord' (NAME-00000-of-0000N.tfrecord shards), 'lmdb' (one
    store) or 'wds' (WebDataset tar shards NAME-00000-of-0000N.tar: KEY.jpg,
    KEY.cls and KEY.json ({"label": N, "filename": ..., "class": ...}) per
    record, KEY the record number, an index NAME-...tar.idx in DALI's
    format beside each); shards counts TFRecord or tar shards.

    Returns a dict: inputs, records, skipped, bytes, passthrough, reencoded,
    shards, shards_kept, and skipped_inputs, a list of (input, reason) for
    every undecodable input (strict=True makes the first one an error).

    Ctrl-C (KeyboardInterrupt), or an exception raised by progress, stops
    the conversion within a chunk of 64 inputs: the shard being written is
    dropped, the shards already written are whole, dataset.json is not
    updated, and the exception is raised; convert(..., resume=True) with the
    same arguments finishes the job.
    """
    w = "sluice.convert"
    sources = [s for s, given in (("folder", folder is not None), ("list", list is not None),
                                  ("idx", idx_images is not None or idx_labels is not None))
               if given]
    if len(sources) != 1:
        raise ConfigError("sluice.convert: give exactly one of folder=, list= or "
                          "idx_images= with idx_labels=")
    if sources[0] == "idx" and (idx_images is None or idx_labels is None):
        raise ConfigError("sluice.convert: idx_images= and idx_labels= go together")
    if format not in ("tfrecord", "lmdb", "wds"):
        raise ConfigError(f"sluice.convert: format={format!r}: 'tfrecord', 'lmdb' or 'wds'")
    if progress is not None and not callable(progress):
        raise ConfigError(f"sluice.convert: progress={progress!r}: a callable or None")
    cfg = {
        "source": sources[0], "out_dir": _path(w, "out", out), "name": _str(w, "name", name),
        "shards": _int(w, "shards", shards, 0, 2**20, " (0 = about 128 MiB each)"),
        "format": format,
        "threads": _int(w, "threads", threads, 0, min(256, _max_threads()),
                        f" (0 = one per core; {_os.cpu_count()} cores here)"),
        "quality": _int(w, "quality", quality, 1, 100),
        "resize_short": _int(w, "resize_short", resize_short, 0, 65535, " pixels (0 = keep)"),
        "shuffle": int(_bool(w, "shuffle", shuffle)), "seed": _int(w, "seed", seed, 0, _I63),
        "resume": int(_bool(w, "resume", resume)), "strict": int(_bool(w, "strict", strict)),
        "label_offset": _int(w, "label_offset", label_offset, 0, 2**30),
        "fsync": int(_bool(w, "fsync", fsync)),
        "max_pixels": _int(w, "max_pixels", max_pixels, 0, _I63, " (0 = 2**26)"),
    }
    if folder is not None:
        cfg["input"] = _path(w, "folder", folder)
    if list is not None:
        cfg["input"] = _path(w, "list", list)
    if idx_images is not None:
        cfg["idx_images"] = _path(w, "idx_images", idx_images)
        cfg["idx_labels"] = _path(w, "idx_labels", idx_labels)
    if class_names is not None:
        if isinstance(class_names, (str, bytes)):
            raise ConfigError(f"{w}: class_names={class_names!r}: a list of str")
        cfg["class_names"] = [_str(w, "class_names", c) for c in class_names]
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
    w = "sluice.verify"
    rng = None
    if label_range is not None:
        try:
            lo, hi = label_range
        except (TypeError, ValueError):
            raise ConfigError(f"{w}: label_range={label_range!r}: a pair (lo, hi)") from None
        rng = (_int(w, "label_range", lo, -2**63, _I63), _int(w, "label_range", hi, -2**63, _I63))
    if split is not None:
        _str(w, "split", split)
    rep = _verify(_path(w, "data", data), split, _bool(w, "all", all), rng, progress)
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
    w = "sluice.inspect"
    if split is not None:
        _str(w, "split", split)
    out = _json.loads(_inspect(_path(w, "data", data), split, progress))

    def int_labels(d):
        d["labels"] = {int(k): int(v) for k, v in d["labels"].items()}

    int_labels(out)
    for sp in out["splits"].values():
        int_labels(sp)
    return out


def __dir__():
    return sorted(__all__ + ["__version__"])
