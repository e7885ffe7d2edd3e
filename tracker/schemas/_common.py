"""Shared schema pieces: the base model and a float that carries NaN and +-inf faithfully."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

# Exactly the documented spellings: a typo, or another language's spelling, is an error, not data.
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def parse_metric_value(value: Any) -> float:
    """A metric value from the wire as a float; ValueError for anything that is not a number."""
    # Numbers only, never booleans or numeric strings: a typo must not become data. NaN and +-inf come as
    # JSON's non-standard literals (Python's json writes them) or as the strings "NaN"/"Infinity"/"-Infinity".
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            raise ValueError(f"integer of {value.bit_length()} bits is beyond float64's range") from None
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    raise ValueError("must be a number, or one of the strings 'NaN', 'Infinity', '-Infinity'")


def _without_nul(text: str) -> str:
    # PostgreSQL's text cannot hold NUL, and no store can hold a lone surrogate (it has no UTF-8): refuse
    # both at the door (a 422 naming the field) on either store, rather than fail inside the transaction.
    if "\x00" in text:
        raise ValueError("must not contain the NUL character (\\x00)")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"must not contain a lone surrogate ({text[exc.start]!r}): it has no UTF-8"
            ) from None
    return text


Text = Annotated[str, AfterValidator(_without_nul)]
"""A string the stores can keep: no NUL character."""


MAX_JSON_DEPTH = 32
_INT64 = 2**63


def stored_json(value: Any, *, max_bytes: int) -> Any:
    """``value`` as a JSON field a client stores and others read back (config, summary): at most
    ``MAX_JSON_DEPTH`` levels and ``max_bytes`` as JSON, integers within int64, strings the stores can
    keep; NaN and +-inf spelled as the strings "NaN", "Infinity", "-Infinity", as everywhere in the API.

    A value nested 300 levels deep was once accepted, and then every read of the run failed (the
    serializer's depth limit): what is stored must be readable by everyone, so it is bounded here.
    """
    safe = _checked(value, "", 0)
    size = len(json.dumps(safe, allow_nan=False, ensure_ascii=False).encode())
    if size > max_bytes:
        raise ValueError(f"is {size} bytes as JSON; at most {max_bytes} are kept")
    return safe


def _checked(value: Any, path: str, depth: int) -> Any:
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"is nested more than {MAX_JSON_DEPTH} levels deep (at {path or 'the top'})")
    if isinstance(value, dict):
        return {_checked_text(k, path): _checked(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_checked(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, str):
        return _checked_text(value, path)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError(f"holds an integer beyond int64 at {path or 'the top'}")
        return value
    if isinstance(value, float):
        return json_safe(value)
    raise ValueError(f"holds a {type(value).__name__} at {path or 'the top'}, which JSON cannot carry")


def _checked_text(text: str, path: str) -> str:
    try:
        return _without_nul(text)
    except ValueError as exc:
        raise ValueError(f"{exc} (at {path or 'the top'})") from None


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
