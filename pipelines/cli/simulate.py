"""`fdo simulate`: a simulated fleet's days, its dumps and drops ingested (or handed to an inbox)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pipelines.cli.common import EXIT_OK, EXIT_QUARANTINED, Subcommands, add_command, print_json
from pipelines.extras import needs
from workloads.simulator.fleet import FleetMode


def add_simulate(sub: Subcommands) -> None:
    """`fdo simulate`."""
    p = add_command(sub, "simulate", "simulate a fleet for some days and ingest what it hands over",
                    ["fdo simulate --days 3 --jobs 500",
                     "fdo simulate --start 2025-01-01 --workloads mlp-s,cnn-s --op-sample 0.2 --json",
                     "fdo simulate --days 1 --jobs 300 --workloads nbody-s --inbox inbox/fleet",
                     "fdo simulate --fleet reach --days 3 --jobs 20000"])
    p.add_argument("--days", type=int, default=7, metavar="N", help="days to simulate")
    p.add_argument("--jobs", type=int, default=2000, metavar="N", help="jobs in the fleet")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the fleet's randomness")
    p.add_argument("--start", metavar="DATE",
                   help="first simulated date, YYYY-MM-DD (default: so the last is today)")
    p.add_argument("--workloads", metavar="NAMES",
                   help="comma-separated zoo workloads the fleet runs (default: all)")
    p.add_argument("--fleet", choices=[str(mode) for mode in FleetMode], default=str(FleetMode.DEFAULT),
                   help="default: each workload at 2 shapes, each graph ranked on its own; reach: a long "
                        "tail of models, each workload at 3 shapes (x1, x2, x4 its batch) with popularity by "
                        "workload, for measuring how much of the fleet's tunable chip-time the loop "
                        "decides (its programs are compiled and profiled on first use)"),
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

    from storage.home_factory import open_home
    from workloads.simulator.run import simulate, store_lookup

    start = datetime.date.fromisoformat(args.start) if args.start else None
    workloads = args.workloads.split(",") if args.workloads else None
    report = simulate(open_home(home), args.days, args.jobs, args.seed, start=start, workloads=workloads,
                      op_sample=args.op_sample, tuned=store_lookup(home), progress=not args.json,
                      inbox=args.inbox.absolute() if args.inbox else None, mode=FleetMode(args.fleet))
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
    for count, unit, shares in ((report.graphs, "graphs", report.top_graph_shares),
                                (report.families, "workloads", report.top_family_shares)):
        print(f"{count} {unit}; chip-time in the top 1 / 5 / 10 {unit}: "
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
