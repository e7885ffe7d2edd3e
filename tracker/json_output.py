"""``--json``: what a command reports, as one JSON document on standard output, for scripts and ``jq``.

Floats that JSON cannot hold are written as the API writes them (``"NaN"``, ``"Infinity"``,
``"-Infinity"``), so the document parses anywhere; dataclasses become objects, paths and times strings.
"""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` with every part JSON can write."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: jsonable(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Path | datetime):
        return str(value) if isinstance(value, Path) else value.isoformat()
    return value


def print_json(value: Any) -> None:
    """Print ``value`` as one indented JSON document (strict JSON: no NaN literals)."""
    print(json.dumps(jsonable(value), indent=2, allow_nan=False))
