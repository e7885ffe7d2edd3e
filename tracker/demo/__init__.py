"""``plateau demo``: real models trained under Plateau's early stopping, with a summary table."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plateau_tracker.server.config import Settings

if TYPE_CHECKING:  # torch is an extra: imported by run_demo only once it is known to be there
    from plateau_tracker.server.demo._train import Outcome


def policy_rules(policy: str) -> list[dict[str, Any]] | None:
    """The rules the demo's runs declare for ``policy``: None for ``default`` (the tracker's default
    policy, which the SDK asks for by declaring no rules), patience-k's (``patience``, ``checkpoint``,
    ``non_finite``) for ``patience-K``; ``ValueError`` naming the choices otherwise."""
    if policy == "default":
        return None
    match = re.fullmatch(r"patience-([1-9][0-9]{0,3})", policy)
    if match is None:
        raise ValueError(f"unknown demo policy {policy!r}: default or patience-K (e.g. patience-5)")
    from plateau_tracker.server.policy.presets import (
        patience_rules,  # the preset's own rules (scipy: loaded only here)
    )

    return patience_rules(int(match.group(1)))


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(out)


def plateau_command(subcommand: str) -> str:
    """How the user, from where they stand, runs ``plateau <subcommand>``: bare ``plateau`` when it is on
    PATH as the program running now, else this program's path (``.venv/bin/plateau`` after the README's
    install, which does not activate the venv), else ``python -m plateau_tracker``."""
    program = Path(sys.argv[0])
    if program.name == "plateau" and program.exists():
        on_path = shutil.which("plateau")
        if on_path is not None and Path(on_path).resolve() == program.resolve():
            return f"plateau {subcommand}"
        return f"{_relative(program)} {subcommand}"
    return f"{_relative(Path(sys.executable))} -m plateau_tracker {subcommand}"


def _relative(path: Path) -> str:
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path.absolute())


def _outcome_table(outcomes: list[Outcome]) -> str:
    """One row per trained model: how long it ran, its best epoch, and why it stopped."""
    rows = [
        [
            f"{o.name} (#{o.run_id})",
            f"{o.epochs_run}/{o.budget}",
            "-" if o.best_epoch is None else str(o.best_epoch),
            "-" if o.best_val_loss is None else f"{o.best_val_loss:.4f}",
            "-" if o.best_val_acc is None else f"{o.best_val_acc:.4f}",
            f"{o.test_acc:.4f}" + (" (restored best)" if o.restored else ""),
            o.reason,
        ]
        for o in outcomes
    ]
    headers = ["run", "epochs", "best epoch", "best val loss", "val acc", "test acc", "why it stopped"]
    return _table(rows, headers)


def run_demo(
    settings: Settings,
    *,
    url: str | None,
    epochs: int,
    seed: int,
    policy: str = "default",
    as_json: bool = False,
) -> int:
    """Train the demo trials against a tracker under ``policy`` (:func:`policy_rules`) and print what
    Plateau decided (``as_json``: one JSON document on stdout, the progress lines on stderr). Returns an
    exit code."""
    rules = policy_rules(policy)
    try:
        from plateau_tracker.server.demo._train import TRIALS, fit_threads_to_host, load_split, train_one
    except ImportError as exc:
        print(
            f"plateau demo needs the torch extra ({exc.name} is missing): "
            "pip install torch==2.13.0 'plateau-tracker[demo]'",
            file=sys.stderr,
        )
        return 1
    from plateau_tracker.server.discovery import tracker_for

    fit_threads_to_host()
    checkpoint_dir = Path(settings.home).expanduser() / "demo" / "checkpoints"
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    split = load_split(seed)
    said = sys.stderr if as_json else sys.stdout
    with tracker_for(settings, url) as tracker_url:
        print(f"tracker: {tracker_url}  (checkpoints in {checkpoint_dir})", file=said)
        print(
            f"training {len(TRIALS)} models on digits, budget {epochs} epochs, monitor val/loss, "
            f"policy {policy}\n",
            file=said,
            flush=True,
        )
        outcomes = []
        for index, trial in enumerate(TRIALS):
            outcome = train_one(
                trial,
                split,
                url=tracker_url,
                budget=epochs,
                seed=seed + index,
                checkpoint_dir=checkpoint_dir,
                rules=rules,
            )
            print(
                f"  {outcome.name}: {outcome.epochs_run}/{outcome.budget} epochs, {outcome.seconds:.1f}s",
                file=said,
                flush=True,
            )
            outcomes.append(outcome)
    saved = sum(o.budget - o.epochs_run for o in outcomes)
    total = sum(o.budget for o in outcomes)
    if as_json:
        from plateau_tracker.server.json_output import print_json

        print_json({"tracker": tracker_url, "policy": policy, "runs": outcomes, "epochs_saved": saved})
        return 0
    print()
    print(_outcome_table(outcomes))
    print(f"\nepochs saved by early stopping: {saved} of {total} ({100 * saved / total:.0f}%)")
    stopped = next((o for o in outcomes if o.epochs_run < o.budget), outcomes[0])
    print(
        f"\nSee these runs with their decisions: run `{plateau_command('dashboard')}` and open "
        f"http://127.0.0.1:8501/run?run={stopped.run_id} (the Runs page lists them all)."
    )
    return 0
