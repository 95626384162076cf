"""Tuner: the XLA compile / execute / measure core, and the search over configs."""
