"""`fdo`: the command line of fleet-fdo, one subcommand per stage of the loop.

Exit codes: 0 success; 1 the work ran but its outcome is a failure (a failed evaluation, numerics
off); 2 bad usage or bad input (unreadable module, unknown flag); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def default_home() -> Path:
    """`FDO_HOME`, else ~/.fdo: the data root of every stage."""
    return Path(os.environ.get("FDO_HOME") or Path.home() / ".fdo")


def _print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=None, sort_keys=True))


def cmd_fingerprint(args: argparse.Namespace) -> int:
    from ingest.environment import current_environment, store_key
    from ingest.fingerprint import fingerprint_module
    from ingest.hlo_module import load_file

    module = load_file(args.file)
    result = fingerprint_module(module, with_ops=args.ops)
    if args.json:
        env_key = current_environment().key()
        payload: dict[str, Any] = {
            "fingerprint": result.fingerprint,
            "env_key": env_key,
            "key": store_key(result.fingerprint, env_key),
            "n_instructions": result.n_instructions,
        }
        if args.ops:
            payload["ops"] = [op.__dict__ for op in result.ops]
        _print_json(payload)
    elif args.ops:
        for op in result.ops:
            print(f"{op.fingerprint}  {op.kind:<28} {op.n_instructions:>6}  {op.name}")
    else:
        print(result.fingerprint)
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ingest.hlo_module import load_file
    from tuner.compile import check_options
    from tuner.evaluate import evaluate
    from tuner.flags import parse_assignment, to_json
    from tuner.measure import MeasureSettings

    module = load_file(args.file)
    candidate = dict(parse_assignment(item) for item in args.set)
    check_options(candidate)
    settings = MeasureSettings(max_seconds=args.max_seconds)
    result = evaluate(module, candidate, settings=settings, timeout=args.timeout)
    if args.json:
        _print_json({**result.to_json(), "config": to_json(candidate)})
    else:
        _print_evaluation(module.source, candidate, result)
    if result.error is not None or result.numerics_ok is False:
        return EXIT_FAILED
    return EXIT_OK


def _print_evaluation(source: str, candidate: dict, result: Any) -> None:
    label = ", ".join(f"{k}={v}" for k, v in candidate.items()) or "A/A (default vs default)"
    print(f"{source}: {label}")
    if result.error:
        print(f"  failed: {result.error}")
        return
    if result.identical_program:
        print("  the candidate compiles to the same program as the default: nothing to measure")
        return
    verdict = "significant gain" if result.significant else "no significant gain"
    print(f"  speedup {result.speedup:.3f}x  (99% CI {result.ci_low:.3f} .. {result.ci_high:.3f}, "
          f"{result.pairs} pairs, {verdict})")
    print(f"  numerics {'ok' if result.numerics_ok else 'FAILED'}; "
          f"compile {result.compile_seconds:.2f} s")


def cmd_workloads(args: argparse.Namespace) -> int:
    from ingest import zoo

    if args.action == "list":
        rows = [{"name": w.name, "family": w.family, "size": w.size,
                 "description": w.description} for w in zoo.all_workloads()]
        if args.json:
            _print_json(rows)
        else:
            for row in rows:
                print(f"{row['name']:<20} {row['description']}")
        return EXIT_OK
    from ingest.zoo.dump import dump_workloads

    out = Path(args.out)
    dirs = dump_workloads(out, names=args.names or None, progress=not args.json)
    if args.json:
        _print_json([str(d) for d in dirs])
    else:
        print(f"dumped {len(dirs)} workloads under {out}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `fdo`."""
    parser = argparse.ArgumentParser(prog="fdo", description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None,
                        help="data root (default: $FDO_HOME or ~/.fdo)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("fingerprint", help="graph (and op) fingerprints of an HLO module")
    p.add_argument("file", help="HLO text (XLA dump or printed) or serialized HLO proto")
    p.add_argument("--json", action="store_true", help="print fingerprint, env_key, key, n_instructions")
    p.add_argument("--ops", action="store_true", help="list the op fingerprints with kind and size")
    p.set_defaults(run=cmd_fingerprint)

    p = sub.add_parser("evaluate", help="measure a compiler config against the default")
    p.add_argument("file", help="HLO module (unoptimized) to compile and run")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                   help="a compiler flag of the candidate; repeat for more (none: A/A check)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--max-seconds", type=float, default=30.0, help="timing budget")
    p.add_argument("--timeout", type=float, default=600.0, help="worker timeout in seconds")
    p.set_defaults(run=cmd_evaluate)

    p = sub.add_parser("workloads", help="the workload zoo")
    p.add_argument("action", choices=["list", "dump"])
    p.add_argument("--out", default="zoo-dump", help="dump: output directory")
    p.add_argument("names", nargs="*", help="dump: only these workloads")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_workloads)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fdo` console script."""
    from ingest.hlo_module import HloLoadError
    from tuner.compile import CompileError
    from tuner.flags import FlagError

    args = build_parser().parse_args(argv)
    if args.home is not None:
        os.environ["FDO_HOME"] = str(args.home)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except (HloLoadError, FlagError, CompileError, KeyError) as exc:
        print(f"fdo {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"fdo {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
