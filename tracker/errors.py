"""Domain errors. Routes map them to HTTP status codes; services never import HTTP types."""

from __future__ import annotations


class PlateauError(Exception):
    """Base of every error the tracker raises on purpose."""


class NotFoundError(PlateauError):
    """The named thing does not exist."""


class ConflictError(PlateauError):
    """The request contradicts what is stored."""


class InvalidInputError(PlateauError):
    """Input that passed schema validation but is wrong in context. ``field`` names where."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
