"""The new rules served by the tracker's app: auxiliary keys, planned length, cross-run pruning."""

from __future__ import annotations

import math
import uuid

import httpx
import pytest

from tests._reasons import detail
from tests.conftest import create_run

# No server process needed: the `client` fixture is the tracker's app in this process.
pytestmark = pytest.mark.in_process


def post(client: httpx.Client, run_id: int, points: list[dict]) -> dict:
    response = client.post(
        f"/api/v1/runs/{run_id}/metrics", json={"batch_id": uuid.uuid4().hex, "points": points}
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_overfitting_reads_the_training_loss_logged_beside_it(client: httpx.Client) -> None:
    policy = {
        "monitor": "val/loss",
        "mode": "min",
        "rules": [{"rule": "overfitting", "train_key": "train/loss", "window": 6}],
    }
    run = create_run(client, policy)
    val = [0.5, 0.45, 0.4, 0.42, 0.44, 0.46, 0.48, 0.5, 0.52, 0.54]
    answers = [
        post(
            client,
            run["id"],
            [
                {"key": "val/loss", "step": s, "value": v},
                {"key": "train/loss", "step": s, "value": 1.0 - 0.05 * s},
            ],
        )
        for s, v in enumerate(val)
    ]
    stops = [a["decision"] for a in answers if a["decision"]["action"] == "stop"]
    assert stops
    assert stops[0]["rule"] == "overfitting"
    assert stops[0]["best_step"] == 2
    assert "train/loss keeps improving" in stops[0]["reason"]


def test_training_loss_from_an_earlier_batch_is_found(client: httpx.Client) -> None:
    policy = {
        "monitor": "val/loss",
        "mode": "min",
        "rules": [
            {"rule": "prechelt", "criterion": "PQ", "alpha": 0.5, "strip": 2, "train_key": "train/loss"}
        ],
    }
    run = create_run(client, policy)
    val = [1.0, 0.8, 0.85, 0.9, 0.95, 1.0]
    for s, v in enumerate(val):
        post(client, run["id"], [{"key": "train/loss", "step": s, "value": 0.5}])  # logged first, alone
        answer = post(client, run["id"], [{"key": "val/loss", "step": s, "value": v}])
    assert answer["decision"]["action"] == "stop"
    assert answer["decision"]["evidence"]["P_k"] == 0.0


def test_forecast_uses_the_planned_length_the_run_declared(client: httpx.Client) -> None:
    policy = {
        "monitor": "acc",
        "mode": "max",
        "rules": [{"rule": "forecast", "window": 5, "delta": 0.01, "min_progress": 0.0}],
    }
    flat = [0.5, 0.6, 0.65, 0.66, 0.661, 0.662, 0.661, 0.662, 0.662, 0.661]
    short = create_run(client, policy, planned_steps=12)
    long = create_run(client, policy, planned_steps=100_000)
    for run in (short, long):
        for s, v in enumerate(flat):
            answer = post(client, run["id"], [{"key": "acc", "step": s, "value": v}])
        run["last"] = answer["decision"]
    assert short["last"]["action"] == "stop"
    assert short["last"]["evidence"]["planned_steps"] == 12
    assert long["last"]["action"] != "stop"  # a tiny slope over 100,000 steps is still worth waiting for


def test_the_default_policy_stops_a_saturated_run_through_the_tracker(client: httpx.Client) -> None:
    """No rules given: the default judges, with the rate the trainer logs beside the monitored loss (logged
    to four decimals, as trainers print it, so it settles on its floor)."""
    policy = {"monitor": "val/loss", "mode": "min"}
    run = create_run(client, policy, planned_steps=100)
    stop = None
    for s in range(100):
        loss = round(0.2 + 2.0 * math.exp(-0.3 * s), 4)
        answer = post(
            client,
            run["id"],
            [{"key": "lr", "step": s, "value": 0.1}, {"key": "val/loss", "step": s, "value": loss}],
        )
        if answer["decision"]["action"] == "stop":
            stop = answer["decision"]
            break
    assert stop is not None
    assert stop["rule"] == "outlook"
    assert 30 <= stop["step"] < 60
    assert stop["evidence"]["planned_steps"] == 100
    assert "last doubling of the run" in detail(stop)
    assert stop["evidence"]["verdict"] == "pace"
    assert stop["best_step"] < stop["step"]


# 15: the accuracy's last new best came at step 3, and a hold stands only for 12 evaluations without one
# (past that, nothing has been gained over the last doubling). A validation loss that still falls is
# evidence of learning at every step, and holds the run to its end.
@pytest.mark.parametrize(("loss", "stop_step"), [("flat", 15), ("falling", None)])
def test_the_default_policy_reads_a_validation_loss_logged_as_eval_loss_in_its_own_batch(
    client: httpx.Client, loss: str, stop_step: int | None
) -> None:
    """An accuracy on 30 samples frozen at 20/30 (iris): a validation loss that still falls holds it, one
    that stopped with it does not. The loss comes as the Transformers trainer names it, in a batch of
    its own ahead of the accuracy's, so the tracker reads it back from the store; other spellings of
    the same series are known keys of other runs, which this run never logged."""
    other = create_run(client, {"monitor": "val_loss"})
    post(
        client,
        other["id"],
        [{"key": "val_loss", "step": 0, "value": 1.0}, {"key": "loss", "step": 0, "value": 1.0}],
    )
    run = create_run(client, {"monitor": "val/acc", "mode": "max"}, planned_steps=60)
    accuracy = [c / 30 for c in [10, 14, 17, 19] + [20] * 36]
    stop = None
    for s, value in enumerate(accuracy):
        eval_loss = 1.1 - (0.1 * min(s, 4) if loss == "flat" else 0.012 * s)
        post(client, run["id"], [{"key": "eval_loss", "step": s, "value": eval_loss}])
        answer = post(client, run["id"], [{"key": "val/acc", "step": s, "value": value}])
        if answer["decision"]["action"] == "stop":
            stop = answer["decision"]
            break
    if stop_step is None:
        assert stop is None, stop["reason"]
        return
    assert stop is not None
    assert (stop["step"], stop["rule"]) == (stop_step, "outlook")
    assert stop["evidence"]["verdict"] == "pace"


def test_percentile_prunes_against_finished_runs_of_the_experiment(client: httpx.Client) -> None:
    experiment = f"sweep-{uuid.uuid4().hex[:6]}"
    policy = {
        "monitor": "acc",
        "mode": "max",
        # warmup's old name: policies written before the rename keep working.
        "rules": [{"rule": "percentile", "n_startup_runs": 3, "warmup_steps": 1}],
    }
    for offset in (0.5, 0.6, 0.7):
        run = create_run(client, policy, experiment=experiment)
        post(client, run["id"], [{"key": "acc", "step": s, "value": offset + 0.05 * s} for s in range(5)])
        client.post(f"/api/v1/runs/{run['id']}/finish", json={"status": "finished"})
    good = create_run(client, policy, experiment=experiment)
    bad = create_run(client, policy, experiment=experiment)
    for s in range(5):
        good_answer = post(client, good["id"], [{"key": "acc", "step": s, "value": 0.9 + 0.01 * s}])
        bad_answer = post(client, bad["id"], [{"key": "acc", "step": s, "value": 0.3 + 0.01 * s}])
    assert good_answer["decision"]["action"] == "continue"
    assert bad_answer["decision"]["action"] == "stop"
    assert bad_answer["decision"]["step"] == 1  # warmup_steps=1
    assert "of 3 finished runs" in bad_answer["decision"]["reason"]
    stored = client.get(f"/api/v1/runs/{bad['id']}").json()
    assert (stored["stop_step"], stored["stop_rule"]) == (1, "percentile")
    assert stored["policy"]["rules"][0]["warmup"] == 1  # said back by its one name


def test_asha_compares_runs_at_their_first_checkpoint_past_a_rung(client: httpx.Client) -> None:
    # Checkpoints at steps 100, 250, 1000: rung 243 is judged at step 250 (inside a stored block, after
    # step 100), rung 729 at step 1000 (a later block), for the judged run and for the others alike.
    experiment = f"asha-{uuid.uuid4().hex[:6]}"
    policy = {"monitor": "acc", "mode": "max", "rules": [{"rule": "asha", "min_step": 1}]}
    steps = [100, 250, 1000]
    for offset in (0.5, 0.6, 0.7):
        run = create_run(client, policy, experiment=experiment)
        post(
            client,
            run["id"],
            [{"key": "acc", "step": s, "value": offset + 0.1 * i} for i, s in enumerate(steps)],
        )
    good = create_run(client, policy, experiment=experiment)
    bad = create_run(client, policy, experiment=experiment)
    late = create_run(client, policy, experiment=experiment)
    for i, s in enumerate(steps):
        good_answer = post(client, good["id"], [{"key": "acc", "step": s, "value": 0.95 + 0.01 * i}])
    bad_answer = post(client, bad["id"], [{"key": "acc", "step": 100, "value": 0.9}])
    bad_answer = post(client, bad["id"], [{"key": "acc", "step": 250, "value": 0.55}])
    late_answer = post(client, late["id"], [{"key": "acc", "step": 1000, "value": 0.8}])
    assert good_answer["decision"]["action"] != "stop"
    assert bad_answer["decision"]["action"] == "stop"
    assert (bad_answer["decision"]["step"], bad_answer["decision"]["evidence"]["rung"]) == (250, 243)
    assert bad_answer["decision"]["evidence"]["runs_at_rung"] == 4  # the three, and the good run at 250
    assert late_answer["decision"]["action"] == "stop"  # 0.8 at 1000 against 0.7, 0.8, 0.9, 0.97
    assert late_answer["decision"]["evidence"]["rung"] == 729


def test_a_tie_is_broken_only_by_the_loss_logged_at_that_evaluation(client: httpx.Client) -> None:
    """The tracker hands a rule a key missing at a step at its latest earlier step. A validation loss that
    arrives in a later batch than its accuracy must not break a tie with the previous evaluation's loss:
    the checkpoint would be saved at the wrong step, on a loss this model never had."""
    run = create_run(client, {"monitor": "val/acc", "mode": "max", "rules": [_TIES]})

    def acc(step: int, value: float) -> dict:
        return {"key": "val/acc", "step": step, "value": value}

    def loss(step: int, value: float) -> dict:
        return {"key": "val/loss", "step": step, "value": value}

    post(client, run["id"], [acc(0, 0.5), loss(0, 1.0)])  # the best, saved with its loss
    post(client, run["id"], [acc(1, 0.4), loss(1, 0.7)])  # below the best, a lower loss
    tied = post(client, run["id"], [acc(2, 0.5)])  # a tie; its loss comes later (0.7 is step 1's)
    post(client, run["id"], [loss(2, 1.2)])
    assert tied["decisions"] == []
    # The same tie with its loss in one batch is broken, and so is one whose loss came first.
    post(client, run["id"], [acc(3, 0.5), loss(3, 0.6)])
    post(client, run["id"], [loss(4, 0.5)])
    post(client, run["id"], [acc(4, 0.5)])
    saved = [
        (d["step"], d["evidence"].get("tie_loss"))
        for d in client.get(f"/api/v1/runs/{run['id']}/decisions").json()["data"]
        if d["action"] == "checkpoint"
    ]
    assert saved == [(0, None), (3, 0.6), (4, 0.5)]


_TIES = {"rule": "checkpoint", "tie_loss_key": "val/loss"}
