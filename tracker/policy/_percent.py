"""A share logged in percent (``100 * correct / total``, timm's and torchvision's ``top1``) read as the same
share: its perfect score is 100.

A share's name is what lets a rule read percent (``plateau_tracker._mode.names_a_share``: ``val/acc``,
``eval_top1``, ``val/mAP``; not a reward, a return or PSNR, which pass through 100 on their way to more), and
its values what shows it: one strictly between 1 and 100 that is not a whole number. Percents of 100 samples
are whole numbers and are not read as percent; nor is a share in percent before it has passed 1%, and while
all its values could be one at about 1% (:func:`could_be_percent_at_one`) a value of 1 is not read as perfect.
"""

from __future__ import annotations

from plateau_tracker._mode import names_a_share as _share_by_name
from plateau_tracker.server.policy._types import Mode


def names_a_share(monitor: str, mode: Mode) -> bool:
    """Whether ``monitor``, maximised, is named as a share (an accuracy, F1, AUC, IoU, mAP or ranking score
    word and no loss or error word): the one case where its values may be read as a percentage."""
    return mode == "max" and _share_by_name(monitor)


def in_percent(value: float) -> bool:
    """A value that of the shares only one in percent takes: strictly between 1 and 100 and not a whole
    number (a count takes whole numbers)."""
    return 1.0 < value < 100.0 and not value.is_integer()


PERCENT_CHANCE_BAND = 0.25
"""How far below 1 a share named as one must have been before a value of exactly 1 is read as its perfect
score, while no value has yet shown it in percent. 1 is also 1.00%: a constant prediction of 100 balanced
classes (CIFAR-100's test set) scores exactly that, and accuracies at that chance level, in percent, stay
within a few tenths of a percent of it, where a share that reaches 1 has mostly risen to it from well below
(wine's three classes from 0.56). Without the band, a ``val/acc`` in percent logged as 1.0, 0.99, 1.0
would be stopped as perfect at its third evaluation, keeping its first."""

CLIMB_TO_ONE = 3
"""New bests below 1 (after the first value) that let ``perfect`` read 1 as a share's perfect score where
the values, all within :data:`PERCENT_CHANCE_BAND` of 1, could also be a percent at about 1%: a share that
starts high (digits at 0.85 after one epoch) climbs to 1 through new bests, where a percent at chance hovers
around 1% and a constant prediction sits on it. The band alone would hold back many true perfect stops on
small validation sets; the climb gives most of them back (HISTORY.md has the replay)."""


def could_be_percent_at_one(low: float, high: float, *, percent: bool) -> bool:
    """Whether values whose lowest is ``low`` and highest ``high``, of a monitor named as a share, could be a
    share in percent at about 1% (no value has shown percent, and all lie within
    :data:`PERCENT_CHANCE_BAND` below 1): a value of 1 then says nothing about a perfect score."""
    return not percent and high <= 1.0 and low > 1.0 - PERCENT_CHANCE_BAND
