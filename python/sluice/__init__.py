"""sluice: record shards in, decoded and augmented batches out, from Python.

    import sluice, torch
    pipe = sluice.Pipeline("data/imagenet", image_size=224, batch=256, workers=8)
    for epoch in range(90):
        for images, labels in pipe:      # one epoch per loop
            x, y = torch.from_dlpack(images), torch.from_dlpack(labels)
            ...

The pipeline is sluice's C engine (DESIGN.md section 4) behind a small
extension module on the stable ABI; Python never enters the library. Batches
are DLPack tensors: torch.from_dlpack, numpy.from_dlpack and
jax.dlpack.from_dlpack take them without a copy.

Epochs: the pipeline is one stream of batches in which each epoch is the
next pass over the records (a permutation of them under 'global', and under
the default 'buffer' when an epoch fits in the buffer). Training without
epochs=: `for batch in pipe` runs one epoch and the next loop the next one
(the loop ends with the batch whose batch.epoch_end is True); with
epochs=E one loop runs all E epochs (a finished run iterated again raises
saying so); evaluation (train=False) is one pass, in which a bad record is
left out of its batch (a batch may hold fewer than `batch` samples, and one
whose records were all bad is not handed out). Training batches are not
cut at epoch ends: the batch that ends an epoch may start the next one
(batch.epochs says each sample's epoch), and every rank ends its epochs at
the same step.

Lifetime of a batch: its images are the pipeline's own batch slot, lent to
you until `hold` more batches have been taken (hold=1 on the CPU: until the
next step of the loop; hold=2 with a device), then the slot is refilled with
a later batch. Its memory stays valid as long as any tensor over it lives
(even after close()), but its content changes: a torch tensor taken over it
and kept past that point shows another batch, and the batch's own
images tensor then refuses (BufferError naming copy=True) instead of
handing out a later batch's pixels (`list(pipe)` then fails loudly). Pass
copy=True to keep batches (each gets memory of its own). labels,
record_ids and epochs are always small copies of their own.

Errors are sluice.Error subclasses whose message names the file and record
(sluice.CorruptError: "train-00003-of-00016.tfrecord: record 41 @ 9123: data
CRC mismatch"), or the URL of a remote shard (sluice.NotFoundError for a
404, sluice.PermissionDeniedError, a PermissionError, for a 401/403).
"""

import json as _json
import os as _os
import warnings as _warnings

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
    _cpus,
    _error,
    _inspect,
    _io_configure,
    _io_opts,
    _Pipeline,
    _verify,
)
from ._args import (  # the settings' checks
    _I63, _LAYOUT, _ON_ERROR, _RANK_SPLIT, _U64, _bool, _bytes, _device_index, _float, _int,
    _max_threads, _pair, _path, _pick, _restart, _shuffle, _str, _triple,
)

__all__ = [
    "Pipeline", "Batch", "Tensor", "convert", "verify", "inspect", "Error", "ConfigError", "CanceledError",
    "CorruptError", "DeviceError", "ExistsError", "ImageError", "NotFoundError",
    "NotSupportedError", "OutOfMemoryError", "PermissionDeniedError", "SystemIOError",
    "BadRecordsWarning",
]


class BadRecordsWarning(UserWarning):
    """Records were skipped under on_error='skip' (a Pipeline says so once,
    at the first batch handed out with a bad record's slot refilled or left
    out, naming how many the batches handed out so far skipped
    (stats()['bad_records_out']) and the first; stats()['bad'] lists them).
    warnings.simplefilter('ignore', sluice.BadRecordsWarning) silences it."""

class Batch(tuple):
    """(images, labels), plus .index (batch number in the run), .record_ids
    (int64: which record filled each slot, numbered over the whole dataset:
    the same record has the same id on every rank and in every rank_split
    mode), .epochs (int32: each sample's epoch; the batch that ends an
    epoch may start the next one, so use .epoch / .epoch_end to count
    epochs) and .skipped (bad records whose slots this batch refilled with
    the next good record, training, or left out, evaluation). All tensors
    are sluice.Tensor objects (DLPack; numpy.asarray takes host ones).

    Shapes: images (N, 3, H, W) or (N, H, W, 3), labels, record_ids and
    epochs (N,); N is `batch` but for a run's last batch and, in evaluation
    (train=False), less the bad records left out (never 0: a batch whose
    records were all bad is not handed out).

    .epoch: the epoch this step counts towards: sample positions
    index*batch*world onwards over records_per_epoch, the same on every rank.
    .epoch_end: True on the step in which an epoch's worth of samples is
    complete (and on the last batch of the run): a loop over the pipeline
    without epochs= ends there; evaluate and checkpoint there, once per
    epoch."""

    def __new__(cls, index, images, labels, record_ids, epochs, epoch=0, epoch_end=False,
                skipped=0):
        self = tuple.__new__(cls, (images, labels))
        self.index = index
        self.record_ids = record_ids
        self.epochs = epochs
        self.epoch = epoch
        self.epoch_end = epoch_end
        self.skipped = skipped
        return self

    @property
    def images(self):
        """The images: (N, 3, H, W) float32, (N, H, W, 3) float32 or uint8
        (N: the batch's samples, see the class doc)."""
        return self[0]

    @property
    def labels(self):
        """The labels: (N,) int64."""
        return self[1]


def _restore(kwargs, state):
    """Unpickle a Pipeline: made anew in this process at the pickled one's
    position (what multiprocessing's spawn and forkserver contexts do)."""
    p = Pipeline.__new__(Pipeline)
    p._setup(kwargs, state)
    return p


class Pipeline:
    """Batches (images, labels) read from record shards, one epoch per loop.

        pipe = sluice.Pipeline("data/imagenet", image_size=224, batch=256)
        for epoch in range(90):
            for images, labels in pipe:    # the batches of one epoch
                ...

    Training without epochs=: each `for batch in pipe` (or pipe.epoch())
    runs one epoch: up to and including the batch whose batch.epoch_end is
    True (len(pipe) batches); the next loop continues with the next epoch,
    and a loop left early (break) is finished by the next one. With
    epochs=E the pipeline is one run of E epochs: one loop covers them all
    (count them with batch.epoch / batch.epoch_end; pipe.epoch() still
    gives one at a time), and iterating a finished run again raises
    sluice.Error saying so. An epoch's batches come from one stream: the
    batch that ends an epoch may hold the first samples of the next
    (batch.epochs says whose), so an epoch's loop holds records_per_epoch
    samples give or take one batch, and every rank ends its epochs at the
    same step. Evaluation (train=False) is one pass by default (epochs=1):
    each record once, the last batch partial; under on_error='skip' a bad
    record is left out of its batch, never replaced by a duplicate, so a
    batch may hold fewer than `batch` samples (images (n, ...), labels,
    record_ids and epochs (n,), all of the same n), and a batch whose
    records were all bad is not handed out (a mean loss or accuracy over 0
    samples is NaN, and would poison the running sums of an evaluation
    loop): the loop goes on with the next batch, batch.index then skips
    one, len(pipe) counts it, and it takes none of the `hold` places. When that batch ends an epoch, pipe.epoch()'s
    loop ends there; in one loop over epochs=E the next batch's
    batch.epoch says the epoch changed.

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
        Under 'buffer:N' an epoch is a permutation of its records when it
        fits in the buffer (N at least the records a rank reads per epoch:
        the buffer then takes one epoch at a time, all of it before its
        first draw, still read in blocks; stats()['shuffle_buffer'] is
        then that epoch's records); a larger dataset streams through the
        buffer, which mixes the last records of an epoch with the first of
        the next (at most N positions apart: tf.data's repeat().shuffle(N)).
    workers: decode/augment threads, 0 = one per core of `cpus` (at most 8
        per core).
    cpus: the cores the pipeline's threads may use: the default workers
        (one per core of it) and so the automatic prefetch follow it. None
        (the default) is the cores this process may use (its affinity mask
        and cgroup CPU quota, not the machine's count) less one, at least
        one, so the training loop keeps a core: right for a loop that
        drives a GPU; a loop that computes on the CPU (torch on the CPU)
        wants more left to it, e.g. cpus=2 on 16 cores. An explicit
        workers wins.
    memory_budget: bytes the pipeline may hold (an int, or '512M', '4G'):
        the read window, the shuffle buffer, remote requests in flight, the
        decode workers and the prefetch ring, estimated from the settings
        and the index files. To fit, prefetch, requests in flight, workers
        and the read window shrink (in that order; not those given);
        what cannot fit (the shuffle buffer, a setting given) raises
        sluice.ConfigError at creation, before a record is read, naming
        each part's bytes. Local shards are then read with pread (a
        mapping's pages stay in RSS). memory() says what was chosen. None
        (the default): no budget. The batches are the same either way.
    seed: seeds shuffles and augmentation: the same seed gives the same bytes,
        whatever the numbers of threads.
    train: random-resized-crop + flip (True) or resize + center crop (False).
    layout: 'nchw-f32' (normalized, torch's order), 'nhwc-f32', or 'nhwc-u8'
        (raw pixels, for normalization on the GPU).
    device: None (host batches) or 'cuda:N': images land in device memory
        through the pipeline's pinned ring and copy stream (the consumer's
        stream waits on the copy; no host sync).
    rank, world, rank_split: this process's part of the data (torchrun's RANK and
        WORLD_SIZE). rank_split='records' (default) gives every rank the
        same share of every epoch (floor or ceil of records / world), so
        every rank gets the same number of batches per epoch: with shuffle
        'buffer' rank r reads range r of each epoch cut in world (the ranks
        together read each byte once an epoch); with 'none' or 'global' it
        takes every world-th record of the world-1 stream, and the ranks'
        k-th batches together are world 1's k-th batch of batch*world
        ('none' reads the other ranks' records in its blocks too).
        rank_split='files' gives rank r the shards i % world ==
        r (disjoint reads, fewer bytes per rank); training counts epochs in
        the whole dataset's records, so every rank takes the same number of
        batches, but when the shards' records do not split evenly a rank
        with fewer records starts its next pass over them sooner
        (evaluation reads each rank's shards once); it needs at least one
        shard per rank. Either way each rank loads every shard's index file
        (and scans the shards without one).
    label_offset: subtracted from stored labels (TensorFlow's ImageNet shards
        store 1..1000: pass 1); None takes dataset.json's (0 without one).
    epochs: None (default): training: endless, iterated one epoch per loop
        (see above), len(pipe) the batches of the next loop's epoch;
        train=False: 1. E > 0: a run of E passes in one stream, iterated in
        one loop, len(pipe) its batches (training with world > 1 and
        rank_split='records': a run whose last step would leave some ranks
        without a sample is refused, pass drop_remainder=True; evaluation:
        ranks may differ by that last batch, each reads its records once).
        0: forever in one loop (no len). Each batch says which epoch its
        step counts towards (batch.epoch) and whether an epoch ends in it
        (batch.epoch_end).
    copy: give each batch memory of its own (for batches kept past the next
        step); otherwise images are lent (see the module's doc).
    hold: batches lent at once (default 1 on the CPU, 2 with a device).
    label_key: WebDataset shards only: the label is the integer field
        label_key of each sample's .json member; None (default) reads the
        .cls member.
    io_retry_budget, io_retries, io_timeout, io_inflight: remote data
        only: seconds a failing read (a timeout, a stall, a reset, a 5xx or
        a 429) is retried from its first try, with capped exponential
        backoff (1 to 86400; default 60, SLUICE_IO_RETRY_MS: rides out a
        server restart; past it the run ends naming the shard, under
        either on_error), at most this many tries after the first within
        that time (0 to 100; 0 = no retry; default: no count, the budget
        alone), seconds to connect and of a stall (1 to 3600; default 30)
        and ranged GETs in flight per reader (1 to 64; default 8, the
        bound of an online tuning that lowers it while the readers wait on
        the workers and raises it again while the reads are the
        bottleneck; given, it is fixed; the batches are the same). They
        are this Pipeline's own: every remote read it makes (the listing,
        dataset.json and the index files when it is made, the shards
        after) uses them, and no other Pipeline's, nor convert, verify or
        inspect, changes with them; None takes that setting as the process
        has it when the Pipeline is made (the default, or
        SLUICE_IO_RETRY_MS, SLUICE_IO_RETRIES, SLUICE_IO_TIMEOUT_MS,
        SLUICE_IO_INFLIGHT from the environment).
    split: the split of a dataset directory to read ('train'; 'test',
        'validation', ... as dataset.json or the shard names say).
    readers: threads reading shards (0 = 2); more help remote or cold data.
    prefetch: batches in the ring decoded ahead of the consumer (0 =
        automatic: what the workers straddle plus `hold`; else 2 to 4096).
    cycle, block: the interleave: `cycle` shards read at once, `block`
        consecutive records from one before moving to the next (tf.data's
        interleave(cycle_length, block_length); 0 = 4 and 16).
    drop_remainder: drop the run's last partial batch (epochs=E).
    on_error: 'skip' (default) refills a bad record's slot with the next
        good record (training) or leaves it out of its batch (evaluation:
        see above), counts it (stats()['bad_records'], the first 16 named
        in stats()['bad']; batch.skipped per batch) and warns once
        (sluice.BadRecordsWarning); 'fail' raises at the first one.
    max_bad: under 'skip', more bad records than this raise (0 = 1000).
    max_pixels: a JPEG whose header claims more pixels is a bad record,
        refused before decoding (0 = 2**26).
    scale, ratio, flip: train=True's random-resized-crop (area fraction and
        aspect-ratio ranges, torchvision's defaults) and horizontal flip.
    crop_fraction: train=False's center crop (resize to size/fraction).
    mean, std: normalization per channel in 0..255 units (f32 layouts).

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

    Threads: one thread at a time takes batches (next() from a second one
    raises RuntimeError); close() may come from any thread, also while
    another waits in next() (that one then raises sluice.CanceledError).
    """

    def __init__(self, data, image_size=224, batch=256, shuffle=None, workers=0, seed=0,
                 train=True, layout="nchw-f32", device=None, rank=0, world=1,
                 label_offset=None, *, split="train", epochs=None, readers=0, prefetch=0,
                 cycle=0, block=0, drop_remainder=False, on_error="skip", max_bad=0, max_pixels=0,
                 rank_split="records", scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=True,
                 crop_fraction=0.875, mean=(123.675, 116.28, 103.53),
                 std=(58.395, 57.12, 57.375), copy=False, hold=None, label_key=None,
                 io_retries=None, io_timeout=None, io_inflight=None, io_retry_budget=None,
                 cpus=None, memory_budget=None):
        kwargs = dict(locals())
        del kwargs["self"]
        self._setup(kwargs, None)

    @staticmethod
    def _io(w, kw):
        """(retries, timeout_ms, inflight, retry_ms) of this pipeline's
        config (None: the process-wide setting as it is); kwargs pickled by
        an older sluice have none of them."""
        retries, timeout, inflight, budget = (kw.get(k) for k in (
            "io_retries", "io_timeout", "io_inflight", "io_retry_budget"))
        if retries is not None:
            retries = _int(w, "io_retries", retries, 0, 100,
                           " tries after the first (0 = no retry)")
        if timeout is not None:
            timeout = round(1000 * _float(w, "io_timeout", timeout, lambda v: 1 <= v <= 3600,
                                          " (seconds per request, 1 to 3600)"))
        if inflight is not None:
            inflight = _int(w, "io_inflight", inflight, 1, 64, " ranged GETs per reader")
        if budget is not None:
            budget = round(1000 * _float(w, "io_retry_budget", budget,
                                         lambda v: 1 <= v <= 86400,
                                         " (seconds from a read's first try, 1 to 86400)"))
        return retries, timeout, inflight, budget

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
                       " threads (0 = one per core of cpus)")
        cpus = kw.get("cpus")  # kwargs pickled by an older sluice have none
        if cpus is None:
            cpus = max(1, _cpus()[0] - 1)  # the loop keeps a core
        else:
            cpus = _int(w, "cpus", cpus, 1, nthreads, " cores for the pipeline's threads")
        workers = workers or cpus
        readers = _int(w, "readers", kw["readers"], 0, nthreads, " threads (0 = 2)")
        label_offset = kw["label_offset"]
        cfg = {
            "data": _path(w, "data", kw["data"]), "split": _str(w, "split", kw["split"]),
            "height": height, "width": width, "batch": batch, "workers": workers,
            "seed": _int(w, "seed", kw["seed"], 0, _U64),
            "transform": 0 if train else 1, "layout": _pick(_LAYOUT, "layout", kw["layout"]),
            "device": dev, "rank": rank, "world": world,
            "epochs": 0,  # set below
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
            nw = workers
            prefetch = 2 + max(1, -(-2 * nw // batch)) + self._hold - 1
        cfg["prefetch"] = prefetch
        # what was not given is tuned online within what is started
        # (pipeline/tune.c); the bytes are the same either way
        cfg["tune"] = ((0 if kw["workers"] else 1) | (0 if kw["prefetch"] else 2) |
                       (0 if kw.get("io_inflight") is not None else 4))  # 4: remote only
        label_key = kw.get("label_key")
        if label_key is not None:
            cfg["label_key"] = _str(w, "label_key", label_key)
        epochs = kw["epochs"]
        if epochs is None and not train:
            epochs = 1  # evaluation: one pass, each record once
        self._epochs = None if epochs is None else _int(
            w, "epochs", epochs, 0, _I63, " (None = one loop per epoch, 0 = forever)")
        self._train = train
        # rank_split='files' over several ranks: each rank has its own
        # shards. Training: each streams them without end and this layer
        # ends every rank's run after the same number of steps (the
        # world's), so DDP's ranks agree. Evaluation: each reads its
        # shards once (no step is shared).
        files = cfg["rank_split"] == _RANK_SPLIT["files"] and world > 1
        self._files_world = files and train
        self._files_own = files and not train
        cfg["epochs"] = 0 if self._files_world or self._epochs is None else self._epochs
        self._cfg = cfg
        self._copy = _bool(w, "copy", kw["copy"])
        self._epoch = None
        self._ended = False   # a finite run's last batch was taken
        self._warned = False  # BadRecordsWarning given
        self._next = 0 if state is None else self._state_batches(state)
        # this pipeline's own (None: the process-wide settings); checked
        # with the rest
        io = self._io(w, kw)
        self._io_opts = None if io == (None,) * 4 else io
        # memory_budget: (bytes, what was given and may not shrink, the ring's
        # floor); kwargs pickled by an older sluice have none
        budget = kw.get("memory_budget")
        self._memory = None if budget is None else (
            _bytes(w, "memory_budget", budget),
            (1 if kw["prefetch"] else 0) | (2 if kw.get("io_inflight") is not None else 0) |
            (4 if kw["workers"] else 0),
            self._hold + 1)
        self._c = _Pipeline(cfg, state, self._hold, self._copy, self._io_opts, self._memory)
        try:
            self._check_ranks_agree()
        except BaseException:
            self._c.close()
            raise

    @staticmethod
    def _state_batches(state):
        """The batches a saved state (the C state's JSON) had taken."""
        try:
            return int(_json.loads(state)["batches"])
        except (ValueError, KeyError, TypeError):
            return 0  # the library refuses it with its own message

    def _check_ranks_agree(self):
        """rank_split='records', epochs=E, world > 1, training: world 1's
        run of E * records samples is dealt out position by position, so
        when its last step holds fewer samples than there are ranks, the
        ranks past them get one batch fewer than rank 0, and DDP's
        all-reduce waits for them forever. Refused here, before any step.
        (Evaluation shares no step: each rank reads its records once.)"""
        c = self._cfg
        world, batch, e = c["world"], c["batch"], self._epochs
        if world == 1 or not self._train or self._files_world or not e or c["drop_remainder"]:
            return
        total = e * self._epoch_plan()[0]
        left = total % (batch * world)
        if 0 < left < world:
            raise ConfigError(
                f"sluice.Pipeline: epochs={e}, world={world}, batch={batch}: the run's "
                f"{total} samples end with a step of {left}, fewer than the {world} ranks: "
                f"ranks {left} to {world - 1} would get one batch fewer than rank 0 (DDP "
                f"would wait for them forever); pass drop_remainder=True, or leave epochs "
                f"out (one loop per epoch, the same steps on every rank)")

    def __reduce__(self):
        return _restore, (self._kwargs, self._c.state())

    def __iter__(self):
        """Without epochs=: the batches of one epoch (self.epoch()). With
        epochs=E: the pipeline itself, one pass over the whole run; a run
        already over raises sluice.Error (iterating it again would give
        nothing, and a loop `for epoch in range(E)` around it would train
        one epoch without a word)."""
        if self._epochs is None:
            return self.epoch()
        if self._ended:
            raise self._over()
        return self

    def epoch(self):
        """An iterator over the batches of one epoch: from the next batch up
        to and including the one whose batch.epoch_end is True (the rest of
        the epoch when a loop left it early); len() of it is the number of
        batches left in it. With epochs=E too (its last epoch ends with the
        run's last batch)."""
        if self._ended:
            raise self._over()
        return _Epoch(self)

    def _over(self):
        e = self._epochs
        if e is None:  # an endless run ends only when there is nothing to read
            return _error(1, f"sluice.Pipeline: no records to read in split "
                          f"'{self._cfg['split']}' of {self._kwargs['data']!r}")
        return _error(1, f"sluice.Pipeline: the run is over: epochs={e} is one run of {e} "
                      f"epoch{'s' if e != 1 else ''} ({self._next} batches), and one loop over "
                      f"the pipeline takes all of it (count epochs with batch.epoch, evaluate and "
                      f"checkpoint where batch.epoch_end is True); leave epochs out for one loop "
                      f"per epoch (for epoch in range(E): for batch in pipe: ...), or make a new "
                      f"Pipeline")

    def __next__(self):
        """The next Batch (images, labels) of the stream (across epochs);
        StopIteration after the run's last batch (epochs=E). Waits for it
        with the GIL released (Ctrl-C raises KeyboardInterrupt within 0.1 s).
        The images are lent until `hold` more batches are taken (copy=True:
        yours)."""
        return self._take(3)

    def _take(self, level, in_epoch=False):
        """__next__'s work; level: the caller's stack level for warnings.
        A batch without samples (evaluation: every record of it bad, left
        out) is not handed out: the next one is taken; in_epoch (an
        _Epoch's call): None instead when that batch ended the epoch."""
        batches = self._epoch_plan()[3]
        while True:
            if batches is not None and self._next >= batches:
                self._ended = True
                raise StopIteration
            t = self._c.next()
            if t is None:
                self._ended = True
                raise StopIteration
            index, images, labels, ids, epochs, skipped = t
            self._next = index + 1
            if batches is not None and self._next >= batches:
                self._ended = True  # the run's last batch
            if not self._warned and self._cfg["on_error"] == _ON_ERROR["skip"]:
                self._warn_bad(level + 1)
            epoch, end = self._epoch_of(index)
            if images.shape[0]:
                return Batch(index, images, labels, ids, epochs, epoch, end, skipped)
            if end and in_epoch:
                return None

    def _warn_bad(self, level):
        """BadRecordsWarning, once per pipeline, when the batches handed out
        so far skipped records (not when the workers met one decoding
        ahead: stats()['bad_records_out'], not 'bad_records')."""
        n = self._c.bad_records()
        if not n:
            return
        self._warned = True
        bad = self._c.stats()["bad"]
        first = f"; the first: {bad[0]}" if bad else ""
        how = ("each slot refilled with the next good record" if self._train else
               "evaluation: each left out of its batch, never replaced by a duplicate")
        _warnings.warn(BadRecordsWarning(
            f"sluice.Pipeline: {n} bad record{'s' if n != 1 else ''} skipped so far (on_error="
            f"'skip': {how}){first}; stats()['bad_records_out'] counts those in the batches "
            f"handed out, stats()['bad'] names the first 16; on_error='fail' raises instead"),
            stacklevel=level)

    def _epoch_plan(self):
        """(N, P, T, batches): records per epoch and sample positions per
        step, both counted over all ranks (world 1's stream; with
        rank_split='files' each rank's own stream is counted as if it were
        its share of it); positions of the whole run (None when endless) and
        this rank's batches in it (None when endless)."""
        if self._epoch is None:
            c = self._cfg
            st = self._c.stats()
            world, batch = c["world"], c["batch"]
            n = st["records_per_epoch_world"]
            if self._files_own:  # evaluation over its own shards, once
                n, world = st["records_per_epoch"], 1
            per_step = batch * world
            total = batches = None
            if self._epochs:
                total = self._epochs * n
                if c["drop_remainder"]:
                    total = total // per_step * per_step
                    batches = total // per_step
                elif self._files_world:  # every rank: full batches, the world's steps
                    batches = -(-total // per_step)
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

    def _epoch_left(self):
        """Batches from the next one to the end of its epoch: that epoch k
        holds the next batch's first position i*P; its last record, at
        position (k+1)*N - 1, is in step ((k+1)*N - 1) // P."""
        n, per_step, total, batches = self._epoch_plan()
        i = self._next
        if batches is not None and i >= batches:
            return 0
        if n == 0:
            return 0
        k = i * per_step // n
        left = ((k + 1) * n - 1) // per_step - i + 1
        return left if batches is None else min(left, batches - i)

    @property
    def records_per_epoch(self):
        """Records in one epoch over all ranks (what batch.epoch counts in;
        this rank's share is about records_per_epoch / world), or this
        rank's with rank_split='files' and train=False (its shards, once)."""
        return self._epoch_plan()[0]

    def __len__(self):
        """Without epochs=: the batches the next loop over the pipeline
        gives (the rest of the epoch the next batch belongs to: about
        records_per_epoch / (batch * world), one more or fewer as the
        batches straddle the epochs' ends). With epochs=E: the batches of
        the whole run on this rank (batch.index goes from 0 to len - 1; a
        pipeline resumed with load_state_dict has fewer left). TypeError
        with epochs=0 (endless)."""
        if self._epochs is None:
            return self._epoch_left()
        batches = self._epoch_plan()[3]
        if batches is None:
            raise TypeError("sluice.Pipeline: epochs=0 runs forever: no len()")
        return batches

    def close(self):
        """Stop the threads and give back the held batches. Tensors taken
        before stay readable and the held batches keep their bytes (their
        memory lives while any tensor over it does); next() then raises
        sluice.CanceledError, state_dict() and stats() still give the
        position and the figures when it was closed. Any thread may call
        it, also while another waits in next(); a second call waits for the
        first to finish."""
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

    # the settings a state may be loaded under with other values: threads,
    # memory, where the batches go; the rest decide the data and its order
    _FREE = frozenset(("data", "workers", "readers", "prefetch", "hold", "copy", "device", "cpus",
                       "on_error", "max_bad", "max_pixels", "io_retries", "io_timeout",
                       "io_inflight", "io_retry_budget", "memory_budget"))

    def _settings(self):
        def plain(v):
            if isinstance(v, (tuple, list)):
                return [plain(x) for x in v]
            return v if v is None or isinstance(v, (bool, int, float, str)) else repr(v)
        return {k: plain(v) for k, v in sorted(self._kwargs.items()) if k not in self._FREE}

    def state_dict(self):
        """The position after the last batch taken (no data): save it with a
        checkpoint; load_state_dict on a Pipeline made with the same settings
        continues with exactly the batches this one would give next. Works
        after close() too (the position when it was closed). 'settings' are
        the data settings it was made with (load_state_dict names the one
        that differs)."""
        return {"version": 1, "pipeline": self._c.state(), "settings": self._settings()}

    def load_state_dict(self, state):
        """Continue from state_dict()'s position: the pipeline is made anew
        (threads and ring), the data settings must be those it was saved
        with (checked: sluice.ConfigError names the setting that differs);
        workers, readers, prefetch, hold, copy and device may change."""
        if not isinstance(state, dict) or state.get("version") != 1 or \
                not isinstance(state.get("pipeline"), str):
            raise ConfigError("sluice.Pipeline.load_state_dict: not a sluice state_dict "
                              "(a dict with version 1 and 'pipeline')")
        try:
            new = _Pipeline(self._cfg, state["pipeline"], self._hold, self._copy,
                            self._io_opts, self._memory)
        except ConfigError as e:
            changed = self._changed(state.get("settings"))
            if changed is None:
                raise
            raise ConfigError(f"sluice.Pipeline.load_state_dict: {changed}: the data "
                              f"settings must be those the state was saved with (workers, "
                              f"readers, prefetch, hold, copy and device may change)") from e
        old, self._c = self._c, new
        old.close()
        self._next = self._state_batches(state["pipeline"])
        self._ended = False

    def _changed(self, saved):
        """'seed=6, saved with seed=5' for the first data setting that
        differs from a state's, or None (an older state has no settings)."""
        if not isinstance(saved, dict):
            return None
        mine = self._settings()
        for k in sorted(saved):
            if k in mine and mine[k] != saved[k]:
                return f"{k}={mine[k]!r}, the state was saved with {k}={saved[k]!r}"
        return None

    def memory(self):
        """What memory_budget chose (None without one): {'budget', 'total'
        (bytes of the estimate), 'parts' (bytes of 'read_window', 'shuffle',
        'remote', 'decode', 'ring', 'index'), 'workers', 'prefetch',
        'read_window', 'shrunk' (e.g. 'prefetch 6 -> 3', '' for nothing)}."""
        return self._c.memory()

    def stats(self):
        """Figures since the pipeline was made (after close(), those when it
        was closed): batches, samples, elapsed_s, records_per_epoch (this
        rank's), records_per_epoch_world, shuffle_buffer (the effective
        buffer in records; the records of an epoch when one fits: each
        epoch then a permutation), bad_records (bad records met so far,
        counting those the workers met decoding batches ahead of you),
        bad_records_out (of those, the ones in the batches handed out, the
        sum of their batch.skipped, and those left out at creation: what
        your loop has skipped) and the first bad records' messages
        ('bad'), and per stage ('read', 'shuffle', 'map', 'load'):
        threads, items, bytes, busy_s, wait_in_s, wait_out_s, queue_fill.
        samples counts positions in the run: a record left out in
        evaluation too."""
        return self._c.stats()


class _Epoch:
    """The batches of one epoch of a Pipeline (Pipeline.epoch())."""

    def __init__(self, pipe):
        self._pipe = pipe
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        try:
            b = self._pipe._take(3, True)
        except StopIteration:
            self._done = True
            raise
        if b is None:  # the epoch's last batch was empty (evaluation, all bad)
            self._done = True
            raise StopIteration
        self._done = b.epoch_end
        return b

    def __len__(self):
        """Batches left in this epoch."""
        return 0 if self._done else self._pipe._epoch_left()


def convert(out, *, folder=None, list=None, idx_images=None, idx_labels=None, tfrecord=None,
            split=None, name="train",
            shards=0, format="tfrecord", threads=0, quality=95, resize_short=0, shuffle=True,
            seed=0, resume=False, strict=False, label_offset=0, class_names=None,
            fsync=True, max_pixels=0, restart=None, restart_rows=None, progress=None):
    """Convert images into record shards in `out` (the library's converter,
    as `sluice convert`): one of folder=DIR (DIR/<class>/<image>, classes
    sorted by name), list=FILE (lines "path<TAB>label"), idx_images= and
    idx_labels= (MNIST IDX files, gzip or plain) or tfrecord=PATH (the
    Examples of one split of TFRecord shards, a TensorFlow Datasets folder
    among them: split= names it, default the one named like name=, else
    the only one; labels, class names and file names kept, images that are
    not JPEG, as TFDS's PNG sets, re-encoded). Shards are written
    atomically with their index files and dataset.json; resume=True keeps
    the whole shards of an earlier, interrupted run with the same inputs and
    options and writes the rest. progress(done, total, bytes) is called a
    few times a second. Paths are str, bytes or os.PathLike.

    format: 'tfrecord' (NAME-00000-of-0000N.tfrecord shards), 'lmdb' (one
    store) or 'wds' (WebDataset tar shards NAME-00000-of-0000N.tar: KEY.jpg,
    KEY.cls and KEY.json ({"label": N, "filename": ..., "class": ...}) per
    record, KEY the record number, an index NAME-...tar.idx in DALI's
    format beside each); shards counts TFRecord or tar shards.

    restart: N (1 to 65535 MCUs) or 'auto' (the measured default: 16
    intervals per MCU row, 4 MCUs at least), as the CLI's --restart: every
    JPEG stored that has no restart markers is re-written losslessly (the
    same pixels; a progressive one becomes baseline) with a marker every N
    MCUs, so the pipeline entropy-decodes only the intervals a crop covers
    (worth it for large photos; README.md "Restart markers"). restart_rows:
    R (1 to 65535), a marker every R MCU rows (--restart-rows); not with
    restart. Default None: JPEGs stored as they are. The shards are those
    `sluice convert` writes with the same options, byte for byte.

    Returns a dict: inputs, records, skipped, bytes, passthrough, reencoded,
    shards, shards_kept, restarted, restart_kept, restart_markers,
    restart_bytes_in and restart_bytes_out (the JPEGs this run re-wrote
    with restart markers, those kept as they were, the markers written,
    the re-written JPEGs' bytes before and after), and skipped_inputs, a
    list of (input, reason) for every undecodable input (strict=True makes
    the first one an error).

    Ctrl-C (KeyboardInterrupt), or an exception raised by progress, stops
    the conversion within a chunk of 64 inputs: the shard being written is
    dropped, the shards already written are whole, dataset.json is not
    updated, and the exception is raised; convert(..., resume=True) with the
    same arguments finishes the job.
    """
    w = "sluice.convert"
    sources = [s for s, given in (("folder", folder is not None), ("list", list is not None),
                                  ("idx", idx_images is not None or idx_labels is not None),
                                  ("tfrecord", tfrecord is not None))
               if given]
    if len(sources) != 1:
        raise ConfigError("sluice.convert: give exactly one of folder=, list=, tfrecord= or "
                          "idx_images= with idx_labels=")
    if split is not None and tfrecord is None:
        raise ConfigError("sluice.convert: split= goes with tfrecord=")
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
    restart, restart_rows = _restart(w, restart, restart_rows)
    if restart == "auto":
        cfg["restart_auto"] = 1
    elif restart is not None:
        cfg["restart_mcus"] = restart
    if restart_rows is not None:
        cfg["restart_rows"] = restart_rows
    if folder is not None:
        cfg["input"] = _path(w, "folder", folder)
    if list is not None:
        cfg["input"] = _path(w, "list", list)
    if tfrecord is not None:
        cfg["input"] = _path(w, "tfrecord", tfrecord)
        if split is not None:
            cfg["input_split"] = _str(w, "split", split)
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

    Returns a dict: ok, records, files, shards_without_index,
    restart_records (records whose JPEG carries restart markers: convert
    restart=), and problems,
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
    restart_records (records whose JPEG carries restart markers: convert
    restart=), unknown_size (records of unreadable size, when any); num_classes,
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
