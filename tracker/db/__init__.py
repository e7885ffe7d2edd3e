"""Persistence: SQLAlchemy models, engine, the one session scope, and migrations."""
