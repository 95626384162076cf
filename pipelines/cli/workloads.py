"""`fdo workloads`: the workload zoo, listed or dumped as XLA dump directories."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipelines.cli.common import EXIT_OK, Subcommands, add_command, print_json, print_table
from pipelines.extras import needs
from storage.home import Home


def add_workloads(sub: Subcommands) -> None:
    """`fdo workloads`."""
    p = add_command(sub, "workloads", "the workload zoo: list it, or dump its programs as XLA dump "
                    "directories", ["fdo workloads list", "fdo workloads dump mlp-s cnn-s --out zoo-dump"])
    p.add_argument("action", choices=["list", "dump"],
                   help="list: name, family, size and description of each; dump: compile them and "
                   "write XLA dump directories under --out")
    p.add_argument("--out", default="zoo-dump", metavar="DIR", help="dump: output directory")
    p.add_argument("names", nargs="*", metavar="NAME", help="dump: only these workloads (default: all)")
    p.add_argument("--json", action="store_true", help="print the workloads (list) or the dump "
                   "directories (dump) as JSON")
    p.set_defaults(run=cmd_workloads, home_use=None, home_url=True)


def cmd_workloads(args: argparse.Namespace, home: Home) -> int:
    """List the zoo's workloads, or dump them."""
    from workloads import zoo

    if args.action == "list":
        rows = [{"name": w.name, "family": w.family, "size": w.size,
                 "description": w.description} for w in zoo.all_workloads()]
        if args.json:
            print_json(rows)
        else:
            print_table(("name", "family", "size", "description"),
                        [(r["name"], r["family"], str(r["size"]), r["description"]) for r in rows], "<<<<")
        return EXIT_OK
    return _dump_workloads(args)


@needs("pipeline")
def _dump_workloads(args: argparse.Namespace) -> int:
    from workloads.zoo.dump import dump_workloads

    out = Path(args.out)
    dirs = dump_workloads(out, names=args.names or None, progress=not args.json)
    if args.json:
        print_json([str(d) for d in dirs])
    else:
        print(f"dumped {len(dirs)} workloads under {out}")
    return EXIT_OK
