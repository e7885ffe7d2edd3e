"""The shape of a policy (rule names, their parameters, types and bounds) as the SDK carries it.

The SDK imports nothing from the tracker, yet a policy typo made while the tracker is away (``patiance``)
must be caught before training, not by ``plateau sync`` hours later. So the SDK ships
``sdk/policy_shape.json``, written by ``python -m plateau_tracker.server.policy.shape`` from the tracker's own
pydantic models; ``tests/test_policy_shape.py`` fails when the file and the models differ.

The shape holds what the models' JSON Schema says of each field: allowed types, ``enum``/``const``,
numeric bounds, string lengths, which fields are required, and the old names a field still accepts
(``aliases``: old name -> field). Checks across fields (``prechelt`` needs
mode ``min``, ``mann_kendall`` a window of at most 200) stay the tracker's: the SDK refuses less, never
more.
"""

from __future__ import annotations

import json
import sys
from typing import Any, get_args

from pydantic import AliasChoices, BaseModel

from plateau_tracker.server.policy._policy import PolicySpec
from plateau_tracker.server.policy._registry import RuleSpec
from plateau_tracker.server.policy.presets import (
    DEFAULT_RULES,
    DEFAULT_SWEEP_RULES,
    MEDIAN_RULES,
    patience_rules,
)

_KEPT = (
    *("type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
    *("minLength", "maxLength", "minItems", "maxItems"),
)


def _alternatives(field: dict[str, Any]) -> list[dict[str, Any]]:
    options = field.get("anyOf", [field])
    return [{key: option[key] for key in _KEPT if key in option} for option in options]


def _object(schema: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "fields": {
            name: _alternatives(field) for name, field in schema["properties"].items() if name not in skip
        },
        "required": sorted(set(schema.get("required", ())) - set(skip)),
    }


def _aliases(model: type[BaseModel]) -> dict[str, str]:
    """The other names each field of ``model`` accepts (a renamed parameter's old spelling)."""
    aliases: dict[str, str] = {}
    for name, field in model.model_fields.items():
        if isinstance(field.validation_alias, AliasChoices):
            for choice in field.validation_alias.choices:
                if isinstance(choice, str) and choice != name:
                    aliases[choice] = name
    return aliases


def _rule_models() -> dict[str, type[BaseModel]]:
    """Each rule's parameter model, by rule name."""
    union = get_args(get_args(RuleSpec)[0])
    return {model.model_fields["rule"].default: model for model in union}


def policy_shape() -> dict[str, Any]:
    """The policy's shape, as ``sdk/policy_shape.json`` holds it."""
    schema = PolicySpec.model_json_schema()
    definitions = schema["$defs"]
    mapping = schema["properties"]["rules"]["items"]["discriminator"]["mapping"]
    rules = {name: _object(definitions[ref.rsplit("/", 1)[1]]) for name, ref in sorted(mapping.items())}
    for name, model in _rule_models().items():
        aliases = _aliases(model)
        if aliases:
            rules[name]["aliases"] = aliases
    return {
        "policy": _object(schema, skip=("rules",)),
        "max_rules": schema["properties"]["rules"].get("maxItems"),
        "min_rules": 1,  # a new run's empty list is refused (tracker/schemas/runs.py)
        "rules": rules,
        # What a run that names no rules is judged by: the SDK judges its local part while the tracker is
        # away (plateau_tracker._local_judge).
        "default_rules": DEFAULT_RULES,
        # The presets' rules, so the SDK's integrations can ask for one by name (``patience-K``: ``"K"``
        # stands for the number given).
        "preset_rules": {
            "default": DEFAULT_RULES,
            "default-sweep": DEFAULT_SWEEP_RULES,
            "median": MEDIAN_RULES,
            "patience-K": [
                {**rule, "patience": "K"} if rule["rule"] == "patience" else rule
                for rule in patience_rules(1)
            ],
        },
    }


def render() -> str:
    return json.dumps(policy_shape(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
