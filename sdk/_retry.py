"""The one retry discipline of Plateau's HTTP callers: the SDK reaching its tracker, and the tracker
delivering webhooks to users' endpoints. Which answers are worth another try, how long to wait before it
(capped, jittered exponential backoff, never sooner than the server's ``Retry-After``), and how to read
that header."""

from __future__ import annotations

import random

# Answers that say "not now" rather than "no": a timeout, too early, too many requests, and the 5xx that
# mean a server or its gateway is down or overloaded. 501 (not implemented) and 505 (version) will not get
# better, and every other 4xx is the request's own fault.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})

# 2**30 times any base is past every cap: the exponent stops there (a float power would overflow later).
_MAX_DOUBLINGS = 30


def backoff_delay(failures: int, *, base_s: float, cap_s: float, retry_after: float | None = None) -> float:
    """Seconds to wait after the ``failures``-th failure in a row (1 for the first): ``base_s`` doubled
    per failure up to ``cap_s``, times a random factor in [0.5, 1] (callers that failed together do not
    come back together), and never less than the server's ``retry_after`` (itself capped at ``cap_s``)."""
    doublings = min(max(failures, 1) - 1, _MAX_DOUBLINGS)
    delay: float = min(cap_s, base_s * 2.0**doublings) * random.uniform(0.5, 1.0)
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap_s))
    return delay


def parse_retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header's seconds (never negative); None when absent or not a number of seconds
    (the HTTP-date form is not used by the servers Plateau talks to, and waiting by the backoff is safe)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
