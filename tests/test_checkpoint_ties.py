"""``checkpoint``'s ``tie_loss_key``: among evaluations at the best value, the one with the lowest loss is
the checkpoint kept. On a coarse metric a run sits on its best for many evaluations while its validation
loss still falls; the first of them is not the model to keep."""

from __future__ import annotations

import json
import math

import pytest

from plateau_tracker.server.policy import Context, Observation, PolicySpec, evaluate, initial_states
from plateau_tracker.server.policy.presets import preset
from plateau_tracker.server.replay._curves import Curve
from plateau_tracker.server.replay._simulate import replay_curve
from plateau_tracker.server.schemas._common import json_safe
from tests._reasons import detail

_TIES = {"rule": "checkpoint", "tie_loss_key": "val_loss"}


def _observations(values: list[float], losses: list[float]) -> list[Observation]:
    return [
        Observation(i, v, 0.0, {"val_loss": loss})
        for i, (v, loss) in enumerate(zip(values, losses, strict=True))
    ]


def _saved(
    values: list[float], losses: list[float | None], *, mode: str = "max", rule: dict | None = None
) -> list[int]:
    """The steps a policy of the checkpoint rule alone saves, fed one point a batch with its state stored
    as the tracker stores it in between (non-finite floats spelt as strings, through JSON); the rule never
    fails on the way."""
    policy = PolicySpec.model_validate({"monitor": "val/acc", "mode": mode, "rules": [rule or _TIES]})
    states, saved = initial_states(policy), []
    for step, (value, loss) in enumerate(zip(values, losses, strict=True)):
        extras = {} if loss is None else {"val_loss": loss}
        evaluation = evaluate(policy, states, [Observation(step, value, 0.0, extras)])
        assert [v.action for v in evaluation.verdicts if v.action != "checkpoint"] == []
        saved += [v.step for v in evaluation.verdicts if v.action == "checkpoint"]
        states = json.loads(json.dumps(json_safe(evaluation.states)))
    return saved


@pytest.mark.parametrize(
    ("values", "losses", "saved"),
    [
        # A tie with a lower loss is saved; one with a higher or equal loss is not.
        ([0.5, 0.9, 0.9, 0.9, 0.9], [1.0, 0.5, 0.4, 0.45, 0.4], [0, 1, 2]),
        # Each saved tie raises the bar: the next must beat the loss saved last, not the best's first.
        ([0.9, 0.9, 0.9, 0.9], [0.5, 0.3, 0.4, 0.2], [0, 1, 3]),
        # Below the best is no tie, whatever its loss.
        ([0.9, 0.8, 0.9], [0.5, 0.1, 0.6], [0]),
        # A new best resets the bar to its own loss, even a higher one.
        ([0.8, 0.8, 0.9, 0.9], [0.5, 0.4, 0.6, 0.55], [0, 1, 2, 3]),
        # No loss at the saved checkpoint, or a NaN one at the tie: nothing to compare, no tie broken.
        ([0.9, 0.9, 0.9], [None, 0.3, 0.2], [0]),
        ([0.9, 0.9, 0.9], [0.5, math.nan, 0.4], [0, 2]),
        # A NaN or infinite loss at the best, stored between batches: no bar, no tie broken until a new best.
        ([0.9, 0.9, 0.9], [math.nan, 0.3, 0.2], [0]),
        ([0.8, 0.9, 0.9], [0.5, math.inf, 0.2], [0, 1]),
        # A loss of -inf at the tie is no finite loss either.
        ([0.9, 0.9], [0.5, -math.inf], [0]),
        # A tie without the loss logged at it: kept as it was.
        ([0.9, 0.9, 0.9], [0.5, None, 0.4], [0, 2]),
        # A NaN value is no tie of a best (and never a best).
        ([0.9, math.nan, 0.9], [0.5, 0.1, 0.4], [0, 2]),
    ],
)
def test_a_tie_at_the_best_with_a_lower_loss_is_saved(
    values: list[float], losses: list[float | None], saved: list[int]
) -> None:
    assert _saved(values, losses) == saved


def test_a_loss_read_from_an_earlier_step_breaks_no_tie_and_sets_no_bar() -> None:
    """A loss the tracker read at an earlier step (``stale``) is not this evaluation's: at a tie it breaks
    nothing, and at a new best it is no bar for the ties after it."""
    policy = PolicySpec.model_validate({"monitor": "val/acc", "mode": "max", "rules": [_TIES]})
    stale = frozenset({"val_loss"})
    obs = [
        Observation(0, 0.9, 0.0, {"val_loss": 0.5}),
        Observation(1, 0.8, 0.0, {"val_loss": 0.3}),
        Observation(2, 0.9, 0.0, {"val_loss": 0.3}, 0, stale),  # step 1's loss, not this model's: no tie
        Observation(3, 0.95, 0.0, {"val_loss": 0.3}, 0, stale),  # a new best, its own loss unknown
        Observation(4, 0.95, 0.0, {"val_loss": 0.2}),  # no bar to beat: kept at 3
    ]
    evaluation = evaluate(policy, initial_states(policy), obs)
    assert [v.step for v in evaluation.verdicts if v.action == "checkpoint"] == [0, 3]


def test_without_tie_loss_key_a_tie_is_never_saved() -> None:
    """Off by default, as Keras' and Lightning's checkpoints: the first evaluation at the best is kept."""
    assert _saved([0.9, 0.9, 0.9], [0.5, 0.4, 0.3], rule={"rule": "checkpoint"}) == [0]


def test_a_loss_watched_on_its_own_breaks_no_tie() -> None:
    """The monitor a minimised loss read under the tie's names: equal values are equal losses."""
    policy = PolicySpec.model_validate(
        {"monitor": "val_loss", "mode": "min", "rules": [{"rule": "checkpoint", "tie_loss_key": "val_loss"}]}
    )
    obs = [Observation(i, v, 0.0, {"val_loss": v}) for i, v in enumerate([0.5, 0.4, 0.4, 0.4])]
    evaluation = evaluate(policy, initial_states(policy), obs)
    assert [v.step for v in evaluation.verdicts] == [0, 1]


def test_the_tie_says_which_loss_and_which_checkpoint_it_beat() -> None:
    policy = PolicySpec.model_validate({"monitor": "val/acc", "mode": "max", "rules": [_TIES]})
    obs = [Observation(i, 0.9, 0.0, {"val_loss": loss}) for i, loss in enumerate([0.5, 0.25])]
    tie = evaluate(policy, initial_states(policy), obs).verdicts[-1]
    assert (tie.action, tie.step, tie.best_step, tie.best_value) == ("checkpoint", 1, 1, 0.9)
    assert detail(tie) == (
        "val/acc equals its best 0.9 at step 1, with val_loss 0.25 below 0.5 at the checkpoint saved for it "
        "(step 0): save it, the model to keep at that best"
    )
    assert tie.evidence == {
        "monitor": "val/acc",
        "mode": "max",
        "value": 0.9,
        "tie": True,
        "tie_loss_key": "val_loss",
        "tie_loss": 0.25,
        "previous_kept_step": 0,
        "previous_kept_loss": 0.5,
    }


def test_a_stop_names_the_tie_saved_last_as_the_model_to_keep() -> None:
    """patience counts from the first evaluation at the best (a tie is no improvement), and its stop names
    the checkpoint the tie saved: the model a loop that saves on should_checkpoint() holds."""
    policy = PolicySpec.model_validate(
        {"monitor": "val/acc", "mode": "max", "rules": [_TIES, {"rule": "patience", "patience": 3}]}
    )
    values = [0.5, 0.9, 0.9, 0.9, 0.8]
    losses = [1.0, 0.5, 0.3, 0.4, 0.2]
    obs = _observations(values, losses)
    evaluation = evaluate(policy, initial_states(policy), obs)
    stop = evaluation.verdicts[-1]
    assert (stop.rule, stop.step, stop.best_step, stop.best_value) == ("patience", 4, 2, 0.9)
    assert detail(stop) == (
        "val/acc has not improved on 0.9 (step 1) for 3 evaluations (patience 3); keep step 2: it equals "
        "that best with a lower val_loss (0.3), the checkpoint saved last at that best"
    )
    assert (stop.evidence["kept_step"], stop.evidence["kept_loss"]) == (2, 0.3)


def test_a_stop_that_said_which_step_to_keep_names_the_tie_instead() -> None:
    """A stop under the default names the tie as the step to keep: one step to keep in the sentence, the
    one in best_step, and the headline keeps it too."""
    policy = preset("default", monitor="val/acc", mode="max")
    values = [0.3, 0.6, 0.8] + [0.9] * 60
    obs = [Observation(i, v, 0.0, {"val/loss": 1.0 / (i + 1)}) for i, v in enumerate(values)]
    evaluation = evaluate(policy, initial_states(policy), obs, Context(planned_steps=60))
    stop = evaluation.verdicts[-1]
    assert (stop.action, stop.best_step) == ("stop", stop.step)
    assert "keep step 3" not in detail(stop)
    assert detail(stop).endswith(
        f"keep step {stop.step}: it equals that best with a lower val/loss ({1.0 / (stop.step + 1):.6g}), "
        "the checkpoint saved last at that best"
    )
    assert stop.reason.endswith(f"keeping step {stop.step}, which ties the best with a lower val/loss")
    assert detail(stop).count("keep step") == 1


def test_a_stop_after_a_new_best_names_that_best() -> None:
    """A tie broken before a new best is no longer the model to keep: the stop names the new best."""
    policy = PolicySpec.model_validate(
        {"monitor": "val/acc", "mode": "max", "rules": [_TIES, {"rule": "patience", "patience": 2}]}
    )
    values = [0.8, 0.8, 0.9, 0.85, 0.85]
    losses = [0.5, 0.4, 0.6, 0.1, 0.1]
    obs = _observations(values, losses)
    stop = evaluate(policy, initial_states(policy), obs).verdicts[-1]
    assert (stop.step, stop.best_step) == (4, 2)
    assert "kept_step" not in stop.evidence


def test_the_default_breaks_ties_by_the_validation_loss_in_its_spellings() -> None:
    policy = preset("default", monitor="val/acc", mode="max")
    checkpoint = next(r for r in policy.rules if r.rule == "checkpoint")
    assert checkpoint.tie_loss_key[:2] == ("val_loss", "val/loss")  # type: ignore[attr-defined]
    obs = [Observation(i, 0.9, 0.0, {"val/loss": loss}) for i, loss in enumerate([0.5, 0.4])]
    evaluation = evaluate(policy, initial_states(policy), obs, Context(planned_steps=100))
    assert [(v.action, v.step) for v in evaluation.verdicts] == [("checkpoint", 0), ("checkpoint", 1)]
    assert evaluation.verdicts[1].evidence["tie_loss_key"] == "val/loss"


def test_replay_scores_the_checkpoint_the_tie_kept() -> None:
    """The replay keeps what the trainer would hold: the tie with the lowest loss, scored on its own
    held-out value; the full run's reference stays the first evaluation at its best, for every policy."""
    curve = Curve(
        source="s",
        run_id="r",
        steps=[0, 1, 2, 3, 4, 5],
        watch=[0.5, 0.9, 0.9, 0.9, 0.9, 0.9],
        score=[0.4, 0.80, 0.84, 0.86, 0.85, 0.85],
        cost=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        extras={"val_loss": [1.0, 0.5, 0.4, 0.3, 0.35, 0.3]},
    )
    with_ties = PolicySpec.model_validate(
        {"monitor": "val", "mode": "max", "rules": [_TIES, {"rule": "patience", "patience": 2}]}
    )
    plain = PolicySpec.model_validate(
        {
            "monitor": "val",
            "mode": "max",
            "rules": [{"rule": "checkpoint"}, {"rule": "patience", "patience": 2}],
        }
    )
    tied, first = replay_curve(with_ties, curve), replay_curve(plain, curve)
    assert (tied.stop_index, tied.kept_index, tied.full_best_index) == (3, 3, 1)
    assert (first.stop_index, first.kept_index, first.full_best_index) == (3, 1, 1)
    assert tied.regret == pytest.approx(0.80 - 0.86)
    assert first.regret == 0.0
