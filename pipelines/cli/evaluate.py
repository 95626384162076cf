"""`fdo evaluate`: a compiler config measured against the default on one module, on a local or a
URL home; and what `fdo tune` shares with it: the --measure-mode option and a module's placement
from the environment file beside it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from execution.sharded import Placement
from hlo.environment import Environment
from pipelines.cli.common import (
    EXIT_DEFAULT_FAILS,
    EXIT_FAILED,
    EXIT_OK,
    JSON_HELP,
    Subcommands,
    add_command,
    config_text,
    print_json,
)
from storage.home import Home
from vocabulary.failures import Failure
from vocabulary.measure import MeasureMode


def add_evaluate(sub: Subcommands) -> None:
    """`fdo evaluate`."""
    p = add_command(sub, "evaluate", "measure a compiler config against the default",
                    ["fdo evaluate module.txt",
                     "fdo evaluate module.txt --set xla_cpu_enable_fast_math=true --max-seconds 10",
                     "fdo evaluate module.txt --set placement:REDUCE=xla --json"],
                    "Exit status 4: the module fails with the compiler's default config (it does not "
                    "compile or run), so there is nothing to measure against; the candidate is still "
                    "tried, and if it runs the module, its numerics are checked against a reference "
                    "config that routes every fusion type to XLA's own emitters. 1: the candidate "
                    "fails, or its numerics are off.")
    p.add_argument("file", metavar="FILE", help="HLO module (unoptimized) to compile and run")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                   help="a compiler flag of the candidate; repeat for more (default: none, an A/A "
                   "check of the default against itself)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.add_argument("--max-seconds", type=float, default=30.0, metavar="SECONDS",
                   help="timing budget of the paired measurements (of each worker's)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="measure in N fresh workers, one after another, and report their median "
                   "(the tuner verifies in 3: one process's interval leaves out the spread from "
                   "one process to the next)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="the worker process is stopped after this long")
    add_measure_mode(p)
    p.set_defaults(run=cmd_evaluate, home_use=None, home_url=True)


def add_measure_mode(p: argparse.ArgumentParser) -> None:
    """The --measure-mode option of the commands that measure a module."""
    p.add_argument("--measure-mode", type=_measure_mode, default=None, metavar="{" + ",".join(_SPELLED) + "}",
                   help="how a module its job compiled across devices is measured (the "
                   "partitioning in the fdo-environment.json beside it, as the hook spools it): "
                   "whole, as the job compiles it on as many devices (a CPU's host devices), or "
                   "per-device, its per-device program on one device (default: whole where this "
                   "machine has the devices, else per-device; docs/sharded.md)")


# The modes as the shell spells them, a hyphen for a space (MeasureMode reads either).
_SPELLED = tuple(mode.replace(" ", "-") for mode in MeasureMode)


def _measure_mode(text: str) -> MeasureMode:
    """The mode --measure-mode names; argparse's error, naming the choices, otherwise."""
    try:
        return MeasureMode(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from "
                                         f"{', '.join(map(repr, _SPELLED))})") from None


def module_placement(path: str, asked: MeasureMode | None) -> tuple[Placement, Environment | None]:
    """How to measure the module in file `path`: from the environment file beside it (the
    partitioning its job compiled it with), whole where this machine has the devices, else
    per device, or as `asked`; and that environment, None where there is no such file.
    ValueError naming the file when it is malformed, or whole is asked and cannot be."""
    from execution.sharded import choose_placement, whole_capacity
    from hlo.environment import ENVIRONMENT_FILE, current_environment, environment_from_json

    beside = Path(path).parent / ENVIRONMENT_FILE
    environment = None
    if beside.is_file():
        try:
            environment = environment_from_json(json.loads(beside.read_text()))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{beside}: bad environment file: {exc}") from None
    partitioning = environment.partitioning if environment is not None else None
    capacity = whole_capacity(current_environment().platform)
    return (choose_placement(partitioning, capacity, asked),
            environment)


def cmd_evaluate(args: argparse.Namespace, home: Home) -> int:
    """Measure the --set config against the default on one module."""
    from execution.compile import check_options
    from execution.evaluate import evaluate_independently, per_device_program
    from execution.flags import parse_assignment, to_json
    from execution.measure import MeasureSettings
    from hlo.module import load_file

    if args.workers < 1:
        raise ValueError(f"--workers {args.workers}: at least one is needed")
    module = load_file(args.file)
    source = module.source
    candidate = dict(parse_assignment(item) for item in args.set)
    check_options(candidate)
    placement, _ = module_placement(args.file, args.measure_mode)
    if placement.mode is MeasureMode.PER_DEVICE:
        assert placement.partitioning is not None
        module = per_device_program(module, placement.partitioning, args.timeout)
    settings = MeasureSettings(max_seconds=args.max_seconds)
    result = evaluate_independently(module, candidate, args.workers, settings=settings,
                                    timeout=args.timeout, partitioning=placement.compiled_for)
    if args.json:
        print_json({**result.to_json(), "config": to_json(candidate),
                    "measure_mode": placement.mode, "measured_as": placement.describe()})
    else:
        _print_evaluation(f"{source} ({placement.describe()})", candidate, result)
    if result.failure == Failure.DEFAULT_FAILS:
        return EXIT_DEFAULT_FAILS
    if result.error is not None or result.numerics_ok is False:
        return EXIT_FAILED
    return EXIT_OK


def _print_evaluation(source: str, candidate: dict, result: Any) -> None:
    label = config_text(candidate) if candidate else "A/A (default vs default)"
    print(f"{source}: {label}")
    if result.failure == Failure.DEFAULT_FAILS:
        print(f"  {result.error}")  # "default fails: <reason>"
        if result.candidate_runs is not None:
            print(f"  {_without_default(result)}")
        return
    if result.error:
        print(f"  failed: {result.error}")
        return
    if result.identical_program:
        print("  the candidate compiles to the same program as the default: nothing to measure")
        return
    verdict = "significant gain" if result.significant else "no significant gain"
    print(f"  speedup {result.speedup.estimate:.3f}x  (99% CI {result.speedup.low:.3f} .. "
          f"{result.speedup.high:.3f}, {result.pairs} pairs, {verdict})")
    if len(result.speedups) > 1:
        print(f"  the median of {len(result.speedups)} workers: {worker_speedups(result.speedups)}")
    print(f"  numerics {'ok' if result.numerics_ok else 'FAILED'}: {result.judged().describe()}; "
          f"compile {result.compile_seconds:.2f} s")


def worker_speedups(speedups: list[float]) -> str:
    """Each worker's speedup, as `fdo evaluate` and `fdo tune` print them."""
    return ", ".join(f"{x:.3f}x" for x in speedups)


def _without_default(result: Any) -> str:
    """What the candidate did where the default fails."""
    if not result.candidate_runs:
        return "the candidate does not run it either"
    if result.numerics_ok is None:
        return "the candidate runs it (its numerics unchecked: the reference config fails too)"
    verdict = "ok" if result.numerics_ok else "FAILED"
    return (f"the candidate runs it; numerics {verdict} against the reference config (every "
            "fusion type on XLA's own emitters)")
