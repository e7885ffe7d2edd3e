"""System metrics of the training process, sampled in a thread of their own every few seconds and logged
as the ``system/`` series at the step the loop logged last (``init(system_metrics=S)``).

- ``system/cpu_percent``: the process's CPU time over the interval, all its threads (100 is one core);
- ``system/rss_mb``: its resident memory (peak, where the current figure cannot be read);
- ``system/mem_available_mb``, ``system/load1``: the host's available memory and load (Linux, Unix);
- ``system/gpu<i>_mem_mb``: memory torch holds on each GPU, when the process has imported torch and it sees
  one (torch is never imported for this).

Reading them costs microseconds, off the training thread; a figure that cannot be read is left out.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

logger = logging.getLogger("plateau")
_MB = 1024 * 1024


class SystemMetrics:
    """Samples every ``every_s`` seconds and hands each sample to ``log(step, metrics)`` at the step
    ``latest()`` gives (nothing before the loop has logged a step)."""

    def __init__(self, every_s: float, latest: Any, log: Any) -> None:
        self.every_s = every_s
        self._latest, self._log = latest, log
        self._stop = threading.Event()
        self._cpu = _cpu_seconds()
        self._at = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="plateau-system-metrics", daemon=True)

    def start(self) -> SystemMetrics:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                step = self._latest()
                figures = self.sample()
                if step is not None and figures:
                    self._log(step, figures)
            except Exception:  # a figure the platform will not give must not end the thread
                logger.debug("plateau: could not sample system metrics", exc_info=True)

    def sample(self) -> dict[str, float]:
        now, cpu = time.monotonic(), _cpu_seconds()
        figures: dict[str, float] = {}
        if now > self._at:
            figures["system/cpu_percent"] = 100.0 * (cpu - self._cpu) / (now - self._at)
        self._cpu, self._at = cpu, now
        rss = _rss_bytes()
        if rss is not None:
            figures["system/rss_mb"] = rss / _MB
        available = _meminfo("MemAvailable")
        if available is not None:
            figures["system/mem_available_mb"] = available / _MB
        if hasattr(os, "getloadavg"):
            figures["system/load1"] = os.getloadavg()[0]
        figures.update(_gpu_memory())
        return figures


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def _rss_bytes() -> float | None:
    """Resident memory now (Linux), else the peak (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    return float(peak if sys.platform == "darwin" else peak * 1024)


def _meminfo(field: str) -> float | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith(field + ":"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gpu_memory() -> dict[str, float]:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return {}
    return {
        f"system/gpu{index}_mem_mb": torch.cuda.memory_allocated(index) / _MB
        for index in range(torch.cuda.device_count())
    }
