"""`fdo ingest`: what the fleet hands over (HLO symbols, profiles, the hook's hits), into the
warehouse of a local or a URL home."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pipelines import stages
from pipelines.cli.common import EXIT_BAD_INPUT, EXIT_OK, EXIT_QUARANTINED, Subcommands, add_command, print_json
from pipelines.extras import needs
from storage.home import Home


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
