"""What every framework callback checks when it is constructed, not once training has started."""

from __future__ import annotations

import inspect
import os
from collections.abc import Collection
from typing import Any


def check_run_arguments(
    callback: str, run: Any, init_kwargs: dict[str, Any], taken: Collection[str] = ("planned_steps",)
) -> None:
    """TypeError now, naming what is wrong, when the callback would create its run without a project
    (``plateau_tracker.init`` needs one), with an argument ``init`` does not take, or with one the callback
    sets itself (``taken``: the plan, from the framework's own limit)."""
    if run is not None:
        return
    if not init_kwargs.get("project") and not os.environ.get("PLATEAU_PROJECT"):
        raise TypeError(
            f"{callback}() needs project= (the run's project; or $PLATEAU_PROJECT), or run= (a run made by "
            "plateau_tracker.init)"
        )
    from plateau_tracker import init

    accepted = set(inspect.signature(init).parameters) - {"positional"}
    unknown = sorted(set(init_kwargs) - accepted)
    if unknown:
        raise TypeError(
            f"{callback}() got arguments plateau_tracker.init does not take: {', '.join(unknown)}"
        )
    clashing = sorted(set(init_kwargs) & set(taken))
    if clashing:
        raise TypeError(f"{callback}() sets {', '.join(clashing)} itself, from the framework's own limits")
