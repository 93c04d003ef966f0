"""examples/train_torch.py runs as documented: the usual epoch loop, a
checkpoint that resumes to the same loss as an uninterrupted run, and DDP
under torchrun (gloo, two CPU ranks), also over shards of uneven sizes with
the pipeline's defaults (issue 38 items 1 and 2)."""
import pathlib
import re
import sys

import pytest

from conftest import run

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_torch.py"
# resnet18 at 32x32 on 3 classes: a step takes a few tens of ms on one thread
ARGS = ["--image-size", "32", "--batch", "16", "--workers", "2", "--threads", "1",
        "--log-every", "1", "--seed", "3"]


def train(data, *extra):
    r = run([sys.executable, str(EXAMPLE), "--data", str(data)] + ARGS + list(extra))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def losses(out):
    return [float(m) for m in re.findall(r"^step \d+ epoch \d+ loss ([0-9.]+)", out, re.M)]


def test_train_and_resume_match_an_uninterrupted_run(dataset, tmp_path):
    whole = train(dataset, "--steps", "6")
    assert "done: 6 steps" in whole and len(losses(whole)) == 6
    ck = tmp_path / "ck.pt"
    first = train(dataset, "--steps", "4", "--checkpoint", str(ck))
    assert ck.exists() and losses(first) == losses(whole)[:4]
    rest = train(dataset, "--steps", "6", "--checkpoint", str(ck), "--resume")
    assert "resumed at step 4" in rest
    # the model, the optimizer and the data position all came back: the
    # losses of steps 5 and 6 are those of the run that never stopped
    assert losses(rest) == losses(whole)[4:], (rest, whole)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(argv, world, timeout=300):
    """The ranks as torchrun starts them: RANK, LOCAL_RANK, WORLD_SIZE and
    the rendezvous address in the environment (all the example reads)."""
    import os
    import subprocess
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:  # a rank left hanging must not outlive the test
            if p.poll() is None:
                p.kill()
                p.wait()
    return [p.returncode for p in procs], outs


def test_ddp_under_torchrun(dataset, tmp_path):
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without gloo")
    script = [str(EXAMPLE), "--data", str(dataset), "--checkpoint", str(tmp_path / "ck.pt"),
              "--steps", "3"] + ARGS
    r = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
             "2"] + script)
    if r.returncode != 0 and "in to_map" in r.stderr:
        # Debian's torch 1.13 launcher fails on Python 3.11 before starting
        # any rank (its Std enum parse); start the ranks as it would
        codes, outs = run_ranks([sys.executable] + script, 2)
        assert codes == [0, 0], "\n".join(outs)
        out = outs[0]
    else:
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout
    assert "done: 3 steps" in out
    # rank 0 saved both ranks' data positions
    ck = torch.load(tmp_path / "ck.pt")
    assert isinstance(ck["data"], list) and len(ck["data"]) == 2 and ck["step"] == 3
    assert ck["data"][0] != ck["data"][1], "each rank reads its own records"


def test_evaluates_and_checkpoints_once_per_epoch(dataset, tmp_path):
    """Issue 28 item 4: with a shuffle buffer that mixes two epochs, the
    example evaluates (and checkpoints) exactly once per epoch, in order."""
    out = train(dataset, "--epochs", "3", "--eval-split", "train", "--checkpoint",
                str(tmp_path / "ck.pt"), "--log-every", "100")
    evals = re.findall(r"^epoch (\d+) top1", out, re.M)
    assert evals == ["0", "1", "2"], out
    # 3 x 150 records in batches of 16, one loop per epoch, epochs fused:
    # loops of 10, 9 and 10 steps, ceil(450 / 16) in all
    assert "150 records per epoch, 10 steps in the next" in out and "done: 29 steps" in out, out
    ck = torch.load(tmp_path / "ck.pt")
    assert ck["step"] == 29


def test_readme_launch_without_torchrun(dataset, tmp_path):
    """Issue 28 item 8: the README's DDP launch without torchrun, as written
    (one process per rank with torchrun's variables), runs."""
    import os
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without gloo")
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    m = re.search(r"tested with Debian's torch ([0-9.]+).*?```sh\n(.*?)```", readme, re.S)
    assert m, "README: the tested torch and a launch without torchrun"
    script = m.group(2)
    assert "RANK=" in script and "WORLD_SIZE=" in script and "torchrun" not in script
    script = (script.replace("python examples/train_torch.py", f"{sys.executable} {EXAMPLE}")
              .replace("data/fmnist", str(dataset))
              .replace("MASTER_PORT=29500", f"MASTER_PORT={free_port()}")
              .replace("--epochs 1", "--epochs 1 --steps 2 --batch 16 --workers 1 --threads 1 "
                       f"--checkpoint {tmp_path / 'ck.pt'}"))
    r = run(["bash", "-c", script], env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0 and "done: 2 steps" in r.stdout, r.stdout + r.stderr
    assert len(torch.load(tmp_path / "ck.pt")["data"]) == 2


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """130 records in 3 shards: split by files over 2 ranks, rank 0 would
    read 87 records and rank 1 43 (7 and 3 batches of 16: DDP hung)."""
    import sluice
    from conftest import make_folder
    tmp = tmp_path_factory.mktemp("uneven")
    make_folder(tmp / "img", 130, seed=4)
    sluice.convert(tmp / "data", folder=tmp / "img", shards=3, fsync=False, threads=2)
    return tmp / "data"


def test_ddp_epoch_loop_over_uneven_shards(uneven, tmp_path):
    """Two gloo ranks, the pipeline's defaults, the usual `for epoch in
    range(E): for x, y in pipe:` loop over 3 uneven shards: every rank takes
    the same steps in every epoch and the run ends (it trained one epoch,
    and the ranks' uneven batch counts left DDP's all-reduce waiting)."""
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without gloo")
    argv = [sys.executable, str(EXAMPLE), "--data", str(uneven), "--epochs", "3",
            "--checkpoint", str(tmp_path / "ck.pt")] + ARGS
    codes, outs = run_ranks(argv, 2, timeout=240)
    assert codes == [0, 0], "\n".join(outs)
    out = outs[0]
    # 130 records per epoch, 32 samples per step over both ranks: epoch loops
    # of 5, 4 and 4 steps (the batch that ends an epoch starts the next)
    assert "130 records per epoch" in out, out
    epochs = [int(e) for e in re.findall(r"^step \d+ epoch (\d+)", out, re.M)]
    assert epochs == [0] * 5 + [1] * 4 + [2] * 4, out
    assert "done: 13 steps" in out, out
    ck = torch.load(tmp_path / "ck.pt")
    assert ck["step"] == 13 and ck["epochs_done"] == 3 and len(ck["data"]) == 2
