"""The wheel, as users install it: one top-level package, ``plateau_tracker``, declaring no dependency.

A training node installs the SDK alone: the wheel installs bare into a fresh venv with no index at all, and
from there logs to a tracker that runs from the full install. With the tracker's dependencies beside it, the
wheel's own commands work from a folder that holds packages named like the repository's folders, which no
longer shadow anything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import httpx
import pytest

from tests._server import TrackerProcess, free_port, wait_until_healthy

# End to end: real processes, real training or real failures; kept out of the quick subset.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# What a wheel is never built from: environments, build outputs, caches, generated data.
_NOT_SOURCES = (".git", ".venv", "build", "dist", "*.egg-info", "test-artifacts", "__pycache__", ".*_cache")

TRAINER = textwrap.dedent("""
    import json, sys, time
    started = time.perf_counter()
    import plateau_tracker as plateau
    imported = time.perf_counter() - started
    rules = [{"rule": "patience", "patience": 2}]
    run = plateau.init(project="slim", monitor="val", mode="min", rules=rules, url=sys.argv[1])
    stopped = None
    for step, value in enumerate([1.0, 0.5, 0.6, 0.7, 0.8, 0.9]):
        run.log({"val": value, "train/loss": value / 2}, step=step)
        if run.should_stop():
            stopped = step
            break
    run.finish()
    modules = sorted(sys.modules)
    print(json.dumps({"run": run.id, "stopped": stopped, "import_s": imported, "modules": modules}))
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout."""
    root = tmp_path_factory.mktemp("slim")
    dist = root / "dist"
    # Built from a copy: setuptools leaves build/ beside the sources, and a stale build/lib there would put
    # modules deleted since into every later wheel (and litter the checkout).
    source = root / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCES))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("plateau_tracker-*.whl")
    return wheel


@pytest.fixture(scope="module")
def slim_venv(wheel: Path) -> Path:
    """A fresh venv holding the bare wheel, installed with no package index (so no dependency could be)."""
    venv = wheel.parent.parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr  # a declared dependency would fail here: no index
    return venv


def test_the_bare_install_holds_nothing_but_plateau(slim_venv: Path) -> None:
    listed = subprocess.run(
        [str(slim_venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert installed - {"pip", "setuptools", "wheel"} == {"plateau-tracker"}
    site = next((slim_venv / "lib").glob("python3*/site-packages"))
    size = sum(p.stat().st_size for p in (site / "plateau_tracker").rglob("*") if p.is_file())
    print(f"\nslim install: plateau-tracker alone, {size / 1e6:.1f} MB")


def test_the_sdk_logs_from_the_bare_install(slim_venv: Path, tracker: TrackerProcess, tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    result = subprocess.run(
        [str(slim_venv / "bin" / "python"), str(script), tracker.url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # not the checkout: the installed package, not the source tree
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["stopped"] == 3  # patience 2 after the best at step 1, acted on at the right step
    heavy = {"fastapi", "sqlalchemy", "pydantic", "httpx", "numpy", "scipy"}
    assert not heavy & {name.split(".")[0] for name in report["modules"]}
    assert not [name for name in report["modules"] if name.startswith("plateau_tracker.server")]
    print(f"\nimport plateau_tracker: {1000 * report['import_s']:.1f} ms in the bare install")
    stored = httpx.get(f"{tracker.url}/api/v1/runs/{report['run']}").json()
    assert stored["status"] == "stopped"
    assert stored["stop_step"] == 3


def test_server_commands_name_the_extra_and_sync_works_bare(slim_venv: Path, tmp_path: Path) -> None:
    plateau = str(slim_venv / "bin" / "plateau")
    serve = subprocess.run([plateau, "serve"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert serve.returncode == 1
    assert serve.stderr.strip().endswith("pip install 'plateau-tracker[server]'")
    assert len(serve.stderr.strip().splitlines()) == 1
    sync = subprocess.run(
        [plateau, "sync", "--spool", str(tmp_path / "spool")], capture_output=True, text=True, timeout=60
    )
    assert sync.returncode == 0, sync.stderr
    assert sync.stdout.startswith("plateau sync: 0 points")
    version = subprocess.run([plateau, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == "plateau 0.1.0"


# The repository's folders and the subpackages they become in the wheel.
_FOLDERS = {"sdk": "", "tracker": "server/", "dashboard": "dashboard/", "migrations": "migrations/"}


def test_the_wheel_holds_one_top_level_package_with_every_module(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"plateau_tracker"}
    packaged = set(names)
    for folder, inside in _FOLDERS.items():
        for module in (ROOT / folder).rglob("*.py"):
            relative = module.relative_to(ROOT / folder).as_posix()
            packaged_as = f"plateau_tracker/{inside}{relative}"
            assert packaged_as in packaged, f"{folder}/{relative} is not in the wheel"
    assert "plateau_tracker/policy_shape.json" in packaged
    assert "plateau_tracker/migrations/script.py.mako" in packaged


@pytest.fixture(scope="module")
def full_venv(wheel: Path) -> Path:
    """A fresh venv holding the wheel, with the tracker's dependencies (fastapi, torch, TensorBoard, ...)
    borrowed from this test environment's site-packages by a path entry, not installed again: a download of
    several gigabytes proves nothing about Plateau. The path entry does not process that folder's own ``.pth``
    files, so the checkout's editable install stays out and ``plateau_tracker`` comes from the wheel."""
    venv = wheel.parent.parent / "full-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    site = next((venv / "lib").glob("python3*/site-packages"))
    borrowed = [path for path in sys.path if path.endswith("site-packages") and Path(path).is_dir()]
    (site / "zz_test_dependencies.pth").write_text("\n".join(borrowed) + "\n")
    return venv


@pytest.fixture
def shadowing_folder(tmp_path: Path) -> Path:
    """A user's project folder with its own packages named like the repository's folders; importing any of
    them fails loudly, so a command that picked one up instead of Plateau's own would say so."""
    project = tmp_path / "project"
    for name in ("sdk", "tracker", "dashboard", "migrations"):
        package = project / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"raise ImportError('the user\\'s own {name} was imported')\n")
    return project


def _environment(project: Path) -> dict[str, str]:
    """This environment with no Plateau settings, a free port for trackers the commands start, and the
    user's project folder first on the path, as in a notebook or a project's own scripts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLATEAU_")}
    return {**env, "PYTHONPATH": str(project), "PLATEAU_PORT": str(free_port())}


def _plateau(venv: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = _environment(cwd)
    return subprocess.run(
        [str(venv / "bin" / "plateau"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
        check=False,
    )


def test_the_installed_package_comes_from_the_wheel(full_venv: Path, shadowing_folder: Path) -> None:
    code = "import plateau_tracker as p, plateau_tracker.server.app as app; print(p.__file__, app.__file__)"
    result = subprocess.run(
        [str(full_venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        cwd=shadowing_folder,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for path in result.stdout.split():
        assert Path(path).is_relative_to(full_venv), path


def test_serve_starts_beside_the_users_own_packages(full_venv: Path, shadowing_folder: Path) -> None:
    port = free_port()
    home = shadowing_folder / "home"
    log_path = shadowing_folder / "serve.log"
    with log_path.open("wb") as log:
        serve = subprocess.Popen(
            [str(full_venv / "bin" / "plateau"), "serve", "--port", str(port), "--home", str(home)],
            cwd=shadowing_folder,
            env=_environment(shadowing_folder),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_healthy(serve, f"http://127.0.0.1:{port}/api/v1/health", log_path, 120.0, poll=0.1)
    finally:
        serve.terminate()
        serve.wait(timeout=60)


def test_demo_and_export_start_their_tracker_beside_the_users_own_packages(
    full_venv: Path, shadowing_folder: Path
) -> None:
    """``plateau demo`` and ``plateau export tensorboard`` each start a tracker of their own on the
    configured store: the path a user's ``tracker/`` used to break ("the tracker did not start")."""
    home = shadowing_folder / "home"
    demo = _plateau(full_venv, shadowing_folder, "demo", "--epochs", "2", "--home", str(home))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert demo.stdout.count("digits") >= 1
    logdir = shadowing_folder / "tb"
    export = _plateau(
        full_venv,
        shadowing_folder,
        "export",
        "tensorboard",
        "--experiment",
        "digits-mlp",
        "--logdir",
        str(logdir),
        "--home",
        str(home),
    )
    assert export.returncode == 0, export.stdout + export.stderr
    assert len({path.parent for path in logdir.rglob("events.out.tfevents.*")}) == 4


def test_the_sdist_carries_its_tests_and_they_collect(tmp_path: Path) -> None:
    """The source distribution holds the license and the whole test tree (conftest, helpers, benchmarks):
    unpacked, its suite collects every test the checkout's does."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCES))
    dist = tmp_path / "dist"
    build = f"from setuptools import build_meta; print(build_meta.build_sdist({str(dist)!r}))"
    subprocess.run([sys.executable, "-c", build], cwd=source, check=True, capture_output=True, timeout=300)
    (sdist,) = dist.glob("plateau_tracker-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        archive.extractall(tmp_path / "unpacked", filter="data")
    for needed in ("LICENSE", "tests/conftest.py", "tests/_server.py", "tests/benchmarks/__init__.py"):
        assert needed in names, needed
    (unpacked,) = (tmp_path / "unpacked").iterdir()

    def collected(folder: Path) -> list[str]:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return sorted(line for line in result.stdout.splitlines() if "::" in line)

    assert collected(unpacked) == collected(ROOT)
