"""Issue 38 items 1, 2 and 5: the loop PyTorch users write, over several
epochs and several ranks.

- `for epoch in range(E): for x, y in pipe:` trains every epoch (it trained
  the first and then nothing, without a word); a finished run iterated
  again raises naming epochs= and batch.epoch_end; evaluation is one pass.
- Ranks get the same number of batches per epoch by default, whatever the
  shards' sizes (rank_split='files' gave 3 uneven shards 13 and 7 batches:
  DDP waited forever), record ids are the dataset's in every split mode,
  one shard serves two ranks, and rank_split='files' with too few shards
  says what to use instead.
- The default shuffle keeps each epoch of a small dataset a permutation (an
  "epoch" of 310 samples held 216 distinct images)."""
import multiprocessing as mp

import numpy as np
import pytest

import sluice
from conftest import make_folder

CFG = dict(image_size=8, batch=16, workers=2, seed=3)


def ids(b):
    return [int(i) for i in np.from_dlpack(b.record_ids)]


def sample_epochs(b):
    return [int(e) for e in np.from_dlpack(b.epochs)]


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """130 records in 3 shards (44, 43, 43): split by files over 2 ranks,
    rank 0 would read 87 records and rank 1 43."""
    tmp = tmp_path_factory.mktemp("uneven")
    make_folder(tmp / "img", 130, seed=4)
    sluice.convert(tmp / "data", folder=tmp / "img", shards=3, fsync=False, threads=2,
                   shuffle=False)
    return tmp / "data"


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    make_folder(tmp / "img", 41, seed=5)
    sluice.convert(tmp / "data", folder=tmp / "img", shards=1, fsync=False, threads=2)
    return tmp / "data"


# ------------------------------------------------------------ item 1
def test_the_usual_epoch_loop_trains_every_epoch(dataset):
    pipe = sluice.Pipeline(dataset, **CFG)
    n = pipe.records_per_epoch
    assert n == 150
    seen, steps = [], 0
    for epoch in range(4):
        want = len(pipe)
        loop = []
        for b in pipe:
            loop.append(b)
            assert b.epoch == epoch
            assert b.epoch_end == (len(loop) == want), "only the loop's last batch ends it"
            steps += 1
        assert len(loop) == want and want in (9, 10), (epoch, want)  # ceil(150 / 16) or one fewer
        assert loop[-1].epoch_end
        seen += [i for b in loop for i in ids(b)]
        # the loop held the epoch: all its records but those the previous
        # loop's last batch took, and a few of the next epoch's
        assert len(set(i for b in loop for i in ids(b))) >= n - 16
    # over the loops every record came as often as any other: the stream is
    # the 4 epochs back to back (no record dropped, none doubled)
    assert steps == len(seen) // 16 and len(seen) == steps * 16
    counts = np.bincount(seen[:4 * n], minlength=n)
    assert (counts == 4).all(), "the first 4 x 150 samples are 4 passes"
    pipe.close()


def test_a_finished_run_iterated_again_raises(dataset):
    pipe = sluice.Pipeline(dataset, epochs=2, **CFG)
    assert len(pipe) == 19  # 300 samples in batches of 16: one loop, the whole run
    assert sum(1 for _ in pipe) == 19
    with pytest.raises(sluice.Error) as e:
        for _ in pipe:
            pass
    assert "epochs=2" in str(e.value) and "batch.epoch_end" in str(e.value)
    assert "leave epochs out" in str(e.value)
    with pytest.raises(sluice.Error):
        pipe.epoch()
    with pytest.raises(StopIteration):
        next(pipe)  # the iterator protocol itself stays as it was
    pipe.close()


def test_epoch_gives_one_epoch_of_a_finite_run(dataset):
    pipe = sluice.Pipeline(dataset, epochs=2, **CFG)
    first, second = list(b.index for b in pipe.epoch()), None
    it = pipe.epoch()
    assert len(it) == 9
    second = [b.index for b in it]
    assert first == list(range(10)) and second == list(range(10, 19)), (first, second)
    assert len(it) == 0
    with pytest.raises(sluice.Error, match="epochs=2"):
        pipe.epoch()
    pipe.close()


def test_a_loop_left_early_is_finished_by_the_next(dataset):
    pipe = sluice.Pipeline(dataset, **CFG)
    for b in pipe:
        if b.index == 3:
            break
    assert len(pipe) == 6
    assert [b.index for b in pipe] == [4, 5, 6, 7, 8, 9]
    assert [b.index for b in pipe][0] == 10
    pipe.close()


def test_evaluation_is_one_pass(dataset):
    pipe = sluice.Pipeline(dataset, train=False, **CFG)
    assert len(pipe) == 10
    got = [i for b in pipe for i in ids(b)]
    assert sorted(got) == list(range(150)), "each record once, the last batch partial"
    with pytest.raises(sluice.Error, match="epochs=1"):
        list(pipe)
    pipe.close()


def test_resume_and_spawn_keep_the_epochs(dataset):
    """The epoch loops of a resumed (or pickled) pipeline are those of the
    one that never stopped: state_dict and the epoch plan agree."""
    whole = sluice.Pipeline(dataset, **CFG)
    loops = [[b.index for b in whole] for _ in range(3)]
    whole.close()
    pipe = sluice.Pipeline(dataset, **CFG)
    [b.index for b in pipe]
    for b in pipe:
        if b.index == 13:
            break
    sd = pipe.state_dict()
    pipe.close()
    other = sluice.Pipeline(dataset, **dict(CFG, workers=1))
    other.load_state_dict(sd)
    assert len(other) == len(loops[1]) - 4
    assert [b.index for b in other] == loops[1][4:]
    assert [b.index for b in other] == loops[2]
    other.close()
    # pickled (spawn): made anew at the position, the same loops
    pipe = sluice.Pipeline(dataset, **CFG)
    [b.index for b in pipe]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_spawned_loops, args=(pipe, q))
    p.start()
    assert q.get(timeout=60) == loops[1:]
    p.join(60)
    pipe.close()


def _spawned_loops(pipe, q):
    q.put([[b.index for b in pipe] for _ in range(2)])


# ------------------------------------------------------------ item 5
def test_default_shuffle_keeps_each_epoch_a_permutation(dataset):
    pipe = sluice.Pipeline(dataset, **CFG)  # shuffle 'buffer:10000' > 150 records
    assert pipe.stats()["shuffle_buffer"] == 150, "the buffer holds an epoch"
    by_epoch = {}
    for _ in range(3):
        for b in pipe:
            for i, e in zip(ids(b), sample_epochs(b)):
                by_epoch.setdefault(e, []).append(i)
    pipe.close()
    for e in (0, 1, 2):
        assert sorted(by_epoch[e]) == list(range(150)), f"epoch {e} is a permutation"
        assert by_epoch[e] != list(range(150)), "shuffled"
    assert by_epoch[0] != by_epoch[1] != by_epoch[2], "reshuffled each epoch"


def test_a_buffer_smaller_than_an_epoch_mixes_only_near_the_boundary(dataset):
    pipe = sluice.Pipeline(dataset, shuffle="buffer:40", epochs=2, **CFG)
    assert pipe.stats()["shuffle_buffer"] == 40
    eps = [e for b in pipe for e in sample_epochs(b)]
    pipe.close()
    assert eps[:150 - 40] == [0] * 110, "no epoch-1 record before the buffer's reach"
    assert sorted(eps) == [0] * 150 + [1] * 150


# ------------------------------------------------------------ item 2
def rank_loops(data, world, epochs=2, **kw):
    """Per rank: the batch indices of each epoch loop, the record ids and
    the epoch_end steps."""
    out = []
    for r in range(world):
        pipe = sluice.Pipeline(data, rank=r, world=world, **dict(CFG, **kw))
        loops = [[(b.index, ids(b), b.epoch_end) for b in pipe] for _ in range(epochs)]
        pipe.close()
        out.append(loops)
    return out


@pytest.mark.parametrize("shuffle", [None, "global", "none", "buffer:20"])
def test_ranks_take_the_same_batches_per_epoch_by_default(uneven, shuffle):
    kw = {} if shuffle is None else {"shuffle": shuffle}
    ranks = rank_loops(uneven, 2, **kw)
    for e in range(2):
        counts = [len(ranks[r][e]) for r in range(2)]
        assert counts[0] == counts[1], f"epoch {e}: {counts} batches"
        ends = [[end for _, _, end in ranks[r][e]] for r in range(2)]
        assert ends[0] == ends[1]
    first = [i for r in range(2) for b in ranks[r][0] for i in b[1]]
    assert len(set(first)) >= 130 - 2 * 16 and max(first) < 130, "the dataset's ids"
    if shuffle in ("global", "none"):
        # rank r's j-th sample is world 1's j*2 + r: together, world 1's batches
        one = sluice.Pipeline(uneven, **dict(CFG, batch=32, **kw))
        want = [ids(b) for b in one]
        one.close()
        got = [sorted(ranks[0][0][k][1] + ranks[1][0][k][1]) for k in range(len(want))]
        assert got == [sorted(w) for w in want]


def test_files_split_counts_the_world_and_names_records_globally(uneven):
    ranks = rank_loops(uneven, 2, rank_split="files")
    for e in range(2):
        assert len(ranks[0][e]) == len(ranks[1][e]), "the world's steps on every rank"
    pipe = sluice.Pipeline(uneven, rank=1, world=2, rank_split="files", **CFG)
    assert pipe.records_per_epoch == 130
    st = pipe.stats()
    assert st["records_per_epoch"] == 43 and st["records_per_epoch_world"] == 130
    pipe.close()
    # rank 1 reads shard 1: the dataset's ids of its 43 records (they were
    # 0..42, rank 0's ids too)
    one = sluice.Pipeline(uneven, rank=1, world=2, rank_split="files", train=False, **CFG)
    got = sorted(i for b in one for i in ids(b))
    one.close()
    whole = sluice.Pipeline(uneven, train=False, shuffle="none", **CFG)
    labels = {i: int(lab) for b in whole for i, lab in zip(ids(b), np.from_dlpack(b.labels))}
    whole.close()
    assert len(got) == 43 and got == list(range(got[0], got[0] + 43)) and got[0] >= 43, got
    one = sluice.Pipeline(uneven, rank=1, world=2, rank_split="files", train=False, **CFG)
    for b in one:
        for i, lab in zip(ids(b), np.from_dlpack(b.labels)):
            assert labels[i] == int(lab), "the id names the record whatever the split"
    one.close()


def test_finite_runs_that_would_leave_a_rank_short_are_refused(uneven):
    # 130 samples, 3 ranks of 43: the last step holds 1 sample
    for r in range(3):
        with pytest.raises(sluice.ConfigError, match="drop_remainder=True") as e:
            sluice.Pipeline(uneven, rank=r, world=3, epochs=1, **dict(CFG, batch=43))
        assert "one batch fewer" in str(e.value)
    counts = []
    for r in range(3):
        with sluice.Pipeline(uneven, rank=r, world=3, epochs=1, drop_remainder=True,
                             **dict(CFG, batch=43)) as p:
            counts.append(sum(1 for _ in p))
    assert counts == [1, 1, 1]
    # evaluation shares no step: each rank reads its records once
    seen = []
    for r in range(3):
        with sluice.Pipeline(uneven, rank=r, world=3, train=False, **dict(CFG, batch=43)) as p:
            seen += [i for b in p for i in ids(b)]
    assert sorted(seen) == list(range(130))


def test_one_shard_serves_two_ranks(one_shard):
    ranks = rank_loops(one_shard, 2)
    assert [len(ranks[0][e]) for e in range(2)] == [len(ranks[1][e]) for e in range(2)]
    with pytest.raises(sluice.ConfigError) as e:
        sluice.Pipeline(one_shard, rank=1, world=2, rank_split="files", **CFG)
    msg = str(e.value)
    assert "only 1 shard" in msg and "rank_split='records'" in msg, msg
    assert not msg.startswith("sl_"), msg
