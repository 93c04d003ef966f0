"""sluice.Pipeline from Python: the bytes equal the CLI's, every framework
sees the same memory, resume, lifetime, errors, Ctrl-C, close and GC, and
no leak over 10,000 batches."""
import ctypes
import gc
import os
import re
import sys
import textwrap
import time

import numpy as np
import pytest

import sluice
from conftest import rss_kib, run, threads

try:
    import torch
except ImportError:  # the numpy / jax / CLI checks still run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="no torch in this Python")

SMALL = dict(split="train", image_size=(16, 20), batch=16, workers=2, seed=5,
             shuffle="buffer:40")


# ------------------------------------------------------------ the CLI's digest
# tools/digest.c's hash (profile --digest), written again from its comment:
# four xxHash64 lanes over 32-byte blocks, then the murmur3 finalizer.
P1, P2, M = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _fmix(z):
    z = ((z ^ (z >> 33)) * 0xFF51AFD7ED558CCD) & M
    z = ((z ^ (z >> 33)) * 0xC4CEB9FE1A85EC53) & M
    return z ^ (z >> 33)


def cli_digest(data):
    v = [(P1 + P2) & M, P2, 0, (-P1) & M]
    tail = len(data) % 32
    words = np.frombuffer(bytes(data[: len(data) - tail]) + bytes(data[len(data) - tail:]) +
                          bytes(32 - tail), dtype="<u8").tolist()
    for i in range(0, len(words), 4):  # the zero-padded tail block always goes in
        for k in range(4):
            v[k] = (_rotl((v[k] + words[i + k] * P2) & M, 31) * P1) & M
    total = len(data)
    a = _fmix(v[0] ^ _rotl(v[2], 17) ^ total)
    b = _fmix(v[1] ^ _rotl(v[3], 29) ^ ((total * P1) & M))
    hi = _fmix((a + b * P2) & M)
    lo = _fmix(b ^ _rotl(a, 23) ^ hi)
    return "%016x%016x" % (hi, lo)


def batch_bytes(b):
    """What the CLI hashes per batch: n (u64), data, labels (int32), record
    ids (u64), epochs (int32), host byte order."""
    img = np.from_dlpack(b.images)
    return b"".join([np.uint64(img.shape[0]).tobytes(), img.tobytes(),
                     np.from_dlpack(b.labels).astype(np.int32).tobytes(),
                     np.from_dlpack(b.record_ids).astype(np.uint64).tobytes(),
                     np.from_dlpack(b.epochs).astype(np.int32).tobytes()])


@pytest.mark.parametrize("layout,train,shuffle", [("nchw-f32", True, "buffer:40"),
                                                  ("nhwc-u8", True, "global"),
                                                  ("nhwc-f32", False, "none")])
def test_bytes_equal_cli_profile_digest(dataset, sluice_bin, layout, train, shuffle):
    args = [sluice_bin, "profile", "--data", str(dataset), "--image-size", "16x20", "--batch",
            "16", "--workers", "2", "--seed", "5", "--epochs", "2", "--layout", layout,
            "--shuffle", shuffle, "--digest", "--quiet"] + ([] if train else ["--eval"])
    r = run(args)
    assert r.returncode == 0, r.stderr
    want = re.search(r"digest: ([0-9a-f]{32})", r.stdout).group(1)
    got = bytearray()
    n = 0
    for b in sluice.Pipeline(dataset, image_size=(16, 20), batch=16, workers=3, seed=5,
                             epochs=2, layout=layout, shuffle=shuffle, train=train):
        got += batch_bytes(b)
        n += b.images.shape[0]
    assert n == 300
    assert cli_digest(got) == want
    # the hash tells a one-byte change apart (the check can fail)
    got[100] ^= 1
    assert cli_digest(got) != want


# ------------------------------------------------------------ frameworks
@needs_torch
def test_torch_numpy_see_the_same_memory(dataset):
    pipe = sluice.Pipeline(dataset, **SMALL)
    b = next(pipe)
    assert b.images.shape == (16, 3, 16, 20) and b.images.dtype == "float32"
    assert b.images.__dlpack_device__() == (1, 0)
    t = torch.from_dlpack(b.images)
    a = np.from_dlpack(b.images)
    assert t.shape == (16, 3, 16, 20) and t.dtype == torch.float32
    assert t.data_ptr() == a.__array_interface__["data"][0], "zero copy: one buffer"
    assert np.array_equal(t.numpy(), a)
    lab = torch.from_dlpack(b.labels)
    assert lab.dtype == torch.int64 and lab.shape == (16,)
    ids = np.from_dlpack(b.record_ids)
    assert set(lab.tolist()) <= {0, 1, 2} and ids.dtype == np.int64 and len(set(ids.tolist())) == 16
    # normalized: not raw 0..255 pixels
    assert -3 < float(a.mean()) < 3 and a.std() > 0.1
    pipe.close()


def test_jax_sees_the_same_data(dataset):
    jax = pytest.importorskip("jax")
    pipe = sluice.Pipeline(dataset, **SMALL)
    b = next(pipe)
    x = jax.dlpack.from_dlpack(b.images)
    assert np.array_equal(np.asarray(x), np.from_dlpack(b.images))
    pipe.close()


def test_versioned_capsule_and_refusals(dataset):
    pipe = sluice.Pipeline(dataset, **SMALL)
    b = next(pipe)
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert name(b.images.__dlpack__()) == b"dltensor"
    assert name(b.images.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert name(b.images.__dlpack__(max_version=(0, 8))) == b"dltensor"
    with pytest.raises(BufferError):
        b.images.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        b.images.__dlpack__(stream=5)
    with pytest.raises(TypeError):
        sluice.Tensor()
    pipe.close()


def collect(pipe, k=None, copy_now=True):
    out = []
    for i, b in enumerate(pipe):
        if k is not None and i == k:
            break
        out.append((b.index, np.from_dlpack(b.images).copy(), np.from_dlpack(b.labels).copy(),
                    np.from_dlpack(b.record_ids).copy()))
    return out


# ------------------------------------------------------------ resume
@pytest.mark.parametrize("shuffle", ["buffer:40", "global", "none"])
def test_state_dict_resumes_the_same_batches(dataset, shuffle):
    cfg = dict(SMALL, shuffle=shuffle, epochs=3)
    whole = collect(sluice.Pipeline(dataset, **cfg))
    assert len(whole) == 29  # 450 samples in batches of 16
    pipe = sluice.Pipeline(dataset, **cfg)
    first = collect(pipe, 11)
    # the 12th batch was taken (and dropped) by collect's loop: the state is after it
    sd = pipe.state_dict()
    pipe.close()
    assert sd["version"] == 1 and "config_hash" in sd["pipeline"]
    other = sluice.Pipeline(dataset, **dict(cfg, workers=1))
    other.load_state_dict(sd)
    rest = collect(other)
    assert [w[0] for w in whole] == [f[0] for f in first] + [12 - 1] + [r[0] for r in rest]
    for w, g in zip(whole[12:], rest):
        assert w[0] == g[0]
        assert np.array_equal(w[1], g[1]) and np.array_equal(w[2], g[2])
        assert np.array_equal(w[3], g[3])


def test_load_state_dict_refuses_other_settings(dataset):
    pipe = sluice.Pipeline(dataset, **SMALL)
    next(pipe)
    sd = pipe.state_dict()
    other = sluice.Pipeline(dataset, **dict(SMALL, seed=6))
    # issue 38 item 7: the one setting that changed, not a group of them
    with pytest.raises(sluice.ConfigError, match=r"seed=6, the state was saved with seed=5"):
        other.load_state_dict(sd)
    with pytest.raises(sluice.ConfigError, match=r"image_size=8, the state was saved "
                       r"with image_size=\[16, 20\]"):
        sluice.Pipeline(dataset, **dict(SMALL, image_size=8)).load_state_dict(sd)
    # what may change, may
    sluice.Pipeline(dataset, **dict(SMALL, workers=1, prefetch=3)).load_state_dict(sd)
    with pytest.raises(sluice.ConfigError):
        other.load_state_dict({"nope": 1})
    assert next(other).index == 0, "a refused state leaves the pipeline as it was"


# ------------------------------------------------------------ lifetime
def test_kept_lent_batches_refuse_and_copy_keeps_batches(dataset):
    """Issue 38 item 4: list(pipe) kept lent batches whose slots were
    refilled (36 of 39 showed another batch, silently); now reading one
    raises BufferError naming copy=True, and copy=True keeps them."""
    want = collect(sluice.Pipeline(dataset, **SMALL))
    kept = [b for b in sluice.Pipeline(dataset, copy=True, **SMALL)]
    assert len(kept) == len(want)
    for w, b in zip(want, kept):
        assert np.array_equal(w[1], np.from_dlpack(b.images)), "copy=True batches stay"
    lent = list(sluice.Pipeline(dataset, **SMALL))
    assert len(lent) == len(want)
    # the last one was still lent when the pipeline went: its bytes are right
    assert np.array_equal(np.from_dlpack(lent[-1].images), want[-1][1])
    for k, b in enumerate(lent[:-1]):
        with pytest.raises(BufferError, match="copy=True") as e:
            np.from_dlpack(b.images)
        assert f"batch {k}" in str(e.value) and f"batch {k + 1}" in str(e.value), str(e.value)
        with pytest.raises(BufferError):
            np.asarray(b.images)
        if torch is not None:
            with pytest.raises(BufferError):
                torch.from_dlpack(b.images)
        # labels, ids and epochs are copies of their own
        assert np.array_equal(np.from_dlpack(b.labels), want[k][2])
        assert b.images.shape == want[k][1].shape


def test_hold_two_keeps_the_previous_batch(dataset):
    want = collect(sluice.Pipeline(dataset, **SMALL))
    pipe = sluice.Pipeline(dataset, hold=2, **SMALL)
    prev = next(pipe)
    older = None
    for w in want[1:]:
        cur = next(pipe)
        assert np.array_equal(np.from_dlpack(cur.images), w[1])
        assert pipe._c.held == 2
        np.from_dlpack(prev.images)  # still lent: readable
        if older is not None:
            with pytest.raises(BufferError, match="hold=2"):
                np.from_dlpack(older.images)
        older, prev = prev, cur
    assert prev is not None


@needs_torch
def test_close_keeps_taken_tensors_readable(dataset):
    pipe = sluice.Pipeline(dataset, epochs=0, **SMALL)  # forever: no thread ends by itself
    b = next(pipe)
    t = torch.from_dlpack(b.images)
    before = t.clone()
    n0 = threads()
    pipe.close()
    assert pipe.closed
    assert threads(at_most=n0 - 4) <= n0 - 4, "close joins the 2 readers and 2 workers"
    assert torch.equal(t, before), "memory lives while a tensor does"
    with pytest.raises(sluice.CanceledError):
        next(pipe)
    pipe.close()  # twice is fine
    del b, t, before
    gc.collect()


def test_close_from_another_thread_ends_a_waiting_next(dataset):
    import threading
    pipe = sluice.Pipeline(dataset, image_size=384, batch=64, workers=1, epochs=0,
                           layout="nhwc-u8")
    got = []

    def consume():
        try:
            for b in pipe:
                got.append(b.index)
        except sluice.CanceledError as e:
            got.append(e)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.5)
    with pytest.raises(RuntimeError, match="two threads"):
        next(pipe)  # the consumer thread is inside next() (or about to be)
    t0 = time.monotonic()
    pipe.close()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 5
    assert isinstance(got[-1], sluice.CanceledError), got
    assert pipe.closed


# Issue 38 item 11: close() from two threads hung every time (both joined
# the same threads; the second could free what the first still used), and
# close() against next() had smaller windows of the same kind. A child
# process with an alarm and Python's debug allocator: a hang or a use after
# free fails the test instead of stalling or passing by luck.
CLOSE_RACES = textwrap.dedent("""
    import faulthandler, random, sys, threading, time, sluice
    faulthandler.dump_traceback_later(100, exit=True)
    data = sys.argv[1]
    cfg = dict(image_size=8, batch=8, workers=2, epochs=0)
    for trial in range(25):
        pipe = sluice.Pipeline(data, **cfg)
        next(pipe)
        go = threading.Barrier(3)
        def closer():
            go.wait()
            pipe.close()
        ts = [threading.Thread(target=closer) for _ in range(2)]
        for t in ts:
            t.start()
        go.wait()
        pipe.close()  # and a third
        for t in ts:
            t.join(20)
            assert not t.is_alive(), "close() hung"
        assert pipe.closed
        assert pipe.stats()["batches"] >= 1 and pipe.state_dict()["version"] == 1
    ended = {}
    for trial in range(40):
        pipe = sluice.Pipeline(data, **cfg)
        def consume():
            try:
                for b in pipe:
                    pass
            except sluice.CanceledError:
                ended["canceled"] = ended.get("canceled", 0) + 1
        t = threading.Thread(target=consume)
        t.start()
        time.sleep(random.random() * 0.02)
        pipe.close()
        t.join(20)
        assert not t.is_alive(), "next() hung after close()"
    print("ok", ended.get("canceled", 0), flush=True)
""")


def test_close_from_two_threads_and_against_next(dataset, tmp_path):
    script = tmp_path / "close_races.py"
    script.write_text(CLOSE_RACES)
    r = run([sys.executable, str(script), str(dataset)],
            env=dict(os.environ, PYTHONMALLOC="debug"), timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok "), r.stdout + r.stderr
    assert int(r.stdout.split()[1]) > 0, "some close() landed while next() waited"


def test_garbage_collection_stops_threads(dataset):
    n0 = threads()
    pipe = sluice.Pipeline(dataset, epochs=0, **SMALL)
    next(pipe)
    assert threads() > n0
    cycle = [pipe]
    cycle.append(cycle)  # only the collector can free it
    del pipe, cycle
    gc.collect()
    assert threads(at_most=n0) <= n0, "the pipeline's threads are gone"


# ------------------------------------------------------------ errors
def test_errors_name_file_and_record(copy_dataset):
    shard = sorted(copy_dataset.glob("train-00001-of-00003.tfrecord"))[0]
    idx = [list(map(int, line.split())) for line in open(str(shard) + ".idx")]
    raw = bytearray(shard.read_bytes())
    off, size = idx[7]
    raw[off + size - 10] ^= 0xFF  # inside record 7's payload: its data CRC fails
    shard.write_bytes(bytes(raw))
    with pytest.raises(sluice.CorruptError) as e:
        collect(sluice.Pipeline(copy_dataset, on_error="fail", **SMALL))
    assert "train-00001-of-00003.tfrecord: record 7 @ %d" % off in str(e.value)
    assert e.value.status == "SL_ECORRUPT" and isinstance(e.value, sluice.Error)
    pipe = sluice.Pipeline(copy_dataset, epochs=1, **SMALL)
    with pytest.warns(sluice.BadRecordsWarning, match="1 bad record skipped"):
        n = sum(b.images.shape[0] for b in pipe)
    st = pipe.stats()
    assert n == 150 and st["bad_records"] == 1, "skip: the slot is refilled, the batch full"
    assert "record 7" in st["bad"][0] and "CRC" in st["bad"][0]


def test_config_and_missing_data_errors(dataset, tmp_path):
    with pytest.raises(sluice.NotFoundError, match="nonexistent"):
        sluice.Pipeline(tmp_path / "nonexistent")
    with pytest.raises(FileNotFoundError):
        sluice.Pipeline(tmp_path / "nonexistent")
    with pytest.raises(sluice.ConfigError, match="batch"):
        sluice.Pipeline(dataset, batch=0)
    with pytest.raises(ValueError):
        sluice.Pipeline(dataset, shuffle="sometimes")
    with pytest.raises(sluice.ConfigError, match="layout"):
        sluice.Pipeline(dataset, layout="nchw-f16")
    with pytest.raises(sluice.ConfigError, match="rank"):
        sluice.Pipeline(dataset, rank=2, world=2)
    with pytest.raises(sluice.Error):
        sluice.Pipeline(dataset, device="cuda:0")  # no GPU here (or no CUDA build)


# A refused setting is named in the message. The name used to be read from
# the UTF-8 copy it was looked up in after that copy was freed (a use after
# free that pymalloc hides: the freed block keeps its bytes). Python's debug
# allocator fills freed memory with 0xDD, which made that message
# undecodable (UnicodeDecodeError instead of ConfigError); so the child runs
# with PYTHONMALLOC=debug. Integers out of their field's range are refused
# too (workers=2**32 was 0 in the C config). Since issue 28 the Python layer
# checks each setting's meaning first (test_arguments.py); the extension's
# own field checks are called directly here.
SETTING_ERRORS = textwrap.dedent("""
    import sys, sluice
    from sluice._sluice import _Pipeline
    for kw in ({"batch": -1}, {"seed": -5}, {"max_bad": -1}, {"workers": 2**32},
               {"height": 2**31}):
        try:
            _Pipeline(dict(data=sys.argv[1], **kw)).close()
            print("accepted", kw)
        except Exception as e:
            print(type(e).__name__, str(e))
""")


def test_setting_errors_name_the_setting(dataset, tmp_path):
    with pytest.raises(sluice.ConfigError,
                       match=r"^sluice.Pipeline: batch=-1: out of range, 1 to \d+ samples$"):
        sluice.Pipeline(dataset, batch=-1)
    script = tmp_path / "setting_errors.py"
    script.write_text(SETTING_ERRORS)
    r = run([sys.executable, str(script), str(dataset)],
            env=dict(os.environ, PYTHONMALLOC="debug"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "ConfigError sluice: batch: -1 is negative",
        "ConfigError sluice: seed: -5 is negative",
        "ConfigError sluice: max_bad: -1 is negative",
        "ConfigError sluice: workers: 4294967296 is out of range (0 to 4294967295)",
        "ConfigError sluice: height: 2147483648 is out of range "
        "(-2147483648 to 2147483647)",
    ], r.stdout + r.stderr


def test_label_offset(dataset, tmp_path):
    from conftest import make_folder
    make_folder(tmp_path / "img", 30, seed=3)
    sluice.convert(tmp_path / "d", folder=tmp_path / "img", shards=2, label_offset=1,
                   fsync=False)

    def labels(**kw):
        return np.concatenate([np.from_dlpack(b.labels) for b in sluice.Pipeline(
            **dict(dict(SMALL, data=tmp_path / "d", shuffle="none"), **kw))])
    assert sorted(set(labels())) == [0, 1, 2], "dataset.json's offset by default"
    assert sorted(set(labels(label_offset=0))) == [1, 2, 3], "the stored labels"
    os.remove(tmp_path / "d" / "dataset.json")
    assert sorted(set(labels(label_offset=1))) == [0, 1, 2], "TF shards without a manifest"


# ------------------------------------------------------------ Ctrl-C
CTRL_C = textwrap.dedent("""
    import os, signal, sys, threading, time, sluice
    # Python installs its KeyboardInterrupt handler only where SIGINT was not
    # ignored at start-up; a shell's background job (`tools/dev test &`) ignores it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    pipe = sluice.Pipeline(sys.argv[1], image_size=1024, batch=48, workers=1, epochs=0,
                           train=False, layout="nhwc-u8")
    it = iter(pipe)
    t0 = time.monotonic()
    next(it)
    print("batch %.3f" % (time.monotonic() - t0), flush=True)
    # SIGINT 0.2 s into the wait for the next batch (which takes far longer)
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        next(it)
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("interrupted %.3f" % (time.monotonic() - t0), flush=True)
    b = next(it)  # still usable after the interrupt
    pipe.close()
    print("closed", b.images.shape[0], flush=True)
""")


def test_ctrl_c_interrupts_a_waiting_next(tmp_path):
    from conftest import make_folder
    # big noisy images: a batch of 48 takes a second or more to decode on one
    # worker, so the interrupt lands while next() waits with the GIL released
    make_folder(tmp_path / "img", 24, classes=2, lo=1400, hi=1500, seed=9)
    sluice.convert(tmp_path / "d", folder=tmp_path / "img", shards=1, fsync=False)
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    r = run([sys.executable, str(script), str(tmp_path / "d")])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[1].startswith("interrupted"), r.stdout
    latency = float(lines[1].split()[1]) - 0.2
    assert latency < 0.25, f"KeyboardInterrupt {latency:.2f} s after SIGINT ({lines[0]})"
    assert lines[2] == "closed 48"


# ------------------------------------------------------------ leaks
@needs_torch
def test_no_leak_over_10000_batches(dataset):
    pipe = sluice.Pipeline(dataset, image_size=8, batch=4, workers=2, epochs=0,
                           shuffle="buffer:20")
    it = iter(pipe)
    rss = []
    for i in range(10000):
        b = next(it)
        t = torch.from_dlpack(b.images)
        a = np.from_dlpack(b.labels)
        s = float(t[0, 0, 0, 0]) + int(a[0])  # touch both
        if i in (1000, 9999):
            gc.collect()
            rss.append(rss_kib())
    st = pipe.stats()
    pipe.close()
    assert st["batches"] == 10000 and s == s
    assert rss[1] - rss[0] < 4096, f"RSS grew {rss[1] - rss[0]} KiB over 9,000 batches"


def test_truncated_shard_with_and_without_index(copy_dataset):
    """Issue 28 item 7: a truncated shard names the file and says
    "truncated record" (as verify does), with or without its .idx; under
    on_error='skip' the pipeline reads its whole records and lists the rest."""
    shard = sorted(copy_dataset.glob("train-*.tfrecord"))[1]
    data = shard.read_bytes()
    shard.write_bytes(data[:-5])
    total = 150
    for with_index in (True, False):
        if not with_index:
            (shard.parent / (shard.name + ".idx")).unlink()
        with pytest.raises(sluice.CorruptError) as e:
            sluice.Pipeline(copy_dataset, image_size=8, batch=10, on_error="fail", train=False)
        assert shard.name in str(e.value) and "stale" not in str(e.value), str(e.value)
        if with_index:
            assert "truncated record" in str(e.value), str(e.value)
        with sluice.Pipeline(copy_dataset, image_size=8, batch=10, train=False) as pipe:
            with pytest.warns(sluice.BadRecordsWarning, match="1 bad record skipped"):
                n = sum(len(np.from_dlpack(b.labels)) for b in pipe)
            st = pipe.stats()
        assert n == total - 1
        assert st["bad_records"] == 1 and shard.name in st["bad"][0], st["bad"]
    with pytest.raises(sluice.CorruptError, match="truncated record"):
        sluice.verify(copy_dataset)
