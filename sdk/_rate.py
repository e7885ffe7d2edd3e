"""The learning rate an optimizer's last step trained at, for the rules that read one beside the monitored
metric (Plateau's default: a run that logs no rate is judged later, as a schedule it cannot see may still
lift it).

A loop that logs ``optimizer.param_groups[0]["lr"]`` itself usually reads it after ``scheduler.step()``:
the next epoch's rate, one epoch early (a step decay is then seen an epoch before it happens). A hook run
after each ``optimizer.step()`` and before the scheduler's reads the rate that step trained at, as the
Lightning and Transformers callbacks read it.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

logger = logging.getLogger("plateau")


# The attributes optimizer wrappers keep the torch optimizer they step under: Accelerate's
# AcceleratedOptimizer ``optimizer``, Lightning's LightningOptimizer ``_optimizer``.
_WRAPPED = ("optimizer", "_optimizer")


def _stepped(optimizer: Any) -> Any:
    """The torch optimizer whose ``step()`` a wrapper calls, or ``optimizer`` itself. A wrapper that does not
    run ``torch.optim.Optimizer.__init__`` (Accelerate's) has no hooks of its own: registering one on it
    fails, and its ``step()`` would not run it; the optimizer it wraps runs its hooks at each real step
    (none on a gradient-accumulation step that skips it)."""
    for _ in range(4):  # wrappers of wrappers, bounded
        if hasattr(optimizer, "_optimizer_step_post_hooks"):  # initialised as a torch optimizer
            return optimizer
        inner = next((getattr(optimizer, name) for name in _WRAPPED if hasattr(optimizer, name)), None)
        if inner is None or inner is optimizer:
            return optimizer
        optimizer = inner
    return optimizer


class _Handle(Protocol):
    def remove(self) -> None: ...


class RateWatch:
    """The rate of the first parameter group at the optimizer's latest step (None before its first)."""

    __slots__ = ("_handle", "_rate", "key")

    def __init__(self, optimizer: Any, key: str) -> None:
        optimizer = _stepped(optimizer)
        register = getattr(optimizer, "register_step_post_hook", None)
        groups = getattr(optimizer, "param_groups", None)
        if not callable(register) or not groups or not isinstance(groups[0], dict) or "lr" not in groups[0]:
            raise TypeError(
                "watch_optimizer() takes a torch optimizer (torch.optim.Optimizer, torch >= 2.0: it needs "
                f"register_step_post_hook and param_groups with an 'lr'), not {type(optimizer).__name__}"
            )
        self.key = key
        self._rate: Any = None
        self._handle: _Handle = register(self._after_step)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # The step's own rate, kept as it is (a float, or a tensor for capturable optimizers: converted only
        # when the monitored metric is logged, so a GPU is not synchronised at every step).
        self._rate = optimizer.param_groups[0]["lr"]

    def value(self) -> float | None:
        """The rate the latest step trained at, as a float; None before the first step or if unreadable."""
        rate = self._rate
        if rate is None:
            return None
        try:
            return float(rate)
        except (TypeError, ValueError, RuntimeError):
            return None

    def remove(self) -> None:
        """Stop watching (the hook is taken off the optimizer)."""
        try:
            self._handle.remove()
        except Exception:  # an optimizer gone or torn down: nothing left to take off
            logger.debug("plateau: could not remove the optimizer hook", exc_info=True)
