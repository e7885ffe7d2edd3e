"""Comparing what the SDK answered alone with what the tracker decided at the same steps; a difference is
recorded as an ``sdk_disagreed`` alert (the rule: :mod:`plateau_tracker.server.policy._sdk_disagreed`)."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from plateau_tracker.server.db import models
from plateau_tracker.server.db.engine import Database
from plateau_tracker.server.policy._sdk_disagreed import SDK_DISAGREED, sdk_disagreed_alert
from plateau_tracker.server.schemas.away_verdicts import AwayComparison, AwayVerdict, AwayVerdicts
from plateau_tracker.server.services.judging import record_decisions
from plateau_tracker.server.services.run_rows import get_run_row
from plateau_tracker.server.services.wakeups import announce

_IN_CHUNK = 500  # steps per IN list: well within every store's limit on bound parameters


def compare(db: Database, run_id: int, request: AwayVerdicts) -> tuple[AwayComparison, int]:
    """Compare the SDK's answers with the run's decisions at the steps the tracker has judged (up to its
    stop), and record an alert at each step judged differently and not said before. Returns the comparison
    and the webhook deliveries queued."""
    asked: dict[int, AwayVerdict] = {}
    for verdict in request.verdicts:  # a step sent twice: its later answer
        asked[verdict.step] = verdict
    with db.session(write=True) as session:
        run = get_run_row(session, run_id, lock=True)
        # Past the run's stop the tracker judges nothing: the alert at the stop says the loop went on.
        last = run.judged_step if run.stop_step is None else min(run.judged_step, run.stop_step)
        judged = sorted(step for step in asked if step <= last)
        made = _made_at(session, run_id, judged)
        alerts = []
        for step in judged:
            actions = made.get(step, {})
            if SDK_DISAGREED in actions:
                continue
            alert = sdk_disagreed_alert(
                step,
                sdk_checkpoint=asked[step].checkpoint,
                sdk_stop=asked[step].stop,
                tracker_checkpoint="checkpoint" in actions,
                tracker_stop_rule=actions.get("stop"),
            )
            if alert is not None:
                alerts.append(alert)
        recorded, deliveries = record_decisions(session, run, alerts, time.time())
        if recorded:
            announce(session, run_id, deliveries=deliveries > 0)
        comparison = AwayComparison(
            compared=len(judged),
            disagreed=[decision.step for decision in recorded],
            not_judged=sorted(step for step in asked if step > run.judged_step),
        )
    return comparison, deliveries


def _made_at(session: Session, run_id: int, steps: list[int]) -> dict[int, dict[str, str]]:
    """Per step: the run's actions there (``checkpoint``, ``stop``) with their rule, and ``sdk_disagreed``
    where that alert was made already."""
    decision = models.Decision
    made: dict[int, dict[str, str]] = {}
    for start in range(0, len(steps), _IN_CHUNK):
        rows = session.execute(
            select(decision.step, decision.action, decision.rule).where(
                decision.run_id == run_id, decision.step.in_(steps[start : start + _IN_CHUNK])
            )
        )
        for step, action, rule in rows:
            if action in ("checkpoint", "stop"):
                made.setdefault(step, {}).setdefault(action, rule)
            elif rule == SDK_DISAGREED:
                made.setdefault(step, {})[SDK_DISAGREED] = rule
    return made
