"""`fdo fingerprint`, `ingest`, `simulate`, `hits`: what the fleet hands over, into the warehouse
(`ingest` and `hits` on a local or a URL home)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from pipelines.cli.common import (EXIT_BAD_INPUT, EXIT_OK, EXIT_QUARANTINED, Subcommands, add_command,
                                  json_rows, print_json, print_table)
from pipelines.extras import needs
from pipelines import stages
from storage.home import Home


def add_fingerprint(sub: Subcommands) -> None:
    """`fdo fingerprint`."""
    p = add_command(sub, "fingerprint", "graph (and op) fingerprints of an HLO module",
                    ["fdo fingerprint module_0001.jit_step.before_optimizations.txt",
                     "fdo fingerprint module_0001.jit_step.cpu_after_optimizations.txt --ops"])
    p.add_argument("file", metavar="FILE", help="HLO text (XLA dump or printed) or serialized HLO proto")
    p.add_argument("--json", action="store_true", help="print fingerprint, env_key, key, n_instructions "
                   "(and the ops with --ops) as JSON")
    p.add_argument("--ops", action="store_true", help="list the op fingerprints with kind and size")
    p.set_defaults(run=cmd_fingerprint, home_use=None)


def cmd_fingerprint(args: argparse.Namespace, home: Path) -> int:
    """Print a module's graph fingerprint (and its ops' with --ops)."""
    from hlo.environment import current_environment, store_key
    from hlo.fingerprint import fingerprint_module
    from hlo.module import load_file

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
        print_json(payload)
    elif args.ops:
        print_table(("op fingerprint", "kind", "instructions", "name"),
                    [(op.fingerprint, op.kind, str(op.n_instructions), op.name) for op in result.ops],
                    "<<><")
    else:
        print(result.fingerprint)
    return EXIT_OK


def add_ingest(sub: Subcommands) -> None:
    """`fdo ingest`."""
    p = add_command(sub, "ingest", "load symbols (HLO), profiles or the hook's hits into the warehouse",
                    ["fdo ingest symbols /tmp/xla-dump", "fdo ingest profiles inbox/ traces/",
                     "fdo ingest hits --json"],
                    "Exit status 3: the good inputs landed but some inputs or rows were quarantined "
                    "(each is printed with its reason).")
    p.add_argument("kind", choices=list(stages.INGEST_KINDS),
                   help="symbols: HLO modules; profiles: traces and drops; hits: the compiler "
                   "hook's spool")
    p.add_argument("paths", nargs="*", metavar="PATH", help="symbols: XLA dump dirs, HLO files, the "
                   "hook's spool (HOME/spool/symbols); profiles: *.xplane.pb traces and "
                   "*.graph_runs/*.op_runs drops (or dirs of them); hits: none (default: none, "
                   "which only hits accepts)")
    p.add_argument("--json", action="store_true", help="print the ingestion report as JSON")
    p.set_defaults(run=cmd_ingest, home_url=True)


@needs("pipeline")
def cmd_ingest(args: argparse.Namespace, home: Home) -> int:
    """Ingest symbols or profiles from the (local) paths given, or the hook's hits, into the
    home (local or a URL)."""
    paths = [Path(p) for p in args.paths]
    if args.kind != "hits" and not paths:
        print(f"fdo ingest {args.kind}: name the files or directories to ingest", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = stages.ingest(home, args.kind, paths, progress=not args.json)
    if args.json:
        print_json(report.to_json())
    else:
        print(_ingest_summary(args.kind, report))
        for item in report.quarantined:
            print(f"quarantined {item.source}: {item.reason}", file=sys.stderr)
    return EXIT_QUARANTINED if report.quarantined else EXIT_OK


def _ingest_summary(kind: str, report: Any) -> str:
    """What an ingestion of `kind` landed, in one line."""
    if kind == "hits":
        return (f"{report.files} spool files: {report.rows} hit records "
                f"({report.waiting} files still being written)")
    if kind == "symbols":
        return (f"{report.modules} modules: {report.graphs_changed} graphs and "
                f"{report.ops_changed} ops new or updated")
    return (f"{report.inputs} inputs ({report.skipped} already ingested): "
            f"{report.graph_runs} graph_runs and {report.op_runs} op_runs rows "
            f"({report.duplicates} rows already held)")


def add_simulate(sub: Subcommands) -> None:
    """`fdo simulate`."""
    p = add_command(sub, "simulate", "simulate a fleet for some days and ingest what it hands over",
                    ["fdo simulate --days 3 --jobs 500",
                     "fdo simulate --start 2025-01-01 --workloads mlp-s,cnn-s --op-sample 0.2 --json",
                     "fdo simulate --days 1 --jobs 300 --workloads nbody-s --inbox inbox/fleet"])
    p.add_argument("--days", type=int, default=7, metavar="N", help="days to simulate")
    p.add_argument("--jobs", type=int, default=2000, metavar="N", help="jobs in the fleet")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the fleet's randomness")
    p.add_argument("--start", metavar="DATE",
                   help="first simulated date, YYYY-MM-DD (default: so the last is today)")
    p.add_argument("--workloads", metavar="NAMES",
                   help="comma-separated zoo workloads the fleet runs (default: all)")
    p.add_argument("--op-sample", type=float, default=1.0, metavar="SHARE",
                   help="share of job-days with op-level profiles (op time is scaled up to match)")
    p.add_argument("--inbox", type=Path, metavar="DIR",
                   help="write the fleet's dumps and drops here and ingest nothing: `fdo nightly` "
                        "lands them from its inbox (default: under HOME/fleet, ingested at once)")
    p.add_argument("--json", action="store_true", help="print the simulation report as JSON")
    p.set_defaults(run=cmd_simulate)


@needs("pipeline")
def cmd_simulate(args: argparse.Namespace, home: Path) -> int:
    """Simulate a fleet's days and ingest what it hands over."""
    import datetime

    from workloads.simulator.run import simulate, store_lookup

    start = datetime.date.fromisoformat(args.start) if args.start else None
    workloads = args.workloads.split(",") if args.workloads else None
    report = simulate(home, args.days, args.jobs, args.seed, start=start, workloads=workloads,
                      op_sample=args.op_sample, tuned=store_lookup(home), progress=not args.json,
                      inbox=args.inbox.absolute() if args.inbox else None)
    if args.json:
        print_json(report.to_json())
    else:
        print_simulation(report)
    return EXIT_QUARANTINED if report.quarantined else EXIT_OK


def print_simulation(report: Any) -> None:
    """The simulated fleet's summary: per day, then its cost distribution, opt-outs and tail."""
    print(f"{'date':<12}{'rows':>10}{'chip-hours':>14}{'opted out':>11}  compiler versions (chip-time)")
    for day in report.days:
        versions = ", ".join(f"{v.rsplit('+', 1)[-1]} {s:.0%}" for v, s in day["compiler_versions"].items())
        print(f"{day['dt']:<12}{day['rows']:>10}{day['chip_hours']:>14.0f}"
              f"{day['opted_out_share']:>11.1%}  {versions}")
    shares = report.top_graph_shares
    print(f"{report.graphs} graphs; chip-time in the top 1 / 5 / 10 graphs: "
          f"{shares['top1']:.0%} / {shares['top5']:.0%} / {shares['top10']:.0%}")
    print("chip-time by job size: " + ", ".join(
        f"{name} {share:.1%}" for name, share in report.size_class_shares.items()))
    print(f"opted out: {report.opted_out_share:.1%} of chip-time; long tail (runs under one "
          f"chip-hour): {report.long_tail['row_share']:.0%} of runs, "
          f"{report.long_tail['chip_time_share']:.2%} of chip-time")
    print(f"{'handed over' if report.inbox else 'ingested'} {report.graph_runs} graph_runs and "
          f"{report.op_runs} op_runs rows, {report.symbol_modules} symbol modules"
          + (f" in {report.inbox}" if report.inbox else ""))
    for item in report.quarantined:
        print(f"quarantined {item.source}: {item.reason}", file=sys.stderr)


def add_hits(sub: Subcommands) -> None:
    """`fdo hits`."""
    p = add_command(sub, "hits", "what the compiler hook did at each compile",
                    ["fdo hits", "fdo hits --job train-7 --json"])
    p.add_argument("--job", metavar="ID", help="only this job id (default: every job)")
    p.add_argument("--json", action="store_true", help="print the hit records and outcome counts as JSON")
    p.set_defaults(run=cmd_hits, home_use="read", home_url=True)


def cmd_hits(args: argparse.Namespace, home: Home) -> int:
    """List the hook's hit records (ingested and still spooled) and count their outcomes."""
    import pyarrow.compute as pc

    from ingest.hits import read_hits

    hits = read_hits(home)
    if args.job:
        hits = hits.filter(pc.equal(hits.column("job_id"), args.job))
    rows = sorted(json_rows(hits.drop_columns(["dt"])), key=lambda r: r["at"])
    outcomes = Counter(row["outcome"] for row in rows)
    if args.json:
        print_json({"records": rows, "outcomes": dict(outcomes)})
        return EXIT_OK
    if rows:
        print_table(("at", "job", "module", "key", "outcome", "version", "speedup", "reason"),
                    [(r["at"][:19], r["job_id"], r["module_name"][:32], r["key"], r["outcome"],
                      f"v{r['config_version']}" if r["config_version"] is not None else "",
                      f"{r['expected_speedup']:.3f}x" if r["expected_speedup"] else "", r["reason"] or "")
                     for r in rows], "<<<<<<><")
    print(", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "no hits recorded")
    return EXIT_OK
