"""The rule interface: a pure function of (parameters, state, observation) -> (state, verdict)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from tracker.policy._types import Mode, Observation, Verdict


class RuleParams(BaseModel):
    """Parameters of one rule in a policy. Subclasses add ``rule: Literal[name]`` and their fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


P = TypeVar("P", bound=RuleParams)
State = dict[str, Any]


class Rule(ABC, Generic[P]):
    """A convergence rule. Instances hold only validated parameters; all memory is in ``state``.

    ``state`` is a small JSON-serialisable dict, bounded in size whatever the run's length, so the tracker
    can store it in the same transaction as the points that moved it.
    """

    name: ClassVar[str]

    def __init__(self, params: P, *, monitor: str, mode: Mode) -> None:
        self.params = params
        self.monitor = monitor
        self.mode = mode

    @abstractmethod
    def initial_state(self) -> State:
        """The state before the first observation."""

    @abstractmethod
    def observe(self, state: State, obs: Observation) -> tuple[State, Verdict | None]:
        """Judge one observation. Must not mutate ``state``; returns the new state and a verdict or None."""
