"""``python -m plateau_tracker`` is the ``plateau`` command: the way to run it where the script is not on
``PATH``, and the module path every process Plateau starts is started by."""

from __future__ import annotations

import sys

from plateau_tracker.server.cli import main

sys.exit(main())
