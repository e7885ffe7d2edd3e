"""Real training for the demo: small PyTorch models on scikit-learn's digits (bundled, works offline)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

import plateau_tracker as plateau


def fit_threads_to_host(cpus: int | None = None) -> int:
    """Sets torch's intra-op threads for the demo's tiny models and returns the count. Their matrices are
    too small to gain from threads, and the tracker the demo starts shares the host: on a host of four
    cores or fewer, one thread; on a larger one, a quarter of the cores, at most 4."""
    cpus = cpus or os.cpu_count() or 1
    threads = 1 if cpus <= 4 else min(4, cpus // 4)
    torch.set_num_threads(threads)
    return threads


@dataclass(frozen=True)
class Split:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass(frozen=True)
class Trial:
    """One run's hyperparameters."""

    name: str
    hidden: tuple[int, ...]
    optimizer: str
    lr: float
    weight_decay: float = 0.0
    dropout: float = 0.0
    batch_size: int = 64


@dataclass(frozen=True)
class Outcome:
    name: str
    run_id: int | None
    epochs_run: int
    budget: int
    best_epoch: int | None
    best_val_loss: float | None
    best_val_acc: float | None
    test_acc: float
    restored: bool
    reason: str
    seconds: float


TRIALS = (
    Trial("wide-adam-lr1e-2", hidden=(256, 256), optimizer="adam", lr=1e-2),
    Trial("mlp-sgd-momentum", hidden=(128,), optimizer="sgd", lr=0.05, dropout=0.2),
    Trial("small-adam-lr1e-3", hidden=(32,), optimizer="adam", lr=1e-3, weight_decay=1e-4),
    Trial("linear-sgd-lr1e-2", hidden=(), optimizer="sgd", lr=1e-2),
)


def load_split(seed: int) -> Split:
    """Digits scaled to [0, 1], split 60/20/20 (train/validation/test), stratified."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_rest, y_train, y_rest = train_test_split(x, y, test_size=0.4, random_state=seed, stratify=y)
    x_val, x_test, y_val, y_test = train_test_split(
        x_rest, y_rest, test_size=0.5, random_state=seed, stratify=y_rest
    )
    t = torch.from_numpy
    return Split(t(x_train), t(y_train), t(x_val), t(y_val), t(x_test), t(y_test))


def build_model(trial: Trial) -> nn.Module:
    layers: list[nn.Module] = []
    width = 64
    for size in trial.hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        if trial.dropout:
            layers.append(nn.Dropout(trial.dropout))
        width = size
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def _optimizer(trial: Trial, model: nn.Module) -> torch.optim.Optimizer:
    if trial.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=trial.lr, weight_decay=trial.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=trial.lr, momentum=0.9, weight_decay=trial.weight_decay)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(mean cross-entropy, accuracy)."""
    model.eval()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return loss, accuracy


def _train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    split: Split,
    batch_size: int,
    run: plateau.Run,
    generator: torch.Generator,
) -> float:
    """One epoch over the training split in a shuffled order, each step timed; returns the mean loss."""
    model.train()
    order = torch.randperm(len(split.x_train), generator=generator)
    total = 0.0
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        with run.step_timer():
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(split.x_train[batch]), split.y_train[batch])
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        total += loss.item() * len(batch)
    return total / len(order)


def train_one(
    trial: Trial,
    split: Split,
    *,
    url: str,
    budget: int,
    seed: int,
    checkpoint_dir: Path,
    rules: list[dict[str, Any]] | None,
) -> Outcome:
    """Train ``trial`` for up to ``budget`` epochs under ``rules`` (None: the tracker's default policy);
    save on checkpoint, restore the best on stop."""
    torch.manual_seed(seed)
    model = build_model(trial)
    optimizer = _optimizer(trial, model)
    config: dict[str, Any] = {**trial.__dict__, "hidden": list(trial.hidden), "budget": budget}
    started = time.perf_counter()
    run = plateau.init(
        project="demo",
        experiment="digits-mlp",
        name=trial.name,
        config=config,
        monitor="val/loss",
        mode="min",
        rules=rules,
        url=url,
        planned_steps=budget - 1,  # epochs are steps 0 .. budget - 1
    )
    # The learning rate beside val/loss, as the README's loop logs it: the default policy reads it.
    run.watch_optimizer(optimizer)
    # Its complexity (parameters, FLOPs, latency, memory), for the dashboard's complexity page.
    run.profile_model(model, split.x_val[:64], batch_size=64, repeats=10)
    checkpoint_path = checkpoint_dir / f"run-{run.id}.pt"
    saved_epoch: int | None = None
    saved_scores: tuple[float, float] | None = None
    epochs_run = 0
    stop = None
    generator = torch.Generator().manual_seed(seed)
    for epoch in range(budget):
        train_loss = _train_epoch(model, optimizer, split, trial.batch_size, run, generator)
        val_loss, val_acc = evaluate(model, split.x_val, split.y_val)
        epochs_run = epoch + 1
        run.log({"train/loss": train_loss, "val/loss": val_loss, "val/acc": val_acc}, step=epoch)
        if run.should_checkpoint():  # the README's loop: answers for this epoch
            torch.save(model.state_dict(), checkpoint_path)
            saved_epoch, saved_scores = epoch, (val_loss, val_acc)
        if run.should_stop():
            stop = run.latest
            break
    restored = False
    if saved_epoch is not None and (stop is None or stop.best_step == saved_epoch):
        model.load_state_dict(torch.load(checkpoint_path, weights_only=True))
        restored = True
    _, test_acc = evaluate(model, split.x_test, split.y_test)
    run.finish()
    reason = stop.reason if stop else f"ran its budget of {budget} epochs"
    return Outcome(
        name=trial.name,
        run_id=run.id,
        epochs_run=epochs_run,
        budget=budget,
        best_epoch=saved_epoch,
        best_val_loss=saved_scores[0] if saved_scores else None,
        best_val_acc=saved_scores[1] if saved_scores else None,
        test_acc=test_acc,
        restored=restored,
        reason=reason,
        seconds=time.perf_counter() - started,
    )
