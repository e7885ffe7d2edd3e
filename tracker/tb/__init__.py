"""TensorBoard interchange: export stored runs as event files, import event files as runs.

Both talk to the tracker over its HTTP API (so they work against any tracker the token can reach) and use
the ``tensorboard`` package's own writer, loader and protos; the record format is never written by hand.
"""

from plateau_tracker.server.tb.export import ExportReport, export_runs
from plateau_tracker.server.tb.importer import ImportReport, import_logdir

__all__ = ["ExportReport", "ImportReport", "export_runs", "import_logdir"]
