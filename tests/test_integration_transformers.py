"""PlateauCallback in a real Hugging Face ``Trainer``: a tiny BERT built from a config on CPU (nothing is
downloaded), against a real tracker. The policy makes the verdicts certain whatever the training does:
``patience`` 2 with a ``min_delta`` no evaluation can beat, so the first evaluation is the best (a
checkpoint) and the third is the stop."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

from plateau_tracker.integrations.transformers import RUN_FILE, PlateauCallback  # noqa: E402
from tests._server import TrackerProcess  # noqa: E402

# End to end: real processes, real training or real failures; kept out of the quick subset.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
EVAL_STEPS = 4
RULES = [{"rule": "patience", "patience": 2, "min_delta": 1e6}, {"rule": "checkpoint", "min_delta": 1e6}]


class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, 50, (size, 8), generator=generator)
        self.labels = (self.ids[:, 0] > 25).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"input_ids": self.ids[index], "attention_mask": torch.ones(8), "labels": self.labels[index]}


def tiny_bert() -> Any:
    """A one-layer BERT built from a config on CPU, seeded (nothing is downloaded)."""
    config = transformers.BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config)


def _trainer(
    output: Path,
    callback: PlateauCallback,
    max_steps: int = 40,
    *,
    ddp: bool = False,
    logging_steps: int = 2,
    **overrides: Any,
) -> Any:
    model = tiny_bert()
    arguments: dict[str, Any] = {
        "output_dir": str(output),
        "max_steps": max_steps,
        "per_device_train_batch_size": 8,
        "eval_strategy": "steps",
        "eval_steps": EVAL_STEPS,
        "logging_steps": logging_steps,
        "save_strategy": "no",  # every checkpoint below is one Plateau asked for
        "learning_rate": 1e-3,
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
        "load_best_model_at_end": False,
        **({"ddp_backend": "gloo"} if ddp else {}),
        **overrides,
    }
    args = transformers.TrainingArguments(**arguments)
    return transformers.Trainer(
        model=model, args=args, train_dataset=Tokens(64, 0), eval_dataset=Tokens(16, 1), callbacks=[callback]
    )


def _callback(tracker: TrackerProcess) -> PlateauCallback:
    return PlateauCallback(
        project="hf", experiment="tiny-bert", monitor="eval_loss", mode="min", rules=RULES, url=tracker.url
    )


def test_trainer_saves_stops_and_resumes_where_plateau_decides(
    tracker: TrackerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="plateau")
    output = tmp_path / "out"
    best, stop = EVAL_STEPS, 3 * EVAL_STEPS

    # A training cut short at step 8 (before any stop): the best evaluation was saved, on Plateau's word.
    first = _trainer(output, _callback(tracker), max_steps=2 * EVAL_STEPS)
    first.train()
    assert sorted(p.name for p in output.glob("checkpoint-*")) == [f"checkpoint-{best}"]
    run_key = json.loads((output / RUN_FILE).read_text())["run_key"]
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "hf", "limit": 1000}).json()["data"]
    (run,) = [r for r in runs if r["run_key"] == run_key]
    assert (run["status"], run["stop_step"], run["planned_steps"]) == ("finished", None, 2 * EVAL_STEPS)
    assert run["config"]["learning_rate"] == 1e-3

    # Resumed from that checkpoint: the same run goes on, and stops at the third evaluation.
    callback = _callback(tracker)
    resumed = _trainer(output, callback)
    resumed.train(resume_from_checkpoint=str(output / f"checkpoint-{best}"))
    assert resumed.state.global_step == stop  # not max_steps
    assert sorted(p.name for p in output.glob("checkpoint-*")) == [f"checkpoint-{best}"]
    assert callback.best_checkpoint is None  # this process saw no new best: the one to keep is step 4's
    assert f"training stops at step {stop} (patience)" in caplog.text
    stored = httpx.get(f"{tracker.url}/api/v1/runs/{run['id']}").json()
    assert (stored["status"], stored["stop_step"]) == ("stopped", stop)
    summary = httpx.get(f"{tracker.url}/api/v1/runs/{run['id']}/summary").json()["summary"]
    assert (summary["stopped_step"], summary["stopped_by"]) == (stop, "patience")
    keys = httpx.get(f"{tracker.url}/api/v1/runs/{run['id']}/keys").json()["keys"]
    assert {"eval_loss", "loss", "lr"} <= set(keys)
    # The Trainer's figures of the whole training are the run's summary, not points of a series.
    assert not {"train_runtime", "train_loss", "total_flos"} & set(keys)
    assert summary["transformers_train_runtime"] > 0
    assert summary["transformers_train_loss"] > 0

    # Resumed once more, a run Plateau has stopped stops at its first evaluation: nothing is left to learn.
    again = _trainer(output, _callback(tracker))
    again.train(resume_from_checkpoint=str(output / f"checkpoint-{best}"))
    assert again.state.global_step == 2 * EVAL_STEPS
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "hf", "limit": 1000}).json()["data"]
    assert [r["id"] for r in runs if r["run_key"] == run_key] == [run["id"]]


def test_each_evaluation_carries_the_rate_its_step_trained_at(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    """The Trainer logs its rate every ``logging_steps`` only (here never before the end): each evaluation
    still carries ``lr``, the rate of its step's update under the linear decay from 1e-3 to 0 over 12 steps
    (the update of step s uses the scheduler's step s - 1). Until 2026-11-26 no rate came, and with
    ``eval_steps`` below ``logging_steps`` the rules read one from up to ``logging_steps`` before."""
    callback = PlateauCallback(project="hf", experiment="rate", monitor="eval_loss", url=tracker.url)
    _trainer(tmp_path / "out", callback, max_steps=3 * EVAL_STEPS, logging_steps=1000).train()
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "hf", "experiment": "rate"}).json()
    (run,) = runs["data"]
    page = httpx.get(f"{tracker.url}/api/v1/runs/{run['id']}/history", params={"key": "lr"}).json()
    assert [(p["step"], p["value"]) for p in page["points"]] == [
        (step, pytest.approx(1e-3 * (12 - (step - 1)) / 12)) for step in (4, 8, 12)
    ]


def test_a_fresh_training_in_the_same_folder_is_a_new_run(tracker: TrackerProcess, tmp_path: Path) -> None:
    output = tmp_path / "out"
    _trainer(output, _callback(tracker), max_steps=EVAL_STEPS).train()
    first = json.loads((output / RUN_FILE).read_text())["run_key"]
    _trainer(output, _callback(tracker), max_steps=EVAL_STEPS).train()
    assert json.loads((output / RUN_FILE).read_text())["run_key"] != first


def test_every_process_of_a_distributed_training_stops_and_saves_alike(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    """torchrun, two processes (gloo on CPU): one run, both processes stop at the same evaluation."""
    output = tmp_path / f"ddp-{uuid.uuid4().hex[:6]}"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    command += ["-m", "tests._hf_ddp", tracker.url, str(output)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLATEAU_")}
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads((output / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [(r["global_step"], r["stopped"]) for r in results] == [(3 * EVAL_STEPS, True)] * 2
    assert sorted(p.name for p in output.glob("checkpoint-*")) == [f"checkpoint-{EVAL_STEPS}"]
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"experiment": output.name}).json()["data"]
    assert [(r["world_size"], r["status"], r["stop_step"]) for r in runs] == [(2, "stopped", 3 * EVAL_STEPS)]


def readme_block(marker: str) -> str:
    """The README's Python block that holds ``marker``, as written."""
    text = (REPO / "README.md").read_text()
    blocks = [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]
    [block] = [block for block in blocks if marker in block]
    return block


# The README's arguments are a user's, who has an accelerator (this machine has none).
@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning")
def test_the_readme_snippet_as_written_loads_plateaus_best_and_stops_at_its_stop(
    tracker: TrackerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's Hugging Face block, run as written in a folder of its own on a tiny BERT: the
    Trainer saves every epoch and keeps the best by its own lights, yet the model it holds at the end is
    the checkpoint Plateau named, and it stops where Plateau's stop came (or runs its course)."""
    monkeypatch.setenv("PLATEAU_URL", tracker.url)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {
        "model": tiny_bert(),
        "train": Tokens(64, 0),
        "val": Tokens(16, 1),
    }
    exec(compile(readme_block("integrations.transformers"), "README.md", "exec"), namespace)
    trainer = namespace["trainer"]
    [callback] = [c for c in trainer.callback_handler.callbacks if isinstance(c, PlateauCallback)]
    run_id = _run_id(tracker, tmp_path / "out")
    decisions = httpx.get(f"{tracker.url}/api/v1/runs/{run_id}/decisions").json()["data"]
    checkpoints = [d["step"] for d in decisions if d["action"] == "checkpoint"]
    stops = [d["step"] for d in decisions if d["action"] == "stop"]
    assert checkpoints, "Plateau named no best checkpoint"
    best = checkpoints[-1]
    assert callback.best_checkpoint == str(Path("out") / f"checkpoint-{best}")
    assert trainer.state.best_model_checkpoint == callback.best_checkpoint
    assert trainer.state.global_step == (stops[0] if stops else trainer.state.max_steps)
    saved = _weights(tmp_path / "out" / f"checkpoint-{best}")
    loaded = {name: tensor.detach() for name, tensor in trainer.model.state_dict().items()}
    assert saved.keys() <= loaded.keys()
    assert all(torch.equal(saved[name], loaded[name]) for name in saved)


def _run_id(tracker: TrackerProcess, output: Path) -> int:
    run_key = json.loads((output / RUN_FILE).read_text())["run_key"]
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "nlp", "limit": 1000}).json()["data"]
    (run,) = [r for r in runs if r["run_key"] == run_key]
    return int(run["id"])


def _weights(checkpoint: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(checkpoint / "model.safetensors"))


def test_required_arguments_are_checked_when_the_callback_is_made() -> None:
    with pytest.raises(TypeError, match="needs project="):
        PlateauCallback()
    with pytest.raises(TypeError, match="does not take: projet"):
        PlateauCallback(project="nlp", projet="typo")
    with pytest.raises(TypeError, match="sets planned_steps itself"):
        PlateauCallback(project="nlp", planned_steps=10)


def test_the_best_model_loaded_at_the_end_is_the_one_plateau_named(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    """The Trainer saves every evaluation and picks its own best (the lowest eval_loss); Plateau's best is
    the first evaluation (no later one beats it by min_delta). Before, the Trainer's pick won: it is
    written before the callback's on_save, which set Plateau's only at Plateau's own checkpoints."""
    output = tmp_path / "out"
    callback = _callback(tracker)
    trainer = _trainer(
        output,
        callback,
        max_steps=5 * EVAL_STEPS,
        save_strategy="steps",
        save_steps=EVAL_STEPS,
        load_best_model_at_end=True,
    )
    trainer.train()
    best = output / f"checkpoint-{EVAL_STEPS}"
    assert trainer.state.best_model_checkpoint == str(best)
    saved = _weights(best)
    loaded = trainer.model.state_dict()
    assert all(torch.equal(saved[name], loaded[name]) for name in saved)


def test_the_trainers_metric_for_best_model_and_run_name_are_honoured(
    tracker: TrackerProcess, tmp_path: Path
) -> None:
    """No monitor given: the run judges the Trainer's metric_for_best_model, in its direction, under its
    run_name (before: eval_loss, minimised, under a generated name)."""
    callback = PlateauCallback(project="hf", experiment="honoured", rules=RULES, url=tracker.url)
    trainer = _trainer(
        tmp_path / "out",
        callback,
        max_steps=2 * EVAL_STEPS,
        metric_for_best_model="accuracy",
        greater_is_better=True,
        run_name="tiny-bert-lr1e-3",
    )
    trainer.compute_metrics = lambda p: {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}
    trainer.train()
    run_key = json.loads((tmp_path / "out" / RUN_FILE).read_text())["run_key"]
    runs = httpx.get(f"{tracker.url}/api/v1/runs", params={"project": "hf", "limit": 1000}).json()["data"]
    (run,) = [r for r in runs if r["run_key"] == run_key]
    assert run["name"] == "tiny-bert-lr1e-3"
    assert (run["policy"]["monitor"], run["policy"]["mode"]) == ("eval_accuracy", "max")
    keys = httpx.get(f"{tracker.url}/api/v1/runs/{run['id']}/keys").json()["keys"]
    assert "eval_accuracy" in keys
