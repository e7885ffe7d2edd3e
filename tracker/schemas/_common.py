"""Shared schema pieces: the base model and a float that carries NaN and +-inf faithfully."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

_NON_FINITE = {
    "nan": math.nan,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-infinity": -math.inf,
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
}


def parse_metric_value(value: Any) -> float:
    """A metric value from the wire as a float; ValueError for anything that is not a number."""
    # Numbers only, never booleans or numeric strings: a typo must not become data. NaN and +-inf come as
    # JSON's non-standard literals (Python's json writes them) or as the strings "NaN"/"Infinity"/"-Infinity".
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in _NON_FINITE:
        return _NON_FINITE[value.strip().lower()]
    raise ValueError("must be a number, or one of the strings 'NaN', 'Infinity', '-Infinity'")


def _without_nul(text: str) -> str:
    # PostgreSQL's text cannot hold NUL: refuse it at the door (a 422 naming the field) on either store,
    # rather than fail inside the transaction.
    if "\x00" in text:
        raise ValueError("must not contain the NUL character (\\x00)")
    return text


Text = Annotated[str, AfterValidator(_without_nul)]
"""A string the stores can keep: no NUL character."""


MetricValue = Annotated[float, BeforeValidator(parse_metric_value)]
"""A float from the wire: a JSON number, or NaN/Infinity/-Infinity. Serialised with the same strings."""


class Schema(BaseModel):
    """Base of every API schema: unknown fields are errors, and NaN/inf are written as strings."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored moment is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats spelled as strings, so JSON columns (JSONB refuses NaN) take it."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
