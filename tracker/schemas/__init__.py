"""Pydantic schemas of the HTTP API (v1), separate from the ORM models; converted at the store boundary."""
