"""Figures, their targets, and the table the suite prints."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from plateau_tracker._quantile import quantile


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (``q`` in [0, 1]) of unsorted values, by the one definition Plateau reports."""
    return quantile(sorted(values), q)


def median_of(measure: Callable[[], float], repeats: int, warmup: int = 1) -> tuple[float, list[float]]:
    """Run ``measure`` ``warmup`` times unrecorded, then ``repeats`` times; its median and every sample."""
    for _ in range(warmup):
        measure()
    samples = [measure() for _ in range(repeats)]
    return statistics.median(samples), samples


@dataclass
class Figure:
    """One measured figure, with its peer's in the same run where there is one, and its target."""

    section: str
    name: str
    value: float | None
    unit: str
    target: str = ""
    met: bool | None = None
    peer: str = ""
    peer_value: float | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: float | None) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def table(figures: list[Figure]) -> str:
    """The figures as a Markdown table (it reads as text too)."""
    lines = [
        "| # | figure | Plateau | peer (same run) | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for figure in figures:
        peer = f"{figure.peer}: {_number(figure.peer_value)} {figure.unit}" if figure.peer else ""
        met = "" if figure.met is None else ("yes" if figure.met else "**no**")
        name = figure.name + (f" ({figure.note})" if figure.note else "")
        lines.append(
            f"| {figure.section} | {name} | {_number(figure.value)} {figure.unit} | {peer} | "
            f"{figure.target} | {met} |"
        )
    return "\n".join(lines)
