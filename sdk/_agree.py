"""Agreement across the ranks of a torch.distributed job: one tiny all-reduce (MAX) per question.

Imported only when torch.distributed is already initialised by the user; it never imports torch itself
at module import time.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any


def _dist() -> Any | None:
    """The initialised ``torch.distributed`` module with more than one rank, or None (no torch import)."""
    module = sys.modules.get("torch.distributed")
    if module is None or not module.is_available() or not module.is_initialized():
        return None
    return module if module.get_world_size() > 1 else None


def detect_rank_world() -> tuple[int, int]:
    """(rank, world size) from torch.distributed when initialised, else RANK/WORLD_SIZE, else (0, 1)."""
    dist = _dist()
    if dist is not None:
        return int(dist.get_rank()), int(dist.get_world_size())
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)


def shared_run_key(world_size: int) -> str:
    """A run key every rank of the job agrees on.

    ``PLATEAU_RUN_KEY``, else torchrun's ``TORCHELASTIC_RUN_ID``, else (under torch.distributed) rank 0's
    fresh key broadcast to the others, which is a collective: every rank calls ``plateau_tracker.init``
    together.
    """
    for name in ("PLATEAU_RUN_KEY", "TORCHELASTIC_RUN_ID"):
        value = os.environ.get(name)
        if value and value != "none" and (name == "PLATEAU_RUN_KEY" or world_size > 1):
            return value
    dist = _dist()
    if dist is not None:
        holder = [uuid.uuid4().hex]
        dist.broadcast_object_list(holder, src=0)
        return str(holder[0])
    return uuid.uuid4().hex


class Agreement:
    """All-reduces small integers (MAX) over the default process group; blocking or deferred by a step."""

    def __init__(self, dist: Any) -> None:
        import torch

        self._torch = torch
        self._dist = dist
        backend = str(dist.get_backend())
        self._device = (
            torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        )
        self._pending: dict[str, tuple[Any, Any]] = {}

    def max(self, name: str, value: int, *, deferred: bool) -> int:
        """The maximum of ``value`` over ranks. Deferred: start this reduction, return the previous one's
        (0 the first time), so the loop never waits on it."""
        tensor = self._torch.tensor([value], dtype=self._torch.int64, device=self._device)
        if not deferred:
            self._dist.all_reduce(tensor, op=self._dist.ReduceOp.MAX)
            return int(tensor.item())
        previous = self._pending.pop(name, None)
        result = 0
        if previous is not None:
            work, earlier = previous
            work.wait()
            result = int(earlier.item())
        work = self._dist.all_reduce(tensor, op=self._dist.ReduceOp.MAX, async_op=True)
        self._pending[name] = (work, tensor)
        return result


def agreement() -> Agreement | None:
    dist = _dist()
    return Agreement(dist) if dist is not None else None
