"""What a night's tasks are expected to take, in seconds: a search, and a transfer check of a key.

A check screens a few configs, then verifies the best in fresh workers, each timing at least
`VERIFY_SETTINGS.min_pairs` pairs of runs: its seconds grow with what one execution of the
program takes. On the reach fleet a check took 5 to 22 s on most zoo programs (median 10 s:
a verification worker stops at 20 pairs where they leave no doubt) and up to 137 s on the
float64 n-body, whose step is a hundred times longer (docs/bench_reach.md). A runner that
does not start a check the stage has no time left for (`tasks.runner.unstartable`) needs each
check's own figure, not the average.

A search's verification is expected to take its fresh workers' starts and their minimum pairs at
the key's step time, or their time limit (`TaskSeconds.verify_of`): on the reach fleet 5 to 7 s
on a fast program and 37 s on the n-body, whose workers stop at their limit. A runner ends the
search that much before its share of the stage's time is up (`tasks.runner.within`), so the
verification on top ends within it.

A key's step time is the fleet's (`step_seconds`: its chip-seconds over chips times executions
in `graph_runs`), which the profiles record for every key, checked or not. A check of a key is
expected to take a power of its step time fitted to the home's past checks (`CheckFit`: least
squares of log seconds on log step, the power held within [0, 1]: a check never gets cheaper as
its program gets slower, nor dearer faster than its step); with fewer than `MIN_CHECKS` past
checks, none spread in step time, or no step time for the key, the average the nights' ledger
says (`TaskSeconds.check`). Either way at least the runs its measurements time at that step
(`check_runs`): the fit cannot see a program slower than any the home has checked (on the reach
fleet, fitted to fast programs alone, it expected 20 s of checks that took 48 to 144 s).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

from execution.evaluate import FRESH_WORKERS
from execution.measure import time_scale
from ingest.tables import GRAPH_RUNS
from storage.home import Home
from storage.warehouse import Warehouse
from tuner.tables import TUNING_RESULTS, results_of
from tuner.transfer import MAX_TRANSFERS, TRANSFER_CHECK, GraphKey
from tuner.tune import SEARCH_SETTINGS, VERIFY_SETTINGS
from vocabulary.tuning import Origin

# Past checks below which no fit is made (the ledger's average is taken instead).
MIN_CHECKS = 3
# Seconds a fresh verification worker takes to start, load and compile the default and the
# config (the reach fleet's fast programs verified in 5 to 7 s in three workers).
WORKER_START = 2.0


def check_runs(configs: int = MAX_TRANSFERS, verify_workers: int = FRESH_WORKERS) -> int:
    """The program runs a check of `configs` transferred configs times where each of its screens
    and of its verification's `verify_workers` fresh workers stops at its minimum pairs (of the
    default and the config) and it verifies one: a catastrophic screen stops sooner, and a screen
    or worker whose pairs leave doubt goes on."""
    return 2 * (configs * SEARCH_SETTINGS.min_pairs + verify_workers * VERIFY_SETTINGS.min_pairs)


@dataclass(frozen=True)
class CheckFit:
    """seconds = exp(log_scale) x step_seconds ** power, fitted to past checks."""

    log_scale: float
    power: float

    @classmethod
    def of(cls, checks: Iterable[tuple[float, float]]) -> CheckFit | None:
        """The fit to (step seconds, check seconds) pairs (both positive); None with fewer than
        `MIN_CHECKS` or no spread in step time."""
        points = [(math.log(step), math.log(seconds)) for step, seconds in checks]
        if len(points) < MIN_CHECKS:
            return None
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        spread = sum((x - mean_x) ** 2 for x, _ in points)
        if spread <= 0:
            return None
        power = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
        power = min(max(power, 0.0), 1.0)
        return cls(mean_y - power * mean_x, power)

    def seconds(self, step_seconds: float) -> float:
        """A check's expected seconds for a program of `step_seconds`."""
        return math.exp(self.log_scale + self.power * math.log(step_seconds))


@dataclass(frozen=True)
class TaskSeconds:
    """What a check and a search of a night are expected to take, in seconds: on average (the
    past nights' ledger, `pipelines.nightly.task_seconds`; the defaults, for a home's first
    nights, are the reach fleet's: 13 s a check on night 1 and 19 s over three nights, where
    later nights check slower programs, and 60 to 150 s a search), and a check of each
    key by its step time (`check_of`). `steps`: each key's step seconds in the fleet; `checks`:
    the home's past checks, (step seconds, seconds taken); `verify_workers`: the fresh workers
    each check's verification runs in (the stage's `--verify-workers`)."""

    check: float = 15.0
    search: float = 120.0
    steps: Mapping[GraphKey, float] = field(default_factory=dict)
    checks: tuple[tuple[float, float], ...] = ()
    verify_workers: int = FRESH_WORKERS

    @cached_property
    def fit(self) -> CheckFit | None:
        """The past checks' fit (None: too few, `CheckFit.of`)."""
        return CheckFit.of(self.checks)

    def check_of(self, key: GraphKey, configs: int = MAX_TRANSFERS) -> float:
        """The seconds a transfer check of `configs` configs on `key` is expected to take (see the
        module docstring)."""
        step = self.steps.get(key)
        if step is None:
            return self.check
        estimate = self.fit.seconds(step) if self.fit is not None else self.check
        return max(estimate, check_runs(configs, self.verify_workers) * step)

    def verify_of(self, key: GraphKey) -> float:
        """The seconds a search's verification on `key` is expected to take: each fresh worker's
        start (`WORKER_START`) and its minimum pairs at the key's step time, or its time limit
        where that is less (no step known: the starts alone). A worker whose pairs leave doubt
        goes on past them, to its limit."""
        pairs = 2 * VERIFY_SETTINGS.min_pairs * self.steps.get(key, 0.0)
        return self.verify_workers * (WORKER_START + min(pairs, VERIFY_SETTINGS.max_seconds * time_scale()))


def step_seconds(home: Home, days: set[str]) -> dict[GraphKey, float]:
    """Each graph key's seconds an execution over `days` (`dt` partitions) of `graph_runs`: its
    chip-seconds over its chips times executions, every job's runs together."""
    runs = Warehouse(home).read(GRAPH_RUNS, ["fingerprint", "env_key", "chips", "executions", "chip_seconds"],
                                filter_dt=days.__contains__)
    spent: dict[GraphKey, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for run in runs.to_pylist():
        spent[(run["fingerprint"], run["env_key"])][0] += run["chip_seconds"]
        spent[(run["fingerprint"], run["env_key"])][1] += run["chips"] * run["executions"]
    return {key: seconds / executions for key, (seconds, executions) in spent.items()
            if executions > 0 and seconds > 0}


def past_checks(home: Home, days: set[str], steps: Mapping[GraphKey, float]) -> tuple[tuple[float, float], ...]:
    """(step seconds, seconds taken) of the transfer checks the home ran over `days` whose key
    has a step time in `steps` (a result shared with a key measured alike ran no check; one
    landed before results told their seconds is left out)."""
    found = []
    for result in results_of(Warehouse(home).read(TUNING_RESULTS, filter_dt=days.__contains__)):
        step = steps.get((result.fingerprint, result.env_key))
        if (result.strategy == TRANSFER_CHECK and result.origin != Origin.SHARED and step is not None
                and result.seconds is not None and result.seconds > 0):
            found.append((step, result.seconds))
    return tuple(sorted(found))
