"""CPU op results folded into graph-level configs, measured on the whole graph.

XLA's CPU backend has no per-op channel: the flags of one compile apply to every kernel of the
graph. So the winners of op-level tuning (`tuner.task.tune_op`) reach users this way: for each
graph holding tuned ops (the `ops` table), graph-level configs are built from its ops' results
and measured against the default on the whole graph, as a graph tuning task (`run_task` over a
fixed list of configs: journal, dedupe, fresh verification) with strategy 'fold-ops' and the op
tasks as its `sources`. Its result is a graph-kind tuning result that `fdo deliver` publishes
like any other if it was accepted: numerics ok and the interval's lower end above the noise band.

The graph's own measurement decides, never a vote: a flag moves every kernel of its class, so
an op's winner can cost the rest of the graph more than it gains (measured on a CNN: YNN
ELTWISE made its costliest elementwise kernel 1.67x faster and the whole graph ~15% slower),
and it can gain more than the op alone (a Flax training step: one convolution kernel 1.73x off
YNNPACK, the whole step 1.37x). The configs measured (`fold_variants`), in this order:
- every change an accepted op asked for (a fusion type's placement, a codegen flag's value),
  together (where two ops disagree on one param, the one with more chip-time behind it);
- each such change alone, most chip-time behind it first;
- the config the votes elect, when it is none of those: every tuned kernel of the graph votes,
  weighted by the fleet's chip-time in it within this graph (`op_runs`; jobs that opted out left
  aside), for its accepted config's value of each knob of its class (`tuner.space.OP_KNOBS`),
  or for the default if its search found no gain; per knob the most chip-time wins, a tie goes
  to a change an accepted op asked for.
Ops fold into the graphs that spend fleet time on them, most chip-time first
(`fold_tuned`).
"""

from __future__ import annotations

import datetime
import json
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Iterable

import pyarrow.compute as pc

from execution.compile import compiler_defaults
from execution.flags import CompilerConfig, FlagValue, as_placement, checked_config, placement_key
from hlo.environment import current_environment
from hlo.fingerprint import graph_fingerprint
from hlo.module import from_text
from ingest.tables import GRAPHS, OP_RUNS, OPS
from storage.blobs import BlobStore
from storage.home import Home
from storage.warehouse import Warehouse
from tuner.op_cut import cut_ops
from tuner.result import TuneResult
from tuner.space import OP_KNOBS, SearchSpace
from tuner.tables import TUNING_RESULTS, ResultRow, results_of
from tuner.target import TuneTarget
from tuner.tune import TuneSettings, run_task
from vocabulary.tuning import Kind

STRATEGY = "fold-ops"


@dataclass(frozen=True)
class OpVote:
    """What one tuned op of a graph says about the graph's config."""

    fingerprint: str
    op_class: str
    config: CompilerConfig  # its accepted config as placements; {} when it found no gain
    weight: float  # the fleet's chip-seconds in it within the graph
    task_id: str  # its op tuning task


_DEFAULT = "(default)"  # a vote for the compiler's default value of a knob


def fold_config(votes: Iterable[OpVote]) -> CompilerConfig:
    """The graph-level config the votes elect (see the module docstring)."""
    tally: dict[str, dict[FlagValue, float]] = defaultdict(lambda: defaultdict(float))
    for vote in votes:
        knobs = OP_KNOBS[vote.op_class]
        for name in (*map(placement_key, knobs.routing), *knobs.codegen):
            tally[name][vote.config.get(name, _DEFAULT)] += vote.weight
    elected = {name: _elect(choices) for name, choices in tally.items()}
    return {name: value for name, value in sorted(elected.items()) if value != _DEFAULT}


def _elect(tally: dict[FlagValue, float]) -> FlagValue:
    """The choice with the most weight; ties go to a change over the default, then the first
    in a fixed order."""
    return min(tally, key=lambda choice: (-tally[choice], choice == _DEFAULT, repr(choice)))


def accepted_changes(votes: Iterable[OpVote]) -> list[tuple[str, FlagValue]]:
    """Every change an accepted op asked for, most chip-time behind it first."""
    weight: dict[tuple[str, FlagValue], float] = defaultdict(float)
    for vote in votes:
        for change in vote.config.items():
            weight[change] += vote.weight
    return sorted(weight, key=lambda change: (-weight[change], change[0], repr(change[1])))


def fold_variants(votes: Iterable[OpVote]) -> list[CompilerConfig]:
    """The configs a fold measures on the whole graph, in order (see the module docstring):
    every accepted change together, each alone, then the elected config; none twice."""
    votes = list(votes)
    changes = accepted_changes(votes)
    together: CompilerConfig = {}
    for name, value in changes:
        together.setdefault(name, value)
    variants = [together, *({name: value} for name, value in changes), fold_config(votes)]
    return [v for i, v in enumerate(variants) if v and v not in variants[:i]]


def fold_graph(home: Home, graph: str, env_key: str,
               settings: TuneSettings = TuneSettings()) -> TuneResult | None:
    """Measure the op results of graph `graph` (in `env_key`) on the whole graph (the configs
    of `fold_variants`); the best is verified afresh (a graph tuning task over that fixed list,
    with the measurement settings, seed and cores of `settings`). None when no op of it won
    and the votes elect the default."""
    votes = graph_votes(home, graph, env_key)
    variants = fold_variants(votes)
    if not variants:
        return None
    row = next((g for g in Warehouse(home).read(GRAPHS).to_pylist()
                if (g["fingerprint"], g["env_key"]) == (graph, env_key)), None)
    if row is None:
        raise ValueError(f"graph {graph} (environment {env_key}): not in the graphs table; "
                         "ingest its symbols first")
    module = from_text(BlobStore(home).get_text(row["hlo_blob"]), source=row["hlo_blob"])
    if graph_fingerprint(module) != graph:
        raise ValueError(f"{row['hlo_blob']}: does not fingerprint as graph {graph}")
    target = TuneTarget(module, graph, Kind.GRAPH, SearchSpace(()), f"fold {row['module_name']}",
                        tuple(variants), tuple(sorted(v.task_id for v in votes if v.config)))
    return run_task(target, home, replace(settings, budget_evals=len(variants), budget_minutes=None,
                                          strategy=STRATEGY), env_key)


def fold_tuned(home: Home, ops: Iterable[tuple[str, str]],
               settings: TuneSettings) -> list[tuple[str, TuneResult]]:
    """Fold the results of the tuned `ops` ((op fingerprint, env_key)) into each graph that holds
    one of them (CPU has no per-op channel: this is how op results reach users), measured here;
    returns (graph fingerprint, folded result) per graph whose votes elect a change."""
    by_env: dict[str, list[str]] = defaultdict(list)
    for fingerprint, env_key in ops:
        by_env[env_key].append(fingerprint)
    graphs = [(graph, env_key) for env_key, held in sorted(by_env.items())
              for graph in graphs_holding(home, held, env_key)]
    return [(graph, folded) for graph, env_key in graphs
            if (folded := fold_graph(home, graph, env_key, settings)) is not None]


def graphs_holding(home: Home, op_fingerprints: Iterable[str], env_key: str) -> list[str]:
    """The graphs (of `env_key`) that spend fleet time on any of the ops, most chip-time in
    them first; every graph holding them (in a stable order) when none has a profile yet."""
    warehouse = Warehouse(home)
    wanted = set(op_fingerprints)
    holding = sorted({row["graph_fingerprint"] for row in warehouse.read(OPS).to_pylist()
                      if row["fingerprint"] in wanted and row["env_key"] == env_key})
    seconds = {graph: sum(v for op, v in _op_seconds(warehouse, graph, env_key).items()
                          if op in wanted) for graph in holding}
    if any(seconds.values()):
        return sorted((g for g in holding if seconds[g] > 0), key=lambda g: (-seconds[g], g))
    return holding


def graph_votes(home: Home, graph: str, env_key: str) -> list[OpVote]:
    """The votes of the kernels of `graph` tuned by this compiler, one per op fingerprint."""
    warehouse = Warehouse(home)
    ops = [row for row in warehouse.read(OPS).to_pylist()
           if (row["graph_fingerprint"], row["env_key"]) == (graph, env_key)]
    results = _best_op_results(warehouse, env_key, {row["fingerprint"] for row in ops})
    tuned = [row for row in ops if row["fingerprint"] in results]
    if not tuned:
        return []
    weights = _op_seconds(warehouse, graph, env_key)
    blobs = BlobStore(home)
    classes: dict[str, str] = {}
    for blob in sorted({row["hlo_blob"] for row in tuned}):
        names = [row["name"] for row in tuned if row["hlo_blob"] == blob]
        for cut in cut_ops(from_text(blobs.get_text(blob), source=blob), names):
            classes[cut.fingerprint] = cut.op_class
    defaults = compiler_defaults()
    return [OpVote(fingerprint, classes[fingerprint],
                   as_placement(checked_config(json.loads(result.config)), defaults)
                   if result.accepted else {},
                   weights.get(fingerprint, 0.0), result.task_id)
            for fingerprint, result in sorted(results.items()) if fingerprint in classes]


def _best_op_results(warehouse: Warehouse, env_key: str, fingerprints: set[str]) -> dict[str, ResultRow]:
    """Per op, its best result by the running compiler: accepted first, then the highest lower
    bound, then the latest."""
    compiler = current_environment().compiler_version
    best: dict[str, ResultRow] = {}
    for result in results_of(warehouse.read(TUNING_RESULTS)):
        if (result.kind != Kind.OP or result.env_key != env_key or result.compiler_version != compiler
                or result.fingerprint not in fingerprints):
            continue
        old = best.get(result.fingerprint)
        if old is None or _rank(result) > _rank(old):
            best[result.fingerprint] = result
    return best


def _rank(result: ResultRow) -> tuple[bool, float, datetime.date, str]:
    """How an op's result ranks among its others (`_best_op_results`)."""
    return result.accepted, result.ci_low or 0.0, result.dt, result.task_id


def _op_seconds(warehouse: Warehouse, graph: str, env_key: str) -> dict[str, float]:
    """Chip-seconds per op inside `graph` (in `env_key`), from jobs that did not opt out."""
    runs = warehouse.read(OP_RUNS, ["op_fingerprint", "graph_fingerprint", "env_key",
                                    "chip_seconds", "opted_out"])
    runs = runs.filter(pc.and_(pc.and_(pc.equal(runs.column("graph_fingerprint"), graph),
                                       pc.equal(runs.column("env_key"), env_key)),
                               pc.invert(runs.column("opted_out"))))
    sums = runs.group_by("op_fingerprint").aggregate([("chip_seconds", "sum")])
    return dict(zip(sums.column("op_fingerprint").to_pylist(),
                    sums.column("chip_seconds_sum").to_pylist()))
