"""The disk spool: batches the tracker could not take wait here, with their batch ids, until it can.

Layout: ``<spool>/<run_key>/run.json`` (the tracker URL and the run's create body, so a later process can
create or join the run) and one ``b-<time_ns>-<pid>-<batch_id>.json`` per batch; names sort in write
order. Each file is written to a temporary name and renamed, so a crash leaves whole batches only. Replay
sends them in order with their original batch ids (the tracker applies each once) and deletes each file
once the tracker has acknowledged it. The spool is bounded in bytes; past the bound batches are dropped
and counted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from plateau_tracker._progress import Progress
from plateau_tracker._transport import RejectedError, RetryableError, Transport

logger = logging.getLogger("plateau")

DEFAULT_MAX_BYTES = 512 * 1024 * 1024
SUMMARY_FILE = "summary.json"
FINISH_FILE = "finish.json"


def default_spool_dir() -> Path:
    home = os.environ.get("PLATEAU_HOME")
    return (Path(home) if home else Path.home() / ".plateau").expanduser() / "spool"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120] or "run"


class Spool:
    """One run's spool folder."""

    def __init__(
        self,
        root: Path,
        run_key: str,
        *,
        url: str,
        create_body: dict[str, Any],
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.root = root
        self.dir = root / _safe(run_key)
        self.url = url
        self.create_body = create_body
        self.max_bytes = max_bytes
        self.started_at = time.time()  # a run synced later starts when its trainer started it

    def _used(self) -> int:
        return _usage.of(self.root)

    def write(self, batch_id: str, series: list[dict[str, Any]]) -> bool:
        """Store a batch (in the series form the sender builds); False when the spool is full (the batch
        is then lost, and counted by the caller)."""
        content = json.dumps({"batch_id": batch_id, "series": series}, separators=(",", ":"))
        if self._used() + len(content) > self.max_bytes:
            return False
        self._prepare_dir()
        _atomic_write(self.dir / f"b-{time.time_ns():020d}-{os.getpid()}-{_safe(batch_id)}.json", content)
        _usage.add(self.root, len(content))
        return True

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Keep the run's summary figures (the whole merged summary: sending it again is harmless)."""
        self._prepare_dir()
        _atomic_write(self.dir / SUMMARY_FILE, json.dumps(summary, default=str))

    def write_finish(self, status: str, ended_at: float) -> None:
        """Keep the run's ``finish()`` made while the tracker was away: ``plateau sync`` replays it after
        the batches, so the run ends with the status and time it had, instead of staying ``running``."""
        self._prepare_dir()
        _atomic_write(self.dir / FINISH_FILE, json.dumps({"status": status, "ended_at": ended_at}))

    def forget_finish(self) -> None:
        """The run goes on in a new process (same run key): an earlier process's finish is void."""
        (self.dir / FINISH_FILE).unlink(missing_ok=True)

    def _prepare_dir(self) -> None:
        """The run's folder, with the ``run.json`` that lets ``plateau sync`` create the run later."""
        self.dir.mkdir(parents=True, exist_ok=True)
        meta = self.dir / "run.json"
        if not meta.exists():
            started = datetime.fromtimestamp(self.started_at, timezone.utc).isoformat()
            create = {**self.create_body, "started_at": started}
            _atomic_write(meta, json.dumps({"url": self.url, "create": create}))

    def pending(self) -> list[Path]:
        return sorted(self.dir.glob("b-*.json")) if self.dir.exists() else []

    def forget(self, path: Path) -> None:
        _discard(path)


class _RootUsage:
    """Bytes spooled under each spool root, as this process knows them: measured by one walk the first
    time a run of the process spools there, then kept as its runs write and deliver. One walk per process,
    not one per run: with thousands of runs spooling, a walk per run made each new run's first write
    (done from ``log()`` when the queue is full) read every other run's files."""

    def __init__(self) -> None:
        self._bytes: dict[str, int] = {}
        self._lock = threading.Lock()

    def of(self, root: Path) -> int:
        key = os.path.abspath(root)
        with self._lock:
            if key not in self._bytes:
                self._bytes[key] = _bytes_under(root)
            return self._bytes[key]

    def add(self, root: Path, change: int) -> None:
        """Bytes written (or, negative, removed) under ``root``; nothing until the root is measured."""
        key = os.path.abspath(root)
        with self._lock:
            if key in self._bytes:
                self._bytes[key] = max(0, self._bytes[key] + change)


_usage = _RootUsage()


def _discard(path: Path) -> None:
    """Remove a spooled file (delivered or dropped), and its bytes from its root's usage."""
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:  # removed already (`plateau sync` beside the run's own sender)
        return
    _usage.add(path.parent.parent, -size)


def _bytes_under(root: Path) -> int:
    """Bytes of the spool files under ``root`` (every run's spool: the cap is the machine's). Other runs
    deliver and remove their files while these are counted: a file or folder gone meanwhile is skipped,
    never an error (one raised out of a run's ``finish()`` into the trainer)."""
    total = 0
    for folder, _, names in os.walk(root):  # os.walk skips folders it cannot list
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                status = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(status.st_mode):
                total += status.st_size
    return total


def _atomic_write(path: Path, content: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(content)
    os.replace(tmp, path)


@dataclass
class ReplayResult:
    batches: int = 0
    points: int = 0
    rejected: int = 0
    complete: bool = True
    errors: list[str] = field(default_factory=list)


UNDELIVERED = "undelivered_points"
"""The summary key a run carries while points it logged wait in a spool (``finish()`` sets it,
``plateau sync`` removes it)."""


def spooled_points(files: list[Path]) -> int:
    """Points in spooled batch ``files`` (unreadable ones count as none)."""
    total = 0
    for path in files:
        try:
            total += batch_size(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return total


def batch_size(batch: dict[str, Any]) -> int:
    """Points in a spooled batch, in either form."""
    return len(batch.get("points", ())) + sum(len(s["steps"]) for s in batch.get("series", ()))


def replay(
    transport: Transport,
    run_id: int,
    files: list[Path],
    on_sent: Any = None,
    between: Any = None,
    *,
    log_errors: bool = True,
) -> ReplayResult:
    """Send spooled batch ``files`` in order; stop at the first retryable failure (they stay for later).
    ``between`` is called before each file (the sender spools what was logged meanwhile). Refusals are
    logged unless ``log_errors`` is False (``plateau sync`` reports them itself: said once, not twice)."""
    result = ReplayResult()
    for path in files:
        if between is not None:
            between()
        try:
            batch = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # a torn or foreign file: keep it aside, never resend garbage
            result.errors.append(f"{path.name}: {exc}")
            path.rename(path.with_suffix(".bad"))
            continue
        points = batch_size(batch)
        try:
            if "series" in batch:
                answer = transport.send_series(run_id, batch["batch_id"], batch["series"])
            else:  # written by an SDK before the series form
                answer = transport.send_points(run_id, batch["batch_id"], batch["points"])
        except RetryableError as exc:
            result.complete = False
            result.errors.append(str(exc))
            return result
        except RejectedError as exc:
            result.rejected += points
            result.errors.append(str(exc))
            if log_errors:
                logger.error("plateau: the tracker rejected spooled batch %s: %s", path.name, exc)
        else:
            result.batches += 1
            result.points += points
            if on_sent is not None:
                on_sent(answer)
        _discard(path)
    return result


def replay_summary(transport: Transport, run_id: int, folder: Path) -> None:
    """Send a spooled summary and delete it; a retryable failure leaves it (raised), a refusal drops it."""
    path = folder / SUMMARY_FILE
    if not path.exists():
        return
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        path.rename(path.with_suffix(".bad"))
        return
    try:
        transport.update_summary(run_id, summary)
    except RejectedError as exc:
        logger.error("plateau: the tracker rejected the spooled summary of run %d: %s", run_id, exc)
    path.unlink(missing_ok=True)


def replay_finish(transport: Transport, run_id: int, folder: Path) -> bool:
    """Send a spooled finish and delete it; True when there was one. A retryable failure leaves it
    (raised); a refusal drops it (the run is then left as the tracker has it)."""
    path = folder / FINISH_FILE
    if not path.exists():
        return False
    try:
        finish = json.loads(path.read_text())
        status, ended_at = str(finish["status"]), float(finish["ended_at"])
    except (OSError, ValueError, KeyError, TypeError):
        path.rename(path.with_suffix(".bad"))
        return False
    try:
        transport.finish_run(run_id, status, timeout=10.0, ended_at=ended_at)
    except RejectedError as exc:
        logger.error("plateau: the tracker refused the spooled finish of run %d: %s", run_id, exc)
    path.unlink(missing_ok=True)
    return True


@dataclass
class SyncReport:
    """What ``plateau sync`` did: runs delivered (``finished`` of them ended by a spooled ``finish()``),
    batches and points sent, points the tracker refused, spooled batch files left, runs ``dropped`` on
    request, and one line per problem in ``errors``."""

    runs: int = 0
    batches: int = 0
    points: int = 0
    rejected: int = 0
    left: int = 0
    finished: int = 0
    dropped: int = 0
    errors: list[str] = field(default_factory=list)


def spooled_runs(spool_dir: Path | None = None) -> dict[str, Path]:
    """Run key -> folder, for every run waiting in the spool."""
    root = spool_dir or default_spool_dir()
    found: dict[str, Path] = {}
    for meta in sorted(root.glob("*/run.json")) if root.exists() else []:
        try:
            key = str(json.loads(meta.read_text())["create"]["run_key"])
        except (OSError, ValueError, KeyError, TypeError):
            key = meta.parent.name
        found[key] = meta.parent
    return found


def sync(
    spool_dir: Path | None = None,
    url: str | None = None,
    *,
    drop: frozenset[str] | set[str] = frozenset(),
    rehome: dict[str, dict[str, Any]] | None = None,
    progress_to: TextIO | None = None,
) -> SyncReport:
    """Replay every run's spool (``plateau sync``): create or join each run by its run key, send its
    batches in order, then its summary and its ``finish()`` (with the status and time it had); delete
    what the tracker acknowledged.

    A run the tracker refuses to create (a policy it rejects, say) stays in the spool, and the report
    says how to get it out: ``drop`` names run keys whose spool is deleted unsent, ``rehome`` maps a run
    key to fields that replace those of its create body (``{"policy": {...}}``, ``{"experiment": "x"}``),
    kept in the spool so the change holds for later syncs too. On a terminal (``progress_to``, standard
    error by default) one line shows the batches sent of all, the rate and the time left.
    """
    report = SyncReport()
    rehome = rehome or {}
    runs = spooled_runs(spool_dir)
    total = sum(len(list(folder.glob("b-*.json"))) for key, folder in runs.items() if key not in drop)
    progress = Progress("plateau sync", total=total, unit="batches", stream=progress_to, clock_every=1)
    with contextlib.closing(progress):
        for key, folder in runs.items():
            _sync_one(key, folder, url, report, drop, rehome, progress)
    return report


def _sync_one(
    key: str,
    folder: Path,
    url: str | None,
    report: SyncReport,
    drop: frozenset[str] | set[str],
    rehome: dict[str, dict[str, Any]],
    progress: Progress,
) -> None:
    """One spooled run: dropped, or sent (with its spool rewritten first where ``rehome`` says)."""
    if key in drop:
        report.dropped += 1
        for path in folder.iterdir():
            _discard(path)
        folder.rmdir()
        return
    meta = folder / "run.json"
    try:
        info = json.loads(meta.read_text())
        if key in rehome:
            info["create"] = {**info["create"], **rehome[key]}
            _atomic_write(meta, json.dumps(info))
        _sync_run(key, folder, info, url, report, progress)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        report.errors.append(f"run {key}: unreadable spool at {folder} ({exc})")
        report.left += len(list(folder.glob("b-*.json")))


def _sync_run(
    key: str, folder: Path, info: dict[str, Any], url: str | None, report: SyncReport, progress: Progress
) -> None:
    files = sorted(folder.glob("b-*.json"))
    # Tokens are never written to the spool; `plateau sync` takes $PLATEAU_TOKEN.
    transport = Transport(url or info["url"], token=os.environ.get("PLATEAU_TOKEN"))
    try:
        try:
            created = transport.create_run(info["create"])
        except RejectedError as exc:
            points = spooled_points(files)
            report.errors.append(
                f"run {key}: the tracker refused to create it ({exc}); its {points} points stay in the "
                f"spool. Correct it with `plateau sync --policy {key}=default` (or =a policy file), "
                f"or discard them with `plateau sync --drop {key}`"
            )
            report.left += len(files)
            return
        run_id = int(created["id"])
        result = replay(transport, run_id, files, between=progress.add, log_errors=False)
        if result.complete:
            replay_summary(transport, run_id, folder)
            transport.update_summary(run_id, {UNDELIVERED: None})  # nothing left behind
            if replay_finish(transport, run_id, folder):
                report.finished += 1
    except RetryableError as exc:
        report.errors.append(f"run {key}: {exc}")
        report.left += len(list(folder.glob("b-*.json")))
        return
    finally:
        transport.close()
    report.runs += 1
    report.batches += result.batches
    report.points += result.points
    report.rejected += result.rejected
    report.errors += [f"run {key} (#{run_id}): {error}" for error in result.errors]
    left = sorted(folder.glob("b-*.json"))
    report.left += len(left)
    leftovers = (folder / SUMMARY_FILE, folder / FINISH_FILE)
    if not left and not any(p.exists() for p in leftovers) and not any(folder.glob("*.bad")):
        (folder / "run.json").unlink(missing_ok=True)
        folder.rmdir()
