"""Does a numerics decision flip with the random inputs' seed? Before and after the conditioning
rule, on the zoo's training steps (and a Flax train step, with --flax; a program built to be
ill-conditioned, with --ill-conditioned).

For each workload, the default compile is checked against every strict one-move neighbour of
the graph space (`tuner.schedule.neighbourhood`, configs that relax numerics left out) whose
program differs from the default's, on the inputs of each seed, by two rules:
- before: the dtype's tolerance (or 4x the default's run-to-run spread), on the seed's inputs
  alone (the check before issue 41);
- after: the tolerance widened to 4x the default's own sensitivity to a last-bit change of its
  inputs, and a failure re-checked on two more sets of inputs, failing where it holds up
  (`execution.session.Reference.judge`, what every worker now runs).
A verification decides over three fresh workers' seeds (s+1, s+2, s+3, as the tuner's): before,
every one must pass; after, the failure must hold up over the inputs of all
(`execution.numerics.pooled`). A program's decision "flips" where some seeds pass and others
fail. It runs in this process, without timing: numerics alone decide what it counts.

    python benchmarks/bench_numerics_seeds.py [--workloads vit-s,transformer-s] [--seeds 10]
        [--flax] [--ill-conditioned] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provenance import describe

from execution.compile import CompileError, compile_module, compiler_defaults, object_code  # noqa: E402
from execution.numerics import all_ok, compare_outputs, pooled  # noqa: E402
from execution.session import Reference, RunError, measurable_module, program_key, run_once  # noqa: E402
from hlo.module import HloModule, from_lowered  # noqa: E402
from tests.support.numerics_programs import flax_train_step_module, ill_conditioned_module  # noqa: E402
from tuner.schedule import neighbourhood  # noqa: E402
from tuner.space import accepted_flags, graph_space  # noqa: E402
from tuner.winner import strict  # noqa: E402
from workloads import zoo  # noqa: E402

TRAIN_STEPS = ("transformer", "mlp", "cnn", "rnn", "gnn", "recommender", "two_tower", "vit")
WORKERS = 3  # a verification's fresh workers (tuner.tune.TuneSettings.verify_workers)


def strict_moves() -> list[dict[str, Any]]:
    """Every one-move config of the graph space that relaxes no numerics."""
    space = graph_space("cpu", accepted_flags("cpu"), compiler_defaults())
    return [config for config in ({name: value} for name, value in neighbourhood(space))
            if strict(config)]


def study(name: str, module: HloModule, moves: list[dict[str, Any]], seeds: int) -> dict[str, Any]:
    """Each move's decisions, per seed and per verification, by both rules."""
    proto = measurable_module(module.proto)
    default = compile_module(proto, {})
    default_program = program_key(default.optimized_proto, object_code(default.executable), {})
    references = [Reference(proto, seed, default.executable) for seed in range(seeds + WORKERS)]
    rows = []
    for config in moves:
        try:
            compiled = compile_module(proto, config)
        except CompileError:
            continue
        if program_key(compiled.optimized_proto, object_code(compiled.executable), config) == default_program:
            continue
        try:
            before, after = [], []
            for reference in references:
                run = reference.run(0)
                candidate = run_once(compiled.executable, run.arguments)
                before.append(all_ok(compare_outputs(run.outputs, candidate, run.spread)))
                after.append(reference.judge(compiled.executable))
        except RunError:
            continue
        worst = max((c.max_error / c.tolerance for judged in after for c in judged.outputs
                     if c.tolerance > 0 and c.max_error != float("inf")), default=0.0)
        rows.append({
            "config": config,
            "before": before[:seeds],
            "after": [judged.ok for judged in after[:seeds]],
            "rechecked": sum(judged.checked > 1 for judged in after[:seeds]),
            "verify_before": [all(before[s + 1:s + 1 + WORKERS]) for s in range(seeds)],
            "verify_after": [pooled(after[s + 1:s + 1 + WORKERS]).ok for s in range(seeds)],
            "worst_error_over_tolerance": worst,
        })
    return {"workload": name, "programs": len(rows), "rows": rows}


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    rows = result["rows"]

    def counts(key: str) -> tuple[int, int, int]:
        failed = sum(not ok for row in rows for ok in row[key])
        flipping = sum(len(set(row[key])) > 1 for row in rows)
        rejected = sum(not any(row[key]) for row in rows)
        return failed, flipping, rejected

    return {"workload": result["workload"], "programs": result["programs"],
            "checks": sum(len(row["before"]) for row in rows),
            **{f"{key}_{what}": value for key in ("before", "after", "verify_before", "verify_after")
               for what, value in zip(("failed", "flipping", "rejected"), counts(key))},
            "rechecked": sum(row["rechecked"] for row in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(f"{family}-s" for family in TRAIN_STEPS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--flax", action="store_true",
                        help="also the Flax train step of tests/support/numerics_programs.py (needs flax, optax)")
    parser.add_argument("--ill-conditioned", action="store_true",
                        help="also the program of tests/support/numerics_programs.py built to be ill-conditioned")
    parser.add_argument("--json", action="store_true", help="print every decision as JSON")
    args = parser.parse_args()
    moves = strict_moves()
    modules = [(name, from_lowered(zoo.get(name).lower())) for name in args.workloads.split(",") if name]
    if args.flax:
        modules.append(("flax-cnn-attention", flax_train_step_module()))
    if args.ill_conditioned:  # errors of a reordered sum straddling float32's tolerance, and over it
        modules += [(f"ill-conditioned-{level:g}", ill_conditioned_module(level)) for level in (30, 40)]
    results = []
    for name, module in modules:
        started = time.monotonic()
        results.append(study(name, module, moves, args.seeds))
        print(f"{name}: {results[-1]['programs']} programs in {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{args.seeds} seeds; each cell: decisions failed / programs whose decision flips with "
          "the seed / programs rejected on every seed")
    print(f"{'workload':<20} {'programs':>8} {'seed, before':>14} {'seed, after':>13} "
          f"{'verify, before':>15} {'verify, after':>14} {'rechecked':>9}")
    for summary in map(_summary, results):
        cells = [f"{summary[f'{key}_failed']}/{summary[f'{key}_flipping']}/{summary[f'{key}_rejected']}"
                 for key in ("before", "after", "verify_before", "verify_after")]
        print(f"{summary['workload']:<20} {summary['programs']:>8} {cells[0]:>14} {cells[1]:>13} "
              f"{cells[2]:>15} {cells[3]:>14} {summary['rechecked']:>9}")
    for result in results:
        for row in result["rows"]:
            if not all(row["before"]) or not all(row["after"]):
                print(f"  {result['workload']} {json.dumps(row['config'])}: before fails seeds "
                      f"{[s for s, ok in enumerate(row['before']) if not ok]}, after "
                      f"{[s for s, ok in enumerate(row['after']) if not ok]}; worst error "
                      f"{row['worst_error_over_tolerance']:.2f}x its tolerance")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
