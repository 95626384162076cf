"""CPU op results folded into graph-level configs, measured on the whole graph.

XLA's CPU backend has no per-op channel: the flags of one compile apply to every kernel of the
graph. So the winners of op-level tuning (`tuner.tune.tune_op`) reach users this way: for each
graph holding tuned ops (the `ops` table), one graph-level config is built from its ops' results
and measured against the default on the whole graph, as a graph tuning task (`run_task` over a
fixed list of configs: journal, dedupe, fresh verification) with strategy 'fold-ops' and the op
tasks as its `sources`. Its result is a graph-kind tuning result that `fdo deliver` publishes
like any other if it was accepted: numerics ok and the interval's lower end above the noise band.

Building the config: every tuned kernel of the graph votes, weighted by the fleet's chip-time
in it within this graph (`op_runs`; jobs that opted out left aside): for its result's config if
that was accepted, for the default if its search found no gain. A kernel votes on the knobs of
its class (`tuner.space.OP_KNOBS`):
- per library fusion type of its class, the set of libraries its config routes that type to;
- per codegen flag of its class, its value.
Per fusion type and per codegen flag the choice with the most chip-time wins; a tie (say, no
profile of the graph yet) goes to a change that an accepted op asked for, its verified gain
being the only evidence, then to the first in a fixed order. The folded config is the
compiler's default with those choices; if it is the default itself, there is nothing to
measure.

Untuned kernels do not vote (nothing is known of them), but a flag moves every kernel of its
class: an op's winner can cost the rest of the graph more than it gains (measured on a CNN: YNN
ELTWISE made its costliest elementwise kernel 1.67x faster and the whole graph ~15% slower than
without it). So when the folded config makes several changes (fusion types rerouted, codegen
flags set), it is screened on the whole graph together with each variant that undoes one change,
and the best is the one verified.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

import pyarrow.compute as pc

from ingest.blobs import BlobStore
from ingest.environment import current_environment
from ingest.fingerprint import graph_fingerprint
from ingest.hlo_module import from_text
from ingest.tables import GRAPHS, OP_RUNS, OPS
from ingest.warehouse import Warehouse
from tuner.compile import compiler_defaults
from tuner.flags import CompilerConfig, FlagValue, from_json
from tuner.op_cut import cut_ops
from tuner.space import LIBRARY_FLAGS, OP_KNOBS, SearchSpace, library_list
from tuner.tables import TUNING_RESULTS
from tuner.tune import TuneResult, TuneSettings, TuneTarget, run_task

STRATEGY = "fold-ops"


@dataclass(frozen=True)
class OpVote:
    """What one tuned op of a graph says about the graph's config."""

    fingerprint: str
    op_class: str
    config: CompilerConfig  # its accepted config; {} (the default) when it found no gain
    weight: float  # the fleet's chip-seconds in it within the graph
    task_id: str  # its op tuning task


def fold_config(votes: Iterable[OpVote], defaults: CompilerConfig) -> CompilerConfig:
    """The graph-level config the votes elect, relative to the compiler's `defaults`."""
    routing: dict[str, dict[frozenset[str], float]] = defaultdict(lambda: defaultdict(float))
    codegen: dict[str, dict[FlagValue, float]] = defaultdict(lambda: defaultdict(float))
    for vote in votes:
        knobs = OP_KNOBS[vote.op_class]
        lists = {flag: vote.config.get(flag, defaults.get(flag, ())) for flag in LIBRARY_FLAGS}
        for fusion_type in knobs.routing:
            routing[fusion_type][_libraries(lists, fusion_type)] += vote.weight
        for flag in knobs.codegen:
            value = vote.config.get(flag, defaults.get(flag))
            if value is not None:  # a flag with no per-executable default was never searched
                codegen[flag][value] += vote.weight
    elected = {fusion_type: _elect(tally, _libraries(defaults, fusion_type))
               for fusion_type, tally in routing.items()}
    config: CompilerConfig = {}
    for flag in LIBRARY_FLAGS:
        default = set(defaults.get(flag, ()))
        members = {t for t in default if t not in elected} | {
            t for t, libraries in elected.items() if flag in libraries}
        if members != default:
            config[flag] = library_list(flag, members)
    for flag, tally in codegen.items():
        value = _elect(tally, defaults.get(flag))
        if value != defaults.get(flag):
            config[flag] = value
    return config


def _libraries(config: CompilerConfig, fusion_type: str) -> frozenset[str]:
    """The library flags whose list in `config` holds `fusion_type`."""
    return frozenset(flag for flag in LIBRARY_FLAGS if fusion_type in config.get(flag, ()))


def _elect(tally: dict, default: object) -> object:
    """The choice with the most weight; ties go to a change over the default, then the first
    in a fixed order."""
    def key(choice: object) -> tuple:
        order = repr(sorted(choice)) if isinstance(choice, frozenset) else repr(choice)
        return -tally[choice], choice == default, order

    return min(tally, key=key)


def fold_variants(config: CompilerConfig, defaults: CompilerConfig) -> list[CompilerConfig]:
    """The folded config, then (when it makes more than one change) it without each change in
    turn: one fusion type's routing, or one codegen flag, put back to the default."""
    moved = sorted(t for t in {t for flag in LIBRARY_FLAGS
                               for t in (*config.get(flag, ()), *defaults.get(flag, ()))}
                   if _libraries({**defaults, **config}, t) != _libraries(defaults, t))
    codegen = sorted(flag for flag in config if flag not in LIBRARY_FLAGS)
    variants = [config]
    if len(moved) + len(codegen) < 2:
        return variants
    for fusion_type in moved:
        lists = {flag: set(config.get(flag, defaults.get(flag, ()))) - {fusion_type}
                 | {fusion_type} & set(defaults.get(flag, ())) for flag in LIBRARY_FLAGS}
        variants.append(_with_lists(config, lists, defaults))
    for flag in codegen:
        variants.append({k: v for k, v in config.items() if k != flag})
    return [v for i, v in enumerate(variants) if v and v not in variants[:i]]


def _with_lists(config: CompilerConfig, lists: dict[str, set[str]],
                defaults: CompilerConfig) -> CompilerConfig:
    """`config` with the library flags' lists replaced (left out where they are the default)."""
    result = {k: v for k, v in config.items() if k not in LIBRARY_FLAGS}
    for flag, members in lists.items():
        if set(members) != set(defaults.get(flag, ())):
            result[flag] = library_list(flag, members)
    return result


def fold_graph(home: Path, graph: str, env_key: str,
               settings: TuneSettings = TuneSettings()) -> TuneResult | None:
    """Fold the op results of graph `graph` (in `env_key`) into one config and measure it, and
    its variants without each change, on the whole graph; the best is verified afresh (a
    graph tuning task over that fixed list, with the measurement settings, seed and cores of
    `settings`). None when no op of it won or the votes elect the default."""
    votes = graph_votes(home, graph, env_key)
    defaults = compiler_defaults()
    config = fold_config(votes, defaults)
    if not config:
        return None
    row = next((g for g in Warehouse(home).read(GRAPHS).to_pylist()
                if (g["fingerprint"], g["env_key"]) == (graph, env_key)), None)
    if row is None:
        raise ValueError(f"graph {graph} (environment {env_key}): not in the graphs table; "
                         "ingest its symbols first")
    module = from_text(BlobStore(home).get_text(row["hlo_blob"]), source=row["hlo_blob"])
    if graph_fingerprint(module) != graph:
        raise ValueError(f"{row['hlo_blob']}: does not fingerprint as graph {graph}")
    variants = fold_variants(config, defaults)
    target = TuneTarget(module, graph, "graph", SearchSpace(()), f"fold {row['module_name']}",
                        tuple(variants), tuple(sorted(v.task_id for v in votes if v.config)))
    return run_task(target, home, replace(settings, budget_evals=len(variants), budget_minutes=None,
                                          strategy=STRATEGY), env_key)


@dataclass
class OpRound:
    """One round of op tuning: the ops tuned, then the graphs their results were folded into."""

    skipped: list[str]
    tasks: list[tuple[str, object, str]]  # (label, cut op, env_key)
    results: list[TuneResult]
    folds: list[tuple[str, TuneResult]]  # (graph fingerprint, folded result)


def tune_ops_and_fold(home: Path, top: int, settings: TuneSettings, fold: bool = True,
                      progress: bool = False, untried: bool = False) -> OpRound:
    """Tune the `top` ranked ops this machine can measure, then fold the results into each graph
    that holds one of them (CPU has no per-op channel: this is how op results reach users).
    `untried`: skip ops this compiler has a result for (see tunable_candidates)."""
    from tuner.candidates import tunable_op_candidates
    from tuner.tune import overall_progress, tune_op

    found = tunable_op_candidates(home, top, untried)
    results = [tune_op(cut, home, settings, env_key=env_key, progress=progress)
               for _, cut, env_key in overall_progress(found.tasks, "tune ops", progress)]
    folds: list[tuple[str, TuneResult]] = []
    if fold:
        graphs = {(graph, env_key) for (_, cut, env_key) in found.tasks
                  for graph in graphs_holding(home, [cut.fingerprint], env_key)}
        folds = [(graph, folded) for graph, env_key in sorted(graphs)
                 if (folded := fold_graph(home, graph, env_key, settings)) is not None]
    return OpRound(list(found.skipped), list(found.tasks), results, folds)


def graphs_holding(home: Path, op_fingerprints: Iterable[str], env_key: str) -> list[str]:
    """The graphs (of `env_key`) that hold any of the ops, in a stable order."""
    wanted = set(op_fingerprints)
    return sorted({row["graph_fingerprint"] for row in Warehouse(home).read(OPS).to_pylist()
                   if row["fingerprint"] in wanted and row["env_key"] == env_key})


def graph_votes(home: Path, graph: str, env_key: str) -> list[OpVote]:
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
    return [OpVote(fingerprint, classes[fingerprint],
                   from_json(json.loads(result["config"])) if result["accepted"] else {},
                   weights.get(fingerprint, 0.0), result["task_id"])
            for fingerprint, result in sorted(results.items()) if fingerprint in classes]


def _best_op_results(warehouse: Warehouse, env_key: str, fingerprints: set[str]) -> dict[str, dict]:
    """Per op, its best result by the running compiler: accepted first, then the highest lower
    bound, then the latest."""
    compiler = current_environment().compiler_version
    best: dict[str, dict] = {}
    for row in warehouse.read(TUNING_RESULTS).to_pylist():
        if (row["kind"] != "op" or row["env_key"] != env_key or row["compiler_version"] != compiler
                or row["fingerprint"] not in fingerprints):
            continue
        rank = (row["accepted"], row["ci_low"] or 0.0, row["dt"], row["task_id"])
        old = best.get(row["fingerprint"])
        if old is None or rank > (old["accepted"], old["ci_low"] or 0.0, old["dt"], old["task_id"]):
            best[row["fingerprint"]] = row
    return best


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
