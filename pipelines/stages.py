"""The stage calls that `fdo <stage>` and `fdo nightly` both make, assembled once.

Each function takes the home explicitly and the stage's own parameters; the CLI prints what it
returns, the nightly run records its counts. The stages' modules are imported inside the
functions: they need the `pipeline` extra, and the CLI imports this module for its help pages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from storage.home import Home
from tuner.kinds import KINDS
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Kind

if TYPE_CHECKING:

    from tasks.records import TaskOutcome, TuneTask
    from tasks.runner import Runner
    from tuner.allot import Allotment
    from tuner.candidates import Candidate, Sharded
    from tuner.plan import NightState, PlannedTask
    from tuner.result import TuneResult
    from tuner.transfer import Transfer
    from tuner.tune import TuneSettings
    from validator.validate import Measurer

CLUSTER_ENV = "FDO_CLUSTER"  # the cluster's address where --cluster is not given
INGEST_KINDS = ("symbols", "profiles", "hits")


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


def tune_settings(kind: Kind, **given: Any) -> TuneSettings:
    """The settings of a tuning task of `kind`: `given`, where a None means the kind's default
    (`tuner.kinds.KINDS`) or the tuner's."""
    from tuner.tune import TuneSettings

    spec = KINDS[Kind(kind)]
    chosen = {name: value for name, value in given.items() if value is not None}
    return TuneSettings(**{"budget_evals": spec.budget_evals, "strategy": spec.strategy, **chosen})


def cluster_address(given: str | None) -> str | None:
    """The cluster that runs the tasks: `given` (--cluster), else $FDO_CLUSTER; None: this
    process. ValueError names an empty address."""
    address = given if given is not None else os.environ.get(CLUSTER_ENV)
    if address is not None and not address.strip():
        source = "--cluster" if given is not None else f"${CLUSTER_ENV}"
        raise ValueError(f"{source}: empty cluster address (a Ray address such as "
                         "10.0.0.5:6379, or auto)")
    return address


def open_runner(address: str | None) -> Runner:
    """The runner of the tasks of `address` (see `cluster_address`): this process's without
    one; with one, the Ray runner connected to it (MissingExtra without the cluster extra,
    ConnectionError when nothing answers there)."""
    from tasks.runner import LocalRunner

    if address is None:
        return LocalRunner()
    from pipelines.extras import require

    require("cluster")
    from tasks.ray_runner import RayRunner

    return RayRunner(address)


@dataclass
class TuneRound:
    """One round of tasks of a kind: each candidate's outcome, in order, and where the kind's
    results are folded into graphs (`tuner.kinds.KindSpec.folded`), each graph their results
    were folded into, with its folded result."""

    outcomes: list[TaskOutcome[TuneResult]]
    folds: list[tuple[str, TuneResult]] = field(default_factory=list)  # (graph, folded result)

    @property
    def results(self) -> list[TuneResult]:
        """The results of the tasks that ran to one."""
        return [o.result for o in self.outcomes if o.result is not None]


def tune_candidates(kind: Kind, home: Home, candidates: Sequence[Candidate], settings: TuneSettings,
                    progress: bool = False, deadline: float | None = None, reserve: int = 0,
                    runner: Runner | None = None, allotments: Sequence[Allotment] | None = None,
                    measure_mode: MeasureMode | None = None,
                    sharded: dict[str, Sharded] | None = None, fold: bool = True,
                    task_settings: Sequence[TuneSettings] | None = None) -> TuneRound:
    """Tune each candidate as a task of `kind` with `settings` on `runner` (default: here, in
    order).

    A whole graph (`tuner.kinds.KindSpec.whole_graph`) its environment partitions across
    devices is measured whole where this machine has the devices, else per device
    (`measure_mode` forces one: execution.sharded.choose_placement; on a cluster a node of its
    machine kind measures it); its partitioning is the warehouse's graphs', or `sharded`'s by
    env_key (`tuner.candidates.Sharded`: a file's, not ingested). An op's kernel is measured on
    one device of its very environment. With `allotments` (one per candidate, `tuner.allot`),
    each task gets its own evaluations and carries its share. With a `deadline` (time.time()),
    each task's search gets a share of the time left (its allotment's, else an equal one),
    `reserve` more shares kept for what the caller runs next, and a task the deadline leaves no
    time for is not started (`tasks.runner.Runner`). `task_settings`: each candidate's own
    settings instead of `settings` (a night's planned tasks: `tuner.plan`). A kind whose results
    are folded into graphs (`KindSpec.folded`: ops) has them folded here, unless `fold` is False
    (`tuner.fold.fold_tuned`). Returns each task's outcome, in order, and the folds."""
    from tasks.runner import Deadline, LocalRunner, run_all
    from tuner.fold import fold_tuned

    records = tune_tasks(kind, home, candidates, settings, allotments, measure_mode, sharded, task_settings)
    outcomes: list[TaskOutcome[TuneResult]] = run_all(
        runner or LocalRunner(), records, home, Deadline(deadline, reserve) if deadline is not None else None,
        progress, f"tune {kind} tasks")
    if not (KINDS[kind].folded and fold):
        return TuneRound(outcomes)
    done = [(o.result.fingerprint, o.result.env_key) for o in outcomes if o.result is not None]
    return TuneRound(outcomes, fold_tuned(home, done, settings))


def tune_tasks(kind: Kind, home: Home, candidates: Sequence[Candidate], settings: TuneSettings,
               allotments: Sequence[Allotment] | None = None, measure_mode: MeasureMode | None = None,
               sharded: dict[str, Sharded] | None = None,
               task_settings: Sequence[TuneSettings] | None = None) -> list[TuneTask]:
    """The task of each candidate, as `tune_candidates` runs them: placed and routed as its
    kind says, with its allotment's budget where there is one, or its own settings
    (`task_settings`)."""
    from dataclasses import replace

    from execution.sharded import choose_placement, whole_capacity
    from hlo.environment import current_environment
    from tasks.records import TuneTask
    from tuner.candidates import sharded_environments

    here = current_environment()
    # Only a whole graph is measured as its environment partitions it.
    placed = {**sharded_environments(home), **(sharded or {})} if KINDS[kind].whole_graph else {}
    capacity = whole_capacity(here.platform)
    given: Sequence[Allotment | None] = allotments if allotments is not None else [None] * len(candidates)
    own: Sequence[TuneSettings | None] = task_settings if task_settings is not None else [None] * len(candidates)
    records = []
    for candidate, allotment, chosen in zip(candidates, given, own, strict=True):
        found = placed.get(candidate.env_key)
        placement = choose_placement(found.partitioning if found else None, capacity, measure_mode)
        if chosen is None:
            chosen = (settings if allotment is None else
                      replace(settings, budget_evals=allotment.budget_evals, allotment=allotment))
        records.append(TuneTask.of(kind, candidate.label, replace(candidate.subject, placement=placement),
                                   candidate.env_key, chosen, found.machine if found else None))
    return records


def run_planned(home: Home, planned: Sequence[PlannedTask], state: NightState, settings: TuneSettings,
                runner: Runner, deadline: float | None = None, reserve: int = 0,
                progress: bool = False) -> PlannedRound:
    """A night's planned graph tasks (`tuner.plan`) on `runner`, each with its own settings
    from the stage's `settings` (`PlannedTask.settings`), within `deadline` (`reserve`: as
    `tune_candidates`); then each result's group, the other keys measured alike, takes it
    (`tuner.plan.land_shared`). Returns each task's outcome and result (None: none, the outcome
    says why), and the shared results."""
    from storage.blobs import BlobStore
    from tuner.candidates import RankedGraph
    from tuner.plan import land_shared

    blobs = BlobStore(home)
    candidates = [RankedGraph(0, 0.0, state.measurable[task.key]).candidate(blobs) for task in planned]
    done = tune_candidates(Kind.GRAPH, home, candidates, settings, progress, deadline, reserve, runner,
                           task_settings=[task.settings(settings) for task in planned])
    results = [o.result for o in done.outcomes]
    shared = [r for task, result in zip(planned, results) if result is not None
              for r in land_shared(home, task, result, settings.day)]
    return PlannedRound(done.outcomes, results, shared)


@dataclass
class PlannedRound:
    """What a night's planned tasks did: each task's outcome and result (None: none), in the
    plan's order, and the results the keys measured alike took from them."""

    outcomes: list[TaskOutcome[TuneResult]]
    results: list[TuneResult | None]
    shared: list[TuneResult]

    def extend(self, later: PlannedRound) -> None:
        """`later`'s tasks after these, as one round."""
        self.outcomes += later.outcomes
        self.results += later.results
        self.shared += later.shared


def transfers_for(home: Home, candidates: Sequence[Candidate]) -> list[tuple[Transfer, ...]]:
    """Each graph candidate's transfers (`tuner.transfer`), from `home`'s warehouse and store:
    a graph of the warehouse by its key; a module given as a file by its family, on this
    machine's platform and device kind."""
    from hlo.environment import current_environment
    from hlo.family import family_fingerprint
    from ingest.families import graph_families
    from tuner.transfer import GraphFacts, TransferSources

    sources = TransferSources.load(home, graph_families(home))
    here = current_environment()
    found = []
    for candidate in candidates:
        key = (candidate.subject.fingerprint, candidate.env_key)
        facts = sources.graphs.get(key) or GraphFacts(family_fingerprint(candidate.subject.module),
                                                      here.platform, here.device_kind)
        found.append(tuple(sources.candidates(key, facts)))
    return found


def measurer(runner: Runner | None) -> Measurer | None:
    """How the validator measures its queue on `runner`: None (its own default, here in order)
    without one or for the local runner, each entry a task for a cluster's."""
    from tasks.runner import LocalRunner, measuring

    return None if runner is None or isinstance(runner, LocalRunner) else measuring(runner)
