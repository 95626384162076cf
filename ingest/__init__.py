"""Ingest: turning fleet XLA programs into data the optimizer can learn from."""
