"""Tuning and validation as tasks: typed records that a local runner and a Ray runner both run."""
