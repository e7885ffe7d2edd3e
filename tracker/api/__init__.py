"""HTTP API v1: thin routes over the services."""
