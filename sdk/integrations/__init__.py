"""Integrations with training frameworks. Each module imports its framework only when it is imported."""
