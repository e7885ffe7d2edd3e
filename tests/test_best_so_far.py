"""The engine keeps each rule's best so far: rules with the same improvement test read one best, so
``patience`` and ``checkpoint`` cannot disagree about which step is best, and states stored before the
engine kept it (the best inside each rule's own state) continue as if nothing had changed."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plateau_tracker.server.policy import Context, Observation, PolicySpec, evaluate, initial_states
from plateau_tracker.server.policy.presets import preset

_VALUES = st.lists(
    st.one_of(
        st.integers(min_value=0, max_value=6).map(float),
        st.sampled_from([math.nan, math.inf, -math.inf, 2.5, 2.5000000001]),
    ),
    min_size=1,
    max_size=40,
)
_TESTS = st.fixed_dictionaries(
    {
        "min_delta": st.sampled_from([0.0, 0.5, 1.0, 0.1]),
        "relative": st.booleans(),
        "ties": st.sampled_from(["wait", "improve"]),
        "warmup": st.integers(min_value=0, max_value=5),
    }
)


def _observations(values: list[float]) -> list[Observation]:
    return [Observation(step, value, 0.0) for step, value in enumerate(values)]


def _in_chunks(policy: PolicySpec, observations: list[Observation], size: int) -> tuple[list, int | None]:
    """Evaluate as the tracker does: a few points per batch, states stored as JSON between batches."""
    states, verdicts = initial_states(policy), []
    for start in range(0, len(observations), size):
        evaluation = evaluate(policy, states, observations[start : start + size])
        verdicts += evaluation.verdicts
        states = json.loads(json.dumps(evaluation.states))
        if evaluation.stop_step is not None:
            return verdicts, evaluation.stop_step
    return verdicts, None


@settings(max_examples=300, deadline=None)
@given(
    values=_VALUES,
    test=_TESTS,
    patience=st.integers(min_value=1, max_value=4),
    mode=st.sampled_from(["min", "max"]),
    chunk=st.integers(min_value=1, max_value=7),
)
def test_patience_stops_naming_the_step_checkpoint_saved_last(
    values: list[float], test: dict, patience: int, mode: str, chunk: int
) -> None:
    policy = PolicySpec.model_validate(
        {
            "monitor": "m",
            "mode": mode,
            "rules": [{"rule": "checkpoint", **test}, {"rule": "patience", "patience": patience, **test}],
        }
    )
    verdicts, stop_step = _in_chunks(policy, _observations(values), chunk)
    saved = [v.step for v in verdicts if v.action == "checkpoint"]
    if stop_step is not None:
        stop = verdicts[-1]
        assert stop.action == "stop"
        assert stop.rule == "patience"
        if not saved:  # no finite value past the warm-up: nothing saved, and no best named
            assert stop.best_step is None
        else:
            assert stop.best_step == saved[-1]
            assert stop.best_value == values[saved[-1]]
    whole = evaluate(policy, initial_states(policy), _observations(values))
    assert (whole.stop_step, [v.step for v in whole.verdicts]) == (stop_step, [v.step for v in verdicts])


_SHAPES = st.fixed_dictionaries(
    {
        "start": st.floats(min_value=0.0, max_value=0.9),
        "gain": st.floats(min_value=-0.3, max_value=1.0),
        "pace": st.sampled_from([2.0, 8.0, 30.0]),
        "noise": st.sampled_from([0.0, 0.01, 0.05]),
        "quantum": st.sampled_from([0.0, 1 / 30, 1 / 359]),
    }
)


def _curve(shape: dict[str, float], length: int, mode: str, seed: int) -> list[float]:
    """A learning curve in [0, 1] (an accuracy for ``max``, its complement for ``min``): a saturating climb
    from ``start`` by ``gain``, with noise, on a grid of ``quantum`` (a small validation set) when given."""
    noise = [((seed * 7919 + i * 104729) % 1000 / 1000 - 0.5) * 2 * shape["noise"] for i in range(length)]
    values = []
    for i in range(length):
        value = shape["start"] + shape["gain"] * (1 - math.exp(-i / shape["pace"])) + noise[i]
        value = min(1.0, max(0.0, value))
        if shape["quantum"]:
            value = round(value / shape["quantum"]) * shape["quantum"]
        values.append(value if mode == "max" else 1.0 - value)
    return values


@settings(max_examples=150, deadline=None)
@given(
    shape=_SHAPES,
    length=st.integers(min_value=4, max_value=90),
    mode=st.sampled_from(["min", "max"]),
    monitor=st.sampled_from(["val", "val/acc", "val/loss"]),
    rate=st.sampled_from([None, "constant", "steps"]),
    plan=st.sampled_from([None, "exact", "double"]),
    chunk=st.integers(min_value=1, max_value=7),
    seed=st.integers(min_value=0, max_value=50),
    loss=st.sampled_from([None, "falling", "wavy"]),
)
def test_the_default_stops_naming_the_step_checkpoint_saved_last(
    shape: dict[str, float],
    length: int,
    mode: str,
    monitor: str,
    rate: str | None,
    plan: str | None,
    chunk: int,
    seed: int,
    loss: str | None,
) -> None:
    """Whichever of the default's rules stops a run (perfect, degenerate, outlook, ...), the best step it
    names is the one ``should_checkpoint()`` was true at last: a loop that saves on the checkpoint verdict
    and restores at the stop restores exactly the step the stop names; so it is where a validation loss
    breaks ties at the best (a later evaluation at the best value with a lower loss is saved too)."""
    policy = preset("default", monitor=monitor, mode=mode)  # type: ignore[arg-type]
    values = _curve(shape, length, mode, seed)
    third = max(1, length // 3)
    rates = {None: None, "constant": lambda i: 0.1, "steps": lambda i: 0.1 * 0.1 ** (i // third)}[rate]
    losses = {
        None: None,
        "falling": lambda i: 1.0 / (1 + i),
        "wavy": lambda i: 1.0 / (1 + i) + 0.3 * ((i * 7 + seed) % 5) / 5,
    }[loss]
    observations = [
        Observation(
            i,
            v,
            1.0 + i,
            {**({"lr": rates(i)} if rates else {}), **({"val_loss": losses(i)} if losses else {})},
        )
        for i, v in enumerate(values)
    ]
    context = Context(planned_steps={None: None, "exact": length - 1, "double": 2 * length}[plan])
    states, verdicts = initial_states(policy), []
    for start in range(0, length, chunk):
        evaluation = evaluate(policy, states, observations[start : start + chunk], context)
        verdicts += evaluation.verdicts
        states = json.loads(json.dumps(evaluation.states))
        if evaluation.stop_step is not None:
            break
    stops = [v for v in verdicts if v.action == "stop"]
    if not stops:
        return
    saved = [v.step for v in verdicts if v.action == "checkpoint"]
    assert stops[0].best_step == (saved[-1] if saved else None), stops[0].reason
    if saved:
        assert stops[0].best_value == values[saved[-1]]


def test_a_warm_up_keeps_steps_before_it_out_of_the_best() -> None:
    """A rule's warm-up is part of its improvement test: checkpoint with warm-up 3 never names step 0,
    while patience without one does, each from its own best."""
    policy = PolicySpec.model_validate(
        {
            "monitor": "m",
            "mode": "min",
            "rules": [{"rule": "checkpoint", "warmup": 3}, {"rule": "patience", "patience": 4}],
        }
    )
    evaluation = evaluate(policy, initial_states(policy), _observations([0.1, 1.0, 0.9, 0.8, 0.85, 0.9]))
    assert [v.step for v in evaluation.verdicts if v.action == "checkpoint"] == [3]
    stop = evaluation.verdicts[-1]
    assert (stop.rule, stop.step, stop.best_step, stop.best_value) == ("patience", 4, 0, 0.1)


def _legacy(states: list[dict]) -> list[dict]:
    """States as the engine stored them before it kept the best: ``best``/``best_step`` in each rule's
    own state, no ``best`` in the wrapper."""
    legacy = []
    for wrapper in states:
        inner = dict(wrapper["s"])
        best = wrapper.get("best")
        if best is not None and inner is not None:
            inner["best"], inner["best_step"] = best
        legacy.append({key: value for key, value in wrapper.items() if key != "best"} | {"s": inner})
    return legacy


def test_states_stored_before_the_engine_kept_the_best_continue_unchanged() -> None:
    policy = PolicySpec.model_validate(
        {
            "monitor": "m",
            "mode": "max",
            "rules": [
                {"rule": "checkpoint", "min_delta": 0.01},
                {"rule": "patience", "patience": 6, "min_delta": 0.01},
                {"rule": "plateau", "warmup": 2, "window": 6},
                {"rule": "threshold", "stop_at": 0.99},
            ],
            "combine": "all",
        }
    )
    curve = _observations([0.5 + 0.4 * (1 - math.exp(-s / 6)) + 0.01 * math.sin(s) for s in range(60)])
    first = evaluate(policy, initial_states(policy), curve[:20])
    assert any(wrapper.get("best") for wrapper in first.states)
    stored = json.loads(json.dumps(first.states))
    today = evaluate(policy, stored, curve[20:])
    yesterday = evaluate(policy, _legacy(stored), curve[20:])
    assert yesterday.verdicts == today.verdicts
    assert yesterday.stop_step == today.stop_step
    assert [v.action for v in today.verdicts].count("checkpoint") >= 1


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=150),
    asks=st.lists(st.integers(min_value=0, max_value=1400), max_size=30),
)
def test_the_best_at_half_the_run_is_the_last_kept_best_at_or_before_it(
    gaps: list[int], asks: list[int]
) -> None:
    """``outlook``'s best-so-far path stays within ``MAX_PATH`` entries however many new bests a run sets,
    and the best it reads at half the run is the path's last entry at or before that step (None before the
    path starts): thinning only ever makes that best older, so the measured pace larger, never smaller."""
    from plateau_tracker.server.policy.rules._best_path import MAX_PATH, best_at_half, keep_best

    path: list[list[float]] = []
    step = 0
    for gap in gaps:
        step += gap
        keep_best(path, step, 1.0 / step)
    assert len(path) <= MAX_PATH
    assert path[-1] == [step, 1.0 / step]
    for t in asks:
        before = [entry[1] for entry in path if entry[0] <= t / 2]
        assert best_at_half(path, t) == (before[-1] if before else None)


@settings(max_examples=200, deadline=None)
@given(
    values=_VALUES,
    test=_TESTS,
    ema=st.sampled_from([None, 0.5]),
    combine=st.sampled_from(["any", "all"]),
    mode=st.sampled_from(["min", "max"]),
    chunk=st.integers(min_value=1, max_value=7),
    losses=st.lists(st.sampled_from([0.3, 0.2, 0.2, 0.1, math.nan]), min_size=40, max_size=40),
)
def test_rules_quiet_on_plain_points_judge_as_if_asked_on_every_point(
    values: list[float],
    test: dict,
    ema: float | None,
    combine: str,
    mode: str,
    chunk: int,
    losses: list[float],
) -> None:
    """The engine does not ask ``checkpoint`` and ``non_finite`` about a finite value that moves no best
    (``quiet_on_plain_points``), nor a checkpoint that breaks ties by a loss about one that equals no best
    (``asked_on_ties``): their verdicts and states are those of asking them on every point, with their own
    improvement tests, smoothing, votes, ties and NaN alike."""
    from plateau_tracker.server.policy import _policy as engine

    policy = PolicySpec.model_validate(
        {
            "monitor": "m",
            "mode": mode,
            "combine": combine,
            "rules": [
                {"rule": "non_finite"},
                {"rule": "checkpoint", **test, "ema": ema},
                {"rule": "patience", "patience": 3},
                {"rule": "checkpoint"},
                {"rule": "checkpoint", **test, "tie_loss_key": "val_loss"},
                {"rule": "checkpoint", "tie_loss_key": "val_loss"},
                {"rule": "plateau", "window": 5},
            ],
        }
    )
    observations = [
        Observation(step, value, 0.0, {"val_loss": loss})
        for step, (value, loss) in enumerate(zip(values, losses, strict=False))
    ]
    quiet = _in_chunks(policy, observations, chunk)
    with pytest.MonkeyPatch.context() as patch:  # the engine asks every rule on every point
        patch.setattr(engine, "_quiet", lambda judged, tie=False: judged)
        asked = _in_chunks(policy, observations, chunk)
    assert quiet == asked
    assert len(quiet[0]) > 0 or not any(math.isfinite(v) for v in values)
