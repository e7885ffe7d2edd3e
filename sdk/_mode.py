"""The direction a monitored metric improves in, read from its name when none is given (``mode="auto"``).

A loop that watches ``val/acc`` and leaves ``mode`` out must not be judged as if accuracy were a loss: the
first value would be its best, every later one "worse", and the run stopped as collapsed while it climbs.
Keras's ``EarlyStopping(mode="auto")`` reads ``acc`` in the name as "higher is better"; Lightning's
defaults to ``min`` whatever the name. Plateau reads the name's words (split at any non-alphanumeric and at
camelCase humps: ``val/acc``, ``val_accuracy``, ``eval_f1``, ``valLoss``, ``ndcg@10``) against two short
lists, and says nothing (``None``) when the name names neither. A loss or error word wins over a score word:
``dice_loss``, ``iou_loss`` and ``top1_error`` are minimised.
"""

from __future__ import annotations

import re
import warnings

from plateau_tracker._types import Mode, ModeChoice

# Words of shares, at most 1 (or 100 in percent): accuracies and their top-k forms, ranking and retrieval
# scores, overlap scores. What ``perfect`` may read in percent; not rewards, returns, PSNR or correlations,
# which pass through 100 on their way to more.
_SHARE_WORDS = frozenset(
    (
        *("acc", "accuracy", "top1", "top5", "auc", "auroc", "auprc", "roc", "f1", "fbeta", "f2"),
        *("precision", "recall", "iou", "miou", "dice", "jaccard", "map", "ndcg", "mrr", "hits", "hit"),
    )
)
# Words of metrics that improve upwards: the shares, agreement scores, text-generation scores, image-quality
# scores, rewards.
_MAX_WORDS = _SHARE_WORDS | frozenset(
    (
        *("bleu", "sacrebleu", "rouge", "rouge1", "rouge2", "rougel", "rougelsum", "meteor", "chrf"),
        *("r2", "mcc", "kappa", "spearman", "pearson", "corr", "correlation"),
        *("psnr", "ssim", "reward", "return", "returns", "sharpe"),
    )
)
# Words of a loss itself (a cross-entropy, a likelihood, a perplexity, a regression loss), and of an error
# rate, which moves in steps as an accuracy does.
_LOSS_WORDS = frozenset(
    (
        *("loss", "losses", "logloss", "mlogloss", "nll", "xent", "crossentropy", "entropy", "ce", "bce"),
        *("perplexity", "ppl", "bpc", "bpd", "mse", "mae", "rmse", "rmsle", "l1", "l2", "huber"),
    )
)
_RATE_WORDS = frozenset(("err", "error", "errors", "merror", "wer", "cer", "ter"))
# Words of metrics that improve downwards: losses, error rates, divergences, relative regression errors, and
# the gradient-boosting libraries' metric names.
_OTHER_MIN_WORDS = frozenset(("mape", "smape", "kl", "kld", "fid", "regret", "distance"))
_MIN_WORDS = _LOSS_WORDS | _RATE_WORDS | _OTHER_MIN_WORDS
_HUMP = re.compile(r"([a-z0-9])([A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")


def _words(monitor: str) -> set[str]:
    # The words as written and split at camelCase humps: ``valLoss`` reads "loss", ``val/mAP`` still "map".
    return {*_SPLIT.split(monitor.lower()), *_SPLIT.split(_HUMP.sub(r"\1_\2", monitor).lower())}


def infer_mode(monitor: str) -> Mode | None:
    """``min`` when the name's words name a loss or an error (``val_loss``, ``valid/perplexity``, and
    ``dice_loss``: the loss of a score), else ``max`` when they name a metric that improves upwards
    (``val/acc``, ``eval_f1``), else None."""
    words = _words(monitor)
    if not words.isdisjoint(_MIN_WORDS):
        return "min"
    return "max" if not words.isdisjoint(_MAX_WORDS) else None


def names_a_share(monitor: str) -> bool:
    """Whether the name says the metric is a share of 1 (an accuracy, F1, AUC, IoU, mAP, a ranking score)
    and names no loss or error: ``val/acc``, ``eval_top1``; not ``top1_error``, ``val/reward``, ``psnr``."""
    words = _words(monitor)
    return words.isdisjoint(_MIN_WORDS) and not words.isdisjoint(_SHARE_WORDS)


def names_a_loss(monitor: str) -> bool:
    """Whether the name says the metric is a loss (``val_loss``, ``valid_0/binary_logloss``, ``val/nll``,
    ``eval_perplexity``, ``val_rmse``, and ``dice_loss``, the loss of a score) and names no error rate
    (not ``val_error``, ``top1_error``, ``wer``)."""
    words = _words(monitor)
    return not words.isdisjoint(_LOSS_WORDS) and words.isdisjoint(_RATE_WORDS)


def resolve_mode(monitor: str, mode: ModeChoice) -> Mode:
    """``mode`` itself when it is ``min`` or ``max`` (with a warning when the name says the other way); for
    ``auto``, the direction the name says (see :func:`infer_mode`), else ``min`` with a warning naming the
    monitor (judged as a loss, as before ``auto`` existed)."""
    if mode not in ("min", "max", "auto"):
        raise ValueError(
            f"mode={mode!r} is not one of 'min' (a loss), 'max' (an accuracy) or 'auto' (read from the name)"
        )
    inferred = infer_mode(monitor)
    if mode != "auto":
        if inferred is not None and inferred != mode:
            # A loss example's mode kept for an accuracy (the quickstart watches val/loss in mode min): the
            # run would keep its worst epoch and stop while it improves. As asked, but said.
            warnings.warn(
                f"plateau: mode={mode!r} for {monitor!r}, whose name says it improves "
                f"{'upwards' if inferred == 'max' else 'downwards'} (mode={inferred!r}); judged with "
                f"mode={mode!r} as asked: leave mode out to have it read from the name",
                UserWarning,
                stacklevel=4,  # the caller of plateau_tracker.init
            )
        return mode
    if inferred is not None:
        return inferred
    warnings.warn(
        f"plateau: cannot tell from the name {monitor!r} whether it improves upwards or downwards; it is "
        "judged as a loss (mode='min'): pass mode='max' if higher is better",
        UserWarning,
        stacklevel=4,  # the caller of plateau_tracker.init
    )
    return "min"
