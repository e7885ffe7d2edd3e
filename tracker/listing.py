"""``plateau runs`` and ``plateau decisions``: the tracker's runs and a run's decisions on a terminal, as a
table for a person or ``--json`` for a script. Both read the tracker over HTTP, as the dashboard does."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from plateau_tracker.server.json_output import print_json


def _table(rows: list[list[str]], headers: list[str]) -> str:
    """Left-aligned columns, the last one unpadded (a reason is never cut)."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers) - 1)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            [*(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)), cells[-1]]
        ).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def _steps(run: dict[str, Any]) -> str:
    judged = "-" if run.get("judged_step") is None else str(run["judged_step"])
    return judged if run.get("planned_steps") is None else f"{judged}/{run['planned_steps']}"


def _verdict(run: dict[str, Any]) -> str:
    """The run's stop, else its best so far, in a few words."""
    if run.get("stop_step") is not None:
        rule = f" ({run['stop_rule']})" if run.get("stop_rule") else ""
        return f"stop at {run['stop_step']}{rule}"
    best = run.get("decision", {}).get("best_step")
    return "-" if best is None else f"best at {best}"


def runs_command(args: argparse.Namespace) -> int:
    """``plateau runs``: the newest runs matching the filters, newest first."""
    from plateau_tracker.client import connect

    with connect(args.url, token=args.token) as client:
        page = client.runs_page(
            project=args.project,
            experiment=args.experiment,
            statuses=args.status or (),
            name=args.name,
            tags=args.tag or (),
            limit=args.limit,
        )
    runs: list[dict[str, Any]] = page["data"]
    if args.json:
        print_json({"count": page["count"], "runs": runs})
        return 0
    if not runs:
        print("no runs match", flush=True)
        return 0
    rows = [
        [
            str(run["id"]),
            run["status"],
            f"{run['project']}/{run['experiment']}",
            run["name"],
            _steps(run),
            _verdict(run),
        ]
        for run in runs
    ]
    print(_table(rows, ["id", "status", "project/experiment", "name", "judged step", "decision"]))
    if page["count"] > len(runs):
        print(f"\n{len(runs)} newest of {page['count']} runs (--limit for more)")
    return 0


def decisions_command(args: argparse.Namespace) -> int:
    """``plateau decisions RUN_ID``: every decision of the run, oldest first, with its reason."""
    from plateau_tracker.client import NotFoundError, connect

    with connect(args.url, token=args.token) as client:
        try:
            decisions = client.decision_list(args.run_id)
        except NotFoundError:
            print(f"plateau decisions: run {args.run_id} does not exist at {client.url}", file=sys.stderr)
            return 1
    if args.json:
        print_json({"run_id": args.run_id, "decisions": decisions})
        return 0
    if not decisions:
        print(f"run {args.run_id} has no decisions yet")
        return 0
    rows = [
        [
            "-" if d.get("step") is None else str(d["step"]),
            d["action"],
            d.get("rule") or "-",
            "-" if d.get("best_step") is None else str(d["best_step"]),
            d.get("reason") or "",
        ]
        for d in decisions
    ]
    print(_table(rows, ["step", "action", "rule", "best step", "reason"]))
    return 0
