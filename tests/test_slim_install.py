"""A training node installs the SDK alone: the wheel declares no dependency, installs bare into a fresh
venv with no index at all, and from there logs to a tracker that runs from the full install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests._server import TrackerProcess

ROOT = Path(__file__).resolve().parents[1]
# What a wheel is never built from: environments, build outputs, caches, generated data.
_NOT_SOURCES = (".git", ".venv", "build", "dist", "*.egg-info", "test-artifacts", "__pycache__", ".*_cache")

TRAINER = textwrap.dedent("""
    import json, sys, time
    started = time.perf_counter()
    import sdk
    imported = time.perf_counter() - started
    rules = [{"rule": "patience", "patience": 2}]
    run = sdk.init(project="slim", monitor="val", mode="min", rules=rules, url=sys.argv[1])
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
def slim_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the bare wheel, installed with no package index (so no dependency could be)."""
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
    venv = root / "venv"
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
    packages = ("sdk", "tracker", "dashboard", "migrations")
    size = sum(p.stat().st_size for name in packages for p in (site / name).rglob("*") if p.is_file())
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
    heavy = {"fastapi", "sqlalchemy", "pydantic", "httpx", "numpy", "scipy", "tracker"}
    assert not heavy & {name.split(".")[0] for name in report["modules"]}
    print(f"\nimport sdk: {1000 * report['import_s']:.1f} ms in the bare install")
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
