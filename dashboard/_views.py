"""Shared pieces of the pages: summaries of runs and the curve chart with decision markers."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from dashboard._api import number

MARKER_COLOURS = {"checkpoint": "#2ca02c", "stop": "#d62728", "alert": "#ff7f0e", "best": "#1f77b4"}


def stop_decision(decisions: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((d for d in decisions if d["action"] == "stop"), None)


def best_of(decisions: list[dict[str, Any]]) -> tuple[int | None, float | None]:
    """The best step and value the policy named: the stop's, else the last checkpoint's."""
    stop = stop_decision(decisions)
    if stop is not None and stop.get("best_step") is not None:
        return stop["best_step"], number(stop.get("best_value"))
    checkpoints = [d for d in decisions if d["action"] == "checkpoint"]
    if checkpoints:
        return checkpoints[-1]["step"], number(checkpoints[-1].get("best_value"))
    return None, None


def run_row(run: dict[str, Any], decisions: list[dict[str, Any]]) -> dict[str, Any]:
    best_step, best_value = best_of(decisions)
    stop = stop_decision(decisions)
    last = run.get("judged_step")
    planned = run.get("planned_steps")
    saved = None
    if planned and stop is not None:
        saved = max(0.0, 1 - stop["step"] / planned)  # the share of the planned steps not run
    return {
        "id": run["id"],
        "name": run["name"],
        "experiment": run["experiment"],
        "status": run["status"],
        "last step": last,
        "planned end": planned,
        "best value": best_value,
        "best step": best_step,
        "ended by": stop["rule"] if stop else "",
        "why": stop["reason"] if stop else "",
        "compute saved": saved,
    }


def smooth(values: pd.Series, ema: float) -> pd.Series:
    return values if ema <= 0 else values.ewm(alpha=1 - ema, adjust=False).mean()


def curve_chart(
    frame: pd.DataFrame,
    decisions: list[dict[str, Any]],
    *,
    log_scale: bool,
    x: str = "step",
    colour: str = "key",
) -> alt.LayerChart:
    """Lines of ``frame`` (columns x, value, colour) with a rule at every checkpoint/stop/alert decision."""
    scale = alt.Scale(type="log") if log_scale else alt.Scale(zero=False)
    lines = (
        alt.Chart(frame)
        .mark_line()
        .encode(
            x=alt.X(f"{x}:Q", title=x),
            y=alt.Y("value:Q", scale=scale),
            color=f"{colour}:N",
            tooltip=[colour, x, "value"],
        )
    )
    rows = [
        {"step": d["step"], "action": d["action"], "rule": d["rule"], "reason": d["reason"]}
        for d in decisions
        if d["action"] in MARKER_COLOURS and d.get("step") is not None
    ]
    best_step, best_value = best_of(decisions)
    if best_step is not None:
        rows.append(
            {
                "step": best_step,
                "action": "best",
                "rule": "",
                "reason": f"best value {best_value} at step {best_step}: the model to keep",
            }
        )
    marks = pd.DataFrame(rows)
    layers: list[alt.Chart] = [lines]
    if not marks.empty and x == "step":
        layers.append(
            alt.Chart(marks)
            .mark_rule(strokeDash=[4, 3])
            .encode(
                x="step:Q",
                color=alt.Color(
                    "action:N",
                    scale=alt.Scale(domain=list(MARKER_COLOURS), range=list(MARKER_COLOURS.values())),
                ),
                tooltip=["action", "rule", "step", "reason"],
            )
        )
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=380)
