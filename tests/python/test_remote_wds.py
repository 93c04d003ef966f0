"""Issue 30 in the Python package: WebDataset tar shards (convert
format='wds', Pipeline label_key=), remote data over HTTP (an nginx on
loopback, as tests/servers.c starts it), the process-wide remote I/O
settings (io_retries, io_timeout, io_inflight, io_retry_budget) and SL_EPERM as
sluice.PermissionDeniedError (a PermissionError)."""
import io
import json
import os
import signal
import socket
import subprocess
import tarfile
import time

import numpy as np
import pytest

import sluice


def P(data, **kw):
    args = dict(image_size=16, batch=16, workers=1, train=False)
    args.update(kw)
    return sluice.Pipeline(data, **args)


def batches(pipe):
    """Every batch of a run as numpy copies: (images, labels, record_ids)."""
    with pipe:
        return [(np.array(np.from_dlpack(b.images)), np.array(np.from_dlpack(b.labels)),
                 np.array(np.from_dlpack(b.record_ids))) for b in pipe]


def assert_same(got, want):
    assert len(got) == len(want) and got
    for (gi, gl, gr), (wi, wl, wr) in zip(got, want):
        np.testing.assert_array_equal(gr, wr)
        np.testing.assert_array_equal(gl, wl)
        np.testing.assert_array_equal(gi, wi)


@pytest.fixture(scope="session")
def wds_dataset(dataset):
    """The images of the dataset fixture converted to WebDataset tar shards
    (the same order: same seed and shard count), beside it."""
    out = dataset.parent / "wds"
    res = sluice.convert(out, folder=dataset.parent / "img", shards=3, format="wds",
                         fsync=False, threads=2)
    assert res["records"] == 150 and res["shards"] == 3 and res["skipped"] == 0
    return out


@pytest.fixture()
def io_settings():
    """Put the process-wide remote I/O settings back after the test."""
    before = sluice._io_opts()
    yield
    retries = -1 if before["retries"] is None else before["retries"]  # -1: no count
    sluice._io_configure(retries, before["timeout_ms"], before["inflight"], before["retry_ms"])
    assert sluice._io_opts() == before


# ---------------------------------------------------------------- WebDataset

def test_convert_wds_writes_tar_shards(wds_dataset):
    names = sorted(p.name for p in wds_dataset.iterdir())
    tars = [n for n in names if n.endswith(".tar")]
    assert tars == [f"train-0000{i}-of-00003.tar" for i in range(3)], names
    assert all(t + ".idx" in names for t in tars), names
    assert "dataset.json" in names
    with tarfile.open(wds_dataset / tars[0]) as t:
        exts = {m.name.rsplit(".", 1)[1] for m in t.getmembers()}
    assert {"jpg", "cls", "json"} <= exts, exts


def test_wds_batches_equal_tfrecord_batches(dataset, wds_dataset):
    want = batches(P(dataset))
    assert sum(len(lab) for _, lab, _ in want) == 150
    assert_same(batches(P(wds_dataset)), want)
    # the converter's .json member holds the label too
    assert_same(batches(P(wds_dataset, label_key="label")), want)
    # and a training run (shuffle, crop, flip) reads the same from both
    kw = dict(train=True, seed=7, shuffle="buffer:50", epochs=2)
    assert_same(batches(P(wds_dataset, **kw)), batches(P(dataset, **kw)))


def _tar_with_json_labels(src_tar, dst_tar, labels):
    """A tar of src_tar's images only (KEY.jpg) plus KEY.json {"y": N, ...}
    with the labels given, made with Python's tarfile (no .cls member, no
    index: the reader scans it)."""
    keys = []
    with tarfile.open(src_tar) as src, tarfile.open(dst_tar, "w", format=tarfile.GNU_FORMAT) as dst:
        for m in src.getmembers():
            if not m.name.endswith(".jpg"):
                continue
            key = m.name[:-4]
            data = src.extractfile(m).read()
            y = labels(len(keys))
            keys.append((key, y))
            for name, payload in ((key + ".jpg", data),
                                  (key + ".json", json.dumps({"name": key, "y": y}).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                info.mtime = 1700000000
                dst.addfile(info, io.BytesIO(payload))
    return keys


def test_label_key_reads_the_json_field(wds_dataset, tmp_path):
    src = wds_dataset / "train-00000-of-00003.tar"
    dst = tmp_path / "json-labels.tar"
    keys = _tar_with_json_labels(src, dst, lambda i: 100 + 3 * i)
    want = {i: y for i, (_, y) in enumerate(keys)}
    got = {}
    with P(dst, label_key="y", label_offset=0, batch=7) as pipe:
        for b in pipe:
            for r, y in zip(np.from_dlpack(b.record_ids), np.from_dlpack(b.labels)):
                got[int(r)] = int(y)
    assert got == want
    # without label_key the .cls member is needed: a bad record naming it
    # (in Python's words), raised with on_error='fail'
    with pytest.raises(sluice.CorruptError) as e:
        batches(P(dst, label_offset=0, on_error="fail"))
    assert "no .cls member" in str(e.value) and "label_key=" in str(e.value), str(e.value)
    # a label_key that is not in the .json
    with pytest.raises(sluice.CorruptError) as e:
        batches(P(dst, label_key="nope", label_offset=0, on_error="fail"))
    assert '"nope"' in str(e.value), str(e.value)


def test_label_key_string_outlives_the_call(wds_dataset, tmp_path):
    # the C config borrows label_key until the pipeline is destroyed: a
    # key made at run time and dropped at once must still be read right
    src = wds_dataset / "train-00000-of-00003.tar"
    dst = tmp_path / "json-labels.tar"
    keys = _tar_with_json_labels(src, dst, lambda i: i % 5)
    pipe = P(dst, label_key="".join(["y"]), label_offset=0, batch=5, prefetch=2)
    import gc
    gc.collect()
    labels = []
    with pipe:
        for b in pipe:
            labels += [int(v) for v in np.from_dlpack(b.labels)]
    assert sorted(labels) == sorted(y for _, y in keys)


def test_pickled_pipeline_keeps_label_key(wds_dataset):
    import pickle
    with P(wds_dataset, label_key="label", batch=10) as pipe:
        next(pipe)
        clone = pickle.loads(pickle.dumps(pipe))
        a, b = next(pipe), next(clone)
        np.testing.assert_array_equal(np.from_dlpack(a.labels), np.from_dlpack(b.labels))
        np.testing.assert_array_equal(np.from_dlpack(a.record_ids), np.from_dlpack(b.record_ids))
        clone.close()


# ---------------------------------------------------------------- settings

@pytest.mark.parametrize("setting, value", [
    ("io_retries", -1), ("io_retries", 101), ("io_retries", "3"), ("io_retries", 2.5),
    ("io_retries", True), ("io_retries", 2**64),
    ("io_timeout", 0), ("io_timeout", 0.5), ("io_timeout", 3601), ("io_timeout", "5"),
    ("io_timeout", float("nan")), ("io_timeout", True),
    ("io_inflight", 0), ("io_inflight", 65), ("io_inflight", 1.5), ("io_inflight", "8"),
    ("io_retry_budget", 0), ("io_retry_budget", 0.5), ("io_retry_budget", 86401),
    ("io_retry_budget", "60"), ("io_retry_budget", float("inf")), ("io_retry_budget", True),
    ("label_key", ""), ("label_key", 3), ("label_key", b"y"),
])
def test_new_settings_raise_config_error_naming_them(dataset, io_settings, setting, value):
    before = sluice._io_opts()
    with pytest.raises(sluice.ConfigError) as e:
        P(dataset, **{setting: value})
    assert setting in str(e.value), str(e.value)
    assert sluice._io_opts() == before  # nothing applied


def test_convert_format_wds_and_bad_format(tmp_path):
    from conftest import make_folder
    make_folder(tmp_path / "img", 3, classes=1)
    for bad in ("tar", "webdataset", "", 3):
        with pytest.raises(sluice.ConfigError) as e:
            sluice.convert(tmp_path / "out", folder=tmp_path / "img", fsync=False, format=bad)
        assert "format" in str(e.value) and "'wds'" in str(e.value), str(e.value)


def test_io_settings_leave_the_process_settings_alone(dataset, io_settings):
    """A Pipeline's io_* are its own (issue 44): making one changes nothing
    in the process-wide settings (_io_opts), given or not."""
    before = sluice._io_opts()
    P(dataset, io_retries=0, io_timeout=2.5, io_inflight=3).close()
    assert sluice._io_opts() == before
    P(dataset, io_retries=100).close()
    P(dataset).close()
    P(dataset, io_timeout=3600, io_inflight=64, io_retry_budget=86400).close()  # upper edges
    assert sluice._io_opts() == before


def test_io_retries_none_is_no_count_and_zero_no_retry(dataset, io_settings):
    """_io_opts() tells the default (no count: the retry budget alone) from
    io_retries=0 (no retry): both read 0 before, and a fixture that put
    the settings back turned the default into no retry without a word."""
    sluice._io_configure(-1, None, None, None)
    got = sluice._io_opts()
    assert got["retries"] is None and got["retry_ms"] >= 1000, got
    sluice._io_configure(0, None, None, None)
    assert sluice._io_opts()["retries"] == 0
    sluice._io_configure(7, None, None, 2500)
    got = sluice._io_opts()
    assert (got["retries"], got["retry_ms"]) == (7, 2500), got
    sluice._io_configure(None, None, None, 86400000)  # the upper edge; retries as they were
    got = sluice._io_opts()
    assert (got["retries"], got["retry_ms"]) == (7, 86400000), got
    P(dataset, io_retries=0).close()  # a Pipeline's own: not these
    assert sluice._io_opts() == got
    sluice._io_configure(-1, None, None, None)
    assert sluice._io_opts()["retries"] is None


def test_io_settings_are_each_pipelines_own(io_settings):
    """Nothing listens at the URL. The process takes 3 tries; a Pipeline
    made with io_retries=0 takes 1, one with io_retries=1 takes 2, and one
    made after them with none given still takes the process's 3 (they were
    process-wide: each Pipeline's io_retries changed every later read)."""
    url = f"http://127.0.0.1:{_free_port()}/d/train-00000-of-00001.tfrecord"
    sluice._io_configure(2, None, None, 30000)
    before = sluice._io_opts()
    for kw, want in (({"io_retries": 0}, "after 1 try"), ({}, "after 3 tries"),
                     ({"io_retries": 1}, "after 2 tries"), ({}, "after 3 tries"),
                     ({"io_retries": 0}, "after 1 try")):
        with pytest.raises(sluice.Error) as e:
            P(url, **kw)
        assert want in str(e.value), (kw, str(e.value))
        assert sluice._io_opts() == before, kw


def test_io_retry_budget_bounds_the_retries_in_time(io_settings):
    """Nothing listens at the URL: the retries go on for io_retry_budget
    seconds (no count), then the error says how long it tried; io_retries=0
    gives up at once."""
    url = f"http://127.0.0.1:{_free_port()}/d/train-00000-of-00001.tfrecord"
    sluice._io_configure(-1, None, None, None)
    for budget in (1, 2.5):
        t0 = time.monotonic()
        with pytest.raises(sluice.Error) as e:
            P(url, io_retry_budget=budget)
        took = time.monotonic() - t0
        assert budget * 0.9 <= took < budget + 10, (budget, took, str(e.value))
        assert url in str(e.value) and "tries in" in str(e.value), str(e.value)
    t0 = time.monotonic()
    with pytest.raises(sluice.Error):
        P(url, io_retries=0, io_retry_budget=60)
    assert time.monotonic() - t0 < 5, "io_retries=0: one try, whatever the budget"


def test_permission_error_class():
    assert issubclass(sluice.PermissionDeniedError, sluice.Error)
    assert issubclass(sluice.PermissionDeniedError, PermissionError)
    e = sluice._error(15, "https://h/d/dataset.json: HTTP 403")
    assert type(e) is sluice.PermissionDeniedError and e.status == "SL_EPERM", (e, e.status)
    assert "PermissionDeniedError" in sluice.__all__


# ---------------------------------------------------------------- remote (nginx)

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _die_with_parent():
    """The server gets SIGKILL when pytest dies (a crash leaves none behind)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@pytest.fixture(scope="session")
def nginx(dataset, wds_dataset, tmp_path_factory):
    """An nginx on 127.0.0.1 serving the datasets' parent folder (as
    tests/servers.c starts it: one process in the foreground, an ephemeral
    port); /private/ answers 403. Yields its base URL."""
    exe = os.environ.get("SLUICE_TEST_NGINX") or "/usr/sbin/nginx"
    if not os.access(exe, os.X_OK):
        msg = (f"nginx not found at {exe}: install Debian's nginx-light (tools/dev deps) "
               f"or point SLUICE_TEST_NGINX at an nginx")
        if os.environ.get("SLUICE_SKIP_SERVERS") == "1":
            pytest.skip(msg + " (skipped: SLUICE_SKIP_SERVERS=1)")
        pytest.fail(msg + "; or set SLUICE_SKIP_SERVERS=1 to skip the tests that need it")
    d = tmp_path_factory.mktemp("nginx")
    root = dataset.parent.resolve()
    why = ""
    for _ in range(3):  # the port may be taken between the probe and the bind
        port = _free_port()
        conf = d / "nginx.conf"
        conf.write_text(
            "daemon off;\nmaster_process off;\nworker_processes 1;\n"
            f"pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
            "events { worker_connections 512; }\n"
            "http {\n"
            f"  access_log {d}/access.log;\n"
            f"  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n"
            f"  fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi;\n"
            f"  scgi_temp_path {d}/scgi;\n"
            "  default_type application/octet-stream;\n"
            f"  server {{ listen 127.0.0.1:{port}; root {root};\n"
            "    location / { } location /private/ { return 403; } }\n"
            "}\n")
        log = open(d / "server.log", "ab")
        proc = subprocess.Popen([exe, "-p", str(d), "-c", str(conf), "-e", "stderr"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                preexec_fn=_die_with_parent)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None and not _port_open(port):
            time.sleep(0.02)
        if proc.poll() is None and _port_open(port):
            break
        proc.kill()
        proc.wait()
        why = (d / "server.log").read_text(errors="replace")[-1500:]
    else:
        pytest.fail(f"nginx did not start; its log:\n{why}")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_http_batches_equal_local_batches(dataset, wds_dataset, nginx, io_settings):
    url = f"{nginx}/{dataset.name}"
    want = batches(P(dataset))
    assert_same(batches(P(url, io_retries=1, io_timeout=10, io_inflight=4)), want)
    assert_same(batches(P(f"{nginx}/{wds_dataset.name}")), want)
    kw = dict(train=True, seed=3, shuffle="buffer:40", readers=2)
    assert_same(batches(P(url, **kw)), batches(P(dataset, **kw)))


def test_http_missing_dir_names_the_url(nginx, io_settings):
    url = f"{nginx}/no-such-dir"
    with pytest.raises(sluice.Error) as e:
        P(url, io_retries=0)
    assert url in str(e.value), str(e.value)
    assert isinstance(e.value, sluice.NotFoundError), (type(e.value), str(e.value))


def test_http_403_is_a_permission_error(nginx, io_settings):
    url = f"{nginx}/private/data"
    with pytest.raises(PermissionError) as e:
        P(url, io_retries=0)
    assert isinstance(e.value, sluice.PermissionDeniedError), (type(e.value), str(e.value))
    assert url in str(e.value) and "403" in str(e.value), str(e.value)


def test_credentials_never_in_an_exception(nginx, io_settings):
    """Issue 39: a password or a presigned URL's signature in the data URL
    never reaches the exception's text (the library redacts the path where
    it enters); the URL is named without them."""
    host = nginx.split("://", 1)[1]
    for url in (f"http://user:hunter2@{host}/no-such-dir",
                f"http://{host}/no-such-dir/train-000000.tar?X-Amz-Signature=5ec2e7&x=1"):
        with pytest.raises(sluice.Error) as e:
            P(url, io_retries=0)
        text = str(e.value)
        assert "hunter2" not in text and "5ec2e7" not in text, text
        assert f"http://{host}/no-such-dir" in text, text
