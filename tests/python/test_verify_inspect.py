"""sluice.verify and sluice.inspect: the library's checks and summary
(records.h's sl_verify_path, sl_dataset_inspect) from Python, against what
the CLI prints for the same data, on damaged shards, and on shards that
TensorFlow itself wrote (TensorFlow's virtualenv: skipped without it)."""
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import sluice
from conftest import run

HERE = pathlib.Path(__file__).resolve().parent
TF_WRITER = HERE.parent / "interop" / "tf_write_imagenet.py"


def flip_payload_byte(shard, recno):
    """Flip a byte inside record recno's payload (its data CRC then fails);
    returns the record's framing offset."""
    idx = [list(map(int, line.split())) for line in open(str(shard) + ".idx")]
    raw = bytearray(shard.read_bytes())
    off, size = idx[recno]
    raw[off + size - 10] ^= 0xFF
    shard.write_bytes(bytes(raw))
    return off


# ------------------------------------------------------------ verify
def test_verify_clean(dataset):
    rep = sluice.verify(dataset)
    assert rep["ok"] and rep["problems"] == []
    assert rep["records"] == 150 and rep["files"] == 3 and rep["shards_without_index"] == 0
    assert sluice.verify(dataset, split="train")["records"] == 150


def test_verify_raises_naming_file_and_record(copy_dataset):
    shard = copy_dataset / "train-00001-of-00003.tfrecord"
    off = flip_payload_byte(shard, 7)
    with pytest.raises(sluice.CorruptError) as e:
        sluice.verify(copy_dataset)
    want = f"{shard}: record 7 @ {off}: data CRC mismatch"
    assert str(e.value) == want
    assert isinstance(e.value, sluice.Error) and e.value.status == "SL_ECORRUPT"
    rep = e.value.report
    assert not rep["ok"] and len(rep["problems"]) == 1, "stops at the first problem"
    p = rep["problems"][0]
    assert (p["file"], p["record"], p["offset"], p["split"]) == (str(shard), 7, off, "train")
    assert p["what"] == "data CRC mismatch" and p["message"] == want


def test_verify_all_lists_every_problem_as_the_cli(copy_dataset, sluice_bin):
    s0 = copy_dataset / "train-00000-of-00003.tfrecord"
    s2 = copy_dataset / "train-00002-of-00003.tfrecord"
    off0 = flip_payload_byte(s0, 3)
    off2 = flip_payload_byte(s2, 40)
    rep = sluice.verify(copy_dataset, all=True, raise_on_problem=False)
    assert not rep["ok"]
    got = [(p["file"], p["record"], p["offset"]) for p in rep["problems"]]
    # a framing error ends a TFRecord file's walk: what follows record 3 of
    # shard 0 is not read, so dataset.json's counts are not checked for it
    assert got[:2] == [(str(s0), 3, off0), (str(s2), 40, off2)]
    assert rep["records"] == 150 - 47 - 10, "shard 0 read to record 3, shard 2 to 40"
    cli = run([sluice_bin, "verify", str(copy_dataset), "--all", "--quiet"])
    assert cli.returncode == 1
    lines = cli.stdout.strip().split("\n")
    assert lines[:-1] == [p["message"] for p in rep["problems"]], "the CLI prints the same"
    assert lines[-1].startswith(f"{len(rep['problems'])} problem")


def test_verify_label_range_and_bad_records(dataset, tmp_path):
    with pytest.raises(sluice.CorruptError, match=r"label 2 outside 0\.\.1"):
        sluice.verify(dataset, label_range=(0, 1))
    rep = sluice.verify(dataset, label_range=(0, 1), all=True, raise_on_problem=False)
    assert len(rep["problems"]) == 50 and {p["what"][:7] for p in rep["problems"]} == {"label 2"}
    with pytest.raises(sluice.ConfigError):
        sluice.verify(dataset, label_range=(3, 1))
    # dataset.json's counts against the shards
    d = tmp_path / "d"
    shutil.copytree(dataset, d)
    man = json.loads((d / "dataset.json").read_text())
    man["splits"]["train"]["records"] = 151
    (d / "dataset.json").write_text(json.dumps(man))
    with pytest.raises(sluice.CorruptError, match="lists 151 records, found 150") as e:
        sluice.verify(d)
    assert e.value.report["problems"][0]["file"] == str(d / "dataset.json")
    # a listed shard that is missing: NotFoundError, the others still read
    os.remove(d / "train-00001-of-00003.tfrecord")
    rep = sluice.verify(d, all=True, raise_on_problem=False)
    p = rep["problems"][0]
    assert p["status"] == "SL_ENOENT" and p["record"] is None and "cannot open" in p["what"]
    assert rep["records"] == 100
    with pytest.raises(sluice.NotFoundError, match="train-00001-of-00003"):
        sluice.verify(d)


def test_verify_missing_path(tmp_path):
    with pytest.raises(sluice.NotFoundError, match="nothing-here"):
        sluice.verify(tmp_path / "nothing-here", raise_on_problem=False)


# ------------------------------------------------------------ inspect
def test_inspect_counts_equal_the_cli(dataset, sluice_bin):
    info = sluice.inspect(dataset)
    assert info["records"] == 150 and info["shards"] == 3
    assert info["labels"] == {0: 50, 1: 50, 2: 50}
    assert info["formats"] == {"JPEG": 150}
    assert 40 <= info["width"]["min"] <= info["width"]["mean"] <= info["width"]["max"] <= 100
    assert info["num_classes"] == 3 and info["class_names"] == ["class0", "class1", "class2"]
    tr = info["splits"]["train"]
    assert tr["format"] == "tfrecord" and tr["records"] == 150 and tr["shards_without_index"] == 0
    assert tr["listed"] == {"records": 150, "shards": 3, "bytes": tr["bytes"]}
    assert info["warnings"] == []
    cli = run([sluice_bin, "inspect", str(dataset), "--json"])
    assert cli.returncode == 0, cli.stderr
    want = json.loads(cli.stdout)
    for d in [want] + list(want["splits"].values()):
        d["labels"] = {int(k): v for k, v in d["labels"].items()}
    assert info == want


def test_inspect_sizes_match_the_pipeline_images(dataset):
    # the widths inspect reports are those of the stored JPEGs: an eval
    # pipeline at 'keep size' is not available, so check the range against
    # the source images (make_folder draws 40..100 a side)
    info = sluice.inspect(dataset, split="train")
    assert info["height"]["min"] >= 40 and info["height"]["max"] <= 100
    assert info["splits"].keys() == {"train"}


def test_inspect_errors(copy_dataset, tmp_path):
    shard = copy_dataset / "train-00002-of-00003.tfrecord"
    off = flip_payload_byte(shard, 11)
    with pytest.raises(sluice.CorruptError) as e:
        sluice.inspect(copy_dataset)
    assert f"{shard}: record 11 @ {off}: data CRC mismatch" in str(e.value)
    with pytest.raises(sluice.NotFoundError):
        sluice.inspect(tmp_path / "nope")
    with pytest.raises(sluice.NotFoundError, match="nope"):
        sluice.inspect(copy_dataset, split="nope")


# ------------------------------------------------------------ TensorFlow's shards
def tf_python():
    """TensorFlow's virtualenv python (tools/dev's SLUICE_PYTHON, or its
    default place); None when SLUICE_SKIP_INTEROP=1 or there is none."""
    if os.environ.get("SLUICE_SKIP_INTEROP") == "1":
        return None
    for p in (os.environ.get("SLUICE_PYTHON"),
              os.path.expanduser("~/.cache/sluice/venv/bin/python")):
        if p and os.access(p, os.X_OK):
            return p
    return None


@pytest.fixture(scope="module")
def tf_dataset(tmp_path_factory):
    """train-0000K-of-00002 (7 + 5 records) and validation-00000-of-00001 (6)
    written by tf.io.TFRecordWriter as build_imagenet_data.py lays them out:
    no suffix, no index files, no dataset.json, labels 1..5."""
    py = tf_python()
    if py is None:
        pytest.skip("no TensorFlow virtualenv (SLUICE_PYTHON or ~/.cache/sluice/venv; "
                    "or SLUICE_SKIP_INTEROP=1)")
    tmp = tmp_path_factory.mktemp("tf")
    raw, data = tmp / "raw", tmp / "data"
    raw.mkdir()
    data.mkdir()
    expected = {}
    for name, n, first in (("train-00000-of-00002", 7, 0), ("train-00001-of-00002", 5, 7),
                           ("validation-00000-of-00001", 6, 100)):
        r = subprocess.run([py, str(TF_WRITER), str(raw / name), str(n), "--classes", "5",
                            "--first", str(first)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0 and "No module named 'tensorflow'" in r.stderr:
            pytest.skip(f"{py} has no tensorflow")
        assert r.returncode == 0, r.stderr
        shutil.move(str(raw / name), str(data / name))
        expected[name] = json.loads((raw / (name + ".json")).read_text())["records"]
    return data, expected


def test_tf_written_shards(tf_dataset):
    data, expected = tf_dataset
    rep = sluice.verify(data)
    assert rep["ok"] and rep["records"] == 18 and rep["files"] == 3
    assert rep["shards_without_index"] == 3, "TensorFlow writes no index files"
    sluice.verify(data, label_range=(1, 5))
    with pytest.raises(sluice.CorruptError, match=r"outside 0\.\.4") as e:
        sluice.verify(data, label_range=(0, 4))
    assert e.value.report["problems"][0]["file"].endswith("train-00000-of-00002")

    info = sluice.inspect(data)
    assert set(info["splits"]) == {"train", "validation"} and "num_classes" not in info
    for split, names in (("train", ["train-00000-of-00002", "train-00001-of-00002"]),
                         ("validation", ["validation-00000-of-00001"])):
        recs = [r for n in names for r in expected[n]]
        sp = info["splits"][split]
        assert sp["records"] == len(recs) and sp["shards"] == len(names)
        assert sp["shards_without_index"] == len(names)
        want = {}
        for r in recs:
            want[r["label"]] = want.get(r["label"], 0) + 1
        assert sp["labels"] == want
        assert sp["width"]["min"] == min(r["width"] for r in recs)
        assert sp["width"]["max"] == max(r["width"] for r in recs)
        assert sp["height"]["max"] == max(r["height"] for r in recs)
        assert sp["formats"] == {"JPEG": len(recs)}
    one = sluice.inspect(data / "validation-00000-of-00001")
    assert one["records"] == 6 and list(one["splits"]) == ["validation"]

    # and the pipeline reads them, labels shifted to 0..4
    got = np.concatenate([np.from_dlpack(b.labels) for b in sluice.Pipeline(
        data, split="validation", image_size=16, batch=4, train=False, label_offset=1)])
    assert sorted(got.tolist()) == sorted(r["label"] - 1 for r in expected[
        "validation-00000-of-00001"])
