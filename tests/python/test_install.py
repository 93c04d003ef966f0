"""Issue 28 items 5 and 6: what `pip install .` gives a user: the package,
the `sluice` command beside it, and type stubs that mypy reads."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import sluice

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = pathlib.Path(sluice.__file__).resolve().parent


def installed():
    """sluice comes from this interpreter's environment (pip install), not a
    build tree on PYTHONPATH."""
    return str(PKG).startswith(os.path.realpath(sys.prefix))


def test_cli_is_installed_with_the_package(tmp_path):
    if not installed():
        pytest.skip(f"sluice imported from {PKG}, not installed by pip")
    cli = pathlib.Path(sys.executable).parent / "sluice"
    assert cli.exists(), f"pip install put no sluice command in {cli.parent}"
    r = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "sluice" in r.stdout, r.stdout + r.stderr
    # the README's tour: convert, then verify, with the installed command
    from conftest import make_folder
    make_folder(tmp_path / "img", 6, classes=2)
    r = subprocess.run([str(cli), "convert", "--from", "folder", str(tmp_path / "img"), "--out",
                        str(tmp_path / "out"), "--name", "train"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(cli), "verify", str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (PKG / "py.typed").exists() and (PKG / "__init__.pyi").exists()


TYPED = textwrap.dedent('''
    import sluice

    def mean_label(path: str) -> float:
        total, n = 0, 0
        with sluice.Pipeline(path, image_size=(32, 32), batch=8, train=False) as pipe:
            steps: int = len(pipe)
            for batch in pipe:
                total += batch.index + (1 if batch.epoch_end else 0) + steps
                n += batch.labels.shape[0]
        report = sluice.verify(path, all=True, raise_on_problem=False)
        ok: bool = report["ok"]
        return total / max(n, 1) if ok else 0.0

    def epochs(path: str) -> int:
        pipe = sluice.Pipeline(path, batch=8, rank=0, world=2)
        steps = 0
        for epoch in range(2):
            for images, labels in pipe:
                steps += images.shape[0] + labels.shape[0]
            it = pipe.epoch()
            steps += len(it) + len(pipe) + sum(b.index for b in it)
        return steps
''')

WRONG = TYPED + textwrap.dedent('''
    sluice.Pipeline("d", batch="8")
    x: str = sluice.convert("out", folder="in")
''')


def test_mypy_accepts_a_typed_program(tmp_path):
    pytest.importorskip("mypy")
    (tmp_path / "good.py").write_text(TYPED)
    (tmp_path / "bad.py").write_text(WRONG)
    env = dict(os.environ)
    if not installed():  # a build tree: show mypy where the package is
        env["MYPYPATH"] = str(PKG.parent)
    cmd = [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
           "--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(cmd + [str(tmp_path / "good.py")], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # the stub is what mypy reads: wrong calls are caught
    r = subprocess.run(cmd + [str(tmp_path / "bad.py")], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 1 and 'Argument "batch" to "Pipeline"' in r.stdout and \
        "Found 2 errors" in r.stdout, r.stdout


@pytest.mark.skipif(os.environ.get("SLUICE_TEST_PIP_INSTALL") != "1",
                    reason="builds the package in a fresh venv (minutes, needs PyPI for "
                           "scikit-build-core): SLUICE_TEST_PIP_INSTALL=1")
def test_pip_install_in_a_plain_venv(tmp_path):
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(tmp_path / "v")], check=True)
    pip = tmp_path / "v" / "bin" / "pip"
    r = subprocess.run([str(pip), "install", "-q", str(ROOT)], capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    py = tmp_path / "v" / "bin" / "python"
    r = subprocess.run([str(py), "-c", "import sluice; print(sluice.__version__)"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == sluice.__version__, r.stdout + r.stderr
    r = subprocess.run([str(tmp_path / "v" / "bin" / "sluice"), "--version"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_stubs_match_the_package(tmp_path):
    """Issue 38 item 7: the stub agrees with the package as mypy.stubtest
    sees it (it reported 13 mismatches, and the stub itself had a mypy
    error: Batch.index over tuple.index)."""
    pytest.importorskip("mypy")
    env = dict(os.environ)
    if not installed():
        env["MYPYPATH"] = str(PKG.parent)
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "sluice", "--mypy-config-file",
                        os.devnull], capture_output=True, text=True, timeout=300, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                        "--cache-dir", str(tmp_path / "cache"), "-m", "sluice"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
