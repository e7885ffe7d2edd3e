"""What every ``plateau`` command and every tracker start pays before doing anything: its imports."""

from __future__ import annotations

import subprocess
import sys


def test_the_tracker_and_a_replay_start_without_scipy() -> None:
    """``scipy.stats`` takes over a second to import (1.2 s of the 1.8 s that ``plateau replay`` spent on
    imports, on a slow host) and only the statistical tests of ``plateau``, ``forecast`` and ``overfitting``
    call it: the app, the command line, the replay and the presets start without it."""
    code = (
        "import sys\n"
        "import tracker.app, tracker.cli, tracker.commands, tracker.replay.command, tracker.policy.presets\n"
        "from tracker.policy import PolicySpec, evaluate, initial_states, Observation\n"
        "from tracker.policy.presets import DEFAULT_RULES\n"
        "policy = PolicySpec.model_validate({'monitor': 'val', 'mode': 'max', 'rules': DEFAULT_RULES})\n"
        "evaluate(policy, initial_states(policy), [Observation(s, 0.5, 0.0, {}) for s in range(40)])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_statistical_rule_imports_scipy_when_it_first_judges() -> None:
    """The other side of the lazy import: a ``plateau`` rule's test still runs, in a fresh process, and
    its answer is scipy's t distribution (a flat run's slope is within its equivalence margin)."""
    code = (
        "import sys\n"
        "from tracker.policy import PolicySpec, evaluate, initial_states, Observation\n"
        "policy = PolicySpec.model_validate({'monitor': 'val', 'mode': 'max',\n"
        "    'rules': [{'rule': 'plateau', 'window': 10, 'delta': 0.01}]})\n"
        "obs = [Observation(s, 0.5 + 0.001 * (s % 2), 0.0, {}) for s in range(30)]\n"
        "result = evaluate(policy, initial_states(policy), obs)\n"
        "print(result.stop_step is not None, 'scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
