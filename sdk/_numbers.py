"""The API's floats: JSON numbers, or the strings ``NaN``, ``Infinity`` and ``-Infinity`` (JSON has no
literal for them). Decoded here, once, for every caller of the API."""

from __future__ import annotations

import math
from typing import Any

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def number(value: Any) -> float | None:
    """An API float as a Python float (None stays None; an unknown string is NaN)."""
    if value is None:
        return None
    if isinstance(value, str):
        return NON_FINITE.get(value, math.nan)
    return float(value)
