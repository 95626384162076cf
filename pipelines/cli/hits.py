"""`fdo hits`: what the compiler hook did at each compile, on a local or a URL home."""

from __future__ import annotations

import argparse
from collections import Counter

from pipelines.cli.common import EXIT_OK, Subcommands, add_command, json_rows, print_json, print_table
from storage.home import Home


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
