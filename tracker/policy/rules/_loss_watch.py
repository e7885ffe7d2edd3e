"""A best-so-far path kept as a run goes, and a validation loss watched beside the monitored metric."""

from __future__ import annotations

import bisect
import math
from operator import itemgetter
from typing import Any

from plateau_tracker._mode import names_a_loss
from plateau_tracker.server.policy._base import State
from plateau_tracker.server.policy._keys import MetricNames, Names, in_training_namespace
from plateau_tracker.server.policy._stats import step_noise
from plateau_tracker.server.policy._types import Mode

# A best-so-far path keeps at most this many points: thinning only ever makes the looked-up earlier best
# older (so the measured pace larger, the outlook more hopeful), never the reverse.
MAX_PATH = 64
# A loss back above its lowest by more than this share of its fall, and by more than TURN_NOISE times its
# step-to-step noise, has turned up (overfitting), and no longer holds a run however fast it fell over the
# last doubling: the default policy's ``retreat`` bars (5% of the progress, 3x the noise).
TURNED_UP = 0.05
TURN_NOISE = 3.0
# A loss that has fallen by at most this share of its first value has not started to learn, and holds
# nothing.
UNLEARNED = 0.005
_LOSS_WINDOW = 8  # the latest values the loss's noise is read from
# The last words of a loss logged beside a metric of the same set: the cross-entropies as
# PyTorch loops, Keras, LightGBM (binary_logloss, multi_logloss) and XGBoost (logloss, mlogloss) name them,
# perplexity, and the regression losses. Each names a loss (plateau_tracker._mode.names_a_loss).
SET_LOSS_LEAVES = (
    *("loss", "nll", "ce", "bce", "xent", "cross_entropy", "crossentropy"),
    *("logloss", "log_loss", "binary_logloss", "multi_logloss", "mlogloss"),
    *("perplexity", "ppl", "mse", "rmse", "mae"),
)
_SET_SEPARATORS = ("/", "-", ".")
# The words a training set's series begin with in the spellings read beside a validation set's monitor
# (tracker.policy._keys names two more, trn and tr, for telling a training series apart; they are rarely
# written, and each would add 17 names to look up).
_TRAINING_WORDS = ("train", "training")
_TRAINING_LEAVES = (*SET_LOSS_LEAVES, "loss_epoch")
_step_of = itemgetter(0)


def loss_names(loss_key: MetricNames | None, monitor: str, mode: Mode) -> Names:
    """The spellings a rule reads a validation loss under: ``loss_key``'s; then the monitor itself when it
    is a loss, minimised (``val/nll``, ``valid_0/binary_logloss``), as a monitor spelt as one of them
    (``val_loss``) always was; then the losses of the monitor's own set (:func:`set_losses`: ``val/nll``
    beside ``val/acc``). A validation loss the rules cannot find counts as none at all (under the default,
    a run that logs none is judged from 80% of its plan, not 30%), so every common spelling is read."""
    names = Names.of(loss_key)
    if loss_key is None:
        return names
    own = (monitor,) if mode == "min" and names_a_loss(monitor) else ()
    added = tuple(name for name in (*own, *set_losses(monitor)) if name not in names.order)
    return Names.of((*names.order, *dict.fromkeys(added))) if added else names


def set_losses(monitor: str) -> tuple[str, ...]:
    """The names a loss of the set ``monitor`` is measured on goes by: the monitor's prefix (up to its last
    ``/``, ``-`` or ``.``, else its first ``_``) before each of :data:`SET_LOSS_LEAVES`. ``val/acc``:
    ``val/loss``, ``val/nll``, ``val/ce``, ...; ``valid_0/auc`` (LightGBM): ``valid_0/binary_logloss``;
    ``validation_0-auc`` (XGBoost): ``validation_0-logloss``; ``val_accuracy``: ``val_nll``. None for a
    name with no prefix (``accuracy``) or a training set's (``train/acc``: its loss is the training loss,
    read as such). A name joined by ``_`` alone also gives its prefix up to its last ``_``: LightGBM's
    ``valid_0_auc``, logged as ``f"{data_name}_{eval_name}"``, beside ``valid_0_binary_logloss``."""
    prefix = _set_prefix(monitor)
    if not prefix or in_training_namespace(prefix):
        return ()
    longer = monitor[: monitor.rfind("_") + 1] if prefix.endswith("_") else prefix
    prefixes = (prefix, longer) if longer != prefix else (prefix,)
    return tuple(each + leaf for each in prefixes for leaf in SET_LOSS_LEAVES)


def training_losses(monitor: str) -> tuple[str, ...]:
    """The names the training loss goes by when spelt as ``monitor``'s set is: ``train`` and ``training``,
    then the separator that ends the monitor's prefix, then each of :data:`SET_LOSS_LEAVES` or ``loss_epoch``
    (Lightning's epoch mean of a loss logged ``on_step`` and ``on_epoch``). ``val/acc``: ``train/nll``,
    ``train/ce``, ``train/loss_epoch``, ...; ``valid_0/auc`` (LightGBM names its training set ``training``):
    ``training/binary_logloss``; ``eval-auc`` (XGBoost's ``evals``): ``train-logloss``; ``val_accuracy``:
    ``train_nll``. None for a name with no prefix, or a training set's own."""
    prefix = _set_prefix(monitor)
    if not prefix or in_training_namespace(prefix):
        return ()
    separator = prefix[-1]
    return tuple(word + separator + leaf for word in _TRAINING_WORDS for leaf in _TRAINING_LEAVES)


def train_loss_names(train_key: MetricNames | None, monitor: str) -> Names:
    """The spellings a rule reads a training loss under: ``train_key``'s, then :func:`training_losses` of the
    monitor. Fixed spellings alone (``train_loss``, ``train/loss``, ``loss``, ...) would judge a loop logging
    ``train/nll`` beside ``val/acc`` as logging no training loss, and hold a run overfitting under a learning
    rate still to decay until the rate had decayed."""
    names = Names.of(train_key)
    if train_key is None:
        return names
    added = tuple(name for name in training_losses(monitor) if name not in names.order)
    return Names.of((*names.order, *added)) if added else names


def _set_prefix(monitor: str) -> str:
    """The monitor's set prefix with its separator (``val/`` of ``val/acc``, ``val_`` of ``val_accuracy``),
    or "" when it has none."""
    cut = max(monitor.rfind(sep) for sep in _SET_SEPARATORS)
    if cut < 0:
        cut = monitor.find("_")
    return monitor[: cut + 1] if cut > 0 else ""


def keep_best(path: list[list[float]], step: int, value: float) -> None:
    """Append a new best to a best-so-far path (in place), thinning its middle past ``MAX_PATH`` points
    (the first and the latest stay)."""
    path.append([step, value])
    if len(path) > MAX_PATH:
        del path[1:-1:2]


def best_at_half(path: list[list[float]], t: int) -> float | None:
    """The best so far at step ``t / 2``: the last entry of the step-ordered path at or before it; None
    when the path starts later."""
    at_half = bisect.bisect_right(path, t / 2, key=_step_of)
    return path[at_half - 1][1] if at_half else None


def best_at_half_after(path: list[list[float]], t: int, start: int) -> tuple[float | None, int]:
    """:func:`best_at_half`, and the count of the path's entries at or before step ``t / 2``, searched
    from ``start``: the count a previous call returned. Its search is then a step or two, since a run's
    steps only grow; any ``start`` gives the same answer (a stale one, after the path was thinned or a
    step went back, costs a search from the start)."""
    half, end = t / 2, len(path)
    if start > end or (start and path[start - 1][0] > half):
        start = bisect.bisect_right(path, half, key=_step_of)
    else:
        while start < end and path[start][0] <= half:
            start += 1
    return (path[start - 1][1] if start else None), start


def doublings_left(planned: int, t: int) -> float:
    return math.log2(planned / t) if planned > t else 0.0


def loss_seen(state: State) -> bool:
    """Whether :func:`observe_loss` has kept a (finite) validation loss in ``state``."""
    return state.get("loss_first") is not None


def observe_loss(state: State, step: int, loss: float | None) -> None:
    """Keep a logged validation loss's first value and its lowest-so-far path in ``state`` (in place)."""
    if loss is None or not math.isfinite(loss):
        return
    if state.get("loss_first") is None:
        state["loss_first"], state["loss_path"] = loss, []
    if not state["loss_path"] or loss < state["loss_path"][-1][1]:
        keep_best(state["loss_path"], step, loss)
    recent = state.setdefault("loss_recent", [])
    recent.append(loss)
    if len(recent) > _LOSS_WINDOW:
        del recent[0]


def loss_outlook(state: State, key: str, t: int, planned: int, delta: float) -> dict[str, Any] | None:
    """The validation loss's own outlook, as evidence: its fall over the last doubling of the run, carried
    to the planned end, against ``delta`` of its own fall since its first value (``loss_bar``), how far
    its latest value has turned back up from its lowest, as a share of that fall (``loss_turn``), and its
    step-to-step noise over its last 8 values as the same share (``loss_noise``); None when the run has not
    logged it."""
    path, first = state.get("loss_path") or [], state.get("loss_first")
    if not path or first is None:
        return None
    lowest = path[-1][1]
    earlier = best_at_half(path, t)
    if earlier is None:
        earlier = first
    fall = first - lowest
    recent = state.get("loss_recent") or [lowest]  # absent from states stored by earlier releases
    return {
        "loss_key": key,
        "loss_first": first,
        "loss_pace": earlier - lowest,
        "loss_outlook": (earlier - lowest) * doublings_left(planned, t),
        "loss_progress": fall,
        "loss_bar": delta * fall,
        "loss_turn": (recent[-1] - lowest) / fall if fall > 0 else 0.0,
        "loss_noise": step_noise(recent) / fall if fall > 0 else 0.0,
    }


def loss_still_falls(outlook: dict[str, Any] | None) -> bool:
    """Whether a :func:`loss_outlook` says the loss still falls at a pace that matters (the run is
    learning): its outlook exceeds its bar, and it has not turned back up (its lowest-so-far path keeps the
    pace of the descent for a doubling after the loss turns, and overfitting is no reason to wait). False
    when the run has not logged the loss."""
    return (
        outlook is not None
        and outlook["loss_outlook"] > outlook["loss_bar"]
        and not turned_up(outlook)
        and not unlearned(outlook)
    )


def unlearned(outlook: dict[str, Any]) -> bool:
    """Whether a :func:`loss_outlook`'s loss has fallen by at most ``UNLEARNED`` of its first value: a run at
    chance whose loss drifts down by a thousandth (cross-entropy at log K, its lowest inching down with its
    noise) is not learning, however its own tiny fall is paced."""
    return float(outlook["loss_progress"]) <= UNLEARNED * abs(float(outlook["loss_first"]))


def turned_up(outlook: dict[str, Any]) -> bool:
    """Whether a :func:`loss_outlook`'s latest value is back above the lowest by more than ``TURNED_UP``
    of the loss's fall and ``TURN_NOISE`` times its step-to-step noise (a noisy validation loss on a small
    set jumps by 5% of its fall and back)."""
    turn, noise = float(outlook["loss_turn"]), float(outlook["loss_noise"])
    return turn > max(TURNED_UP, TURN_NOISE * noise)


def loss_said(outlook: dict[str, Any], delta: float) -> str:
    """Why a :func:`loss_outlook` held nothing back, in words (a clause ending in "; ")."""
    key, fall = outlook["loss_key"], outlook["loss_progress"]
    if fall <= 0:  # its pace and its bar are both 0: said as what it is, not as "at most 0.01 of 0"
        return f"{key} has not fallen below its first value {outlook['loss_first']:.3g}; "
    if unlearned(outlook) and outlook["loss_outlook"] > outlook["loss_bar"] and not turned_up(outlook):
        return (
            f"{key} fell {fall:.3g} since its first value {outlook['loss_first']:.3g}, at most "
            f"{UNLEARNED:g} of it: not learning; "
        )
    if turned_up(outlook) and outlook["loss_outlook"] > outlook["loss_bar"]:
        return (
            f"{key} has turned back up from its lowest by {outlook['loss_turn']:.3g} of its fall "
            f"({fall:.3g}), more than {TURNED_UP:g} of it and {TURN_NOISE:g}x its step-to-step noise "
            f"({outlook['loss_noise']:.3g} of it); "
        )
    return (
        f"{key} fell {outlook['loss_pace']:.3g} over the same doubling, {outlook['loss_outlook']:.3g} to the "
        f"planned end, at most {delta:g} of its own fall ({fall:.3g}); "
    )
