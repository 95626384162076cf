"""The stage calls that `fdo <stage>` and `fdo nightly` both make, assembled once.

Each function takes the home explicitly and the stage's own parameters; the CLI prints what it
returns, the nightly run records its counts. The stages' modules are imported inside the
functions: they need the `pipeline` extra, and the CLI imports this module for its help pages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from storage.home import Home
from tuner.strategies import EvolutionStrategy, ExhaustiveStrategy

if TYPE_CHECKING:
    from tuner.tune import TuneResult, TuneSettings

INGEST_KINDS = ("symbols", "profiles", "hits")


@dataclass(frozen=True)
class TuneDefaults:
    """What a tuning task of one kind searches unless told otherwise."""

    budget_evals: int
    strategy: str  # a key of tuner.strategies.STRATEGIES


# A graph's search ends in evolution, within a budget; an op's space is small, so it is searched
# whole (up to the budget), in enumeration order.
TUNE_DEFAULTS = {"graph": TuneDefaults(40, EvolutionStrategy.name),
                 "op": TuneDefaults(200, ExhaustiveStrategy.name)}


def ingest(home: Home, kind: str, paths: Sequence[Path], progress: bool = False) -> Any:
    """Land inputs of `kind` (one of INGEST_KINDS) in the warehouse of `home` (local or a URL;
    the paths are local): symbols (HLO modules) or profiles (traces and drops) from `paths`;
    hits from the compiler hook's spool under `home` (no paths). Returns the ingestion's report."""
    from ingest.hits import ingest_hits
    from ingest.profiles import ingest_profiles
    from ingest.symbols import ingest_symbols

    if kind == "hits":
        return ingest_hits(home)
    ingest_kind = ingest_symbols if kind == "symbols" else ingest_profiles
    return ingest_kind(paths, home, progress)


def tune_settings(kind: str, **given: Any) -> TuneSettings:
    """The settings of a tuning task of `kind` (graph or op): `given`, where a None means the
    kind's default (TUNE_DEFAULTS) or the tuner's."""
    from tuner.tune import TuneSettings

    defaults = TUNE_DEFAULTS[kind]
    chosen = {name: value for name, value in given.items() if value is not None}
    return TuneSettings(**{"budget_evals": defaults.budget_evals, "strategy": defaults.strategy, **chosen})


def tune_graphs(home: Home, tasks: Sequence[tuple[str, Any, str | None]], settings: TuneSettings,
                progress: bool = False, deadline: float | None = None, reserve: int = 0) -> list[TuneResult]:
    """Tune each task's (label, HloModule, env_key) module with `settings`, in order; returns their
    results. With a `deadline` (time.monotonic()), each task gets an even share of the time left,
    `reserve` more shares kept for what the caller runs next, and a task the deadline leaves no
    time for is not started: there are fewer results than tasks."""
    from tuner.tune import overall_progress, tune_module

    results = []
    for index, (_, module, env_key) in enumerate(overall_progress(tasks, "tune graphs", progress)):
        if deadline is not None:
            left = (deadline - time.monotonic()) / 60
            if left <= 0:
                break
            settings = replace(settings, budget_minutes=left / (len(tasks) - index + reserve))
        results.append(tune_module(module, home, settings, env_key=env_key, progress=progress))
    return results
