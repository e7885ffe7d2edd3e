"""One retry discipline for the SDK and webhook delivery (``sdk/_retry.py``)."""

from __future__ import annotations

import random

from plateau_tracker._retry import RETRYABLE_STATUSES, backoff_delay, parse_retry_after


def test_backoff_doubles_up_to_its_cap_with_jitter_and_waits_for_retry_after() -> None:
    random.seed(7)
    for failures, full in ((1, 0.25), (2, 0.5), (3, 1.0), (8, 30.0), (10_000, 30.0)):
        delay = backoff_delay(failures, base_s=0.25, cap_s=30.0)
        assert 0.5 * full <= delay <= full
    assert backoff_delay(1, base_s=0.25, cap_s=30.0, retry_after=12.0) == 12.0
    assert backoff_delay(1, base_s=0.25, cap_s=30.0, retry_after=600.0) == 30.0  # capped like the rest


def test_which_answers_are_retried_and_how_retry_after_is_read() -> None:
    assert {408, 425, 429, 500, 502, 503, 504} == RETRYABLE_STATUSES
    assert not {400, 401, 403, 404, 409, 413, 422, 501, 505} & RETRYABLE_STATUSES
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("-5") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT") is None
    assert parse_retry_after(None) is None
