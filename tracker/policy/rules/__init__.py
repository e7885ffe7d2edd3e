"""One module per rule; each registers itself by name in :mod:`plateau_tracker.server.policy._registry`."""
