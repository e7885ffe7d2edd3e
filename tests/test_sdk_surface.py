"""The SDK's public surface: the names its docstring documents, and an import that works everywhere."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import sdk

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_exactly_the_documented_api() -> None:
    documented = re.findall(r"^- ``(\w+)``", sdk.__doc__ or "", flags=re.MULTILINE)
    assert sorted(documented) == sorted(sdk.__all__)
    for name in sdk.__all__:
        value = getattr(sdk, name)
        assert isinstance(value, str) or (value.__doc__ or "").strip(), f"sdk.{name} has no docstring"


def test_import_sdk_needs_no_unix_only_module() -> None:
    """As on native Windows: Unix-only modules are missing. Importing the SDK and reading peak memory
    must not need them."""
    script = textwrap.dedent("""
        import sys
        for name in ("resource", "fcntl", "termios", "pwd", "grp"):
            sys.modules[name] = None  # import raises ImportError, as where the module does not exist
        import sdk, sdk.complexity, sdk.distributed, sdk.staleness
        print(sdk.complexity.peak_rss_bytes() >= 0)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
