"""What a replay saved and cost, per source."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from plateau_tracker._quantile import quantile
from plateau_tracker.server.replay._simulate import RunResult

REGRET_TOLERANCE = 0.005


@dataclass(frozen=True)
class SourceReport:
    source: str
    runs: int
    compute_saved: float
    mean_regret: float
    p95_regret: float
    share_regret_over: float
    sweep_regret: float | None
    stopped_by: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "compute_saved": self.compute_saved,
            "mean_regret": self.mean_regret,
            "p95_regret": self.p95_regret,
            "share_regret_over_0.005": self.share_regret_over,
            "sweep_best_regret": self.sweep_regret,
            "stopped_by": self.stopped_by,
        }


def _p95(values: list[float]) -> float:
    return quantile(sorted(values), 0.95)


def summarise(source: str, results: Sequence[RunResult], *, sweep: bool) -> SourceReport:
    """Compute saved (cost-weighted), regret statistics, and for a sweep the best-of-sweep regret."""
    full = sum(r.cost_full for r in results)
    saved = sum(r.cost_full - r.cost_used for r in results)
    regrets = [r.regret for r in results]
    sweep_regret = None
    if sweep:
        sign = results[0].curve.score_sign(results[0].mode) if results else 1.0

        def best(values: list[float]) -> float:
            finite = [sign * v for v in values if not math.isnan(v)]
            return max(finite) if finite else math.nan

        sweep_regret = best([r.curve.score[r.full_best_index] for r in results]) - best(
            [r.curve.score[r.kept_index] for r in results]
        )
    counts: dict[str, int] = {}
    for r in results:
        key = r.stopped_by or "ran to the end"
        counts[key] = counts.get(key, 0) + 1
    return SourceReport(
        source=source,
        runs=len(results),
        compute_saved=saved / full if full > 0 else 0.0,
        mean_regret=sum(regrets) / len(regrets),
        p95_regret=_p95(regrets),
        share_regret_over=sum(r > REGRET_TOLERANCE for r in regrets) / len(regrets),
        sweep_regret=sweep_regret,
        stopped_by=dict(sorted(counts.items())),
    )


def table(reports: Sequence[SourceReport]) -> str:
    headers = ["source", "runs", "saved", "mean regret", "p95 regret", "regret>0.005", "sweep regret"]
    rows = [
        [
            r.source,
            str(r.runs),
            f"{r.compute_saved:.3f}",
            f"{r.mean_regret:.4f}",
            f"{r.p95_regret:.4f}",
            f"{r.share_regret_over:.3f}",
            "-" if r.sweep_regret is None else f"{r.sweep_regret:.4f}",
        ]
        for r in reports
    ]
    widths = [max(len(x) for x in column) for column in zip(headers, *rows, strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)
