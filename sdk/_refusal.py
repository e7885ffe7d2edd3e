"""What is left of a batch the tracker refused with a 422 that names its offending points.

The tracker validates a whole batch before writing any of it, and its 422 locates each error
(``["body", "series", 2, "steps", 1]``: the second step of the third series). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

_COLUMNS = ("steps", "values", "wall_times")

Refused = list[tuple[str, Any]]
"""(key, step) of each point taken out."""


def without_refused(series: list[dict[str, Any]], detail: Any) -> tuple[list[dict[str, Any]], Refused] | None:
    """``series`` without the points ``detail`` names, and those points; None when ``detail`` does not name
    points of this batch (the whole batch is refused, or the answer is not the tracker's)."""
    named: dict[int, set[int] | None] = {}  # series index -> point indices, or None for the whole series
    if not isinstance(detail, list) or not detail:
        return None
    for error in detail:
        loc = error.get("loc") if isinstance(error, dict) else None
        if not (
            isinstance(loc, list)
            and len(loc) >= 3
            and loc[:2] == ["body", "series"]
            and isinstance(loc[2], int)
            and 0 <= loc[2] < len(series)
        ):
            return None
        index = loc[2]
        if len(loc) >= 5 and loc[3] in _COLUMNS and isinstance(loc[4], int):
            points = named.setdefault(index, set())
            if points is not None:
                points.add(loc[4])
        else:
            named[index] = None
    kept: list[dict[str, Any]] = []
    refused: Refused = []
    for index, column in enumerate(series):
        points = named.get(index, set())
        steps = column["steps"]
        if points is None:
            refused += [(column["key"], step) for step in steps]
            continue
        if not points:
            kept.append(column)
            continue
        refused += [(column["key"], steps[j]) for j in sorted(points) if j < len(steps)]
        keep = [j for j in range(len(steps)) if j not in points]
        if keep:
            kept.append({**column, **{c: [column[c][j] for j in keep] for c in _COLUMNS if c in column}})
    return kept, refused
