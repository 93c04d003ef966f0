"""Issue 38 items 3, 6 and 7: what the package says when something is off.

- A file that is not a shard, given as the data (dataset.json, an .idx, an
  image), is refused naming what it is and what was expected (it gave an
  empty pipeline: len 0, no error).
- on_error='skip' warns once per pipeline, naming how many records were
  skipped so far and the first (it was silent).
- stats() works after close() as state_dict() does; help(sluice.Pipeline)
  explains every setting; messages do not open with C function names; the
  README's venv line sees Debian's torch."""
import os
import pathlib
import pydoc
import re
import subprocess
import warnings

import numpy as np
import pytest

import sluice

ROOT = pathlib.Path(__file__).resolve().parents[2]
CFG = dict(image_size=8, batch=16, workers=2)
C_NAME = re.compile(r"(^|: )sl_[a-z0-9_]+: ")


# ------------------------------------------------------------ item 3
@pytest.mark.parametrize("name,says", [
    ("dataset.json", "the dataset's manifest: pass the directory that holds it"),
    ("train-00000-of-00003.tfrecord.idx", "an index file"),
])
def test_a_file_that_is_no_shard_is_refused(dataset, name, says):
    with pytest.raises(sluice.ConfigError) as e:
        sluice.Pipeline(dataset / name, **CFG)
    msg = str(e.value)
    assert name in msg and "not a record shard" in msg and says in msg, msg
    assert "dataset directory" in msg and not C_NAME.search(msg), msg
    with pytest.raises(sluice.ConfigError, match="not a record shard"):
        sluice.verify(dataset / name)


def test_an_image_as_data_is_refused(tmp_path):
    from conftest import write_ppm
    for name in ("cat.jpg", "cat.ppm"):
        write_ppm(tmp_path / name, np.zeros((20, 20, 3), np.uint8))
        with pytest.raises(sluice.ConfigError) as e:
            sluice.Pipeline(tmp_path / name, **CFG)
        assert "an image: convert images into shards first (sluice.convert)" in str(e.value)
    # a shard is a shard whatever its name (TensorFlow's have no suffix)
    (tmp_path / "x.bin").write_bytes(b"")
    with sluice.Pipeline(tmp_path / "x.bin", **CFG) as p:
        assert len(p) == 0 and list(p) == []
        with pytest.raises(sluice.Error, match="no records to read"):
            list(p)


# ------------------------------------------------------------ item 6
def corrupt(shard, records):
    idx = [list(map(int, line.split())) for line in open(str(shard) + ".idx")]
    raw = bytearray(shard.read_bytes())
    for r in records:
        off, size = idx[r]
        raw[off + size - 10] ^= 0xFF  # in the payload: its data CRC fails
    shard.write_bytes(bytes(raw))


def test_skip_warns_once_naming_the_count(copy_dataset):
    corrupt(copy_dataset / "train-00001-of-00003.tfrecord", [3, 7, 11])
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with sluice.Pipeline(copy_dataset, epochs=3, shuffle="none", **CFG) as pipe:
            n = sum(b.images.shape[0] for b in pipe)
            st = pipe.stats()
    mine = [w for w in got if issubclass(w.category, sluice.BadRecordsWarning)]
    assert len(mine) == 1, [str(w.message) for w in got]
    msg = str(mine[0].message)
    m = re.search(r"(\d+) bad records? skipped so far", msg)
    assert m and 1 <= int(m.group(1)) <= 9, msg
    assert "train-00001-of-00003.tfrecord: record " in msg and "on_error='fail'" in msg, msg
    assert mine[0].filename == __file__, "the warning points at the caller's loop"
    assert n == 450 and st["bad_records"] == 9
    assert all(not C_NAME.search(b) for b in st["bad"]), st["bad"]
    # a clean dataset says nothing; 'fail' raises instead of warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with sluice.Pipeline(copy_dataset, split="train", epochs=1, on_error="fail",
                             **CFG) as pipe:
            with pytest.raises(sluice.CorruptError):
                list(pipe)


def test_clean_data_does_not_warn(dataset):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with sluice.Pipeline(dataset, epochs=2, **CFG) as pipe:
            assert sum(1 for _ in pipe) == 19


# ------------------------------------------------------------ item 7
def test_stats_after_close(dataset):
    pipe = sluice.Pipeline(dataset, **CFG)
    for b in pipe:
        if b.index == 4:
            break
    pipe.close()
    st = pipe.stats()  # it raised CanceledError
    assert st["batches"] == 5 and st["samples"] == 80 and st["records_per_epoch"] == 150
    assert set(st["stages"]) == {"read", "shuffle", "map", "load"}
    assert pipe.state_dict()["version"] == 1
    assert len(pipe) == 5, "the epoch plan still answers"


def test_help_explains_every_setting():
    text = pydoc.render_doc(sluice.Pipeline, renderer=pydoc.plaintext)
    import inspect
    params = [p for p in inspect.signature(sluice.Pipeline).parameters if p != "self"]
    doc = sluice.Pipeline.__doc__
    for p in params:
        # each setting opens an entry of its own ("name:" or "name, other:")
        assert re.search(rf"^    (\w+, )*{p}(, \w+)*: \S", doc, re.M), f"{p} is not explained"
    for p in ("split", "readers", "prefetch", "cycle", "block", "max_bad"):
        assert re.search(rf"{p}(, \w+)*: ", text), p
    assert "epoch()" in text and "epoch_end" in text


def test_messages_do_not_open_with_c_function_names(dataset, one_shard_data):
    msgs = []
    for kw in (dict(world=8, rank=7, rank_split="files"), dict(world=2, rank=1,
                                                               rank_split="files")):
        with pytest.raises(sluice.Error) as e:
            sluice.Pipeline(one_shard_data, **dict(CFG, **kw))
        msgs.append(str(e.value))
    with pytest.raises(sluice.Error) as e:
        sluice.Pipeline(dataset, split="nope", **CFG)
    msgs.append(str(e.value))
    for m in msgs:
        assert not C_NAME.search(m), m
    assert "no split 'nope'" in msgs[-1]


@pytest.fixture()
def one_shard_data(tmp_path):
    from conftest import make_folder
    make_folder(tmp_path / "img", 6, classes=2)
    sluice.convert(tmp_path / "d", folder=tmp_path / "img", shards=1, fsync=False)
    return tmp_path / "d"


def test_readme_venv_line_sees_debians_torch(tmp_path):
    """The python/README's install line makes a venv that sees Debian's
    python3-torch (it made one with `python -m venv v`, which does not)."""
    text = (ROOT / "python" / "README.md").read_text()
    m = re.search(r"`(/usr/bin/python3 -m venv --system-site-packages v)[^`]*`", text)
    assert m, "python/README.md: the venv line names /usr/bin/python3 and --system-site-packages"
    assert "--system-site-packages" in (ROOT / "README.md").read_text()
    if not os.path.exists("/usr/lib/python3/dist-packages/torch"):
        pytest.skip("no Debian python3-torch here")
    cmd = m.group(1).split()[:-1] + ["--without-pip", str(tmp_path / "v")]
    subprocess.run(cmd, check=True, timeout=120)
    r = subprocess.run([str(tmp_path / "v" / "bin" / "python"), "-c", "import torch"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
