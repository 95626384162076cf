"""`fdo analyze`: which compiler flags matter, from every tuning trial in the warehouse of a
local or a URL home."""

from __future__ import annotations

import argparse
import sys

from pipelines.cli.common import EXIT_FAILED, EXIT_OK, Subcommands, add_command, print_json
from storage.home import Home


def add_analyze(sub: Subcommands) -> None:
    """`fdo analyze`."""
    p = add_command(sub, "analyze", "which compiler flags matter, from every tuning trial",
                    ["fdo analyze flags --top 10",
                     "fdo analyze flags --graph 0123456789abcdef0123456789abcdef --json"])
    p.add_argument("what", choices=["flags"], help="flags: each flag's importance and its values' effects")
    p.add_argument("--top", type=int, default=None, metavar="N",
                   help="only the N most important flags (default: all)")
    p.add_argument("--graph", metavar="FINGERPRINT",
                   help="only the trials of this graph fingerprint (default: every graph's)")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON")
    p.set_defaults(run=cmd_analyze, home_use="read", home_url=True)


def cmd_analyze(args: argparse.Namespace, home: Home) -> int:
    """Which flags matter, from every tuning trial in the warehouse (or one graph's)."""
    from tuner.analyze import analyze_flags, format_analysis

    analysis = analyze_flags(home, fingerprint=args.graph)
    if args.json:
        payload = analysis.to_json()
        payload["flags"] = payload["flags"][: args.top]
        print_json(payload)
    if analysis.trials == 0:
        where = f" for graph {args.graph}" if args.graph else ""
        print(f"no tuning trials in the warehouse under {home}{where}: run fdo tune first",
              file=sys.stderr)
        return EXIT_FAILED
    if not args.json:
        print(format_analysis(analysis, args.top))
    return EXIT_OK
