"""How a graph's program is measured (`MeasureMode`): the `measure_mode` of the trials, the
tuning results and the validations, chosen per graph by `execution.sharded.choose_placement`."""

from __future__ import annotations

from vocabulary.closed_set import ClosedSet


class MeasureMode(ClosedSet):
    """How a graph's program is measured: WHOLE, compiled as the job compiles it and run across
    the devices its partitioning spans (one, for a graph of one device); PER_DEVICE, its
    partitioned per-device program, collectives replaced by local stand-ins, on one device
    (`execution.per_device`). Earlier versions wrote PER_DEVICE "per-device"; it reads (and
    the command line takes it: `--measure-mode per-device`)."""

    WHOLE = "whole"
    PER_DEVICE = "per device"
