"""The README is for users: short, about how things are now, with both set-up commands that CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

MAIN_JOB = (
    "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && "
    ".venv/bin/pip install '.[demo,dashboard,tensorboard]' && .venv/bin/plateau demo"
)
TESTS = (
    "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && "
    ".venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest"
)


def test_the_readme_is_at_most_400_lines() -> None:
    assert len(README.splitlines()) <= 400


def test_the_readme_holds_no_dates_commit_hashes_or_seeds() -> None:
    assert not re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b", README)
    # A commit hash: 7 to 40 hex digits with at least one digit and one letter, standing alone.
    hashes = [
        word
        for word in re.findall(r"\b[0-9a-f]{7,40}\b", README)
        if re.search(r"\d", word) and re.search(r"[a-f]", word)
    ]
    assert not hashes
    assert not re.findall(r"\bseeds? \d", README, flags=re.IGNORECASE)
    assert not re.findall(r"\bsessions?\b", README, flags=re.IGNORECASE)


def test_the_readme_gives_both_set_up_commands_and_ci_runs_the_tests_one() -> None:
    assert MAIN_JOB in README
    assert TESTS in README
    assert TESTS in (ROOT / ".ci" / "run").read_text()


def test_the_readme_imports_the_package_by_its_name() -> None:
    code = "\n".join(re.findall(r"```python\n(.*?)```", README, flags=re.S))
    assert "import plateau_tracker" in code
    assert not re.findall(r"^\s*(?:from|import) (?:sdk|tracker|dashboard|migrations)\b", code, flags=re.M)


def test_the_code_says_why_in_the_present_tense() -> None:
    """Dates, corpus seeds and tuning history live in tracker/policy/HISTORY.md, not in the code."""
    dated = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
    seeded = re.compile(r"\b(?:corpus )?seeds? \d|\bseed \d+'s\b", flags=re.IGNORECASE)
    found = []
    for folder in ("tracker", "sdk", "dashboard"):
        for module in (ROOT / folder).rglob("*.py"):
            for number, line in enumerate(module.read_text().splitlines(), 1):
                if dated.search(line) or seeded.search(line):
                    found.append(f"{module.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
