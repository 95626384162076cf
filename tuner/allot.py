"""How a tune stage shares its budget among its candidates: by what each graph is worth.

A graph's worth is the chip-time a tuning of it can be expected to save: its fleet chip-seconds
over the ranking window (the `candidates` table) times the share of it a tuned config saves,
1 - 1/speedup, at the speedup that graphs like it were tuned to (`expected_speedup`). Each
candidate's share of the stage's budget is its worth over the candidates' worth together
(`allot`): of the stage's evaluations (at least `FLOOR_EVALUATIONS`: the cold-start screen of
the likeliest moves, or the stage's per-task budget where that is less) and of its time (the
runner gives a task the share of the time left that its share says: `tasks.runner`). A graph
worth 0.1% of the fleet gets the floor, not the top graph's budget; the search stops when it
has stalled (`tuner.search.Stall`), so a large share is a ceiling, not a cost.

What graphs like it gained is read from the warehouse's tuning results (`tuning_results`, each
the verified outcome of a task: its speedup where it was accepted, 1 where it was not, since
then nothing was delivered), as the share of chip-time each saved, 1 - 1/speedup: the quantity
a worth is linear in, and bounded (a 6x lever saves 0.83 of its graph's time, a 100x one 0.99),
so that one graph's big lever does not swamp a mean:
- similar graphs: graphs of the same module name on the same platform (the same program at
  another shape, on another compiler or device count, the graph itself on an earlier compiler);
- its platform's graphs: every graph result of that platform;
- with neither, `PRIOR_SPEEDUP`, a prior, not a measurement: the shares then follow chip-time.
The estimate is the mean of the similar graphs' evidence shrunk towards the platform's mean with
`PSEUDO_COUNT` pseudo-results (a single lucky or unlucky result does not decide a graph's share).

Every allotment says why (`Allotment.reason`), and a task records it with its result.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Sequence

import pyarrow.compute as pc

from ingest.tables import GRAPHS
from storage.home import Home
from storage.warehouse import Warehouse
from tuner.candidates import latest_candidates
from tuner.tables import TUNING_RESULTS, results_of
from vocabulary.tuning import Kind

# The fewest evaluations a task is allotted: the cold-start screen of the likeliest moves (16
# single moves on CPU, about half of them free on a real module: `tuner.schedule.LIKELY_RANK`).
FLOOR_EVALUATIONS = 8
# What a graph is expected to gain where the warehouse holds no results of its platform.
PRIOR_SPEEDUP = 1.05
# Pseudo-results of the platform's mean that the similar graphs' mean is shrunk towards.
PSEUDO_COUNT = 2.0


class Basis(StrEnum):
    """What a graph's expected speedup rests on: results of similar graphs (SIMILAR, shrunk
    towards its platform's), of its platform's graphs only (PLATFORM), or none (PRIOR)."""

    SIMILAR = "similar graphs"
    PLATFORM = "its platform's graphs"
    PRIOR = "no results yet"


@dataclass(frozen=True)
class Worth:
    """One candidate of a stage: its key, fleet chip-seconds over the ranking window, and the
    speedup a tuning of it is expected to find, with what that rests on."""

    fingerprint: str
    env_key: str
    chip_seconds: float
    expected_speedup: float
    basis: Basis
    evidence: int  # results of similar graphs (SIMILAR), or of its platform's (PLATFORM)

    @property
    def chip_seconds_saved(self) -> float:
        """What a tuning of it is expected to save over the window."""
        return self.chip_seconds * saved_share(self.expected_speedup)


@dataclass(frozen=True)
class Allotment:
    """A task's part of its stage's budget: `share` of it (its worth over the candidates'),
    `budget_evals` of the stage's `stage_evals` evaluations, and why (`reason`)."""

    worth: Worth
    share: float
    budget_evals: int
    stage_evals: int

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: every field, the worth's within `worth`."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Allotment:
        """The allotment `to_json` wrote."""
        worth = data["worth"]
        return cls(**{**data, "worth": Worth(**{**worth, "basis": Basis(worth["basis"])})})

    @property
    def reason(self) -> str:
        """Why the task got its share, in a line."""
        w = self.worth
        based = (f"{w.evidence} result(s) of {w.basis}" if w.basis != Basis.PRIOR
                 else f"{w.basis}: a prior")
        return (f"{self.share:.1%} of the candidates' worth: {w.chip_seconds / 3600:,.2f} chip-hours "
                f"x an expected {w.expected_speedup:.3f}x ({based}) -> {self.budget_evals} of "
                f"{self.stage_evals} evaluations")


def allot(worths: Sequence[Worth], per_task_evals: int) -> list[Allotment]:
    """Each candidate's part of a stage whose budget is `per_task_evals` evaluations per
    candidate: its share of the candidates' worth, of those evaluations together, at least
    `FLOOR_EVALUATIONS` (or `per_task_evals`, where less). Equal shares where no candidate is
    worth anything (no chip-time)."""
    total = sum(w.chip_seconds_saved for w in worths)
    stage = per_task_evals * len(worths)
    floor = min(FLOOR_EVALUATIONS, per_task_evals)
    allotted = []
    for worth in worths:
        share = worth.chip_seconds_saved / total if total > 0 else 1.0 / len(worths)
        allotted.append(Allotment(worth, share, max(floor, round(share * stage)), stage))
    return allotted


def worths(home: Home, keys: Sequence[tuple[str, str]]) -> list[Worth]:
    """The worth of each graph (fingerprint, env_key) of `keys`: its chip-seconds at the latest
    ranking (0 where it was not ranked) and its expected speedup (`expected_speedup`)."""
    ranked = {(r["fingerprint"], r["env_key"]): r["chip_seconds"]
              for r in latest_candidates(home, Kind.GRAPH).to_pylist()}
    graphs = {(g["fingerprint"], g["env_key"]): g for g in
              Warehouse(home).read(GRAPHS, ["fingerprint", "env_key", "module_name", "platform"]).to_pylist()}
    evidence = _evidence(home, graphs)
    found = []
    for key in keys:
        graph = graphs.get(key, {"module_name": None, "platform": None})
        speedup, basis, count = expected_speedup(evidence, graph["module_name"], graph["platform"])
        found.append(Worth(*key, ranked.get(key, 0.0), speedup, basis, count))
    return found


# (platform, module name) -> the chip-time shares that platform's graph results of that name saved
# (either null where the graphs table holds none).
Evidence = dict[tuple[str | None, str | None], list[float]]


def expected_speedup(evidence: Evidence, module_name: str | None,
                     platform: str | None) -> tuple[float, Basis, int]:
    """The speedup a graph named `module_name` on `platform` is expected to be tuned to, what
    it rests on, and how many results (see the module docstring)."""
    pooled = [v for (where, _), values in evidence.items() if where == platform for v in values]
    if not pooled:
        return PRIOR_SPEEDUP, Basis.PRIOR, 0
    base = sum(pooled) / len(pooled)
    similar = evidence.get((platform, module_name), [])
    if not similar:
        return _speedup(base), Basis.PLATFORM, len(pooled)
    shrunk = (sum(similar) + PSEUDO_COUNT * base) / (len(similar) + PSEUDO_COUNT)
    return _speedup(shrunk), Basis.SIMILAR, len(similar)


def saved_share(speedup: float) -> float:
    """The share of a graph's chip-time a config of `speedup` saves (none below 1)."""
    return max(0.0, 1.0 - 1.0 / speedup)


def _speedup(saved: float) -> float:
    """The speedup that saves the share `saved` of a graph's chip-time."""
    return 1.0 / (1.0 - saved)


def _evidence(home: Home, graphs: dict[tuple[str, str], dict]) -> Evidence:
    """The warehouse's graph results, as the share of their graph's chip-time each saved (0
    where not accepted: nothing was delivered), by the platform and module name of their
    graph."""
    results = Warehouse(home).read(TUNING_RESULTS)
    found: Evidence = defaultdict(list)
    for result in results_of(results.filter(pc.equal(results.column("kind"), Kind.GRAPH))):
        graph = graphs.get((result.fingerprint, result.env_key))
        if graph is None:
            continue
        saved = saved_share(result.speedup) if result.accepted and result.speedup else 0.0
        found[(graph["platform"], graph["module_name"])].append(saved)
    return found
