"""Database URLs as people paste them."""

from __future__ import annotations

_DRIVERLESS = ("postgres", "postgresql")  # the schemes libpq and hosted services print, without a driver


def normalized_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` (as libpq and hosted services print them) as
    ``postgresql+psycopg://``, the driver Plateau installs; any other URL unchanged."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql+psycopg://{rest}" if sep and scheme in _DRIVERLESS else url
