"""`fdo tune`: searching compiler flags for HLO modules (or the top ranked graphs and ops) and
verifying the best, on a local or a URL home."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pipelines import stages
from pipelines.cli.cluster import add_cluster_option
from pipelines.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_DEFAULT_FAILS,
    EXIT_FAILED,
    EXIT_OK,
    Subcommands,
    add_command,
    config_text,
    print_json,
    print_table,
)
from pipelines.cli.evaluate import add_measure_mode, module_placement, worker_speedups
from pipelines.extras import needs
from storage.home import Home
from tuner.kinds import KINDS, check_platform
from tuner.strategies import STRATEGIES
from tuner.trial import STALL_AFTER
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Kind, StopReason

if TYPE_CHECKING:
    from tuner.candidates import Candidate, Sharded


def add_tune(sub: Subcommands) -> None:
    """`fdo tune`."""
    graph, op, kernels = KINDS[Kind.GRAPH], KINDS[Kind.OP], KINDS[Kind.KERNELS]
    p = add_command(sub, "tune", "search compiler flags for HLO modules and verify the best",
                    ["fdo tune --top 3 --budget-minutes 30",
                     "fdo tune module.txt --budget-evals 20 --cores 0-7", "fdo tune --kind op --top 2",
                     "fdo tune --kind kernels --top 2   # on a GPU machine",
                     "fdo --home /shared/fdo tune --top 8 --cluster 10.0.0.5:6379"],
                    "Exit status 4: a module fails with the compiler's default config (it does not "
                    "compile or run), so there is nothing to measure against; its task ends with "
                    "status \"default fails: <reason>\".")
    p.add_argument("files", nargs="*", metavar="FILE", help="HLO modules (unoptimized) to tune "
                   "(default: none, the top ranked graph candidates this machine can measure)")
    p.add_argument("--kind", choices=[str(kind) for kind in KINDS], default=str(Kind.GRAPH),
                   help="op: tune the top ranked ops (cut out of their graphs), then fold the "
                   "winners into graph-level configs measured on each whole graph; kernels (a "
                   "GPU's): run XLA's autotuner exhaustively over each graph's fusions and verify "
                   "the graph with the costliest fusions' results delivered")
    p.add_argument("--top", type=int, default=5, metavar="K", help="without files: how many candidates")
    _add_budget(p, graph.budget_evals, kernels.budget_evals)
    p.add_argument("--strategy", default=None, choices=sorted(STRATEGIES),
                   help="the search's last phase, after the default's one-move neighbours (by "
                   f"prior) and their combinations (default: {graph.strategy} for graphs, {op.strategy} "
                   "for ops)")
    p.add_argument("--plain", action="store_true",
                   help="the strategy alone, from the first evaluation (no neighbours, no "
                   "combinations; for comparisons)")
    p.add_argument("--no-shipped-prior", action="store_true",
                   help="graphs: order the default's neighbours by this home's evidence and the "
                   "flags' cold ranks alone, without the prior the tuner ships for this platform "
                   "(which skips the moves slower on every zoo workload they change; for comparisons)")
    p.add_argument("--no-fold", action="store_true", help="with --kind op: tune the ops only")
    p.add_argument("--no-transfer", action="store_true",
                   help="graphs: search from the defaults alone, without first trying the configs "
                   "verified for the graph's siblings (the same program in other environments or "
                   "at other shapes) or that won broadly on its platform (for comparisons)")
    p.add_argument("--transfer-check", action="store_true",
                   help="graphs: try only those transferred configs and verify the best, as the "
                   "nightly loop's first pass does (no search); a graph with none is not run")
    p.add_argument("--cores", default=None, metavar="CORES",
                   help="cores to compile and measure on, e.g. 0-7; a quarter compile, the rest "
                   "measure (default: all available)")
    p.add_argument("--compile-workers", type=int, default=None, metavar="N",
                   help="compile worker processes (default: one per compile core)")
    p.add_argument("--verify-workers", type=int, default=None, metavar="N",
                   help="fresh workers, one after another, that compare two finalists and that "
                   "verify the winner; their median decides (default: 3; 1 is faster, and "
                   "trusts one process)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the search")
    add_measure_mode(p)
    add_cluster_option(p)
    p.add_argument("--json", action="store_true", help="print the tuning results as JSON (with "
                   "--cluster, each with the node that ran it)")
    p.set_defaults(run=cmd_tune, home_url=True)


def _add_budget(p: argparse.ArgumentParser, graph_evals: int, kernels_evals: int) -> None:
    """`fdo tune`'s budget: evaluations, minutes, and when a stalled search ends."""
    p.add_argument("--budget-evals", type=int, default=None, metavar="N",
                   help=f"evaluations of each task's search: configs timed or failed (one that "
                   f"compiles to a program already known is free); the finalists' race, the "
                   f"winner's pruning and its verification come on top, and the output says "
                   f"what each phase spent (default: {graph_evals} for graphs, the whole "
                   f"space for ops; kernels: how many of the costliest fusions' results to keep, "
                   f"default {kernels_evals})")
    p.add_argument("--budget-minutes", type=float, default=None, metavar="MINUTES",
                   help="time budget of each task's search, race and pruning together: no "
                   "screen or comparison starts after it; the verification comes on top "
                   "(default: none, --budget-evals alone)")
    p.add_argument("--stall-after", type=int, default=None, metavar="K",
                   help="end a search before its budget once K evaluations in a row brought no "
                   "significant improvement on its best so far, after its cold-start screen of "
                   "the likeliest moves and their combinations (docs/tuner.md); the output says "
                   "why each search ended: budget, stalled, time or exhausted (default: "
                   f"{STALL_AFTER}; 0: never, the search runs its budget)")


@needs("pipeline")
def cmd_tune(args: argparse.Namespace, home: Home) -> int:
    """Tune the modules given, or the top ranked candidates of the kind (ops are then folded
    into their graphs)."""
    from hlo.environment import current_environment

    kind = Kind(args.kind)
    spec = KINDS[kind]
    settings = _tune_settings(args)  # bad options are told before a cluster is reached
    if args.files and not spec.whole_graph:
        print(f"fdo tune --kind {kind}: {kind}s come from the ranking (fdo rank); give no files",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    address = stages.cluster_address(args.cluster)
    if address is None:  # this machine tunes: a kind it cannot is refused before any work
        check_platform(kind, current_environment().platform)
    with stages.open_runner(address) as runner:
        sharded: dict[str, Sharded] = {}
        if args.files:
            candidates = [_file_candidate(path, args.measure_mode, sharded) for path in args.files]
        else:
            found = spec.candidates(home, args.top, False, runner.environments())
            for reason in found.skipped:
                print(f"skipped {reason}", file=sys.stderr)
            candidates = found.tunable
            if not candidates:
                asked = f" for --kind {kind}" if spec.whole_graph else ""
                print(f"no ranked {Kind.GRAPH if spec.whole_graph else kind} candidates that "
                      f"{_measurers(runner)} can measure{asked} (run fdo rank)", file=sys.stderr)
                return EXIT_FAILED
        own = None
        if kind == Kind.GRAPH and not args.no_transfer:
            candidates, own = _with_transfers(home, candidates, settings, args.transfer_check)
            if not candidates:
                print("no transferred configs to check for any of the graphs", file=sys.stderr)
                return EXIT_FAILED
        done = stages.tune_candidates(
            kind, home, candidates, settings, progress=not args.json, runner=runner,
            measure_mode=args.measure_mode,
            sharded=sharded, fold=not args.no_fold, task_settings=own)
    _print_round(candidates, done, runner.name, args.json, spec.folded)
    return _tune_exit(done.outcomes)


def _with_transfers(home: Home, candidates: list[Candidate], settings: Any,
                    check: bool) -> tuple[list[Candidate], list[Any]]:
    """Each graph candidate with its own settings: seeded with its transfers (`tuner.transfer`),
    or with `check`, a transfer check of them; a candidate with none to check is told and left
    out."""
    kept, own = [], []
    for candidate, transfers in zip(candidates, stages.transfers_for(home, candidates)):
        if check and not transfers:
            print(f"{candidate.label}: no transferred configs to check (no sibling has a verified "
                  "config, nothing won on its platform yet, or the graph tried them all)", file=sys.stderr)
            continue
        kept.append(candidate)
        own.append(replace(settings, transfers=transfers, transfer_check=check,
                           budget_evals=len(transfers) if check else settings.budget_evals))
    return kept, own


def _file_candidate(path: str, measure_mode: MeasureMode | None, sharded: dict[str, Sharded]) -> Candidate:
    """The candidate of a module file: keyed to the environment beside it (`module_placement`),
    else this machine's; a partitioned environment is added to `sharded`."""
    from hlo.environment import current_environment
    from hlo.module import load_file
    from tasks.resources import kind_of
    from tuner.candidates import Candidate, Sharded
    from tuner.target import graph_subject

    _, environment = module_placement(path, measure_mode)
    if environment is not None and environment.partitioning is not None:
        sharded[environment.key()] = Sharded(environment.partitioning, kind_of(environment))
    env_key = environment.key() if environment is not None else current_environment().key()
    return Candidate(str(path), graph_subject(load_file(path)), env_key)


def _print_round(candidates: list[Candidate], done: stages.TuneRound, runner: str, as_json: bool,
                 folded: bool) -> None:
    """Each task's outcome, and for a kind whose results are folded (`folded`), the folds:
    as JSON (one task alone as its own document; with folds, {"ops": ..., "folds": ...}), or
    for people."""
    if as_json:
        payload = [_outcome_json(o, runner) for o in done.outcomes]
        if folded:
            print_json({"ops": payload, "folds": [f.to_json() for _, f in done.folds]})
        else:
            print_json(payload[0] if len(payload) == 1 else payload)
        return
    for candidate, o in zip(candidates, done.outcomes):
        _print_outcome(candidate.label, o, runner)
    for graph, f in done.folds:
        _print_tune_result(f"graph {graph[:8]} folded from {len(f.sources)} op results", f)


def _outcome_json(outcome: Any, runner: str) -> dict[str, Any]:
    """A task's JSON: its result's, as a local run prints it; on a cluster, with the node that
    ran it and its tries; a task with no result: its status and the reason."""
    payload = (outcome.result.to_json() if outcome.result is not None
               else {"task": outcome.label, "status": str(outcome.status), "reason": outcome.reason})
    if runner != "local":
        payload.update(node=outcome.node, tries=outcome.tries)
    return payload


def _print_outcome(label: str, outcome: Any, runner: str) -> None:
    """A task's outcome: its result as a local run prints it (on a cluster, with the node that
    ran it), or its status and the reason it has no result."""
    where = f" [node {outcome.node[:12]}]" if runner != "local" and outcome.node else ""
    if outcome.result is None:
        print(f"{label}: {outcome.status}{where}: {outcome.reason}")
        return
    _print_tune_result(label + where, outcome.result)


def _measurers(runner: Any) -> str:
    """Who measures the tasks of `runner`, as the CLI names them."""
    return "this machine" if runner.environments() is None else "the cluster's nodes"


def _tune_exit(outcomes: list[Any]) -> int:
    """`fdo tune`'s exit status: EXIT_DEFAULT_FAILS if any task's default failed; EXIT_FAILED
    if a task has no result (failed, or no node measures its environment)."""
    from vocabulary.tuning import Verdict
    if any(o.result is not None and o.result.status == Verdict.DEFAULT_FAILS for o in outcomes):
        return EXIT_DEFAULT_FAILS
    return EXIT_FAILED if any(o.result is None for o in outcomes) else EXIT_OK


def _tune_settings(args: argparse.Namespace) -> Any:
    """`fdo tune`'s TuneSettings from its arguments, the kind's defaults for the rest; ValueError
    names a bad --cores, --compile-workers or --verify-workers."""
    from execution.cores import parse_cores

    for option in ("compile_workers", "verify_workers"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise ValueError(f"--{option.replace('_', '-')} {value}: at least one is needed")
    if args.transfer_check and args.no_transfer:
        raise ValueError("--transfer-check and --no-transfer exclude each other")
    if args.transfer_check and args.kind != Kind.GRAPH:
        raise ValueError(f"--transfer-check: graphs only, not --kind {args.kind}")
    if args.stall_after is not None and args.stall_after < 0:
        raise ValueError(f"--stall-after {args.stall_after}: a count of evaluations, or 0 for never")
    # --budget-evals 0 asks for no budget of its own: the kind's default, as without it.
    settings = stages.tune_settings(args.kind, budget_evals=args.budget_evals or None,
                                    budget_minutes=args.budget_minutes, strategy=args.strategy,
                                    schedule=not args.plain, seed=args.seed,
                                    shipped_prior=not args.no_shipped_prior,
                                    cores=parse_cores(args.cores) if args.cores else None,
                                    compile_workers=args.compile_workers,
                                    verify_workers=args.verify_workers,
                                    stall_after=args.stall_after or None)
    return replace(settings, stall_after=None) if args.stall_after == 0 else settings


# Why a search ended, in words (vocabulary.tuning.StopReason).
STOP_TEXT = {
    StopReason.BUDGET: "its evaluations were spent",
    StopReason.STALLED: "after its cold-start screen, none of its last evaluations was a "
                        "significant improvement on its best",
    StopReason.TIME: "its minutes were spent",
    StopReason.EXHAUSTED: "nothing was left to propose",
}


def _print_tune_result(label: str, r: Any) -> None:
    """A task's result: its verdict, the opt-in config that relaxes numerics and what it would
    gain where there is one, when its config was found (minutes into the task, of its minutes
    in all: the phases' sum), and what each phase spent (a result landed before phases were
    told has none), with their total."""
    from execution.flags import relaxes_numerics

    speed = r.speedup.as_speedup() if r.speedup is not None else ""
    if len(r.speedups) > 1:  # the verification's workers, each on its own
        speed += f" (workers {worker_speedups(r.speedups)})"
    print(f"{label}: {r.status} {speed}; config {config_text(r.to_json()['config'])}")
    if r.reason:
        print(f"  {r.reason}")
    if r.transferred_from is not None:
        print(f"  config from {r.transferred_from} ({r.origin})")
    if r.autotune_results is not None:
        from execution.autotune.results import parse_results

        fusions = parse_results(r.autotune_results).fusions
        print(f"  autotune results of {len(fusions)} fusions "
              f"({', '.join(sorted({f.kind for f in fusions}))}), delivered with the config")
    if r.relaxed is not None:
        relaxed = r.relaxed
        print(f"  opt-in, relaxes numerics ({', '.join(relaxes_numerics(relaxed.config))}): "
              f"{relaxed.speedup.as_speedup()}; "
              f"config {config_text(r.to_json()['relaxed']['config'])} "
              "(for jobs run with FDO_RELAXED_NUMERICS=1)")
    if r.seconds_to_best is not None:
        in_all = f" of {r.seconds / 60:.1f} in all" if r.seconds is not None else ""
        print(f"  best config found after {r.seconds_to_best / 60:.1f} minutes{in_all}")
    if r.search_stop is not None:
        print(f"  search ended: {r.search_stop} ({STOP_TEXT[r.search_stop]})")
    if r.budget_reason is not None:
        print(f"  budget: {r.budget_reason}")
    if r.phases:
        rows = [(str(p.phase), str(p.configs), str(p.evaluations), str(p.measured),
                 str(p.compiles), f"{p.seconds:.1f}") for p in r.phases]
        total = ("total", str(sum(p.configs for p in r.phases)), str(r.evaluations),
                 str(r.measured), str(sum(p.compiles for p in r.phases)),
                 f"{sum(p.seconds for p in r.phases):.1f}")
        print_table(("phase", "configs", "evaluations", "measured", "compiles", "seconds"),
                    [*rows, total], "<>>>>>", indent="  ")
