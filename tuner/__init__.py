"""Tuner: the search over compiler configs, behind an evaluator (`tuner.search`)."""
