"""The team's development corpus: real small trainings on this machine, written as OPDA-schema curves.

    python -m tests.benchmarks.corpus [--out test-artifacts/corpus.jsonl] [--runs 40] [--seed 0]

The curves are generated, never committed: this script is the corpus. Each source is one sweep (random
search over one task), grouped in families for leave-one-family-out choices:

- ``mlp/*``: PyTorch MLPs on scikit-learn's bundled digits, wine, iris and breast-cancer data and on a
  large synthetic task;
- ``cnn/*``: a small PyTorch CNN on the 8x8 digits images;
- ``gbdt/*``: scikit-learn gradient-boosted trees, one checkpoint every few boosting rounds, or every round;
- ``seq/*``: a small GRU recalling the first of 12 symbols at the end of the sequence, a task a recurrent
  network learns late and all at once, after a long stretch at chance.

What varies within a source, drawn per run: the optimizer and learning rate (some high enough to diverge),
the schedule (constant, step, cosine with warm-up, one-cycle; a long warm-up makes a long flat start),
label noise on the training set (overfitting, late climbs), width and weight decay, the planned length,
and whether the run logs its learning rate (half do, as ``lr``; the rest leave it out, as many trainers
do). Sources differ in the validation set's size (coarse accuracy in steps of 1/36 to fine ones of
1/2000) and in the metric watched: accuracy-type sources watch ``val`` in mode max, loss-type sources
watch a cross-entropy in mode min (``"mode": "min"`` in the record).

Each line has the OPDA fields (``source``, ``run_id``, ``hparams``, ``budget``, ``x``, ``val``, ``val2``,
``complete``, ``diverged``) plus ``mode``, ``score_mode``, ``family`` and per-checkpoint series
``train_loss``, ``val_loss``, ``val_acc``, ``test_loss`` and, where the run logs it, ``lr``. ``val2`` is
the accuracy on a held-out test split (larger than the validation split where the data allows), whichever
metric is watched, so a stop is scored on data the rule never saw. A run whose training loss turns NaN
ends there (``diverged``, incomplete).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("test-artifacts") / "corpus.jsonl"


@dataclass(frozen=True)
class Task:
    """One source: a dataset split, a model kind and the metric watched."""

    source: str
    family: str
    model: str  # mlp | cnn | gbdt
    dataset: str
    n_val: int
    n_test: int
    metric: str  # acc (mode max) | loss (mode min)


TASKS = (
    Task("mlp/digits-coarse", "mlp", "mlp", "digits", 60, 600, "acc"),
    Task("mlp/wine-tiny", "mlp", "mlp", "wine", 36, 60, "acc"),
    Task("mlp/synthetic-large", "mlp", "mlp", "synthetic", 2000, 2000, "acc"),
    Task("mlp/digits-loss", "mlp", "mlp", "digits", 300, 600, "loss"),
    Task("cnn/digits", "cnn", "cnn", "digits", 360, 600, "acc"),
    Task("cnn/digits-noisy-loss", "cnn", "cnn", "digits", 150, 600, "loss"),
    Task("gbdt/synthetic-coarse", "gbdt", "gbdt", "synthetic-hard", 120, 1500, "acc"),
    Task("gbdt/synthetic-logloss", "gbdt", "gbdt", "synthetic-hard", 600, 1500, "loss"),
    # The coarse end: accuracy on 30 and 114 validation samples. Each new source is appended, so every
    # earlier source keeps its seeds.
    Task("mlp/iris-tiny", "mlp", "mlp", "iris", 30, 45, "acc"),
    Task("mlp/cancer", "mlp", "mlp", "breast_cancer", 114, 150, "acc"),
    # Late phase transitions (a recurrent network that sits at chance, then learns a task all at once) and
    # boosting judged at every round.
    Task("seq/recall", "seq", "seq", "recall", 500, 1000, "acc"),
    Task("seq/recall-loss", "seq", "seq", "recall", 500, 1000, "loss"),
    Task("gbdt/per-round", "gbdt", "gbdt", "synthetic-hard", 300, 1500, "acc"),
)


def _data(name: str, n_val: int, n_test: int, seed: int) -> tuple[Any, ...]:
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine, make_classification

    if name == "recall":
        x, y = _sequences(n_train=2000 + n_val + n_test, seed=seed)
        return _split(x, y, n_val, n_test, seed, scale=False)
    if name == "digits":
        x, y = load_digits(return_X_y=True)
    elif name == "wine":
        x, y = load_wine(return_X_y=True)
    elif name == "iris":
        x, y = load_iris(return_X_y=True)
    elif name == "breast_cancer":
        x, y = load_breast_cancer(return_X_y=True)
    elif name == "synthetic":
        x, y = make_classification(
            n_samples=8000, n_features=40, n_informative=12, n_classes=4, class_sep=0.8, random_state=7
        )
    else:  # synthetic-hard: few informative features, flipped labels, so boosting overfits
        x, y = make_classification(
            n_samples=3000, n_features=30, n_informative=6, n_classes=3, flip_y=0.1, random_state=11
        )
    return _split(x, y, n_val, n_test, seed, scale=True)


def _split(x: Any, y: Any, n_val: int, n_test: int, seed: int, *, scale: bool) -> tuple[Any, ...]:
    import numpy as np
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x_rest, x_test, y_rest, y_test = train_test_split(x, y, test_size=n_test, random_state=seed, stratify=y)
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=n_val, random_state=seed + 1, stratify=y_rest
    )
    if scale:
        scaler = StandardScaler().fit(x_train)
        x_train, x_val, x_test = (scaler.transform(a) for a in (x_train, x_val, x_test))
    return (
        x_train.astype(np.float32),
        y_train,
        x_val.astype(np.float32),
        y_val,
        x_test.astype(np.float32),
        y_test,
    )


def _sequences(n_train: int, seed: int) -> tuple[Any, Any]:
    """Random sequences of 12 symbols drawn from 6, one token per position (as floats, one-hot later),
    labelled by their first symbol: a recurrent network must carry it to the end."""
    import numpy as np

    rng = np.random.default_rng(1000 + seed)
    x = rng.integers(0, 6, size=(n_train, 12))
    return x.astype(np.float32), x[:, 0].copy()


def _noisy(y: Any, share: float, classes: int, rng: random.Random) -> Any:
    y = y.copy()
    for i in range(len(y)):
        if rng.random() < share:
            y[i] = rng.randrange(classes)
    return y


def _schedule(kind: str, peak: float, epochs: int, warm: float) -> Callable[[int], float]:
    """The learning rate during epoch ``e`` (0-based) of ``epochs``."""

    def rate(e: int) -> float:
        t = (e + 0.5) / epochs
        if kind == "constant":
            return peak
        if kind == "step":
            return peak * 0.1 ** int(t / 0.4)
        if kind == "cosine":
            if t < warm:
                return peak * t / warm
            return peak * 0.5 * (1 + math.cos(math.pi * (t - warm) / (1 - warm)))
        # one-cycle: up to the peak at 30%, then cosine down to 1/1000 of it
        if t < 0.3:
            return peak * (0.04 + 0.96 * t / 0.3)
        return peak * (0.001 + 0.999 * 0.5 * (1 + math.cos(math.pi * (t - 0.3) / 0.7)))

    return rate


def _sample(task: Task, rng: random.Random) -> dict[str, Any]:
    if task.model == "gbdt":
        return {
            "learning_rate": 10 ** rng.uniform(-2.3, -0.3),
            "max_depth": rng.choice([2, 3, 5, 8]),
            "subsample": rng.choice([0.5, 0.8, 1.0]),
            "rounds": rng.choice([150, 240, 300]),
            "every": 1 if task.source.endswith("per-round") else 3,
            "logs_lr": rng.random() < 0.5,
        }
    optimizer = rng.choice(["sgd", "adam"])
    centre = -1.2 if optimizer == "sgd" else -2.7
    return {
        "optimizer": optimizer,
        "lr": 10 ** rng.uniform(centre - 1.6, centre + 1.4),
        "schedule": rng.choice(["constant", "step", "cosine", "onecycle"]),
        "warmup": rng.choice([0.05, 0.05, 0.3]),
        "epochs": rng.choice([30, 50, 80]),
        "width": rng.choice([16, 64, 256]),
        "depth": rng.choice([1, 2, 4]),
        "weight_decay": rng.choice([0.0, 0.0, 1e-4, 1e-2]),
        "label_noise": rng.choice([0.0, 0.0, 0.15, 0.4]),
        "batch_size": rng.choice([32, 128]),
        "logs_lr": rng.random() < 0.5,
    }


def _torch_curves(task: Task, hp: dict[str, Any], seed: int) -> dict[str, Any]:
    import numpy as np
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    x_train, y_train, x_val, y_val, x_test, y_test = _data(task.dataset, task.n_val, task.n_test, seed % 5)
    classes = int(max(y_train.max(), y_val.max(), y_test.max())) + 1
    y_train = _noisy(y_train, hp["label_noise"], classes, rng)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(np.asarray(y_train, dtype=np.int64))
    splits = {
        "val": (torch.from_numpy(x_val), torch.from_numpy(np.asarray(y_val, dtype=np.int64))),
        "test": (torch.from_numpy(x_test), torch.from_numpy(np.asarray(y_test, dtype=np.int64))),
    }
    model: nn.Module
    if task.model == "seq":
        model = _Recurrent(int(xt.max().item()) + 1, max(8, hp["width"] // 8), classes)
    elif task.model == "cnn":
        side = math.isqrt(xt.shape[1])
        width = max(8, hp["width"] // 8)
        model = nn.Sequential(
            nn.Unflatten(1, (1, side, side)),
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
            nn.Linear(8 * width, classes),
        )
    else:
        layers: list[nn.Module] = []
        size = xt.shape[1]
        for _ in range(hp["depth"]):
            layers += [nn.Linear(size, hp["width"]), nn.ReLU()]
            size = hp["width"]
        layers.append(nn.Linear(size, classes))
        model = nn.Sequential(*layers)
    if hp["optimizer"] == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(
            model.parameters(), lr=hp["lr"], momentum=0.9, weight_decay=hp["weight_decay"]
        )
    else:
        opt = torch.optim.Adam(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    rate = _schedule(hp["schedule"], hp["lr"], hp["epochs"], hp["warmup"])
    loss_fn = nn.CrossEntropyLoss()
    out: dict[str, list[float]] = {k: [] for k in ("train_loss", "val_loss", "val_acc", "test_loss", "lr")}
    out["test_acc"] = []
    diverged = False
    for epoch in range(hp["epochs"]):
        for group in opt.param_groups:
            group["lr"] = rate(epoch)
        model.train()
        order = torch.randperm(len(xt))
        total, count = 0.0, 0
        for start in range(0, len(xt), hp["batch_size"]):
            idx = order[start : start + hp["batch_size"]]
            opt.zero_grad()
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            count += len(idx)
        train_loss = total / count
        if not math.isfinite(train_loss) or train_loss > 1e6:
            diverged = True
            break
        model.eval()
        with torch.no_grad():
            for name, (xs, ys) in splits.items():
                logits = model(xs)
                out[f"{name}_loss"].append(float(loss_fn(logits, ys)))
                out[f"{name}_acc"].append(float((logits.argmax(1) == ys).float().mean()))
        out["train_loss"].append(train_loss)
        out["lr"].append(rate(epoch))
    return {**out, "diverged": diverged, "budget": hp["epochs"]}


def _recurrent_class() -> Any:
    from torch import nn

    class Recurrent(nn.Module):
        """A GRU over one-hot tokens, read out at the last position."""

        def __init__(self, symbols: int, width: int, classes: int) -> None:
            super().__init__()
            self.symbols = symbols
            self.gru = nn.GRU(symbols, width, batch_first=True)
            self.out = nn.Linear(width, classes)

        def forward(self, x: Any) -> Any:
            one_hot = nn.functional.one_hot(x.long(), self.symbols).float()
            states, _ = self.gru(one_hot)
            return self.out(states[:, -1])

    return Recurrent


def _Recurrent(symbols: int, width: int, classes: int) -> Any:  # noqa: N802 - builds a module
    return _recurrent_class()(symbols, width, classes)


def _gbdt_curves(task: Task, hp: dict[str, Any], seed: int) -> dict[str, Any]:
    import numpy as np
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.metrics import log_loss

    x_train, y_train, x_val, y_val, x_test, y_test = _data(task.dataset, task.n_val, task.n_test, seed % 5)
    model = GradientBoostingClassifier(
        n_estimators=hp["rounds"],
        learning_rate=hp["learning_rate"],
        max_depth=hp["max_depth"],
        subsample=hp["subsample"],
        random_state=seed,
    ).fit(x_train, y_train)
    out: dict[str, list[float]] = {k: [] for k in ("val_loss", "val_acc", "test_loss", "test_acc", "lr")}
    out["train_loss"] = [float(v) for v in model.train_score_[hp["every"] - 1 :: hp["every"]]]
    labels = np.arange(len(model.classes_))
    stages = {
        name: list(model.staged_predict_proba(xs))[hp["every"] - 1 :: hp["every"]]
        for name, xs in (("val", x_val), ("test", x_test))
    }
    for name, ys in (("val", y_val), ("test", y_test)):
        for proba in stages[name]:
            out[f"{name}_loss"].append(float(log_loss(ys, proba, labels=labels)))
            out[f"{name}_acc"].append(float((proba.argmax(1) == ys).mean()))
    out["lr"] = [hp["learning_rate"]] * len(out["val_acc"])
    return {**out, "diverged": False, "budget": hp["rounds"] // hp["every"]}


def _run(job: tuple[Task, int, int]) -> dict[str, Any]:
    task, index, seed = job
    rng = random.Random(seed)
    hp = _sample(task, rng)
    curves = _gbdt_curves(task, hp, seed) if task.model == "gbdt" else _torch_curves(task, hp, seed)
    n = len(curves["val_acc"])
    watched = "val_acc" if task.metric == "acc" else "val_loss"
    record: dict[str, Any] = {
        "source": task.source,
        "family": task.family,
        "run_id": str(index),
        "hparams": {k: v for k, v in hp.items() if k != "logs_lr"},
        "budget": curves["budget"],
        "x": list(range(1, n + 1)),
        "x_unit": "epoch" if task.model != "gbdt" else "checkpoint",
        "mode": "max" if task.metric == "acc" else "min",
        "val": curves[watched],
        # Scored on test accuracy whichever metric is watched: a user watching a loss wants the checkpoint
        # that classifies best, and a bounded score keeps one unstable run from ruling a source's mean.
        "val2": curves["test_acc"],
        "score_mode": "max",
        "test_loss": curves["test_loss"],
        "train_loss": curves["train_loss"],
        "val_loss": curves["val_loss"],
        "val_acc": curves["val_acc"],
        "diverged": curves["diverged"],
        "complete": not curves["diverged"] and n == curves["budget"],
        "val_size": task.n_val,
    }
    if hp["logs_lr"]:
        record["lr"] = curves["lr"]
    return record


def jobs(runs: int, seed: int) -> Iterator[tuple[Task, int, int]]:
    for t, task in enumerate(TASKS):
        for index in range(runs):
            yield task, index, seed * 1_000_003 + t * 10_007 + index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--runs", type=int, default=40, help="runs per source")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--source", action="append", help="only these sources (default: all)")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    todo = [job for job in jobs(args.runs, args.seed) if not args.source or job[0].source in args.source]
    with ProcessPoolExecutor(args.workers) as pool, args.out.open("w") as out:
        for record in pool.map(_run, todo, chunksize=2):
            out.write(json.dumps(record) + "\n")
    print(f"{len(todo)} runs in {time.perf_counter() - started:.0f}s -> {args.out}")


if __name__ == "__main__":
    main()
