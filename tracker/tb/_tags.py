"""How Plateau's series map to TensorBoard tags, both ways.

A key logged by rank 0 only is the tag ``key``; a key with points from several ranks (or from a rank other
than 0) gets one tag per rank, ``key/rank<N>``. Plateau's own tags: decisions (text) under ``plateau/``;
the best value, the run's summary figures and convergence times (one-point scalars HParams lists as
metrics) under ``~plateau/``, which sorts last. Import reads ``~plateau/summary/*`` (and the older
``plateau/summary/*``) back into the summary and skips the rest of both.
"""

from __future__ import annotations

import re

NAMESPACE = "plateau/"
DECISIONS_TAG = "plateau/decisions"
# Run-level figures (one point each) under a namespace that sorts after every tag a trainer logs: the
# Scalars and Time Series pages order groups with TensorBoard's compareTagNames, which compares ASCII codes
# (after '/', '_' and digits), and '~' is the last printable one. Opened at the top, as `plateau/` sorted,
# 18 one-point charts came before the real curves. HParams lists them as metrics all the same.
FIGURES_NAMESPACE = "~plateau/"
BEST_TAG = "~plateau/best_value"
SUMMARY_PREFIX = "~plateau/summary/"
CONVERGENCE_PREFIX = "~plateau/convergence/"
LEGACY_SUMMARY_PREFIX = "plateau/summary/"  # exports before the figures moved: still imported
# Plugin name of the metadata that carries a value's exact float64 where float32 would round it.
EXACT_PLUGIN = "plateau_exact"
# HParams entries that are Plateau's, not the run's config: read back into the run, not its config.
RUN_NAME_HPARAM = "plateau/run_name"
HPARAM_PREFIX = "plateau/"

_RANK_SUFFIX = re.compile(r"^(?P<key>.+)/rank(?P<rank>\d+)$")


def series_tag(key: str, rank: int, *, per_rank: bool) -> str:
    return f"{key}/rank{rank}" if per_rank else key


def parse_tag(tag: str) -> tuple[str, int]:
    """``(key, rank)`` of a scalar tag."""
    match = _RANK_SUFFIX.match(tag)
    if match is None:
        return tag, 0
    return match.group("key"), int(match.group("rank"))


def safe_dirname(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name).strip("._")
    return cleaned[:100] or "run"
