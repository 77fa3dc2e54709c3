"""The built wheel, installed into a fresh venv outside the source tree, works on its own.

`python -m build` (what `make dist` runs) makes the sdist and, from it, the wheel. The wheel
goes into a new venv under the test's tmp dir with `replog[spark]`, from local wheels only
(`pip install --no-index --find-links`): the wheelhouse (`REPLOG_WHEELHOUSE`, default
`tmp/wheelhouse` in the repo) is filled once by `pip wheel`, which takes what it can from
pip's cache, and reused by later runs. Every command then runs from the tmp dir with the
venv's own `replog` and `python`, so nothing comes from the source tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import replog

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 240
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Installed:
    """A fresh venv holding the built wheel (and its `spark` extra), and a dir outside the repo."""

    venv: Path
    workdir: Path
    wheel: Path
    sdist: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def replog(self) -> Path:
        return self.venv / "bin" / "replog"

    def run(
        self, *cmd: str | Path, stdin: bytes = b"", timeout_s: float = 60
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(c) for c in cmd],
            input=stdin,
            capture_output=True,
            cwd=self.workdir,
            env=_clean_env(),
            timeout=timeout_s,
            check=False,
        )


def _clean_env() -> dict[str, str]:
    """The environment minus anything that could point Python or replog at the source tree."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("REPLOG_")}


def _check(cmd: list[str | Path], *, cwd: Path) -> None:
    done = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        cwd=cwd,
        env=_clean_env(),
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout.decode()}\n{done.stderr.decode()}"


def _install_offline(python: Path, wheel: Path, wheelhouse: Path, cwd: Path) -> bool:
    done = subprocess.run(
        [
            *(python, "-m", "pip", "install", "--quiet", "--no-index"),
            *("--find-links", str(wheelhouse), f"{wheel}[spark]"),
        ],
        capture_output=True,
        cwd=cwd,
        env=_clean_env(),
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    return done.returncode == 0


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("packaging")
    assert REPO not in root.parents, "the venv must live outside the source tree"
    dist = root / "dist"
    _check([sys.executable, "-m", "build", "--outdir", dist, REPO], cwd=root)
    (wheel,) = dist.glob("replog-*.whl")
    (sdist,) = dist.glob("replog-*.tar.gz")

    venv = root / "venv"
    _check([sys.executable, "-m", "venv", venv], cwd=root)
    python = venv / "bin" / "python"
    wheelhouse = Path(os.environ.get("REPLOG_WHEELHOUSE", REPO / "tmp" / "wheelhouse"))
    if not _install_offline(python, wheel, wheelhouse, root):
        # First run (or new dependencies): fill the wheelhouse, from pip's cache where it can.
        wheelhouse.mkdir(parents=True, exist_ok=True)
        _check(
            [
                *(sys.executable, "-m", "pip", "wheel", "--quiet"),
                *("--wheel-dir", wheelhouse, f"{wheel}[spark]"),
            ],
            cwd=root,
        )
        for own in wheelhouse.glob("replog-*.whl"):
            own.unlink()  # only dependencies live there; the wheel under test comes from dist
        assert _install_offline(python, wheel, wheelhouse, root), "offline install failed"
    workdir = root / "work"
    workdir.mkdir()
    return Installed(venv=venv, workdir=workdir, wheel=wheel, sdist=sdist)


@dataclass
class Served:
    address: str
    proc: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def served(installed: Installed) -> Iterator[Served]:
    """`replog serve` from the installed package, on 127.0.0.1 port 0, with a ready file."""
    ready = installed.workdir / "ready"
    log_path = installed.workdir / "server.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [
                *(installed.replog, "serve", "--data-dir", installed.workdir / "data"),
                *("--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"),
                *("--ready-file", ready),
            ],
            stdout=log,
            stderr=log,
            cwd=installed.workdir,
            env=_clean_env(),
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            assert proc.poll() is None, f"server exited early:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"server not ready:\n{log_path.read_text()}"
            time.sleep(0.05)
        yield Served(address=ready.read_text().splitlines()[0], proc=proc)
    finally:
        if proc.poll() is None:
            proc.terminate()  # our own child, by its pid
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def test_the_wheel_and_sdist_carry_the_version_written_in_replog_init(
    installed: Installed,
) -> None:
    assert installed.wheel.name == f"replog-{replog.__version__}-py3-none-any.whl"
    assert installed.sdist.name == f"replog-{replog.__version__}.tar.gz"


def test_the_installed_command_prints_its_version(installed: Installed) -> None:
    done = installed.run(installed.replog, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == f"replog {replog.__version__}"


def test_the_installed_package_comes_from_the_venv_and_ships_its_type_hints(
    installed: Installed,
) -> None:
    probe = (
        "import importlib.metadata, json, pathlib, replog, replog.client;"
        "root = pathlib.Path(replog.__file__).parent;"
        "print(json.dumps({'file': replog.__file__, 'version': replog.__version__,"
        " 'metadata': importlib.metadata.version('replog'),"
        " 'typed': (root / 'py.typed').is_file(),"
        " 'stubs': sorted(p.name for p in (root / 'v1').glob('*.pyi'))}))"
    )
    done = installed.run(installed.python, "-c", probe)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert Path(seen["file"]).is_relative_to(installed.venv)
    assert seen["version"] == seen["metadata"] == replog.__version__
    assert seen["typed"], "py.typed missing: typed users would not see the client's hints"
    protos = sorted(p.stem for p in (REPO / "proto" / "replog" / "v1").glob("*.proto"))
    assert seen["stubs"] == [f"{name}_pb2.pyi" for name in protos]


def test_records_produced_with_the_installed_cli_are_consumed_back(
    installed: Installed, served: Served
) -> None:
    addr = ["--address", served.address]
    created = installed.run(installed.replog, "topic", "create", "wheel-cli", *addr)
    assert created.returncode == 0, created.stderr
    lines = b"".join(b"record %d\n" % i for i in range(100))
    produced = installed.run(installed.replog, "produce", "wheel-cli", *addr, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    consumed = installed.run(installed.replog, "consume", "wheel-cli", *addr)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == lines


def test_records_produced_with_the_installed_client_are_consumed_back(
    installed: Installed, served: Served
) -> None:
    script = f"""
import itertools
from replog import Client
with Client({served.address!r}) as client:
    client.create_topic("wheel-client", partitions=1)
    with client.producer("wheel-client") as producer:
        futures = [producer.send(b"value %d" % i) for i in range(50)]
        producer.flush()
    offsets = [f.result(timeout=30).offset for f in futures]
    # consecutive; the first follows the partition's leader-epoch marker (offset 0)
    assert offsets == list(range(offsets[0], offsets[0] + 50)), offsets
    consumer = client.consumer("wheel-client", 0, "earliest")
    got = [r.value for r in itertools.islice(consumer, 50)]
    consumer.close()
    assert got == [b"value %d" % i for i in range(50)], got
print("ok")
"""
    done = installed.run(installed.python, "-c", script)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "ok"


def test_the_spark_source_imports_from_the_installed_package(installed: Installed) -> None:
    probe = (
        "import pathlib, replog.spark.source as source;"
        "from replog.spark import register;"
        "assert source.ReplogDataSource.name() == 'replog';"
        "print(source.__file__)"
    )
    done = installed.run(installed.python, "-c", probe, timeout_s=120)
    assert done.returncode == 0, done.stderr.decode()
    assert Path(done.stdout.decode().strip()).is_relative_to(installed.venv)


def test_the_wheel_was_installed_without_the_source_tree_on_the_path(
    installed: Installed,
) -> None:
    done = installed.run(installed.python, "-c", "import sys; print('\\n'.join(sys.path))")
    assert done.returncode == 0
    assert not any(p and Path(p).resolve() == REPO for p in done.stdout.decode().splitlines())
    assert shutil.which("replog", path=str(installed.venv / "bin")) == str(installed.replog)
