"""A policy whose monitored metric never arrives (``monitor="val/acc"`` while the loop logs
``val/accuracy``): the run would get "no decision yet" forever. This says so, as an ``alert``.

Lightning raises at the first validation without the monitor; Hugging Face warns at the first evaluation.
The tracker sees no validation, only keys, so "an evaluation happened" is read from the keys themselves:
a key *like* the monitor (the same namespace, ``val/...``, or a close name, ``val_acc``) has arrived at
``STEPS_BEFORE_ALERT`` steps and the monitor at none. Keys of the training namespace never count: a loop
that logs ``train/loss`` every step and ``val/loss`` every 1,000 is not missing anything at step 3.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable

from plateau_tracker.server.policy._keys import in_training_namespace, namespace
from plateau_tracker.server.policy._types import Verdict

RULE = "missing_monitor"
STEPS_BEFORE_ALERT = 3
_SIMILAR = 0.6  # difflib's ratio from which two key names read as the same metric misspelt


@functools.lru_cache(maxsize=4096)
def is_like_monitor(monitor: str, key: str) -> bool:
    """Whether ``key`` is logged when the monitor would be: its namespace, or a close name; never a key
    of the training namespace."""
    if key == monitor or in_training_namespace(key):
        return False
    if "/" in monitor and namespace(key) == namespace(monitor):
        return True
    return difflib.SequenceMatcher(None, monitor.lower(), key.lower()).ratio() >= _SIMILAR


def closest_first(monitor: str, keys: Iterable[str]) -> list[str]:
    """``keys`` ordered by how close their names are to ``monitor`` (closest first, then by name)."""
    return sorted(
        set(keys),
        key=lambda k: (-difflib.SequenceMatcher(None, monitor.lower(), k.lower()).ratio(), k),
    )


def missing_monitor_alert(monitor: str, logged: Iterable[str], like: str, steps: int, step: int) -> Verdict:
    """The alert: the monitored key, the keys the run did log (closest names first), and the key like
    the monitor that arrived at ``steps`` steps without it."""
    keys = closest_first(monitor, logged)
    shown = ", ".join(keys[:10]) + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")
    return Verdict(
        action="alert",
        rule=RULE,
        step=step,
        reason=(
            f"monitor {monitor!r} has not arrived, while {like!r} has, at {steps} steps: nothing is judged "
            f"until it does (the run logged: {shown}). Is the monitor misspelt?"
        ),
        evidence={"monitor": monitor, "logged_keys": keys, "like_monitor": like, "steps": steps},
    )
