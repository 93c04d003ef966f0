"""Bad records under on_error='skip', as the Python loop sees them.

- Evaluation (train=False) leaves a bad record out of its batch (the C side
  since issue 38 item 6): a batch may be shorter than `batch`, with images,
  labels, record_ids and epochs all of its n; one whose records were all
  bad is not handed out (a mean over 0 samples is NaN and would poison an
  evaluation loop's sums), and the loop's end and epoch_end stay right.
- BadRecordsWarning counts the bad records in the batches handed out
  (stats()['bad_records_out'], batch.skipped), not those the workers met
  decoding ahead of the loop."""
import time
import warnings

import numpy as np
import pytest

import sluice

CFG = dict(image_size=8, workers=2)


def corrupt(shard, records):
    """Flip a byte inside each record's payload: its data CRC fails."""
    idx = [list(map(int, line.split())) for line in open(str(shard) + ".idx")]
    raw = bytearray(shard.read_bytes())
    for r in records:
        off, size = idx[r]
        raw[off + size - 10] ^= 0xFF
    shard.write_bytes(bytes(raw))


def shards(data):
    """(path, first global id) of each shard, in order."""
    out, first = [], 0
    for p in sorted(data.glob("train-*.tfrecord")):
        out.append((p, first))
        first += sum(1 for _ in open(str(p) + ".idx"))
    return out


def eval_ids(data, **kw):
    """The record ids of an evaluation pass, in order."""
    with sluice.Pipeline(data, train=False, batch=10, **CFG, **kw) as pipe:
        return [int(i) for b in pipe for i in np.from_dlpack(b.record_ids)]


def where(data, rid):
    """(shard path, record number) of global id rid."""
    for p, first in reversed(shards(data)):
        if rid >= first:
            return p, rid - first
    raise AssertionError(rid)


def look(b):
    """(index, n, skipped, epoch, epoch_end, ids) of a batch, each tensor's
    leading dimension checked against the others."""
    n = b.images.shape[0]
    assert b.images.shape[1:] == (3, 8, 8), b.images.shape
    for t in (b.labels, b.record_ids, b.epochs):
        assert t.shape == (n,), (t.shape, n)
    assert len(np.from_dlpack(b.labels)) == n
    return b.index, n, b.skipped, b.epoch, b.epoch_end, [int(i) for i in
                                                         np.from_dlpack(b.record_ids)]


# ------------------------------------------------------------ evaluation
def test_eval_batches_leave_bad_records_out(copy_dataset):
    want = eval_ids(copy_dataset)
    s1, first = shards(copy_dataset)[1]
    corrupt(s1, [3, 7, 11])
    bad = {first + 3, first + 7, first + 11}
    with sluice.Pipeline(copy_dataset, train=False, batch=10, **CFG) as pipe:
        assert len(pipe) == 15
        with pytest.warns(sluice.BadRecordsWarning, match="left out of its batch"):
            got = [look(b) for b in pipe]
        st = pipe.stats()
    assert [g[0] for g in got] == list(range(15)), "no batch is empty: none is left out"
    assert [g[1] for g in got] == [10 - g[2] for g in got], "n is batch less the skipped"
    assert sum(g[2] for g in got) == 3 and min(g[1] for g in got) < 10
    ids = [i for g in got for i in g[5]]
    assert ids == [i for i in want if i not in bad], "the good records once each, in order"
    assert [g[4] for g in got] == [False] * 14 + [True], "epoch_end on the last batch only"
    assert st["bad_records"] == st["bad_records_out"] == 3
    assert st["samples"] == 150, "positions in the run, the records left out included"


@pytest.mark.parametrize("copy", [False, True])
def test_eval_batch_of_bad_records_only_is_not_handed_out(copy_dataset, copy):
    """batch=1: each bad record's batch is empty, and skipped by the loop;
    the last record of the pass is one of them, so the loop ends on an
    empty batch that ends the run (and epoch) and must still end cleanly."""
    want = eval_ids(copy_dataset)
    s1, first = shards(copy_dataset)[1]
    corrupt(s1, [3, 7])
    last, rec = where(copy_dataset, want[-1])
    corrupt(last, [rec])
    bad = {first + 3, first + 7, want[-1]}
    with sluice.Pipeline(copy_dataset, train=False, batch=1, copy=copy, **CFG) as pipe:
        assert len(pipe) == 150, "len counts the batches of every position"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sluice.BadRecordsWarning)
            got = [look(b) for b in pipe]
        st = pipe.stats()
        with pytest.raises(sluice.Error, match="the run is over"):
            iter(pipe)
    assert all(g[1] == 1 and g[2] == 0 for g in got), "no empty batch handed out"
    ids = [g[5][0] for g in got]
    assert ids == [i for i in want if i not in bad]
    gone = sorted(set(range(150)) - {g[0] for g in got})
    assert [want[i] for i in gone] == [i for i in want if i in bad], "their indexes skipped"
    assert not any(g[4] for g in got), "the epoch's end was the empty batch"
    assert st["batches"] == 150 and st["bad_records_out"] == 3


def test_an_empty_batch_takes_no_hold_place(copy_dataset):
    """hold=2: a batch stays readable until two more batches have been
    handed out; an empty one the loop never sees does not count."""
    s1, _ = shards(copy_dataset)[1]
    corrupt(s1, [3, 7, 8])
    with sluice.Pipeline(copy_dataset, train=False, batch=1, hold=2, **CFG) as pipe:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sluice.BadRecordsWarning)
            prev, n = None, 0
            for b in pipe:
                if prev is not None:  # one step later: still lent, still its pixels
                    np.from_dlpack(prev.images)
                prev, n = b, n + 1
    assert n == 147


def test_eval_epochs_end_on_an_empty_batch(copy_dataset):
    """pipe.epoch() over evaluation epochs: an epoch whose last batch is
    empty ends there; the next loop is the next epoch."""
    want = eval_ids(copy_dataset)
    last, rec = where(copy_dataset, want[-1])
    corrupt(last, [rec])
    with sluice.Pipeline(copy_dataset, train=False, batch=1, epochs=2, **CFG) as pipe:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sluice.BadRecordsWarning)
            e0 = [look(b) for b in pipe.epoch()]
            e1 = [look(b) for b in pipe.epoch()]
            with pytest.raises(sluice.Error, match="the run is over"):
                pipe.epoch()
    for k, e in enumerate((e0, e1)):
        assert [g[5][0] for g in e] == want[:-1], f"epoch {k}: every good record once"
        assert {g[3] for g in e} == {k}, f"epoch {k}: batch.epoch"


def test_eval_loop_in_torch_sees_no_empty_batch(copy_dataset):
    """The evaluation loop people write: a mean per batch never NaN."""
    torch = pytest.importorskip("torch")
    want = eval_ids(copy_dataset)
    first, rec = where(copy_dataset, want[0])
    corrupt(first, [rec])
    correct = total = 0
    loss_sum = 0.0
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 3))
    with sluice.Pipeline(copy_dataset, train=False, batch=1, **CFG) as pipe:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sluice.BadRecordsWarning)
            with torch.no_grad():
                for x, y in pipe:
                    x, y = torch.from_dlpack(x), torch.from_dlpack(y)
                    out = model(x)
                    loss_sum += float(torch.nn.functional.cross_entropy(out, y)) * len(y)
                    correct += int((out.argmax(1) == y).sum())
                    total += len(y)
    assert total == 149 and 0 <= correct <= total
    assert np.isfinite(loss_sum), "an empty batch's NaN mean reached the sum"


# ------------------------------------------------------------ the warning
def test_warning_counts_what_the_loop_skipped(copy_dataset):
    """The workers decode the whole run ahead (a ring of 16 batches) before
    the loop takes one: the warning, at the first batch with a bad record,
    counts that batch's, not the three the workers have met. (The three lie
    in blocks of 16 records of their own: never in one batch of 10.)"""
    for (shard, _), rec in zip(shards(copy_dataset), (3, 3, 40)):
        corrupt(shard, [rec])
    with sluice.Pipeline(copy_dataset, batch=10, epochs=1, shuffle="none", prefetch=16,
                         **CFG) as pipe:
        deadline = time.monotonic() + 60
        while pipe.stats()["bad_records"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pipe.stats()["bad_records"] == 3 and pipe.stats()["bad_records_out"] == 0
        seen = []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for b in pipe:
                seen.append((b.images.shape[0], b.skipped))
                if w:
                    break
        assert len(w) == 1 and issubclass(w[0].category, sluice.BadRecordsWarning)
        msg = str(w[0].message)
        n = sum(s for _, s in seen)
        assert 1 <= n < 3 and seen[-1][1] > 0, seen
        assert msg.startswith(f"sluice.Pipeline: {n} bad record{'s' if n > 1 else ''} skipped "
                              f"so far (on_error='skip': each slot refilled"), msg
        assert all(k == 10 for k, _ in seen), "training batches stay full"
        assert pipe.stats()["bad_records_out"] == n
        rest = [b.skipped for b in pipe]
        assert n + sum(rest) == 3 == pipe.stats()["bad_records_out"]
