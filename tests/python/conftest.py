"""Fixtures of the Python package's tests (run by `tools/dev test` through
tools/dev's python step; SLUICE_BIN names the CLI for the digest test)."""
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import sluice


def write_ppm(path, rgb):
    h, w, _ = rgb.shape
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h))
        f.write(np.ascontiguousarray(rgb, dtype=np.uint8).tobytes())


def make_folder(root, n, classes=3, lo=40, hi=100, seed=1):
    """n images of random sizes lo..hi a side in root/<class>/ (PPM: the
    converter re-encodes them as JPEG)."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        h, w = rng.integers(lo, hi + 1, size=2)
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 // w, yy * 255 // h, np.full((h, w), (i * 37) % 256)], -1)
        noise = rng.integers(0, 40, size=(h, w, 3))
        write_ppm(root / f"class{i % classes}" / f"img{i:04d}.ppm", (base + noise) % 256)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """150 records (3 classes) in 3 shards, labels stored with offset 0."""
    tmp = tmp_path_factory.mktemp("ds")
    make_folder(tmp / "img", 150)
    res = sluice.convert(tmp / "data", folder=tmp / "img", shards=3, fsync=False, threads=2)
    assert res["records"] == 150 and res["shards"] == 3 and res["skipped"] == 0
    return tmp / "data"


@pytest.fixture()
def sluice_bin():
    b = os.environ.get("SLUICE_BIN")
    if not b:
        here = pathlib.Path(__file__).resolve().parents[2]
        b = str(here / "build" / "sluice")
    if not os.access(b, os.X_OK):
        pytest.skip(f"no sluice CLI at {b} (set SLUICE_BIN)")
    return b


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def threads(at_most=None):
    """Threads of this process. With at_most: wait up to 5 s for the count to
    fall to it (a joined thread's /proc entry goes a moment after the join
    returns: the kernel wakes the joiner before it reaps the thread)."""
    import time
    deadline = time.monotonic() + 5
    while True:
        n = len(os.listdir("/proc/self/task"))
        if at_most is None or n <= at_most or time.monotonic() > deadline:
            return n
        time.sleep(0.01)


@pytest.fixture()
def copy_dataset(dataset, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(dataset, d)
    return d


def run(cmd, timeout=600, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
