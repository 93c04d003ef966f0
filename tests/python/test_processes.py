"""Issue 28 item 1: a Pipeline across fork() and multiprocessing. The child
of a fork owns none of the pipeline's threads: it must exit, close and drop
the inherited pipeline without touching them, and next() there raises
sluice.NotSupportedError. Pickled (spawn), a Pipeline is made anew at its
position."""
import multiprocessing as mp
import os
import subprocess
import sys

import numpy as np
import pytest

import sluice


def _pipe(dataset, **kw):
    return sluice.Pipeline(dataset, image_size=16, batch=10, workers=2, train=False, **kw)


FORK_SCRIPT = r"""
import os, signal, sys
import numpy as np
import sluice
how, data = sys.argv[1], sys.argv[2]
pipe = sluice.Pipeline(data, image_size=16, batch=10, workers=2, train=False)
first = next(pipe)
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a hang is a failure, not a stuck test run
    if how == "close":
        pipe.close()
        assert pipe.closed
    elif how == "del":
        del first  # the batch's tensors hold the pipeline's memory
        pipe = None  # the last reference: dealloc in the child
    elif how == "next":
        try:
            next(pipe)
            sys.exit(3)
        except sluice.NotSupportedError as e:
            sys.exit(0 if "fork" in str(e) else 4)
    sys.exit(0)  # a normal interpreter exit: what is left is finalized here
_, status = os.waitpid(pid, 0)
child = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
# the parent's pipeline is untouched by the child
n = len(np.from_dlpack(first.labels)) + sum(len(np.from_dlpack(b.labels)) for b in pipe)
pipe.close()
print("child", child, "parent", n)
"""


@pytest.mark.parametrize("how", ["exit", "close", "del", "next"])
def test_os_fork_child_exits_closes_drops(dataset, how):
    r = subprocess.run([sys.executable, "-c", FORK_SCRIPT, how, str(dataset)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "child 0 parent 150" in r.stdout, r.stdout + r.stderr


def _child_next(pipe, q):
    try:
        next(pipe)
        q.put("no error")
    except sluice.NotSupportedError as e:
        q.put("ok" if "fork" in str(e) else str(e))
    pipe.close()
    del pipe


def _child_spawned(pipe, q):
    # made anew in this process at the pickled position
    ids = [int(i) for b in pipe for i in np.from_dlpack(b.record_ids)]
    q.put(ids)


def test_multiprocessing_fork_context(dataset):
    pipe = _pipe(dataset)
    next(pipe)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_next, args=(pipe, q))
    p.start()
    assert q.get(timeout=30) == "ok"
    p.join(30)
    assert p.exitcode == 0
    assert sum(len(np.from_dlpack(b.labels)) for b in pipe) == 140
    pipe.close()


def test_multiprocessing_spawn_context(dataset):
    pipe = _pipe(dataset)
    taken = [int(i) for i in np.from_dlpack(next(pipe).record_ids)]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child_spawned, args=(pipe, q))
    p.start()
    theirs = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    ours = [int(i) for b in pipe for i in np.from_dlpack(b.record_ids)]
    assert theirs == ours, "the spawned copy continues where the pickled one was"
    assert sorted(taken + ours) == list(range(150))
    pipe.close()
