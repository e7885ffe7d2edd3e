"""Plateau tracker: stores runs and metric streams, applies convergence policies, answers trainers."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
