"""sluice.convert: the library's converter from Python (records/convert.c)."""
import json

import numpy as np
import pytest

import sluice
from conftest import make_folder


def test_convert_folder_reports_skipped_and_progress(tmp_path):
    make_folder(tmp_path / "img", 20, classes=2)
    (tmp_path / "img" / "class1" / "broken.ppm").write_bytes(b"P6\n10 10\n255\n\x00\x01")
    calls = []
    res = sluice.convert(tmp_path / "out", folder=tmp_path / "img", shards=2, fsync=False,
                         progress=lambda done, total, nbytes: calls.append((done, total)))
    assert res["inputs"] == 21 and res["records"] == 20 and res["skipped"] == 1
    assert res["shards"] == 2
    (inp, why), = res["skipped_inputs"]
    assert inp.endswith("broken.ppm") and why
    assert calls and calls[-1] == (21, 21), "progress ends with done == total"
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert man["num_classes"] == 2
    # what was written reads back: every record once, labels from the folders
    ids = np.concatenate([np.from_dlpack(b.record_ids) for b in sluice.Pipeline(
        tmp_path / "out", image_size=8, batch=7, train=False)])
    assert sorted(ids.tolist()) == list(range(20))


def test_convert_strict_and_errors(tmp_path):
    make_folder(tmp_path / "img", 6, classes=2)
    (tmp_path / "img" / "class0" / "broken.ppm").write_bytes(b"not an image")
    with pytest.raises(sluice.Error, match="broken.ppm"):
        sluice.convert(tmp_path / "out", folder=tmp_path / "img", strict=True, fsync=False)
    assert not list((tmp_path / "out").glob("*.tfrecord")) if (tmp_path / "out").exists() else True
    with pytest.raises(sluice.NotFoundError):
        sluice.convert(tmp_path / "out2", folder=tmp_path / "missing", fsync=False)
    with pytest.raises(sluice.ConfigError):
        sluice.convert(tmp_path / "out3", folder=tmp_path / "img", list=tmp_path / "x")
    with pytest.raises(ZeroDivisionError):
        sluice.convert(tmp_path / "out4", folder=tmp_path / "img", fsync=False,
                       progress=lambda *a: 1 / 0)


def test_convert_tfrecord_reads_shards_back_into_a_dataset(tmp_path):
    """tfrecord=: another dataset's shards in, the same records out, in
    source order: JPEG bytes, labels and class names kept (the CLI's
    --from tfrecord; tests/tools/test_convert_tfrecord.c has PNG inside)."""
    make_folder(tmp_path / "img", 12, classes=3)
    sluice.convert(tmp_path / "a", folder=tmp_path / "img", name="train", shards=2,
                   fsync=False)
    res = sluice.convert(tmp_path / "b", tfrecord=tmp_path / "a", split="train", name="val",
                         shuffle=False, fsync=False)
    assert res["inputs"] == 12 and res["records"] == 12 and res["passthrough"] == 12
    man = json.loads((tmp_path / "b" / "dataset.json").read_text())
    assert man["classes"] == json.loads((tmp_path / "a" / "dataset.json").read_text())["classes"]

    def labels_by_id(path, split):
        out = {}
        for b in sluice.Pipeline(path, split=split, image_size=8, batch=5, train=False):
            ids, labels = np.from_dlpack(b.record_ids), np.from_dlpack(b.labels)
            out.update(zip(ids.tolist(), labels.tolist()))
        return out
    a = labels_by_id(tmp_path / "a", "train")
    assert sorted(labels_by_id(tmp_path / "b", "val").values()) == sorted(a.values())
    with pytest.raises(sluice.ConfigError, match="split= goes with tfrecord="):
        sluice.convert(tmp_path / "c", folder=tmp_path / "img", split="train")
    with pytest.raises(sluice.Error, match=r"no split 'nope' \(it has: train\)"):
        sluice.convert(tmp_path / "c", tfrecord=tmp_path / "a", split="nope", fsync=False)


def test_convert_idx_with_class_names(tmp_path):
    import gzip
    import struct
    imgs = np.arange(5 * 28 * 28, dtype=np.uint8).reshape(5, 28, 28)
    with gzip.open(tmp_path / "i.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, 5, 28, 28) + imgs.tobytes())
    with gzip.open(tmp_path / "l.gz", "wb") as f:
        f.write(struct.pack(">II", 0x801, 5) + bytes([0, 1, 2, 1, 0]))
    res = sluice.convert(tmp_path / "out", idx_images=tmp_path / "i.gz",
                         idx_labels=tmp_path / "l.gz", name="test", shuffle=False,
                         class_names=["a", "b", "c"], fsync=False)
    assert res["records"] == 5
    man = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert man["classes"] == ["a", "b", "c"]
    labels = np.concatenate([np.from_dlpack(b.labels) for b in sluice.Pipeline(
        tmp_path / "out", split="test", image_size=28, batch=5, train=False)])
    assert labels.tolist() == [0, 1, 2, 1, 0]


def test_max_pixels_in_convert_and_pipeline(tmp_path):
    # images of 40..60 a side: 1600..3600 pixels
    make_folder(tmp_path / "img", 8, classes=2, lo=40, hi=60)
    res = sluice.convert(tmp_path / "none", folder=tmp_path / "img", fsync=False, max_pixels=1000)
    assert res["records"] == 0 and res["skipped"] == 8
    assert all("pixels" in why for _, why in res["skipped_inputs"]), res["skipped_inputs"]
    res = sluice.convert(tmp_path / "out", folder=tmp_path / "img", fsync=False, max_pixels=4000)
    assert res["records"] == 8 and res["skipped"] == 0
    # the pipeline refuses the same records from their headers, and says so
    with pytest.raises(sluice.Error, match="pixels"):
        for _ in sluice.Pipeline(tmp_path / "out", image_size=8, batch=4, train=False,
                                 on_error="fail", max_pixels=1000):
            pass
    n = sum(len(np.from_dlpack(b.labels)) for b in sluice.Pipeline(
        tmp_path / "out", image_size=8, batch=4, train=False, max_pixels=4000))
    assert n == 8


CANCEL_SCRIPT = r"""
import os, signal, sys
import sluice
# Python installs its KeyboardInterrupt handler only where SIGINT was not
# ignored at start-up; a shell's background job (`tools/dev test &`) ignores it
signal.signal(signal.SIGINT, signal.default_int_handler)
out, folder = sys.argv[1], sys.argv[2]

def progress(done, total, nbytes):
    if done < total:  # Ctrl-C, as the terminal sends it, mid-run
        os.kill(os.getpid(), signal.SIGINT)

sluice.convert(out, folder=folder, shards=40, threads=1, fsync=False, progress=progress)
print("finished")
"""


def test_sigint_stops_convert_leaving_whole_shards_and_resume_finishes(tmp_path):
    """Issue 28 item 3: Ctrl-C stops sluice.convert at the next chunk, the
    shards written are whole, dataset.json is not written, and resume=True
    finishes with every record."""
    import os
    import subprocess
    import sys
    from conftest import make_folder
    make_folder(tmp_path / "base", 40, classes=4, lo=48, hi=64)
    base = sorted((tmp_path / "base").rglob("*.ppm"))
    n = 12000  # hard links: a run of about half a second on one thread
    for c in range(4):
        (tmp_path / "img" / f"c{c}").mkdir(parents=True)
    for i in range(n):
        os.link(base[i % 40], tmp_path / "img" / f"c{i % 4}" / f"{i:05d}.ppm")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-c", CANCEL_SCRIPT, str(out), str(tmp_path / "img")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "KeyboardInterrupt" in r.stderr, r.stdout + r.stderr
    assert "finished" not in r.stdout
    shards = sorted(out.glob("train-*-of-00040.tfrecord"))
    assert len(shards) < 40, "stopped before the end"
    assert not (out / "dataset.json").exists()
    assert not [p for p in out.iterdir() if "tmp" in p.name], list(out.iterdir())
    for s in shards:  # each one whole, with its index
        assert sluice.verify(s)["ok"] and (s.parent / (s.name + ".idx")).exists()
    res = sluice.convert(out, folder=tmp_path / "img", shards=40, threads=1, fsync=False,
                         resume=True)
    assert res["shards_kept"] == len(shards) and res["records"] == n
    assert sluice.verify(out)["records"] == n


def test_messages_speak_python(tmp_path):
    """A library message that names a CLI option says the keyword."""
    from conftest import make_folder
    make_folder(tmp_path / "img", 4, classes=2)
    sluice.convert(tmp_path / "out", folder=tmp_path / "img", fsync=False)
    with pytest.raises(sluice.Error) as e:
        sluice.convert(tmp_path / "out", folder=tmp_path / "img", fsync=False)
    assert "resume=True" in str(e.value) and "--resume" not in str(e.value), str(e.value)
    res = sluice.convert(tmp_path / "small", folder=tmp_path / "img", fsync=False, max_pixels=10)
    assert all("max_pixels=" in why and "--max-pixels" not in why
               for _, why in res["skipped_inputs"]), res["skipped_inputs"]


def _files(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.parametrize("kw,cli", [
    (dict(restart=2), ["--restart", "2"]),
    (dict(restart="auto"), ["--restart", "auto"]),
    (dict(restart_rows=1), ["--restart-rows", "1"]),
])
def test_convert_restart_gives_the_cli_bytes(tmp_path, sluice_bin, kw, cli):
    """Issue 41 in Python: convert(restart=...) writes what `sluice convert
    --restart` writes, byte for byte; the result counts the re-written
    JPEGs and their markers, and verify's restart_records (inspect's too)
    counts the records that carry them."""
    import subprocess
    make_folder(tmp_path / "img", 12, classes=2, lo=40, hi=140)
    opts = dict(shards=2, seed=5, fsync=False, threads=2)
    res = sluice.convert(tmp_path / "py", folder=tmp_path / "img", **opts, **kw)
    subprocess.run([sluice_bin, "convert", "--from", "folder", str(tmp_path / "img"), "--out",
                    str(tmp_path / "cli"), "--name", "train", "--shards", "2", "--shuffle-seed",
                    "5", "--no-fsync", "--threads", "2", "--quiet", *cli],
                   check=True, capture_output=True)
    py, want = _files(tmp_path / "py"), _files(tmp_path / "cli")
    assert sorted(py) == sorted(want) and len(py) == 6, sorted(py)  # .train.done too
    for name in want:
        assert py[name] == want[name], f"{name} differs from the CLI's"
    assert res["records"] == 12 and res["restarted"] == 12 and res["restart_kept"] == 0, res
    assert res["restart_markers"] >= 12, res
    assert res["restart_bytes_out"] > res["restart_bytes_in"] > 0, res
    assert sluice.verify(tmp_path / "py")["restart_records"] == 12
    assert sluice.inspect(tmp_path / "py")["restart_records"] == 12
    plain = sluice.convert(tmp_path / "plain", folder=tmp_path / "img", **opts)
    assert plain["restarted"] == plain["restart_markers"] == 0, plain
    assert sluice.verify(tmp_path / "plain")["restart_records"] == 0
    # the same pixels: the pipeline's batches are those of the plain shards
    def images(d):
        with sluice.Pipeline(d, image_size=24, batch=12, train=False, workers=1) as p:
            return [np.array(np.from_dlpack(b.images)) for b in p]
    for a, b in zip(images(tmp_path / "py"), images(tmp_path / "plain")):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kw,says", [
    (dict(restart=0), "restart=0: out of range, 1 to 65535"),
    (dict(restart=65536), "restart=65536: out of range"),
    (dict(restart="rows"), "restart='rows': an integer"),
    (dict(restart=2.0), "restart=2.0: an integer"),
    (dict(restart_rows=0), "restart_rows=0: out of range"),
    (dict(restart_rows="auto"), "restart_rows='auto': an integer"),
    (dict(restart=4, restart_rows=1), "give one or the other"),
])
def test_convert_restart_refuses_bad_values(tmp_path, kw, says):
    make_folder(tmp_path / "img", 2, classes=1)
    with pytest.raises(sluice.ConfigError) as e:
        sluice.convert(tmp_path / "out", folder=tmp_path / "img", fsync=False, **kw)
    assert says in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists(), "refused before anything was written"


def test_folder_tree_as_imagefolder_reads_it(tmp_path):
    """A class folder's images in folders under it (by year, by camera...)
    are its samples at any depth, as torchvision's ImageFolder takes them
    (os.walk, links followed): the same tree, the same count per class. They
    used to be dropped without a word below DIR/<class>/."""
    tv = pytest.importorskip("torchvision")
    import shutil
    make_folder(tmp_path / "img", 30, classes=3)
    root = tmp_path / "img"
    for i, f in enumerate(sorted((root / "class1").glob("*.ppm"))):
        sub = root / "class1" / ("2019" if i % 2 else "2020/raw/a")
        sub.mkdir(parents=True, exist_ok=True)
        shutil.move(str(f), str(sub / f.name))  # class1: every image nested
    (root / "class2" / "more").mkdir()
    shutil.move(str(sorted((root / "class2").glob("*.ppm"))[0]), str(root / "class2" / "more"))
    ref = tv.datasets.ImageFolder(str(root))
    want = {}
    for _, t in ref.samples:
        want[t] = want.get(t, 0) + 1
    res = sluice.convert(tmp_path / "out", folder=root, fsync=False)
    assert res["records"] == len(ref.samples) == 30 and res["skipped"] == 0
    got = {int(k): v for k, v in sluice.inspect(tmp_path / "out")["labels"].items()}
    assert got == want, (got, want)
    assert sluice.inspect(tmp_path / "out")["class_names"] == ref.classes
