"""Issue 28 items 2 and 6: every setting checked against its C type and its
meaning (sluice.ConfigError naming the setting, never a value cut to 32 bits
or a bare TypeError/OverflowError); paths as str, bytes or non-UTF-8 names;
introspection (len, __array__, docstrings, dir, state_dict after close,
typing)."""
import os
import pathlib
import shutil

import numpy as np
import pytest

import sluice


def P(dataset, **kw):
    args = dict(image_size=16, batch=10, workers=1, train=False)
    args.update(kw)
    return sluice.Pipeline(dataset, **args)


@pytest.mark.parametrize("setting, value", [
    ("batch", 2**32 + 8), ("batch", 2**40), ("batch", 0), ("batch", -1), ("batch", 64.7),
    ("batch", "8"), ("batch", True), ("batch", 2**70),
    ("image_size", 2**32 + 48), ("image_size", "a"), ("image_size", 64.7), ("image_size", 0),
    ("image_size", (16, 2**32 + 16)),
    ("workers", 2**32 + 3), ("workers", -1), ("workers", 1000),
    ("readers", 1000), ("epochs", -1), ("epochs", 2**70), ("seed", -1), ("seed", 2**64),
    ("rank", 1), ("world", 0), ("label_offset", -1), ("max_bad", -5), ("prefetch", 1),
    ("hold", 0), ("scale", (0.5, 2.0)), ("ratio", "wide"), ("crop_fraction", 0),
    ("std", (1, 0, 1)), ("mean", (1, 2)), ("train", "yes"), ("device", "gpu"),
    ("shuffle", "buffer:0"), ("split", b"train"), ("copy", 2),
])
def test_pipeline_settings_raise_config_error_naming_them(dataset, setting, value):
    with pytest.raises(sluice.ConfigError) as e:
        P(dataset, **{setting: value})
    assert setting in str(e.value), str(e.value)


@pytest.mark.parametrize("setting, value", [
    ("shards", -3), ("shards", 2**32 + 1), ("threads", -1), ("threads", 1000),
    ("quality", 0), ("quality", 101), ("quality", 2**32 + 95), ("resize_short", -1),
    ("seed", -1), ("label_offset", -1), ("label_offset", 2**40), ("max_pixels", 2**70),
    ("shards", "3"), ("shards", 3.0), ("name", 3), ("class_names", "abc"),
])
def test_convert_settings_raise_config_error_naming_them(tmp_path, setting, value):
    from conftest import make_folder
    make_folder(tmp_path / "img", 3, classes=1)
    with pytest.raises(sluice.ConfigError) as e:
        sluice.convert(tmp_path / "out", folder=tmp_path / "img", fsync=False, **{setting: value})
    assert setting in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_wrong_path_types(dataset, tmp_path):
    for bad in (3, None, 2.5):
        with pytest.raises(sluice.ConfigError, match="data"):
            sluice.Pipeline(bad)
        with pytest.raises(sluice.ConfigError, match="data"):
            sluice.verify(bad)
    with pytest.raises(sluice.ConfigError, match="folder"):
        sluice.convert(tmp_path / "o", folder=7)


def test_good_values_at_the_edges_work(dataset):
    # numpy integers are integers; the documented bounds are accepted
    with P(dataset, batch=np.int64(150), image_size=(np.int32(8), 9), seed=2**64 - 1,
           workers=0, epochs=1) as pipe:
        b = next(pipe)
        assert b.images.shape == (150, 3, 8, 9)


def test_bytes_and_non_utf8_paths(dataset, tmp_path):
    # a directory whose name is not UTF-8, given as bytes and as os.fsdecode's str
    raw = os.fsencode(str(tmp_path)) + b"/data-\xff\xfe"
    shutil.copytree(dataset, os.fsdecode(raw))
    for path in (raw, os.fsdecode(raw), pathlib.Path(os.fsdecode(raw))):
        ids = [int(i) for b in P(path) for i in np.from_dlpack(b.record_ids)]
        assert sorted(ids) == list(range(150))
        assert sluice.verify(path)["records"] == 150
        assert sluice.inspect(path)["records"] == 150
    from conftest import make_folder
    img = os.fsencode(str(tmp_path)) + b"/img-\xff"
    make_folder(pathlib.Path(os.fsdecode(img)), 4, classes=2)
    res = sluice.convert(raw + b"/again", folder=img, fsync=False)
    assert res["records"] == 4
    assert sluice.verify(os.fsdecode(raw + b"/again"))["records"] == 4
    # an error about such a path names it readably (\xff), not a decode error
    with pytest.raises(sluice.NotFoundError) as e:
        sluice.Pipeline(raw + b"/missing", image_size=8, batch=2)
    assert "missing" in str(e.value) and "\\xff" in str(e.value)


def test_len_epoch_length_and_array(dataset):
    pipe = P(dataset, epochs=2)
    assert pipe.records_per_epoch == 150
    assert len(pipe) == 30  # 300 samples in batches of 10
    b = next(pipe)
    a = np.asarray(b.images)
    assert a.shape == (10, 3, 16, 16) and a.dtype == np.float32
    assert np.array_equal(np.asarray(b.labels), np.from_dlpack(b.labels))
    assert np.asarray(b.labels, dtype=np.int32).dtype == np.int32
    pipe.close()
    with pytest.raises(TypeError, match="forever"):
        len(P(dataset, epochs=0))
    assert len(P(dataset, batch=16)) == 10  # 150 = 9 x 16 + 6
    assert len(P(dataset, batch=16, drop_remainder=True)) == 9


def test_state_dict_after_close_and_with_block(dataset):
    with P(dataset, shuffle="global", train=True, seed=4) as pipe:
        for _ in range(3):
            next(pipe)
    state = pipe.state_dict()  # after the with block: the position reached
    again = P(dataset, shuffle="global", train=True, seed=4)
    for _ in range(3):
        next(again)
    want = [int(i) for i in np.from_dlpack(next(again).record_ids)]
    resumed = P(dataset, shuffle="global", train=True, seed=4)
    resumed.load_state_dict(state)
    assert [int(i) for i in np.from_dlpack(next(resumed).record_ids)] == want


def test_introspection():
    public = set(dir(sluice))
    assert not {"os", "json", "math", "operator"} & public, public
    assert not [n for n in public if n.startswith("_") and n != "__version__"], public
    for f in (sluice.Pipeline.__next__, sluice.Pipeline.__enter__, sluice.Pipeline.__len__,
              sluice.Pipeline.__exit__, sluice.Tensor.__array__, sluice.Tensor.__dlpack__):
        assert f.__doc__, f
    pkg = pathlib.Path(sluice.__file__).parent
    assert (pkg / "py.typed").exists() and (pkg / "__init__.pyi").exists()


def test_device_without_gpu_says_so(dataset):
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    except ImportError:
        pass
    with pytest.raises(sluice.Error) as e:
        P(dataset, device="cuda:0")
    msg = str(e.value)
    assert "driver version" not in msg and ("no CUDA GPU" in msg or "no CUDA" in msg), msg
    assert "device=" in msg, msg


def _map_threads(pipe):
    next(pipe)
    return pipe.stats()["stages"]["map"]["threads"]


def test_cpus_budget_sets_the_default_workers(dataset):
    """Issue 43: workers=0 means one per core of `cpus`; the default budget
    is the usable cores less the loop's one (at least one); an explicit
    workers wins; a bad budget names the setting."""
    with P(dataset, workers=0, cpus=3) as pipe:
        assert _map_threads(pipe) == 3
    with P(dataset, workers=2, cpus=1) as pipe:
        assert _map_threads(pipe) == 2
    usable, why = sluice._cpus()
    assert usable >= 1 and "core" in why
    with P(dataset, workers=0) as pipe:
        assert _map_threads(pipe) == max(1, usable - 1)
    for bad in (0, -1, "2", 10**6):
        with pytest.raises(sluice.ConfigError) as e:
            P(dataset, cpus=bad)
        assert "cpus" in str(e.value)
