"""sluice.ray on a real Ray cluster (issue 42): a head and a second node
started on loopback from the Ray virtualenv (tools/dev rayvenv,
SLUICE_TEST_RAY), a driver under its Python with this package on its path.
While the conversion runs, the test kills the Ray worker process of a task
in the middle of it; Ray runs the task again, and the result must be byte
for byte the one-machine `sluice convert` of the same inputs and options,
on local disk and in moto's S3 server (the S3-compatible server of
tests/servers.c, from tools/dev s3venv)."""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import sluice

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = pathlib.Path(os.environ.get("SLUICE_CACHE") or
                     pathlib.Path(os.environ.get("XDG_CACHE_HOME") or
                                  pathlib.Path.home() / ".cache") / "sluice")
RAY_PY = os.environ.get("SLUICE_TEST_RAY") or str(CACHE / "venv-ray" / "bin" / "python")
MOTO_PY = os.environ.get("SLUICE_TEST_MOTO") or str(CACHE / "venv-s3" / "bin" / "python")

OPTS = dict(shards=6, resize_short=64, seed=7)
CLI_OPTS = ["--shards", "6", "--resize-short", "64", "--shuffle-seed", "7", "--no-fsync", "--quiet"]


def need(path, what):
    if not os.access(path, os.X_OK):
        pytest.skip(f"{what} not found at {path} (tools/dev {what.split()[0]} makes it)")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


@pytest.fixture(scope="module")
def cluster():
    """A Ray head and a second node (one CPU each) on loopback, in their
    own process groups (killed at the end: nothing of another Ray on this
    machine is touched)."""
    need(RAY_PY, "rayvenv (Ray)")
    tmp = tempfile.mkdtemp(prefix="slr")  # short: Ray's socket paths
    pp = pathlib.Path(tmp) / "pp"
    pp.mkdir()
    (pp / "sluice").symlink_to(pathlib.Path(sluice.__file__).parent)
    env = dict(os.environ, PYTHONPATH=str(pp), RAY_USAGE_STATS_ENABLED="0")
    ray = str(pathlib.Path(RAY_PY).parent / "ray")
    port = free_port()
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats", "--block"]
    procs = []
    log = open(pathlib.Path(tmp) / "ray.log", "w")
    try:
        procs.append(subprocess.Popen([ray, "start", "--head", f"--port={port}",
                                       "--include-dashboard=false", f"--temp-dir={tmp}/r"] + common,
                                      env=env, stdout=log, stderr=log, start_new_session=True))
        addr = f"127.0.0.1:{port}"
        wait_nodes(addr, env, 1, procs, tmp)
        procs.append(subprocess.Popen([ray, "start", f"--address={addr}"] + common, env=env,
                                      stdout=log, stderr=log, start_new_session=True))
        wait_nodes(addr, env, 2, procs, tmp)
        yield addr, env, tmp
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_nodes(addr, env, n, procs, tmp):
    code = ("import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
            "print(sum(1 for x in ray.nodes() if x['Alive']))")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, open(pathlib.Path(tmp) / "ray.log").read()[-3000:]
        r = subprocess.run([RAY_PY, "-c", code, addr], env=env, capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() and int(r.stdout.split()[-1]) >= n:
            return
        time.sleep(1)
    raise AssertionError("Ray cluster did not come up: " +
                         open(pathlib.Path(tmp) / "ray.log").read()[-3000:])


# The driver: converts with sluice.ray while a thread kills the Ray worker
# running the first task it sees (a sluice process's parent), and records
# which tasks ran in which processes.
DRIVER = r'''
import json, os, signal, sys, threading, time
import ray, sluice.ray
addr, out, folder, plan, opts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
env = json.loads(sys.argv[6])
ray.init(address=addr, logging_level="ERROR")
seen, killed, stop = {}, [], threading.Event()

def killer():
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if b"--task" not in argv or plan.encode() not in argv:
                continue
            k = int(argv[argv.index(b"--task") + 1])
            seen.setdefault(k, set()).add(int(pid))
            if not killed:
                os.kill(ppid, signal.SIGKILL)  # the Ray worker, mid-task
                killed.append((k, ppid))
        time.sleep(0.005)

t = threading.Thread(target=killer, daemon=True)
t.start()
calls = []
res = sluice.ray.convert(out, folder=folder, plan=plan, fsync=False, progress=calls.append,
                         max_retries=3, sluice_bin=os.environ["SLUICE_BIN"], env=env, **opts)
stop.set()
t.join()
print(json.dumps({"res": res, "killed": killed, "seen": {k: len(v) for k, v in seen.items()},
                  "progress": calls[-1] if calls else None, "ncalls": len(calls)}))
'''


def make_photos(root, per_class=40):
    photos = sorted((REPO / "tests" / "data" / "photos").glob("*.jpg"))
    for c in "abc":
        d = root / c
        d.mkdir(parents=True)
        for i in range(per_class):
            shutil.copy(photos[i % len(photos)], d / f"{i:03d}.jpg")
    (root / "b" / "bad.jpg").write_bytes(b"junk")


def same_files(a, b):
    names = sorted(p.name for p in a.iterdir() if not p.name.startswith("."))
    assert names == sorted(p.name for p in b.iterdir() if not p.name.startswith("."))
    assert len(names) > 6
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n


def one_machine(sluice_bin, img, out, *extra):
    subprocess.run([sluice_bin, "convert", "--from", "folder", str(img), "--out", str(out),
                    "--name", "train", *CLI_OPTS, *extra], check=True, capture_output=True)


def drive(cluster, out, img, plan, env=None, opts=OPTS):
    addr, cenv, _ = cluster
    r = subprocess.run([RAY_PY, "-c", DRIVER, addr, str(out), str(img), str(plan), json.dumps(opts),
                        json.dumps(env or {})], env=dict(cenv, **(env or {})),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_run(d, nshards=6):
    assert d["killed"], "no task was running to be killed"
    k = d["killed"][0][0]
    assert d["seen"][str(k)] >= 2, f"task {k} was not run again after its worker died: {d}"
    res = d["res"]
    assert res["shards"] == nshards and res["tasks"] == nshards
    assert res["inputs"] == 121 and res["records"] == 120 and res["skipped"] == 1
    p = d["progress"]
    assert p["shards_done"] == p["shards"] == nshards and p["images_done"] == 121
    assert p["images_per_s"] > 0


def test_ray_convert_survives_a_killed_worker(cluster, sluice_bin, tmp_path):
    make_photos(tmp_path / "img")
    one_machine(sluice_bin, tmp_path / "img", tmp_path / "one")
    d = drive(cluster, tmp_path / "ray", tmp_path / "img", tmp_path / "plan.json",
              env={"SLUICE_BIN": sluice_bin})
    check_run(d)
    same_files(tmp_path / "one", tmp_path / "ray")


def test_ray_convert_restart_gives_the_one_machine_bytes(cluster, sluice_bin, tmp_path):
    """restart= travels to every task (the plan carries it): the shards of
    `sluice convert --restart auto` on one machine, markers in every JPEG."""
    make_photos(tmp_path / "img")
    one_machine(sluice_bin, tmp_path / "img", tmp_path / "one", "--restart", "auto")
    d = drive(cluster, tmp_path / "ray", tmp_path / "img", tmp_path / "plan.json",
              env={"SLUICE_BIN": sluice_bin}, opts=dict(OPTS, restart="auto"))
    check_run(d)
    same_files(tmp_path / "one", tmp_path / "ray")
    assert sluice.verify(tmp_path / "ray")["restart_records"] == 120


def test_ray_convert_wds_to_s3(cluster, sluice_bin, tmp_path):
    need(MOTO_PY, "s3venv (moto)")
    make_photos(tmp_path / "img")
    one_machine(sluice_bin, tmp_path / "img", tmp_path / "one", "--to", "wds")
    port = free_port()
    log = open(tmp_path / "moto.log", "w")
    moto = subprocess.Popen([MOTO_PY, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3",
                                     S3_UPLOAD_PART_MIN_SIZE="1024"),
                            stdout=log, stderr=log, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        s3put = str(REPO / "tests" / "servers" / "s3put.py")
        key, secret = subprocess.run([MOTO_PY, s3put, "init", url], check=True, capture_output=True,
                                     text=True).stdout.split()[-2:]
        env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
               "AWS_REGION": "us-east-1", "SLUICE_PUT_PART_BYTES": "65536",
               "SLUICE_BIN": sluice_bin}
        (tmp_path / "empty").mkdir()
        subprocess.run([MOTO_PY, s3put, "put", url, "dsets", "x/", str(tmp_path / "empty")],
                       check=True, capture_output=True, env=dict(os.environ, **env))
        d = drive(cluster, "s3://dsets/wds", tmp_path / "img", "s3://dsets/plans/train.json", env=env,
                  opts=dict(OPTS, format="wds"))
        check_run(d)
        subprocess.run([MOTO_PY, s3put, "get", url, "dsets", "wds/", str(tmp_path / "got")],
                       check=True, capture_output=True, env=dict(os.environ, **env))
        same_files(tmp_path / "one", tmp_path / "got")
        left = subprocess.run([MOTO_PY, s3put, "uploads", url, "dsets"], check=True,
                              capture_output=True, text=True, env=dict(os.environ, **env))
        assert left.stdout.split()[-1] == "0", "multipart uploads left open"
    finally:
        os.killpg(moto.pid, signal.SIGKILL)
        moto.wait()
        log.close()


def test_ray_convert_arguments_checked():
    import sluice.ray as sr
    with pytest.raises(sluice.ConfigError, match="exactly one of folder= or list="):
        sr.convert("/tmp/x", folder="a", list="b")
    with pytest.raises(sluice.ConfigError, match="LMDB"):
        sr.convert("/tmp/x", folder="a", format="lmdb")
    with pytest.raises(sluice.ConfigError, match="restart=0: out of range"):
        sr.convert("/tmp/x", folder="a", restart=0)
    with pytest.raises(sluice.ConfigError, match="give one or the other"):
        sr.convert("/tmp/x", folder="a", restart="auto", restart_rows=2)
