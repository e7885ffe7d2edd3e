"""``python -m tracker`` is the ``plateau`` command."""

from __future__ import annotations

import sys

from tracker.cli import main

sys.exit(main())
