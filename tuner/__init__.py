"""Tuner: the XLA compile / execute / measure core, and (later) the search over configs."""
