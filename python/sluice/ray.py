"""sluice.ray: convert images into record shards on a Ray cluster.

    import ray, sluice.ray
    ray.init(address="auto")
    res = sluice.ray.convert("s3://bucket/imagenet", list="s3-images.txt",
                             name="train", shards=1024, format="tfrecord")

Ray is an optional extra (``pip install sluice[ray]``); nothing else of
the package needs it. The conversion is sluice's planned conversion
(README.md, "Converting on a cluster"), which any engine can run:

1. the driver cuts a plan: ``sluice convert ... --plan-out PLAN --tasks N``
   (the inputs listed, ordered by the seed, assigned to shards and the
   shards to N tasks);
2. one Ray task per shard group runs ``sluice convert --plan PLAN --task K
   --tasks N`` on some worker, retried by Ray when its worker dies or the
   command fails (``max_retries``): a task keeps the shards a killed
   attempt finished, rewrites the rest with the same bytes, and never
   touches another task's shards, so retries and stragglers are safe;
3. the driver runs ``sluice convert --plan PLAN --finish``, which reads
   every shard back (CRCs, counts against the plan), writes the indexes that
   are missing and dataset.json, or raises naming the missing shards.

The result is byte for byte what one ``sluice convert`` of the same inputs
and options writes on one machine. ``out`` is a folder every worker and the
driver see (a shared file system) or ``s3://BUCKET/PREFIX`` (the workers'
environment then needs AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and, for a
non-AWS store, AWS_ENDPOINT_URL; ``env=`` adds variables to the tasks').
The plan goes to ``OUT/.NAME.plan.json`` unless ``plan=`` says otherwise.

Each task runs the ``sluice`` command (installed with the package; on a
worker it is found as SLUICE_BIN, then on PATH, then beside the worker's
Python). A worker killed by Ray leaves its ``sluice`` process to end its
task on its own; the retry and that process write the same bytes.
"""

import json as _json
import os as _os
import shutil as _shutil
import subprocess as _subprocess
import sys as _sys
import tempfile as _tempfile
import time as _time

from . import ConfigError, Error, _bool, _int, _path, _restart, _str, _I63

__all__ = ["convert"]


def _find_cli(sluice_bin=None):
    """The sluice command: sluice_bin, SLUICE_BIN, PATH, or beside Python."""
    for b in (sluice_bin, _os.environ.get("SLUICE_BIN"), _shutil.which("sluice"),
              _os.path.join(_sys.prefix, "bin", "sluice")):
        if b and _os.access(b, _os.X_OK):
            return b
    raise Error("sluice.ray: the sluice command was not found (set SLUICE_BIN, or install the "
                "package where the workers run: pip install sluice[ray])")


def _join(out, name):
    return out.rstrip("/") + "/" + name


def _run(cmd, env=None, what="sluice"):
    p = _subprocess.run(cmd, stdout=_subprocess.PIPE, stderr=_subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        raise Error(f"{what}: exit {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
    return p


def _task(sluice_bin, plan, k, n, threads, fsync, env):
    """One Ray task: sluice convert --plan PLAN --task k --tasks n."""
    b = _find_cli(sluice_bin)
    e = dict(_os.environ)
    e.update(env or {})
    cmd = [b, "convert", "--plan", plan, "--task", str(k), "--tasks", str(n),
           "--threads", str(threads), "--quiet"]
    if not fsync:
        cmd.append("--no-fsync")
    t0 = _time.monotonic()
    _run(cmd, e, f"sluice.ray: task {k} of {n}")
    return k, _time.monotonic() - t0


def _plan_head(plan):
    """The first line of a local plan file (its shards, tasks, inputs)."""
    with open(plan, "rb") as f:
        line = f.readline().decode()
    return _json.loads(line[: line.rindex(',"shard_list":[')] + "}")


def _shard_counts(head):
    """Inputs of each task's shards, as sl_convert_shard_begin splits them."""
    n, shards, tasks = head["inputs"], head["shards"], head["tasks"]
    begin = [n * s // shards for s in range(shards + 1)]
    out = []
    for k in range(tasks):
        f, e = shards * k // tasks, shards * (k + 1) // tasks
        out.append((e - f, begin[e] - begin[f]))
    return out


class _Progress:
    """shards done / total, images/s, ETA; on stderr, or a callable's."""

    def __init__(self, how, shards, inputs):
        self.how, self.shards, self.inputs = how, shards, inputs
        self.t0 = _time.monotonic()

    def __call__(self, shards_done, inputs_done, final=False):
        t = _time.monotonic() - self.t0
        rate = inputs_done / t if t > 0 else 0.0
        eta = (self.inputs - inputs_done) / rate if rate > 0 else float("nan")
        if callable(self.how):
            self.how({"shards_done": shards_done, "shards": self.shards, "images_done": inputs_done,
                      "images": self.inputs, "images_per_s": rate, "eta_s": eta, "seconds": t})
        elif self.how:
            _sys.stderr.write(f"\r  {shards_done}/{self.shards} shards  {rate:.0f} img/s  "
                              f"ETA {eta:.0f} s\033[K" + ("\n" if final else ""))
            _sys.stderr.flush()


def convert(out, *, folder=None, list=None, name="train", shards=0, format="tfrecord",
            quality=95, resize_short=0, shuffle=True, seed=0, label_offset=0, class_names=None,
            max_pixels=0, restart=None, restart_rows=None, tasks=None, plan=None,
            threads_per_task=1, max_retries=3, fsync=True, progress=True, env=None,
            sluice_bin=None):
    """Convert folder=DIR or list=FILE into shards in out on the Ray cluster
    ray.init() connected to (see the module's doc for the three steps).

    The conversion options are sluice.convert's (shards, format 'tfrecord'
    or 'wds', quality, resize_short, shuffle, seed, label_offset,
    class_names, max_pixels, restart, restart_rows: each task writes its
    shards as sluice.convert does); 'lmdb' is one store written by one process
    and is refused. tasks: Ray tasks to cut the shards into (default: one
    per shard, at most the shard count). threads_per_task: the command's
    --threads, and the CPUs each task asks Ray for. max_retries: Ray's
    retries of a task whose worker died or whose command failed.
    progress: True prints shards done / total, images/s and ETA on stderr;
    a callable gets a dict of them after each task; False is silent.

    Returns a dict: plan, shards, tasks, inputs, records, skipped (from the
    finish), seconds, images_per_s. Raises sluice.Error naming the failed
    task, or the finish's list of missing or damaged shards.
    """
    w = "sluice.ray.convert"
    if (folder is None) == (list is None):
        raise ConfigError(f"{w}: give exactly one of folder= or list=")
    if format not in ("tfrecord", "wds"):
        raise ConfigError(f"{w}: format={format!r}: 'tfrecord' or 'wds' (an LMDB store is written "
                          "by one process: use sluice.convert)")
    if progress not in (True, False, None) and not callable(progress):
        raise ConfigError(f"{w}: progress={progress!r}: True, False or a callable")
    out = _path(w, "out", out)
    out = _os.fsdecode(out)
    name = _str(w, "name", name)
    args = ["--name", name, "--to", format,
            "--shards", str(_int(w, "shards", shards, 0, 99999, " (0 = about 128 MiB each)")),
            "--quality", str(_int(w, "quality", quality, 1, 100)),
            "--resize-short", str(_int(w, "resize_short", resize_short, 0, 65535)),
            "--shuffle-seed", str(_int(w, "seed", seed, 0, _I63)),
            "--label-offset", str(_int(w, "label_offset", label_offset, 0, 2**30))]
    if max_pixels:
        args += ["--max-pixels", str(_int(w, "max_pixels", max_pixels, 1, _I63))]
    restart, restart_rows = _restart(w, restart, restart_rows)
    if restart is not None:
        args += ["--restart", str(restart)]
    if restart_rows is not None:
        args += ["--restart-rows", str(restart_rows)]
    if not _bool(w, "shuffle", shuffle):
        args.append("--no-shuffle")
    ntasks = 0 if tasks is None else _int(w, "tasks", tasks, 1, 99999)
    threads = _int(w, "threads_per_task", threads_per_task, 0, 256, " (0 = all cores)")
    retries = _int(w, "max_retries", max_retries, 0, 1000)
    fsync = _bool(w, "fsync", fsync)
    env = dict(env or {})
    if plan is None:
        plan = _join(out, f".{name}.plan.json")
    plan = _os.fsdecode(_path(w, "plan", plan))
    if not plan.startswith(("s3://", "http://", "https://")):
        plan = _os.path.abspath(plan)
    if not out.startswith(("s3://", "http://", "https://")):
        out = _os.path.abspath(out)
    src = ["--from", "folder", _os.path.abspath(_os.fsdecode(_path(w, "folder", folder)))] \
        if folder is not None else \
        ["--from", "list", _os.path.abspath(_os.fsdecode(_path(w, "list", list)))]
    try:
        import ray
    except ImportError:
        raise Error("sluice.ray needs Ray: pip install sluice[ray]") from None
    bin_here = _find_cli(sluice_bin)
    penv = dict(_os.environ)
    penv.update(env)

    with _tempfile.TemporaryDirectory(prefix="sluice-ray-") as tmp:
        if class_names is not None:
            names = [_str(w, "class_names", c) for c in class_names]
            cn = _os.path.join(tmp, "classes.txt")
            with open(cn, "w") as f:
                f.write("\n".join(names) + "\n")
            args += ["--class-names", cn]
        base = [bin_here, "convert", *src, "--out", out, *args]
        if ntasks:
            args_tasks = ["--tasks", str(ntasks)]
        else:
            args_tasks = []
        local_plan = plan
        if plan.startswith(("s3://", "http://", "https://")):
            # the plan is deterministic: cut once more here, to read its head
            local_plan = _os.path.join(tmp, "plan.json")
            _run(base + ["--plan-out", local_plan] + args_tasks, penv, f"{w}: plan")
        _run(base + ["--plan-out", plan] + args_tasks, penv, f"{w}: plan")
        head = _plan_head(local_plan)
    nshards, n = head["shards"], head["tasks"]
    counts = _shard_counts(head)

    remote = ray.remote(_task).options(num_cpus=max(1, threads), max_retries=retries,
                                       retry_exceptions=True)
    t0 = _time.monotonic()
    pending = {remote.remote(sluice_bin, plan, k, n, threads, fsync, env): k for k in range(n)}
    show = _Progress(progress, nshards, head["inputs"])
    sdone = idone = 0
    try:
        while pending:
            ready, _ = ray.wait([*pending], num_returns=1, timeout=1.0)  # list: the argument
            for r in ready:
                k = pending.pop(r)
                ray.get(r)  # raises the task's error once its retries are spent
                sdone += counts[k][0]
                idone += counts[k][1]
            show(sdone, idone, final=not pending)
    except BaseException:
        for r in pending:
            ray.cancel(r, force=True)
        raise
    fin = _run([bin_here, "convert", "--plan", plan, "--finish", "--quiet"] +
               ([] if fsync else ["--no-fsync"]), penv, f"{w}: finish")
    secs = _time.monotonic() - t0
    res = {"plan": plan, "shards": nshards, "tasks": n, "inputs": head["inputs"],
           "seconds": secs, "images_per_s": head["inputs"] / secs if secs > 0 else 0.0}
    # "finished: N inputs -> R records in S shards (...); K skipped; ..."
    line = fin.stdout.strip().splitlines()[-1] if fin.stdout.strip() else ""
    try:
        res["records"] = int(line.split("-> ")[1].split()[0])
        res["skipped"] = int(line.split("; ")[1].split()[0])
    except (IndexError, ValueError):
        pass
    return res
