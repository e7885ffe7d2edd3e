"""The tracker's HTTP API from Python: the one client every part of Plateau that talks to a tracker uses
(the SDK's runs, the CLI's remote commands, TensorBoard export and import, replay, the dashboard, the demo).

    from plateau_tracker.client import connect

    with connect() as tracker:  # $PLATEAU_URL and $PLATEAU_TOKEN, else the local default
        for run in tracker.runs(experiment="mlp-sweep"):
            print(run["id"], run["status"], tracker.summary(run["id"])["convergence"])

Standard library only. Errors are :class:`TrackerError`: :class:`RetryableError` when the tracker could
not be reached or asked to come back, :class:`RejectedError` when it refused (:class:`NotFoundError` for a
404). Values come back as Python floats, NaN and infinities included.
"""

from __future__ import annotations

from plateau_tracker._numbers import number
from plateau_tracker._transport import (
    DEFAULT_URL,
    NotFoundError,
    RejectedError,
    RetryableError,
    TrackerError,
    connect,
)
from plateau_tracker._transport import Transport as TrackerClient

__all__ = [
    "DEFAULT_URL",
    "NotFoundError",
    "RejectedError",
    "RetryableError",
    "TrackerClient",
    "TrackerError",
    "connect",
    "number",
]
