"""Optuna: ``PlateauPruner``, an ``optuna.pruners.BasePruner`` whose verdict is Plateau's.

    from plateau_tracker.integrations.optuna import PlateauPruner

    study = optuna.create_study(direction="minimize", pruner=PlateauPruner(project="search"))
    study.optimize(objective, n_trials=50)

- **Each trial is a Plateau run** in the experiment named after the study (run key
  ``optuna-<study>-<trial number>``), so the dashboard shows the study's trials with their decisions.
- **``trial.report(value, step)``** values are logged as ``value`` (the monitor; mode from the study's
  direction) when ``trial.should_prune()`` asks; ``should_prune()`` is the run's stop verdict on that
  step: its single-run rules and the experiment's cross-run rules (``percentile``, ``asha``).
- **The policy** is the ``default-sweep`` preset (the default rules, with cross-run pruning:
  ``percentile`` and ``asha``) unless ``policy`` names another preset or ``rules`` gives the rules.
- **At a prune** the run stops with the rule's reason (the trial raises ``TrialPruned`` as usual) and is
  finished ``stopped`` at once. Any other trial's run is finished with its end state (``finished``,
  ``failed``) when the next trial starts, and the last at the end of the process; passed also as a study
  callback (``callbacks=[pruner]``), the pruner finishes each at once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

import plateau_tracker as plateau
from plateau_tracker._policy_check import preset_rules
from plateau_tracker._types import FinalStatus

logger = logging.getLogger("plateau")

MONITOR = "value"
_STATUS: dict[TrialState, FinalStatus] = {
    TrialState.COMPLETE: "finished",
    TrialState.PRUNED: "stopped",
    TrialState.FAIL: "failed",
}


class PlateauPruner(optuna.pruners.BasePruner):
    """Prunes a trial when Plateau decides its run should stop. ``policy``: a preset's name
    (``default-sweep``, the default, prunes across trials; ``default``, ``median``, ``patience-K``);
    ``rules``: the rules themselves, instead; ``planned_steps``: the last step a trial reports, for
    budget-aware rules; other keyword arguments go to :func:`plateau.init`."""

    def __init__(
        self,
        *,
        project: str = "optuna",
        experiment: str | None = None,
        policy: str = "default-sweep",
        rules: Sequence[Mapping[str, Any]] | None = None,
        url: str | None = None,
        planned_steps: int | None = None,
        **init_kwargs: Any,
    ) -> None:
        self.project = project
        self.experiment = experiment
        self.rules = list(rules) if rules is not None else preset_rules(policy)
        self.url = url
        self.planned_steps = planned_steps
        self.init_kwargs = init_kwargs
        self._runs: dict[int, plateau.Run] = {}
        self._logged: dict[int, set[int]] = {}
        self._pruned: set[int] = set()

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Log the trial's new intermediate values and answer Plateau's stop verdict on the last one. A
        pruned trial's run is finished (``stopped``) at once: Optuna ends the trial there."""
        if trial.number in self._pruned:
            return True
        run = self._run_of(study, trial)
        logged = self._logged.setdefault(trial.number, set())
        for step in sorted(set(trial.intermediate_values) - logged):
            run.log({MONITOR: trial.intermediate_values[step]}, step=step)
            logged.add(step)
        stop = run.should_stop()
        if stop:
            logger.info("plateau: trial %d pruned (%s): %s", trial.number, run.latest.rule, run.latest.reason)
            self._pruned.add(trial.number)
            self._runs.pop(trial.number, None)
            self._logged.pop(trial.number, None)
            run.finish("stopped")
        return stop

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """As a study callback (``study.optimize(..., callbacks=[pruner])``): finish the trial's run."""
        run = self._runs.pop(trial.number, None)
        self._logged.pop(trial.number, None)
        if run is None:
            return
        if trial.state == TrialState.COMPLETE and trial.value is not None:
            run.update_summary({"optuna_value": trial.value, "optuna_trial": trial.number})
        run.finish(_STATUS.get(trial.state, "failed"))

    def _run_of(self, study: optuna.Study, trial: FrozenTrial) -> plateau.Run:
        run = self._runs.get(trial.number)
        if run is None:
            self._finish_ended(study)
            minimise = study.direction == optuna.study.StudyDirection.MINIMIZE
            run = self._runs[trial.number] = plateau.init(
                project=self.project,
                experiment=self.experiment or study.study_name,
                name=f"trial-{trial.number}",
                config=dict(trial.params),
                monitor=MONITOR,
                mode="min" if minimise else "max",
                rules=self.rules,
                url=self.url,
                run_key=f"optuna-{_safe(study.study_name)}-{trial.number}",
                planned_steps=self.planned_steps,
                **self.init_kwargs,
            )
        return run

    def close(self) -> None:
        """Finish every run still open (the process's end does it too): ``stopped`` where Plateau stopped
        it, else ``finished``."""
        for number in list(self._runs):
            run = self._runs.pop(number)
            self._logged.pop(number, None)
            run.finish()

    def _finish_ended(self, study: optuna.Study) -> None:
        """Finish the runs of trials that have ended (a pruner given only as ``pruner=`` is never called
        back at a trial's end: a new trial is when it learns)."""
        if not self._runs:
            return
        ended = study.get_trials(deepcopy=False, states=tuple(_STATUS))
        for trial in ended:
            if trial.number in self._runs:
                self(study, trial)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:150]
