"""The verdicts the SDK can reach alone while the tracker is away, so the loop keeps its best model and
stops where it should whatever the tracker does.

It judges what needs only the run's own monitored values, with the tracker's own definitions: the
improvement test and the best so far (:mod:`plateau_tracker._improvement`, which the tracker's policy engine
runs too) behind ``checkpoint`` and ``patience``, and the guards ``non_finite`` and ``threshold``. A rule that
needs more (a plan, a learning rate, another metric, the experiment's other runs, a moving average) waits
for the tracker, and is named once. Pure: no I/O, no clock, no thread.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plateau_tracker._decision import Decision
from plateau_tracker._improvement import Best, ImprovementTest
from plateau_tracker._policy_check import default_rules
from plateau_tracker._types import Mode

logger = logging.getLogger("plateau")

LOCAL_RULES = frozenset({"checkpoint", "patience", "non_finite", "threshold"})
"""The rules the SDK judges alone: each reads the monitored value and the best so far, nothing else."""

_GUARDS = frozenset({"non_finite", "threshold"})  # they stop on their own under combine "all" too


@dataclass(frozen=True)
class LocalVerdict:
    """A verdict the SDK reached alone: ``action`` ``checkpoint`` or ``stop`` at ``step``, by ``rule``."""

    action: str
    step: int
    rule: str
    best_step: int | None
    best_value: float | None
    reason: str


def _test(rule: Mapping[str, Any], mode: Mode) -> ImprovementTest:
    """The improvement test a rule's parameters describe, as the tracker reads them."""
    return ImprovementTest(
        mode,
        float(rule.get("min_delta", 0.0)),
        bool(rule.get("relative", False)),
        rule.get("ties", "wait"),
        from_step=int(rule.get("warmup", 0)),
    )


class LocalJudge:
    """Judges the monitored values of one run, in step order, by the rules of its policy it can judge.

    ``observe`` takes every monitored value the loop logs (tracker up or not, so its best is right when the
    tracker goes away); ``checkpoint`` and ``stop`` answer for the step observed last."""

    def __init__(
        self, monitor: str, mode: Mode, rules: Sequence[Mapping[str, Any]], combine: str = "any"
    ) -> None:
        self.monitor = monitor
        self.mode = mode
        self._bests: dict[ImprovementTest, Best] = {}
        self._checkpoints: list[Best] = []
        # The rules that stop, in the policy's order (the tracker reports the first that stops): (name, the
        # best its stop names, patience or None, warmup, stop_at or None).
        self._stoppers: list[tuple[str, Best, int | None, int, float | None]] = []
        self._waits: list[int] = []
        self.waiting: list[str] = []  # rules only the tracker judges
        plain = self._best(ImprovementTest(mode))  # the best a guard's stop names, as the tracker's guards do
        for rule in rules:
            name = str(rule.get("rule"))
            local = name in LOCAL_RULES and rule.get("ema") is None
            if local and combine == "all" and name not in _GUARDS:
                local = name == "checkpoint"  # a convergence rule stops only with the others' votes
            warmup = int(rule.get("warmup", 0))
            if not local:
                self.waiting.append(name)
            elif name == "checkpoint":
                self._checkpoints.append(self._best(_test(rule, mode)))
            elif name == "patience":
                best = self._best(_test(rule, mode))
                self._stoppers.append((name, best, int(rule.get("patience", 5)), warmup, None))
            elif name == "threshold":
                self._stoppers.append((name, plain, None, warmup, float(rule["stop_at"])))
            else:
                self._stoppers.append((name, plain, None, 0, None))
        self._waits = [0] * len(self._stoppers)
        self.step: int | None = None
        self.checkpointed = False  # a checkpoint rule's best moved at ``step``
        self.stopped: LocalVerdict | None = None

    def _best(self, test: ImprovementTest) -> Best:
        best = self._bests.get(test)
        if best is None:
            best = self._bests[test] = Best(test)
        return best

    @property
    def judges(self) -> bool:
        """Whether any rule of the policy is judged here."""
        return bool(self._checkpoints or self._stoppers)

    def observe(self, step: int, value: float) -> None:
        """Judge the monitored ``value`` at ``step``, as the tracker's engine would, in step order (a step
        at or before the last one observed is ignored, as the engine judges each step once)."""
        if self.step is not None and step <= self.step:
            return
        self.step = step
        for best in self._bests.values():
            best.see(value, step)
        self.checkpointed = any(best.improved for best in self._checkpoints)
        if self.stopped is None:
            self.stopped = self._stop(step, value)

    def _stop(self, step: int, value: float) -> LocalVerdict | None:
        """The first of the policy's stopping rules that stops at ``step``, as the tracker's engine asks
        them: every rule counts this observation, in the policy's order."""
        stop: LocalVerdict | None = None
        for index, (name, best, patience, warmup, stop_at) in enumerate(self._stoppers):
            if name == "non_finite":
                said = None if math.isfinite(value) else f"{self.monitor} is {value} at step {step}"
            elif step < warmup:
                continue
            elif name == "threshold":
                assert stop_at is not None
                reached = value >= stop_at if self.mode == "max" else value <= stop_at
                said = f"{self.monitor} reached its target {stop_at:g}" if reached else None
            else:
                assert patience is not None
                self._waits[index] = 0 if best.improved else self._waits[index] + 1
                waited = self._waits[index] >= patience
                said = f"{self.monitor} has not improved for {patience} evaluations" if waited else None
            if said is not None and stop is None:
                stop = LocalVerdict("stop", step, name, best.step, best.value, said)
        return stop


class AwayVerdicts:
    """The local judge as the training loop reads it: it takes every monitored value the loop logged, and
    answers for the step logged last when the tracker has not judged it (away, or slower than the bound),
    once per checkpoint; a stop it reached stays. Said once, naming the rules that wait for the tracker."""

    def __init__(self, judge: LocalJudge) -> None:
        self.judge = judge
        self._saved_step: int | None = None
        self._said = False
        self.acted: Decision | None = None
        """The local stop the loop was told of: it stays, tracker or not."""

    @classmethod
    def for_policy(cls, policy: Mapping[str, Any] | None) -> AwayVerdicts | None:
        """For a run's policy (the tracker's default when it names no rules); None when nothing of it can
        be judged here: no policy, or one that judges a reduction over ranks, which no rank sees alone)."""
        if policy is None or policy.get("reduce", "rank0") != "rank0":
            return None
        rules = policy.get("rules")
        judge = LocalJudge(
            policy["monitor"],
            policy["mode"],
            default_rules() if rules is None else rules,
            str(policy.get("combine", "any")),
        )
        return cls(judge) if judge.judges else None

    def said_elsewhere(self) -> None:
        """The run has said why the tracker judges nothing (PLATEAU_DISABLED): no word of waiting for it."""
        self._said = True

    def catch_up(self, monitored: deque[tuple[int, Any]]) -> None:
        """Judge every monitored value logged since the last call (a value that is not a number is the
        tracker's to refuse, and is skipped here)."""
        while monitored:
            step, value = monitored.popleft()
            try:
                number = float(value)
            except Exception:
                continue
            self.judge.observe(step, number)

    def checkpoint(self, step: int | None) -> bool:
        """True, once, when ``step`` is the step judged last and moved a checkpoint rule's best."""
        judge = self.judge
        if step is None or judge.step != step or not judge.checkpointed or self._saved_step == step:
            return False
        self._say(step)
        self._saved_step = step
        return True

    def saved(self, step: int | None) -> None:
        """The loop saved at ``step`` on the tracker's verdict: not again on this one's."""
        self._saved_step = step

    def stop(self, step: int | None) -> Decision | None:
        """The local stop, once reached (at ``step`` or before), now told to the loop: it stays."""
        stopped = self.judge.stopped
        if self.acted is not None or stopped is None or step is None:
            return self.acted
        self._say(step)
        self.acted = Decision(
            seq=0,
            action="stop",
            step=stopped.step,
            best_step=stopped.best_step,
            best_value=stopped.best_value,
            rule=stopped.rule,
            reason=f"{stopped.reason}; judged by the SDK while the tracker was away",
            evidence={"judged_by": "sdk"},
        )
        return self.acted

    def _say(self, step: int) -> None:
        if self._said:
            return
        self._said = True
        waiting = sorted(set(self.judge.waiting))
        rest = (
            f"; {', '.join(waiting)} {'needs' if len(waiting) == 1 else 'need'} the tracker: "
            f"{'its' if len(waiting) == 1 else 'their'} stops will come once it is back"
            if waiting
            else ""
        )
        logger.warning(
            "plateau: the tracker has not judged step %d (away, or slower than decision_timeout); until it "
            "does, should_checkpoint() and should_stop() follow the SDK's own judgement of the rules it can "
            "judge alone%s",
            step,
            rest,
        )
