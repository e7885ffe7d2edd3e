"""The disk spool: batches the tracker could not take wait here, with their batch ids, until it can.

Layout: ``<spool>/<run_key>/run.json`` (the tracker URL and the run's create body, so a later process can
create or join the run) and one ``b-<time_ns>-<pid>-<batch_id>.json`` per batch; names sort in write
order. Each file is written to a temporary name and renamed, so a crash leaves whole batches only. Replay
sends them in order with their original batch ids (the tracker applies each once) and deletes each file
once the tracker has acknowledged it. The spool is bounded in bytes; past the bound batches are dropped
and counted.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdk._transport import RejectedError, RetryableError, Transport

logger = logging.getLogger("plateau")

DEFAULT_MAX_BYTES = 512 * 1024 * 1024
SUMMARY_FILE = "summary.json"


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
        self._bytes: int | None = None

    def _used(self) -> int:
        if self._bytes is None:
            self._bytes = (
                sum(p.stat().st_size for p in self.root.rglob("*.json") if p.is_file())
                if self.root.exists()
                else 0
            )
        return self._bytes

    def write(self, batch_id: str, series: list[dict[str, Any]]) -> bool:
        """Store a batch (in the series form the sender builds); False when the spool is full (the batch
        is then lost, and counted by the caller)."""
        content = json.dumps({"batch_id": batch_id, "series": series}, separators=(",", ":"))
        if self._used() + len(content) > self.max_bytes:
            return False
        self._prepare_dir()
        _atomic_write(self.dir / f"b-{time.time_ns():020d}-{os.getpid()}-{_safe(batch_id)}.json", content)
        self._bytes = self._used() + len(content)
        return True

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Keep the run's summary figures (the whole merged summary: sending it again is harmless)."""
        self._prepare_dir()
        _atomic_write(self.dir / SUMMARY_FILE, json.dumps(summary, default=str))

    def _prepare_dir(self) -> None:
        """The run's folder, with the ``run.json`` that lets ``plateau sync`` create the run later."""
        self.dir.mkdir(parents=True, exist_ok=True)
        meta = self.dir / "run.json"
        if not meta.exists():
            _atomic_write(meta, json.dumps({"url": self.url, "create": self.create_body}))

    def pending(self) -> list[Path]:
        return sorted(self.dir.glob("b-*.json")) if self.dir.exists() else []

    def forget(self, path: Path) -> None:
        size = path.stat().st_size
        path.unlink(missing_ok=True)
        if self._bytes is not None:
            self._bytes = max(0, self._bytes - size)


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
    transport: Transport, run_id: int, files: list[Path], on_sent: Any = None, between: Any = None
) -> ReplayResult:
    """Send spooled batch ``files`` in order; stop at the first retryable failure (they stay for later).
    ``between`` is called before each file (the sender spools what was logged meanwhile)."""
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
            logger.error("plateau: the tracker rejected spooled batch %s: %s", path.name, exc)
        else:
            result.batches += 1
            result.points += points
            if on_sent is not None:
                on_sent(answer)
        path.unlink(missing_ok=True)
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


@dataclass
class SyncReport:
    runs: int = 0
    batches: int = 0
    points: int = 0
    rejected: int = 0
    left: int = 0
    errors: list[str] = field(default_factory=list)


def sync(spool_dir: Path | None = None, url: str | None = None) -> SyncReport:
    """Replay every run's spooled batches (``plateau sync``): create or join each run by its run key,
    send its batches in order, delete what the tracker acknowledged."""
    root = spool_dir or default_spool_dir()
    report = SyncReport()
    for meta in sorted(root.glob("*/run.json")) if root.exists() else []:
        info = json.loads(meta.read_text())
        files = sorted(meta.parent.glob("b-*.json"))
        # Tokens are never written to the spool; `plateau sync` takes $PLATEAU_TOKEN.
        transport = Transport(url or info["url"], token=os.environ.get("PLATEAU_TOKEN"))
        try:
            created = transport.create_run(info["create"])
            result = replay(transport, int(created["id"]), files)
            if result.complete:
                replay_summary(transport, int(created["id"]), meta.parent)
                transport.update_summary(int(created["id"]), {UNDELIVERED: None})  # nothing left behind
        except (RetryableError, RejectedError) as exc:
            report.errors.append(f"{meta.parent.name}: {exc}")
            report.left += len(files)
            continue
        finally:
            transport.close()
        report.runs += 1
        report.batches += result.batches
        report.points += result.points
        report.rejected += result.rejected
        report.errors += result.errors
        left = sorted(meta.parent.glob("b-*.json"))
        report.left += len(left)
        if not left and not (meta.parent / SUMMARY_FILE).exists() and not any(meta.parent.glob("*.bad")):
            meta.unlink(missing_ok=True)
            meta.parent.rmdir()
    return report
