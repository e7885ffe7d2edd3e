"""The sender's link to the tracker: online or offline, and when to try an offline tracker again.

A failure (network error, 408, 429, 5xx) takes the link offline until a probe answers; probes back off
(capped, jittered, exponential, honouring Retry-After). The process also remembers, per tracker URL, when
it last failed to reach it, so that ``init`` of the next run of a sweep does not wait for a tracker that is
known to be away.
"""

from __future__ import annotations

import time

from plateau_tracker._retry import backoff_delay
from plateau_tracker._transport import OfflineByChoiceError, RetryableError

UNREACHABLE_MEMORY_S = 60.0
"""How long a process remembers a tracker it could not reach: ``init`` of another run to it within this
time does not wait for it (a sweep of short runs would pay ``wait`` each time)."""

LIVE_PROBE_S = 1.0
"""While the loop is logging, the longest wait between probes of an absent tracker: a tracker that comes
back is noticed within about a second, and its verdicts take over from there. An idle run backs off
further (up to the sender's cap)."""

# Documented module state: tracker URL -> monotonic time this process last failed to reach it (removed
# when it answers).
_UNREACHABLE: dict[str, float] = {}


def recently_unreachable(url: str) -> bool:
    """Whether this process failed to reach the tracker at ``url`` in the last ``UNREACHABLE_MEMORY_S``."""
    failed = _UNREACHABLE.get(url.rstrip("/"))
    return failed is not None and time.monotonic() - failed < UNREACHABLE_MEMORY_S


class Link:
    """Reachability of one tracker, as the last exchange with it found it. Used by the sender's thread;
    ``online`` may be read from any thread."""

    def __init__(self, url: str, *, max_backoff: float) -> None:
        self.url = url
        self._max_backoff = max_backoff
        self.online = True
        """Whether the last exchange with the tracker worked (False from a failure until a probe answers)."""
        self.failures = 0  # consecutive failed exchanges
        self._next_probe = 0.0
        self._failed_at = 0.0
        self._asked_to_wait = False  # the last failure carried a Retry-After

    def failed(self, exc: RetryableError) -> float:
        """An exchange failed: the link is offline. Returns the delay before the next probe."""
        self.online = False
        if not isinstance(exc, OfflineByChoiceError):  # a run offline by choice tried no tracker
            _UNREACHABLE[self.url] = time.monotonic()
        self.failures += 1
        delay = backoff_delay(
            self.failures, base_s=0.25, cap_s=self._max_backoff, retry_after=exc.retry_after
        )
        self._failed_at = time.monotonic()
        self._asked_to_wait = exc.retry_after is not None
        self._next_probe = self._failed_at + delay
        return delay

    def answered(self) -> bool:
        """An exchange worked: the link is online. Returns whether it had been failing."""
        was_failing = self.failures > 0
        self.online = True
        self.failures = 0
        _UNREACHABLE.pop(self.url, None)
        return was_failing

    def probe_due(self, *, live: bool = False) -> bool:
        """Whether the backoff since the last failure has run out; while the loop is ``live`` (logging), at
        most :data:`LIVE_PROBE_S` after the last failure, unless the tracker asked for longer
        (Retry-After, which the backoff honours)."""
        now = time.monotonic()
        if live and now - self._failed_at >= LIVE_PROBE_S and not self._asked_to_wait:
            return True
        return now >= self._next_probe

    def probe_now(self) -> None:
        """Cut the backoff short: the next cycle probes (``close`` does, to try before its deadline)."""
        self._next_probe = 0.0
