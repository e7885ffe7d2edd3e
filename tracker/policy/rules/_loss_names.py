"""The names a validation or training loss goes by beside a monitored metric."""

from __future__ import annotations

from plateau_tracker._mode import names_a_loss
from plateau_tracker.server.policy._keys import MetricNames, Names, in_training_namespace
from plateau_tracker.server.policy._types import Mode

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
