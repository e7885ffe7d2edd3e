"""A share logged in percent (``100 * correct / total``, timm's and torchvision's ``top1``) read as the same
share: its perfect score is 100 and its step is 100 times a share's.

A share's name is what lets a rule read percent (``sdk._mode.names_a_share``: ``val/acc``, ``eval_top1``,
``val/mAP``; not a reward, a return or PSNR, which pass through 100 on their way to more), and its values
what shows it: one strictly between 1 and 100 that is not a whole number. Percents of 100 samples are whole
numbers and are not read as percent; nor is a share in percent before it has passed 1%.
"""

from __future__ import annotations

from collections.abc import Iterable

from sdk._mode import names_a_share as _share_by_name
from tracker.policy._resolution import resolution
from tracker.policy._types import Mode


def names_a_share(monitor: str, mode: Mode) -> bool:
    """Whether ``monitor``, maximised, is named as a share (an accuracy, F1, AUC, IoU, mAP or ranking score
    word and no loss or error word): the one case where its values may be read as a percentage."""
    return mode == "max" and _share_by_name(monitor)


def in_percent(value: float) -> bool:
    """A value that of the shares only one in percent takes: strictly between 1 and 100 and not a whole
    number (a count takes whole numbers)."""
    return 1.0 < value < 100.0 and not value.is_integer()


def share_resolution(values: Iterable[float], share: bool) -> float:
    """:func:`~tracker.policy._resolution.resolution` of ``values``, read on a share's scale when they are a
    share in percent (``share``: the monitor is named as one; and a value is :func:`in_percent`). Read as
    they stand, 30 samples in percent move in thirds (10/3 is a third's multiple) where as a share they move
    in thirtieths: a step ten times finer than the same accuracy's, relative to its range."""
    kept = list(values)
    if share and any(in_percent(v) for v in kept):
        return 100.0 * resolution(v / 100.0 for v in kept)
    return resolution(kept)
