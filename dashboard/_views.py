"""Shared pieces of the pages: summaries of runs and the curve chart with decision markers."""

from __future__ import annotations

import html
from typing import Any

import altair as alt
import pandas as pd

from plateau_tracker.dashboard._api import number

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


def compute_saved(stop_step: int, planned_steps: int) -> float:
    """The share of the planned steps a stop left unrun. ``planned_steps`` is the step the run planned to
    end at (0-based, inclusive), so the plan is ``planned_steps + 1`` steps and the run ran
    ``stop_step + 1``: 40 of 60 epochs saved is 66.7%, not ``1 - 19/59``."""
    return max(0.0, (planned_steps - stop_step) / (planned_steps + 1))


def ending(run: dict[str, Any], stop: dict[str, Any] | None) -> tuple[str, str]:
    """What ended the run and why, in words, for runs a rule stopped and runs that ended otherwise."""
    if stop is not None:
        return stop.get("rule") or "", stop.get("reason") or ""
    status, last, planned = run["status"], run.get("judged_step"), run.get("planned_steps")
    at = f" at step {last}" if last is not None and last >= 0 else ""
    if status == "running":
        return "", "running" + (f", step {last} of {planned}" if planned and at else at)
    if status in ("failed", "crashed"):
        return status, f"the trainer reported it {status}{at}"
    if planned is not None and last is not None and last >= planned:
        return "budget", f"ran its budget of {planned + 1} steps (to step {planned})"
    return "trainer", f"the trainer ended it ({status}){at}"


def run_row(run: dict[str, Any], stop: dict[str, Any] | None) -> dict[str, Any]:
    """One run as the Runs page lists it. ``stop`` is the run's stop decision, if a rule stopped it (the
    run's latest decision is it, as the runs list carries: no request per run)."""
    latest = run.get("decision") or {}
    best = stop if stop is not None else latest
    planned = run.get("planned_steps")
    ended_by, why = ending(run, stop)
    return {
        "id": run["id"],
        "name": run["name"],
        "status": run["status"],
        "ended by": ended_by,
        "why": why,
        "compute saved": compute_saved(stop["step"], planned) if planned and stop is not None else None,
        "best value": number(best.get("best_value")),
        "best step": best.get("best_step"),
        "last step": run.get("judged_step"),
        "planned end": planned,
        "experiment": run["experiment"],
    }


def runs_table(rows: list[dict[str, Any]]) -> str:
    """The runs as an HTML table that reads at a glance: the run links to its page, ``why`` wraps instead
    of being cut, and what matters (how it ended, why, compute saved) comes before the details."""
    body = []
    for row in rows:
        saved = row["compute saved"]
        bar = (
            f'<div class="saved"><span style="width:{100 * saved:.1f}%"></span></div>{100 * saved:.1f}%'
            if saved is not None
            else ""
        )
        best = row["best value"]
        cells = {
            "run": f'<a href="./run?run={row["id"]}" target="_self">#{row["id"]} {html.escape(row["name"])}'
            "</a>",
            "status": html.escape(row["status"]),
            "ended by": html.escape(row["ended by"]),
            "why": html.escape(row["why"]),
            "compute saved": bar,
            "best value": "" if best is None else f"{best:.6g}",
            "best step": _blank(row["best step"]),
            "last step": _blank(row["last step"]),
            "planned end": _blank(row["planned end"]),
            "experiment": shortened(row["experiment"]),
        }
        body.append(cells)
    return _html_table("plateau-runs", _TABLE_COLUMNS, body)


def _html_table(classes: str, columns: tuple[str, ...], rows: list[dict[str, str]]) -> str:
    """``rows`` (each an HTML cell per column) under a header of ``columns``, each cell classed by its
    column, with the tables' style."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name in columns)
    body = "".join(
        "<tr>" + "".join(f'<td class="{_css(n)}">{row[n]}</td>' for n in columns) + "</tr>" for row in rows
    )
    return (
        f'<style>{_TABLE_CSS}</style><table class="{classes}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


_TABLE_COLUMNS = (
    "run",
    "status",
    "ended by",
    "why",
    "compute saved",
    "best value",
    "best step",
    "last step",
    "planned end",
    "experiment",
)
_TABLE_CSS = """
table.plateau-runs { border-collapse: collapse; width: 100%; font-size: 0.85rem; }
table.plateau-runs th, table.plateau-runs td { border-bottom: 1px solid #e6e6e6; padding: 4px 6px;
  text-align: left; vertical-align: top; }
table.plateau-runs td.why { min-width: 16rem; max-width: 30rem; }
table.plateau-decisions td.reason { min-width: 20rem; }
table.plateau-decisions td.step, table.plateau-decisions td.best-step { white-space: nowrap; }
table.plateau-runs td.run, table.plateau-runs td.experiment { white-space: nowrap; }
table.plateau-runs td.compute-saved { white-space: nowrap; min-width: 7rem; }
table.plateau-runs .saved { display: inline-block; width: 3.5rem; height: 0.5rem; background: #eee;
  margin-right: 0.4rem; }
table.plateau-runs .saved span { display: block; height: 100%; background: #2ca02c; }
"""


def shortened(name: str, width: int = 24) -> str:
    """``name`` cut to ``width`` characters with an ellipsis, the whole of it on hover: an Optuna study's
    ``no-name-<uuid>`` experiment wrapped every row of the runs table to five lines."""
    if len(name) <= width:
        return html.escape(name)
    return f'<span title="{html.escape(name)}">{html.escape(name[: width - 1])}…</span>'


_DECISION_COLUMNS = ("seq", "step", "action", "rule", "reason", "best step")


def decisions_table(decisions: list[dict[str, Any]]) -> str:
    """A run's decisions as an HTML table whose reasons wrap whole, never cut."""
    rows = [
        {
            "seq": _blank(d.get("seq")),
            "step": _blank(d.get("step")),
            "action": html.escape(str(d.get("action", ""))),
            "rule": html.escape(str(d.get("rule", ""))),
            "reason": html.escape(str(d.get("reason", ""))),
            "best step": _blank(d.get("best_step")),
        }
        for d in decisions
    ]
    return _html_table("plateau-runs plateau-decisions", _DECISION_COLUMNS, rows)


def _blank(value: Any) -> str:
    return "" if value is None else html.escape(str(value))


def _css(name: str) -> str:
    return name.replace(" ", "-")


def smooth(values: pd.Series, ema: float) -> pd.Series:
    return values if ema <= 0 else values.ewm(alpha=1 - ema, adjust=False).mean()


# Curves never take a marker's colour: with several metrics, the default palette's blue, orange, green and
# red made curves look like best, alert, checkpoint and stop lines.
LINE_COLOURS = ["#6a3d9a", "#8c564b", "#17becf", "#e377c2", "#7f7f7f", "#bcbd22", "#393b79", "#637939"]


def curve_chart(
    frame: pd.DataFrame,
    decisions: list[dict[str, Any]],
    *,
    log_scale: bool,
    x: str = "step",
    colour: str = "key",
) -> alt.LayerChart:
    """Lines of ``frame`` (columns x, value, colour); a dashed rule at the stop, at each alert and at the
    best step; and every checkpoint as a thin tick along the bottom axis, so that a run improving every
    step keeps a readable curve (the Decisions table lists them all)."""
    scale = alt.Scale(type="log") if log_scale else alt.Scale(zero=False)
    several = frame[colour].nunique() > 1
    lines = (
        alt.Chart(frame)
        .mark_line()
        .encode(
            x=alt.X(f"{x}:Q", title=x),
            y=alt.Y("value:Q", scale=scale, title=None if several else str(frame[colour].iloc[0])),
            # One curve is named by its axis: its legend would be a second legend beside the decisions'.
            color=alt.Color(
                f"{colour}:N", scale=alt.Scale(range=LINE_COLOURS), legend=alt.Legend() if several else None
            ),
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
    layers: list[alt.Chart | alt.LayerChart] = [lines]
    if not marks.empty and x == "step":
        marker_colour = alt.Color(
            "action:N",
            scale=alt.Scale(domain=list(MARKER_COLOURS), range=list(MARKER_COLOURS.values())),
            title="decision",
        )
        tooltip = ["action", "rule", "step", "reason"]
        ticks = marks[marks["action"] == "checkpoint"]
        rules = marks[marks["action"] != "checkpoint"]
        markers: list[alt.Chart] = []
        if not rules.empty:
            markers.append(
                alt.Chart(rules)
                .mark_rule(strokeDash=[4, 3])
                .encode(x="step:Q", color=marker_colour, tooltip=tooltip)
            )
        if not ticks.empty:
            markers.append(
                alt.Chart(ticks)
                .mark_tick(thickness=1, size=10, orient="vertical")
                .encode(x="step:Q", y=alt.value(CHART_HEIGHT - 5), color=marker_colour, tooltip=tooltip)
            )
        # The stop and alert rules and the checkpoint ticks share one colour scale, so one "decision"
        # legend; the curves' scale stays apart from it.
        layers.append(alt.layer(*markers))
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=CHART_HEIGHT)


CHART_HEIGHT = 380
