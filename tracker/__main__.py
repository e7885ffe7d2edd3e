"""``python -m plateau_tracker.server`` is the ``plateau`` command too."""

from __future__ import annotations

import sys

from plateau_tracker.server.cli import main

sys.exit(main())
