"""Alembic revisions: the only way Plateau's schema is made or changed."""
