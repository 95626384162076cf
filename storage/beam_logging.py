"""Beam's own log records in fdo's processes: shown from ERROR up, so that a command's answer is
not preceded by Beam's start-up notices, and real errors still show.

Beam logs notices nobody can act on at every pipeline: importing it warns on the root logger
where Google's apitools is not installed ("apitools not found"), and its workers' start-up
("No semi_persistent_directory found", "Discarding unparseable args") comes back through the
runner's logging service. `quiet_beam_logging` keeps both out of a process's stderr; the
in-process runner's workers start quietly too (storage.beam_worker). Records of every other
logger (fdo's own warnings included) are left as they are. Nothing here imports Beam.
"""

from __future__ import annotations

import logging
from pathlib import Path

BEAM_LOGGER = "apache_beam"
# What Beam logs below this level is not shown.
BEAM_LEVEL = logging.ERROR


class BeamNoise(logging.Filter):
    """Drops records below BEAM_LEVEL that Beam's own modules log on the root logger (a
    logger's filter sees only the records logged on it, not those propagated to it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= BEAM_LEVEL or BEAM_LOGGER not in Path(record.pathname).parts


def quiet_beam_logging() -> None:
    """Show Beam's log records in this process from BEAM_LEVEL up, before or after Beam is
    imported; idempotent."""
    root = logging.getLogger()
    if not any(isinstance(f, BeamNoise) for f in root.filters):
        root.addFilter(BeamNoise())
    beam = logging.getLogger(BEAM_LOGGER)
    beam.setLevel(max(beam.level, BEAM_LEVEL))
