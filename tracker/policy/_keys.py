"""The names a rule reads a companion series under: a learning rate, a validation or a training loss.

Trainers spell the same series differently: Keras logs the training loss as ``loss`` and the validation
loss as ``val_loss``, the Transformers trainer ``loss`` and ``eval_loss``, Lightning whatever
``self.log`` was given (``val_loss``, ``val/loss``), a hand-written loop anything. A key parameter
(``lr_key``, ``loss_key``, ``train_key``) therefore takes one name or a list of names for the same
series; at each evaluation the rule reads the first of them the run has logged. Plateau's default policy
lists the common spellings, so a loop written as Keras, Transformers or the README writes it gets the
same judgement without naming its keys.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import Field, StringConstraints

_NAMESPACE_SPLIT = re.compile(r"[/._\-]")
# A training set's namespace, in the spellings loops give it.
_TRAINING = frozenset({"train", "training", "trn", "tr"})


def namespace(key: str) -> str:
    """``key``'s first word, lower-cased: ``val`` for ``val/acc``, ``val_loss`` and ``Val.acc``."""
    return _NAMESPACE_SPLIT.split(key.lower(), maxsplit=1)[0]


def in_training_namespace(key: str) -> bool:
    """Whether ``key``'s first word names the training set (``train/loss``, ``training_acc``,
    ``trn-auc``): no validation series is read or expected under such a name."""
    return namespace(key) in _TRAINING


MetricName = Annotated[str, StringConstraints(min_length=1, max_length=250)]
"""One metric key (the bounds of a logged key's name)."""

MetricNames = MetricName | Annotated[tuple[MetricName, ...], Field(min_length=1, max_length=16)]
"""One metric key, or up to 16 names of the same series in order of preference (a JSON list)."""


class Names:
    """The names a key parameter gives, in order of preference (none when the parameter is off)."""

    __slots__ = ("_any", "_first", "order")

    def __init__(self, given: MetricNames | None) -> None:
        self.order: tuple[str, ...] = () if given is None else (given,) if isinstance(given, str) else given
        self._any = frozenset(self.order)
        self._first = self.order[0] if self.order else ""

    @staticmethod
    @functools.lru_cache(maxsize=1024)  # bounded: policies come from clients, with any names
    def of(given: MetricNames | None) -> Names:
        """The :class:`Names` for a parameter's value, built once rather than at every evaluation (a rule's
        parameters are immutable, and the same spellings recur across rules and runs)."""
        return Names(given)

    def __bool__(self) -> bool:
        return bool(self.order)

    def read(self, extras: Mapping[str, float]) -> float | None:
        """The value of the first of the names the run has logged (in ``extras``), or None."""
        # The first name is the common spelling (lr, val_loss): asked first, it ends most reads. Otherwise
        # most evaluations carry none of the names: a disjointness test walks the smaller side.
        value = extras.get(self._first)
        if value is not None:
            return value
        if self._any.isdisjoint(extras):
            return None
        for name in self.order:
            value = extras.get(name)
            if value is not None:
                return value
        return None

    def read_name(self, extras: Mapping[str, float]) -> str:
        """The name :meth:`read` reads from, for a decision's sentence and evidence; the first name when
        none is logged."""
        return next((name for name in self.order if name in extras), self.order[0])
