"""Curve files read as sources: the complete runs of each source, with its family and mode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from plateau_tracker.server.policy import Mode
from plateau_tracker.server.replay._curves import Curve, load_jsonl

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "curves"
DEFAULT_CURVES = SHARED / "opda_curves.jsonl"
DEFAULT_CORPUS = Path("test-artifacts") / "corpus.jsonl"
OPDA_FAMILIES = {
    "alexnet-imagenet": "opda-imagenet",
    "convnext-tiny-imagenet": "opda-imagenet",
    "deberta-base-mnli": "opda-mnli",
    "deberta-v3-base-mnli": "opda-mnli",
}


@dataclass
class Source:
    name: str
    family: str
    mode: Mode
    curves: list[Curve]


def load_sources(
    opda: Path | None, corpora: Sequence[Path], without: Sequence[str] = ()
) -> dict[str, Source]:
    """Complete runs by source; ``without`` drops those series from every run (``lr``: replay as if no
    trainer had logged its learning rate)."""
    sources: dict[str, Source] = {}
    files = ([opda] if opda else []) + list(corpora)
    for path in files:
        for curve in load_jsonl(path, metric="val", score="val2"):
            if not curve.complete:
                continue
            if without:
                curve = replace(curve, extras={k: v for k, v in curve.extras.items() if k not in without})
            family = curve.family or OPDA_FAMILIES.get(curve.source, curve.source)
            source = sources.setdefault(curve.source, Source(curve.source, family, curve.mode or "max", []))
            source.curves.append(curve)
    return sources
