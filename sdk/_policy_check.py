"""The policy's shape checked in the training process, before training, with the tracker away or not.

A typo (``patiance``) used to be caught by nobody until ``plateau sync`` met a 422, hours after a run
trained unjudged. ``policy_shape.json`` is the tracker's own schema of rule names, parameters, types and
bounds (written by ``python -m plateau_tracker.server.policy.shape``; a test keeps the two equal). The check
refuses only what the tracker refuses: where a value might pass the tracker's lax parsing (``"5"`` for an
int), it passes here, and checks across fields stay the tracker's.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

_TRUTHY = {"0", "1", "true", "false", "yes", "no", "on", "off", "t", "f", "y", "n"}


@functools.cache
def _shape() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        resources.files("plateau_tracker").joinpath("policy_shape.json").read_text()
    )
    return loaded


def default_rules() -> list[dict[str, Any]]:
    """The rules of the tracker's default policy, as it wrote them into ``policy_shape.json``."""
    rules: list[dict[str, Any]] = _shape()["default_rules"]
    return rules


def preset_rules(name: str) -> list[dict[str, Any]]:
    """The rules of the tracker's preset ``name`` (``default``, ``default-sweep``, ``median``,
    ``patience-K``), as it wrote them into ``policy_shape.json``; ``ValueError`` naming the presets."""
    presets: dict[str, list[dict[str, Any]]] = _shape()["preset_rules"]
    if name in presets and name != "patience-K":
        return [dict(rule) for rule in presets[name]]
    prefix, _, count = name.partition("-")
    if prefix == "patience" and count.isdigit() and int(count) > 0:
        return [
            {**rule, "patience": int(count)} if rule.get("patience") == "K" else dict(rule)
            for rule in presets["patience-K"]
        ]
    raise ValueError(f"unknown preset {name!r}; presets: {', '.join(sorted(presets))}")


def check_policy(policy: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming every field of ``policy`` the tracker would refuse by its shape."""
    problems = _problems(policy)
    if problems:
        raise ValueError("invalid policy: " + "; ".join(problems))


def _problems(policy: Mapping[str, Any]) -> list[str]:
    shape = _shape()
    problems = _object_problems("policy", policy, shape["policy"], skip=("rules",))
    if "rules" not in policy:
        return problems
    rules = policy["rules"]
    if not isinstance(rules, Sequence) or isinstance(rules, (str, bytes)):
        return [*problems, f"rules must be a list of rules, got {type(rules).__name__}"]
    if len(rules) < shape["min_rules"]:
        problems.append(
            "rules is an empty list, so nothing would be judged: leave rules out for the default policy, "
            "or name at least one rule"
        )
    if shape["max_rules"] is not None and len(rules) > shape["max_rules"]:
        problems.append(f"rules holds {len(rules)} rules, at most {shape['max_rules']} are allowed")
    for index, rule in enumerate(rules):
        where = f"rules[{index}]"
        if not isinstance(rule, Mapping):
            kind = type(rule).__name__
            problems.append(f"{where} must be a mapping like {{'rule': 'patience'}}, got {kind}")
            continue
        name = rule.get("rule")
        known = shape["rules"]
        if name not in known:
            hint = _did_you_mean(name, known) if isinstance(name, str) else ""
            problems.append(f"{where}: unknown rule {name!r}{hint}; rules are {', '.join(sorted(known))}")
            continue
        problems += _object_problems(f"{where} ({name})", rule, known[name])
    return problems


def _object_problems(
    where: str, values: Mapping[str, Any], shape: dict[str, Any], skip: tuple[str, ...] = ()
) -> list[str]:
    fields: dict[str, list[dict[str, Any]]] = shape["fields"]
    aliases: dict[str, str] = shape.get("aliases", {})  # a renamed parameter's old name -> its field
    problems = []
    for given, value in values.items():
        if given in skip:
            continue
        name = aliases.get(given, given)
        if name != given and name in values:
            problems.append(f"{where} names {name!r} twice: as {name!r} and by its old name {given!r}")
        elif name not in fields:
            hint = _did_you_mean(name, fields) if isinstance(name, str) else ""
            allowed = ", ".join(sorted(set(fields) - {"rule"}))
            problems.append(f"{where} has no parameter {name!r}{hint}; it takes {allowed}")
        elif not any(_fits(value, option) for option in fields[name]):
            problems.append(f"{where}: {given} = {value!r} is not {_describe(fields[name])}")
    for name in shape["required"]:
        if name not in values:
            problems.append(f"{where}: {name} is required")
    return problems


def _did_you_mean(name: str, known: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _number(value: Any, integer: bool) -> float | None:
    """The number pydantic's lax mode would read from ``value``, or None when it reads none."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    if integer and math.isfinite(number) and not number.is_integer():
        return None
    return number


def _fits(value: Any, option: dict[str, Any]) -> bool:
    kind = option.get("type")
    if "const" in option and value != option["const"]:
        return False
    if "enum" in option and value not in option["enum"]:
        return False
    if kind == "null":
        return value is None
    if kind == "string":
        if not isinstance(value, str):
            return False
        return bool(option.get("minLength", 0) <= len(value) <= option.get("maxLength", len(value)))
    if kind == "boolean":
        return isinstance(value, (bool, int)) or (isinstance(value, str) and value.lower() in _TRUTHY)
    if kind in ("integer", "number"):
        number = _number(value, integer=kind == "integer")
        if number is None:
            return False
        if not math.isfinite(number):
            return True  # the tracker decides (it refuses inf and NaN where they make no sense)
        return bool(
            number >= option.get("minimum", -math.inf)
            and number <= option.get("maximum", math.inf)
            and number > option.get("exclusiveMinimum", -math.inf)
            and number < option.get("exclusiveMaximum", math.inf)
        )
    if kind == "array":  # a list of names (a key parameter); the items are the tracker's to check
        if not isinstance(value, (list, tuple)):
            return False
        return bool(option.get("minItems", 0) <= len(value) <= option.get("maxItems", len(value)))
    return True  # a type this check does not know: the tracker decides


def _describe(options: list[dict[str, Any]]) -> str:
    parts = []
    for option in options:
        if "enum" in option:
            parts.append("one of " + ", ".join(repr(v) for v in option["enum"]))
            continue
        kinds = {"integer": "a whole number", "number": "a number", "boolean": "true or false"}
        text = {**kinds, "string": "a string", "array": "a list"}.get(
            option.get("type", ""), option.get("type", "a value")
        )
        bounds = []
        if "minimum" in option:
            bounds.append(f">= {option['minimum']}")
        if "exclusiveMinimum" in option:
            bounds.append(f"> {option['exclusiveMinimum']}")
        if "maximum" in option:
            bounds.append(f"<= {option['maximum']}")
        if "exclusiveMaximum" in option:
            bounds.append(f"< {option['exclusiveMaximum']}")
        if "minItems" in option:
            bounds.append(f"of at least {option['minItems']} items")
        if "maxItems" in option:
            bounds.append(f"of at most {option['maxItems']} items")
        parts.append(text + (" " + " and ".join(bounds) if bounds else ""))
    return " or ".join(parts)
