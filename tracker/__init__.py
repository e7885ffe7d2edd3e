"""Plateau's tracker: stores runs and metric streams, applies convergence policies, answers trainers."""

from __future__ import annotations

from plateau_tracker import __version__

__all__ = ["__version__"]
