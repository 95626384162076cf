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

from execution.sharded import MeasureMode
from storage.home import Home
from tuner.kinds import KINDS

from vocabulary.tuning import Kind
if TYPE_CHECKING:
    from tasks.records import TaskOutcome
    from tuner.allot import Allotment
    from validator.validate import Measurer
    from tasks.runner import Runner
    from tuner.tune import TuneResult, TuneSettings

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


def tune_graphs(home: Home, tasks: Sequence[tuple[str, Any, str | None]], settings: TuneSettings,
                progress: bool = False, deadline: float | None = None, reserve: int = 0,
                runner: Runner | None = None, kind: Kind = Kind.GRAPH,
                allotments: Sequence[Allotment] | None = None,
                measure_mode: MeasureMode | None = None,
                sharded: dict[str, Any] | None = None) -> list[TaskOutcome]:
    """Tune each task's (label, HloModule, env_key) module with `settings` on `runner` (default:
    here, in order), as a task of `kind` (a graph's flags, or its kernels); an env_key of None
    is this machine's environment. A graph its environment partitions across devices is
    measured whole where this machine has the devices, else per device (`measure_mode` forces
    one: execution.sharded.choose_placement; on a cluster a node of its machine kind measures
    it); its partitioning is the warehouse's graphs', or `sharded`'s by env_key
    (`tuner.candidates.Sharded`: a file's, not ingested). With `allotments` (one per task,
    `tuner.allot`), each task gets its own evaluations and carries its share. With a `deadline`
    (time.time()), each task's search gets a share of the time left (its allotment's, else an
    equal one), `reserve` more shares kept for what the caller runs next, and a task the
    deadline leaves no time for is not started (`tasks.runner.Runner`). Returns each task's
    outcome, in order."""
    from dataclasses import replace

    from hlo.environment import current_environment
    from tasks.records import TuneTask
    from tasks.runner import Deadline, LocalRunner, run_all
    from execution.sharded import choose_placement, whole_capacity
    from tuner.candidates import sharded_environments
    from tuner.tune import graph_subject

    here = current_environment()
    sharded = {**sharded_environments(home), **(sharded or {})}
    given = allotments if allotments is not None else [None] * len(tasks)
    records = []
    for (label, module, env_key), allotment in zip(tasks, given, strict=True):
        found = sharded.get(env_key) if env_key else None
        placement = choose_placement(found.partitioning if found else None,
                                     whole_capacity(here.platform), measure_mode)
        task_settings = (settings if allotment is None else
                         replace(settings, budget_evals=allotment.budget_evals, allotment=allotment))
        records.append(TuneTask.of(kind, label, graph_subject(module, placement),
                                   env_key or here.key(), task_settings,
                                   found.machine if found else None))
    return run_all(runner or LocalRunner(), records, home,
                   Deadline(deadline, reserve) if deadline is not None else None, progress,
                   "tune graphs")


def planned_graphs(home: Home, date: Any, top: int, per_task_evals: int,
                   environments: frozenset[str] | None, force: bool = False
                   ) -> tuple[list[tuple[str, Any, str]], list[Allotment]]:
    """The graph tasks of a night's tune stage (`date`) and each one's part of the stage's
    budget, `per_task_evals` evaluations per task shared by what each graph is worth
    (`tuner.allot`): the `top` ranked graphs this compiler has not tuned that `environments`
    can measure, the worthiest first (a stage whose time runs out leaves the least worth for
    the next night). The plan is written once per date (`tune-plans/<date>.json` under the
    home's pipelines) and a resumed stage runs what is left of it, each task with the budget it
    had (so it resumes from its journal); `force` plans again."""
    import json

    from tuner.allot import Allotment, allot, worths
    from tuner.tune import graph_subject

    found = KINDS[Kind.GRAPH].candidates(home, top, True, environments).tasks
    keys = [(graph_subject(module).fingerprint, env_key) for _, module, env_key in found]
    where = home.location("pipelines", "tune-plans", f"{date}.json")
    if home.exists(where) and not force:
        planned = [Allotment.from_json(a) for a in json.loads(home.read_bytes(where))]
        tasks = dict(zip(keys, found))
        left = [(tasks[key], a) for a in planned if (key := (a.worth.fingerprint, a.worth.env_key)) in tasks]
        return [task for task, _ in left], [allotment for _, allotment in left]
    allotted = allot(worths(home, keys), per_task_evals) if keys else []
    order = sorted(range(len(allotted)), key=lambda i: -allotted[i].share)  # stable: rank for ties
    tasks, allotments = [found[i] for i in order], [allotted[i] for i in order]
    home.atomic_write(where, json.dumps([a.to_json() for a in allotments]) + "\n")
    return tasks, allotments


@dataclass
class OpRound:
    """One round of op tuning: the ops tuned, then the graphs their results were folded into."""

    skipped: list[str]
    tasks: list[tuple[str, Any, str]]  # (label, cut op, env_key)
    outcomes: list[TaskOutcome]
    folds: list[tuple[str, TuneResult]] = field(default_factory=list)  # (graph, folded result)

    @property
    def results(self) -> list[TuneResult]:
        """The results of the op tasks that ran to one."""
        return [o.result for o in self.outcomes if o.result is not None]


def tune_ops(home: Home, top: int, settings: TuneSettings, fold: bool = True,
             progress: bool = False, untried: bool = False,
             runner: Runner | None = None) -> OpRound:
    """Tune the `top` ranked ops that `runner`'s machines can measure on it (default: this
    machine, in order), then fold the results into each graph that holds one of them, here
    (`tuner.fold.fold_tuned`). `untried`: skip ops this compiler has a result for."""
    from tasks.records import TuneTask
    from tasks.runner import LocalRunner, run_all
    from tuner.fold import fold_tuned
    from tuner.tune import op_subject

    runner = runner or LocalRunner()
    found = KINDS[Kind.OP].candidates(home, top, untried, runner.environments())
    records = [TuneTask.of(Kind.OP, label, op_subject(cut), env_key, settings)
               for label, cut, env_key in found.tasks]
    outcomes = run_all(runner, records, home, progress=progress, label="tune ops")
    done = [(o.result.fingerprint, o.result.env_key) for o in outcomes if o.result is not None]
    folds = fold_tuned(home, done, settings) if fold else []
    return OpRound(list(found.skipped), list(found.tasks), outcomes, folds)


def measurer(runner: Runner | None) -> Measurer | None:
    """How the validator measures its queue on `runner`: None (its own default, here in order)
    without one or for the local runner, each entry a task for a cluster's."""
    from tasks.runner import LocalRunner, measuring

    return None if runner is None or isinstance(runner, LocalRunner) else measuring(runner)
