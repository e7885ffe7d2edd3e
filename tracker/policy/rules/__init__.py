"""One module per rule; each registers itself by name in :mod:`tracker.policy._registry`."""
