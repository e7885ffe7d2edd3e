"""Distributed health for torch.distributed jobs: sync-wait, stragglers (needs the ``torch`` extra).

On rank r, for the c-th collective of a step, ``d[r,c]`` is the time from the rank's arrival at the
collective (at offset ``o[r,c]`` into the step) to its completion. The fastest rank to complete waited
least, so rank r spent ``w[r,c] = d[r,c] - min_j d[j,c]`` of it waiting, then ``min_j d[j,c]`` moving
data. Collectives overlap (DDP launches bucket all-reduces back to back, and they all wait for the same
straggler), so the figures are lengths of unions of intervals on the rank's own clock, never sums:

    sync_wait[r] = |union_c [o[r,c], o[r,c] + w[r,c]]|           time lost waiting for slower ranks
    comm[r]      = |union_c [o[r,c] + w[r,c], o[r,c] + d[r,c]]|  (about) the transfers themselves
    compute[r]   = step_time[r] - sync_wait[r]                    the step as this rank alone would take it
    rel_perf[r]  = min_j compute[j] / compute[r]                  1 for the fastest rank, < 1 for a straggler

DDP's own "communication time" is ``d[r,c]`` summed, wait included: it makes a straggler look fast and the
healthy ranks look communication-bound. Records are gathered every ``every`` steps (a step count, so every
rank reaches the same ``all_gather``) and rank 0 logs per-rank series (``dist/step_time_ms``,
``dist/compute_time_ms``, ``dist/sync_wait_ms``, ``dist/comm_ms``, ``dist/rel_perf``,
``dist/sync_wait_frac``) and per-step ones (``dist/skew_ms``, ``dist/slowest_rank``).

On NCCL, collectives are timed with CUDA events: host callbacks fire when work is enqueued, not done.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from plateau_tracker._run import Run

__all__ = ["StepTimer", "step_figures"]


class _Clock:
    """Wall time on CPU backends; CUDA events on NCCL (read when the step's records are gathered)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        if not self.cuda:
            return float(end - start)
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0


class StepTimer:
    """Times this rank's steps and collectives; every ``every`` steps gathers all ranks' records.

    Use ``with timer.step(step):`` around each training step, ``with timer.collective():`` around explicit
    collectives, and :meth:`wrap_ddp` to time a DDP model's gradient all-reduces. Every rank must use the
    timer the same way (the gather is a collective).
    """

    def __init__(
        self, run: Run, *, every: int = 10, max_collectives: int = 256, group: Any | None = None
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be a step count >= 1, got {every}")
        self.run = run
        self.every = every
        self.max_collectives = max_collectives
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._clock = _Clock(cuda=str(dist.get_backend(group)) == "nccl")
        self._records: list[tuple[int, float, list[tuple[float, float]]]] = []
        self._open: list[list[Any]] = []  # [start, end] marks of this step's collectives
        self._step_mark: Any = None
        self._sections: dict[str, float] = {}
        self.last_figures: list[dict[str, Any]] = []

    # --- timing --------------------------------------------------------------------------------------

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Time one training step; the gather runs on leaving every ``every``-th step."""
        self._open = []
        started = time.perf_counter()
        self._step_mark = self._clock.mark()
        yield
        if self._clock.cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
        spans = [
            (self._clock.seconds(self._step_mark, start), self._clock.seconds(start, end))
            for start, end in self._open
            if end is not None
        ]
        self._records.append((step, elapsed, spans))
        if len(self._records) >= self.every:
            self.flush()

    @contextmanager
    def collective(self) -> Iterator[None]:
        """Time an explicit collective (``dist.all_reduce(...)`` etc.) as one of the step's collectives."""
        marks = [self._clock.mark(), None]
        self._open.append(marks)
        yield
        marks[1] = self._clock.mark()

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Time a named part of the step (forward, data loading ...); logged as ``dist/section/<name>_ms``."""
        started = time.perf_counter()
        yield
        self._sections[name] = self._sections.get(name, 0.0) + time.perf_counter() - started

    def wrap_ddp(self, model: Any, hook: Callable[..., Any] | None = None, state: Any = None) -> None:
        """Register a communication hook on the DDP ``model`` that times each bucket's all-reduce and then
        runs ``hook`` (the user's own, with its ``state``) or DDP's default all-reduce."""
        if hook is None:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            hook = allreduce_hook
        timed = _TimedHook(self, hook, state)
        # DDP accepts a function or a bound method as the hook, not an arbitrary callable object.
        model.register_comm_hook(state=None, hook=timed.run)

    # --- gathering -----------------------------------------------------------------------------------

    def flush(self) -> list[dict[str, Any]]:
        """Gather the records since the last flush from every rank (a collective) and, on rank 0, log the
        figures. Returns the per-step figures (on every rank)."""
        records, self._records = self._records, []
        if not records:
            return []
        width = 3 + 2 * self.max_collectives
        local = torch.zeros((len(records), width), dtype=torch.float64)
        for i, (step, elapsed, spans) in enumerate(records):
            kept = spans[: self.max_collectives]
            local[i, 0], local[i, 1], local[i, 2] = step, elapsed, len(kept)
            if kept:
                local[i, 3 : 3 + 2 * len(kept)] = torch.tensor(kept, dtype=torch.float64).flatten()
        device = (
            torch.device("cuda", torch.cuda.current_device()) if self._clock.cuda else torch.device("cpu")
        )
        shared = local.to(device)
        gathered = [torch.zeros_like(shared) for _ in range(self.world_size)]
        dist.all_gather(gathered, shared, group=self.group)
        matrix = torch.stack([g.cpu() for g in gathered])  # (ranks, steps, width)
        figures = [step_figures(matrix[:, i, :]) for i in range(len(records))]
        self.last_figures = figures
        if self.rank == 0:
            self._log(figures)
        return figures

    def _log(self, figures: list[dict[str, Any]]) -> None:
        for fig in figures:
            step = int(fig["step"])
            for r in range(self.world_size):
                self.run.log(
                    {
                        "dist/step_time_ms": fig["step_time_ms"][r],
                        "dist/compute_time_ms": fig["compute_time_ms"][r],
                        "dist/sync_wait_ms": fig["sync_wait_ms"][r],
                        "dist/comm_ms": fig["comm_ms"][r],
                        "dist/rel_perf": fig["rel_perf"][r],
                        "dist/sync_wait_frac": fig["sync_wait_frac"][r],
                    },
                    step=step,
                    rank=r,
                )
            self.run.log(
                {"dist/skew_ms": fig["skew_ms"], "dist/slowest_rank": fig["slowest_rank"]}, step=step
            )


def _union(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by ``intervals`` (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def step_figures(rows: torch.Tensor) -> dict[str, Any]:
    """Figures of one step from its gathered rows (one per rank: step, step time, n, then for each
    collective its start offset into the step and its duration)."""
    step_time = rows[:, 1]
    ranks = rows.shape[0]
    n = int(rows[:, 2].min().item())
    spans = rows[:, 3 : 3 + 2 * n].reshape(ranks, n, 2)
    offsets, d = spans[:, :, 0], spans[:, :, 1]
    fastest = d.min(dim=0).values if n else torch.zeros(0, dtype=rows.dtype)
    waits = d - fastest
    wait = torch.tensor(
        [
            _union([(o, o + w) for o, w in zip(offsets[r].tolist(), waits[r].tolist(), strict=True)])
            for r in range(ranks)
        ],
        dtype=rows.dtype,
    )
    comm = [
        _union(
            [
                (o + w, o + t)
                for o, w, t in zip(offsets[r].tolist(), waits[r].tolist(), d[r].tolist(), strict=True)
            ]
        )
        for r in range(ranks)
    ]
    compute = (step_time - wait).clamp(min=1e-9)
    rel = compute.min() / compute
    skew = (compute.max() - compute.min()).item()
    return {
        "step": rows[0, 0].item(),
        "step_time_ms": (step_time * 1000).tolist(),
        "compute_time_ms": (compute * 1000).tolist(),
        "sync_wait_ms": (wait * 1000).tolist(),
        "comm_ms": [c * 1000 for c in comm],
        "rel_perf": rel.tolist(),
        "sync_wait_frac": (wait / step_time.clamp(min=1e-9)).tolist(),
        "skew_ms": skew * 1000,
        "slowest_rank": int(compute.argmax().item()),
        "collectives": n,
    }


class _TimedHook:
    def __init__(self, timer: StepTimer, hook: Callable[..., Any], state: Any) -> None:
        self.timer = timer
        self.hook = hook
        self.state = state

    def run(self, _state: Any, bucket: Any) -> Any:
        marks: list[Any] = [self.timer._clock.mark(), None]
        self.timer._open.append(marks)
        future = self.hook(self.state, bucket)

        def done(fut: Any) -> Any:
            marks[1] = self.timer._clock.mark()
            return fut.value()

        return future.then(done)


# DDP checks the hook's annotations against the real types; postponed (string) annotations fail that check.
_TimedHook.run.__annotations__ = {
    "_state": object,
    "bucket": dist.GradBucket,  # type: ignore[attr-defined]
    "return": torch.futures.Future[torch.Tensor],
}
