"""Model complexity: parameters, FLOPs, inference latency and memory of a torch model, and time per step.

``profile_model`` needs torch (the ``torch`` extra) and imports it only when called, so the SDK stays light.
Figures are plain numbers, ready for the run's summary:

- ``params``, ``trainable_params``, ``param_bytes`` (parameters and buffers);
- ``flops_per_sample``: FLOPs of one forward pass per sample, counted by ``torch.utils.flop_counter``
  (a multiply-add is 2 FLOPs; a ``Linear(i, o)`` costs ``2*i*o`` per sample, its bias is not counted);
- ``latency_ms_batch1``: milliseconds for one sample alone; ``latency_ms_per_sample`` at ``batch_size``
  (``latency_batch_size``) and ``throughput_samples_per_s``; each the median of timed forward passes in
  inference mode after warm-up;
- ``peak_rss_bytes``: the process's peak resident memory so far; ``cuda_max_allocated_bytes`` where the
  model is on a GPU.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from plateau_tracker._quantile import quantile


def peak_rss_bytes() -> int:
    """The process's peak resident set size (Linux reports KiB, macOS bytes; Windows: the peak working
    set). ``resource`` is Unix-only, so it is imported here: ``import sdk`` works on every platform."""
    try:
        import resource
    except ImportError:  # Windows
        return _peak_working_set()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _peak_working_set() -> int:  # pragma: no cover - Windows only
    import ctypes
    from ctypes import wintypes

    class Counters(ctypes.Structure):
        _fields_ = [
            ("cb", wintypes.DWORD),
            ("PageFaultCount", wintypes.DWORD),
            ("PeakWorkingSetSize", ctypes.c_size_t),
            ("WorkingSetSize", ctypes.c_size_t),
            ("QuotaPeakPagedPoolUsage", ctypes.c_size_t),
            ("QuotaPagedPoolUsage", ctypes.c_size_t),
            ("QuotaPeakNonPagedPoolUsage", ctypes.c_size_t),
            ("QuotaNonPagedPoolUsage", ctypes.c_size_t),
            ("PagefileUsage", ctypes.c_size_t),
            ("PeakPagefileUsage", ctypes.c_size_t),
        ]

    counters = Counters()
    counters.cb = ctypes.sizeof(Counters)
    windll = getattr(ctypes, "windll", None)
    if windll is None:
        return 0
    process = windll.kernel32.GetCurrentProcess()
    if not windll.psapi.GetProcessMemoryInfo(process, ctypes.byref(counters), counters.cb):
        return 0
    return int(counters.PeakWorkingSetSize)


def _map_tensors(inputs: Any, fn: Callable[[Any], Any]) -> Any:
    import torch

    if isinstance(inputs, torch.Tensor):
        return fn(inputs)
    if isinstance(inputs, tuple | list):
        return type(inputs)(_map_tensors(item, fn) for item in inputs)
    if isinstance(inputs, dict):
        return {key: _map_tensors(value, fn) for key, value in inputs.items()}
    return inputs


def _batch_size(inputs: Any) -> int:
    import torch

    if isinstance(inputs, torch.Tensor):
        return int(inputs.shape[0]) if inputs.dim() > 0 else 1
    if isinstance(inputs, tuple | list):
        for item in inputs:
            return _batch_size(item)
    if isinstance(inputs, dict):
        for value in inputs.values():
            return _batch_size(value)
    raise ValueError("example_input must be a tensor, or a tuple, list or dict of tensors")


def _rebatch(inputs: Any, size: int) -> Any:
    """The first sample of every tensor, repeated ``size`` times along the batch dimension."""
    return _map_tensors(inputs, lambda t: t[:1].repeat(size, *([1] * (t.dim() - 1))))


def _call(model: Any, inputs: Any) -> Any:
    if isinstance(inputs, tuple | list):
        return model(*inputs)
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(inputs)


def _median_ms(
    run: Callable[[], Any], synchronize: Callable[[], None], *, warmup: int, repeats: int
) -> float:
    for _ in range(warmup):
        run()
    synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def profile_model(
    model: Any,
    example_input: Any,
    *,
    batch_size: int = 32,
    warmup: int = 3,
    repeats: int = 20,
) -> dict[str, Any]:
    """Measure ``model`` (a ``torch.nn.Module``) on ``example_input`` (a batch: a tensor, or a tuple, list
    or dict of tensors whose first dimension is the batch). The model is left in the mode it was in."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    if batch_size < 1 or warmup < 0 or repeats < 1:
        raise ValueError("batch_size and repeats must be >= 1, warmup >= 0")
    params = list(model.parameters())
    buffers = list(model.buffers())
    device = params[0].device if params else torch.device("cpu")
    on_cuda = device.type == "cuda"

    def synchronize() -> None:
        if on_cuda:
            torch.cuda.synchronize(device)

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            given = _batch_size(example_input)
            counter = FlopCounterMode(display=False)
            with counter:
                _call(model, example_input)
            flops_per_sample = counter.get_total_flops() / given
            single = _rebatch(example_input, 1)
            batched = _rebatch(example_input, batch_size)
            if on_cuda:
                torch.cuda.reset_peak_memory_stats(device)
            latency_1 = _median_ms(lambda: _call(model, single), synchronize, warmup=warmup, repeats=repeats)
            latency_n = _median_ms(lambda: _call(model, batched), synchronize, warmup=warmup, repeats=repeats)
    finally:
        model.train(was_training)
    figures: dict[str, Any] = {
        "model": type(model).__name__,
        "params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in params if p.requires_grad),
        "param_bytes": sum(t.numel() * t.element_size() for t in params + buffers),
        "flops_per_sample": flops_per_sample,
        "latency_ms_batch1": latency_1,
        "latency_ms_per_sample": latency_n / batch_size,
        "latency_batch_size": batch_size,
        "throughput_samples_per_s": batch_size / (latency_n / 1e3) if latency_n > 0 else None,
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "peak_rss_bytes": peak_rss_bytes(),
    }
    if on_cuda:
        figures["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return figures


class StepTimes:
    """Durations of timed training steps: the newest ``keep`` of them, for medians that follow the run."""

    def __init__(self, keep: int = 1000, skip_first: int = 1) -> None:
        self._durations: deque[float] = deque(maxlen=keep)
        self._skip = skip_first
        self.count = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        if self.count > self._skip:  # the first steps pay for allocation and compilation
            self._durations.append(seconds)

    def figures(self) -> dict[str, Any]:
        """``step_time_s`` (median), ``step_time_p90_s`` and ``steps_timed``; empty before two steps."""
        if not self._durations:
            return {}
        ordered = sorted(self._durations)
        return {
            "step_time_s": statistics.median(ordered),
            "step_time_p90_s": quantile(ordered, 0.9),
            "steps_timed": self.count,
        }


@contextmanager
def timed(on_done: Callable[[float], None], *, cuda_sync: bool = False) -> Iterator[None]:
    """Time the block with ``perf_counter`` and pass its seconds to ``on_done``; with ``cuda_sync``, wait
    for queued GPU work first (otherwise a GPU step is timed at launch, not at completion)."""
    sync = _cuda_sync if cuda_sync else None
    if sync is not None:
        sync()
    start = time.perf_counter()
    yield
    if sync is not None:
        sync()
    on_done(time.perf_counter() - start)


def _cuda_sync() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


__all__ = ["StepTimes", "peak_rss_bytes", "profile_model", "timed"]
