"""What the tracker has decided for a run, as this process has heard it, and the bounded wait for its
verdict on the monitored step the loop logged last.

Answers arrive on the sender's thread (``on_answer``, under the sender's ``progress`` condition); the
training loop reads them (``await_verdict``, ``stop``, ``checkpoint``). A verdict later than
``decision_timeout`` is said once, and the loop then goes unblocked until the tracker has caught up (for
twice as many calls after each further timeout).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from plateau_tracker._decision import CONTINUE, Answer, Decision
from plateau_tracker._sender import Sender
from plateau_tracker._transport import RejectedError, RetryableError, Transport

logger = logging.getLogger("plateau")

# Alerts the training process is told about as a warning (once each): the policy cannot work as asked
# (no monitored metric), saw monitored steps out of order (judged late, by fewer rules), saw them pass
# the run's planned end (judged from there as a run with no plan), got a key its rules read (a rate, a
# loss) after the step it belongs to was judged, got such a key in another step unit than the monitor, or
# judges the run later than it could because it logs neither a rate nor a validation loss (blind).
_WARNED_ALERTS = frozenset(
    {"missing_monitor", "late", "plan_passed", "companion_late", "companion_steps", "blind"}
)


class Verdicts:
    """The run's decisions as received: the newest, the first stop, the newest checkpoint; and how far the
    tracker has judged the monitored metric."""

    def __init__(self, transport: Transport, *, rank: int, decision_timeout: float) -> None:
        self._transport = transport
        self._rank = rank
        self.decision_timeout = decision_timeout
        self.latest: Decision = CONTINUE
        self.stop: Decision | None = None
        self.checkpoint: Decision | None = None
        # The newest step of the monitored metric the tracker judged, and the newest step of this process's
        # own that it answered for (judged or not: a reduced step waits for ranks).
        self.judged = -1
        self._answered = -1
        # After a verdict came later than decision_timeout: the step it was for, how many timeouts so far,
        # and how many calls go unblocked before the next wait.
        self._slow_step: int | None = None
        self._timeouts = 0
        self._unblocked_calls = 0
        self.warned: set[str] = set()  # topics said once: alerts, "slow"
        # Under torch.distributed the ranks agree on rank 0's answer through a collective, and only rank 0
        # waits; without one, every rank waits for its own step's verdict, or it would run ahead of them.
        self.agreed = False
        self._lock = threading.Lock()

    # --- from the sender's thread --------------------------------------------------------------------

    def on_created(self, created: dict[str, Any]) -> None:
        """The tracker created or joined the run: its body may carry the latest decision already."""
        decision = created.get("decision")
        if isinstance(decision, dict):
            self.record(Decision.from_json(decision))
        judged = created.get("judged_step")
        if isinstance(judged, int):
            self.judged = max(self.judged, judged)

    def on_answer(self, answer: Answer, monitor_step: int | None) -> None:
        """The tracker's answer to a batch that carried the monitored metric up to ``monitor_step``."""
        for decision in (*answer.decisions, answer.decision):
            self.record(decision)
        if answer.judged_step is not None and answer.judged_step > self.judged:
            self.judged = answer.judged_step
        if monitor_step is not None and monitor_step > self._answered:
            self._answered = monitor_step

    def record(self, decision: Decision) -> None:
        """Keep ``decision``: alerts are said once, stops and checkpoints are kept for the loop."""
        if decision.action == "alert":
            if decision.rule in _WARNED_ALERTS and decision.rule not in self.warned:
                self.warned.add(decision.rule)
                logger.warning("plateau: %s", decision.reason)
            return
        with self._lock:
            if decision.seq >= self.latest.seq:
                self.latest = decision
            if decision.stop and self.stop is None:
                self.stop = decision
            elif decision.checkpoint and (self.checkpoint is None or decision.seq > self.checkpoint.seq):
                self.checkpoint = decision

    # --- from the training loop ----------------------------------------------------------------------

    def await_verdict(self, sender: Sender) -> int | None:
        """Wait, boundedly, for the tracker's verdict on the monitored step this process logged last.
        Returns that step once its verdict is known (answers are exact), else None (they come from
        memory). Under an agreement across ranks only rank 0 waits. Never raises."""
        sender.step_complete()  # the loop asks: what it logged at the step goes with it, now
        target = sender.monitor_step
        if target is None or (self._rank != 0 and self.agreed):
            return None
        try:
            if target <= self.judged:  # known already: the common call, a read of two ints
                return target
            if not sender.waitable or not self._may_wait():
                return None
            return self._wait_for(sender, target, time.monotonic() + self.decision_timeout)
        except Exception:  # a bad step type from the user, a bug: the loop must go on
            logger.warning("plateau: could not wait for the verdict on step %r", target, exc_info=True)
            return None

    def _may_wait(self) -> bool:
        if self._slow_step is None:
            return True
        if self._unblocked_calls > 0:
            self._unblocked_calls -= 1
            return False
        if self.judged >= self._slow_step:  # the tracker has caught up: exact again
            self._slow_step = None
            return True
        return False

    def _wait_for(self, sender: Sender, target: int, deadline: float) -> int | None:
        with sender.progress:
            while self.judged < target and self._answered < target:
                remaining = deadline - time.monotonic()
                if not sender.waitable:
                    return None
                if remaining <= 0:
                    self._too_slow(target)
                    return None
                sender.progress.wait(remaining)
        if self.judged >= target:
            return target
        # The tracker took the point but has not judged it (a reduced metric waits for every rank, or
        # after the reduce timeout): ask for that step's verdict, long-polling for the rest of the bound.
        run_id = sender.run_id
        if run_id is None:
            return None
        try:
            decision = self._transport.get_decision(
                run_id, step=target, wait=max(0.0, deadline - time.monotonic())
            )
            if not decision.judged:
                self._too_slow(target)
                return None
            self.record(decision)
            if decision.stop and decision.step == target:  # a checkpoint at the same step hides behind it
                for made in self._transport.decisions_at(run_id, target):
                    self.record(made)
        except (RetryableError, RejectedError) as exc:
            logger.warning("plateau: could not get the verdict on step %d: %s", target, exc)
            return None
        self.judged = max(self.judged, target)
        return target

    def _too_slow(self, target: int) -> None:
        self._timeouts += 1
        self._slow_step = target
        self._unblocked_calls = 2 ** min(self._timeouts - 1, 10) - 1
        if "slow" not in self.warned:
            self.warned.add("slow")
            logger.warning(
                "plateau: the tracker's verdict on step %d did not come within %.1fs (decision_timeout); "
                "should_stop()/should_checkpoint() answer from what has arrived until it keeps pace again",
                target,
                self.decision_timeout,
            )

    @property
    def shown(self) -> Decision:
        """The decision the run shows: the stop once there is one, else the newest."""
        return self.stop or self.latest

    def unjudged(self) -> Decision:
        """The decision to show when the verdict asked for could not be had: :attr:`shown`, not judged."""
        return Decision(**{**self.shown.__dict__, "judged": False})
