"""`fdo family`: a graph's family (the same program at other shapes, in every environment the
warehouse saw it), and what the loop has decided for each member."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pipelines.cli.common import EXIT_FAILED, EXIT_OK, Subcommands, add_command, print_json, print_table
from pipelines.extras import needs
from storage.home import Home
from vocabulary.tuning import KeyDecision, Kind


def add_family(sub: Subcommands) -> None:
    """`fdo family`."""
    p = add_command(sub, "family", "a graph's family: its members (the same program at other shapes, "
                    "releases and partitionings) and which hold a verified config",
                    ["fdo family 3f2a9c1b04d7e6a5b8c9d0e1f2a3b4c5",
                     "fdo family module_0001.jit_step.before_optimizations.txt --json"])
    p.add_argument("graph", metavar="GRAPH", help="an HLO module file, a graph fingerprint of the "
                   "warehouse (or a unique prefix of one), or a family fingerprint")
    p.add_argument("--json", action="store_true", help="print the family and its members as JSON")
    p.set_defaults(run=cmd_family)


@needs("pipeline")
def cmd_family(args: argparse.Namespace, home: Home) -> int:
    """List the members of a graph's family with their decisions and live entries; exit 1
    where the warehouse holds no graph of it."""
    from ingest.families import graph_families

    families = graph_families(home)
    family = _family_of(args.graph, families)
    members = sorted(key for key, found in families.items() if found == family) if family else []
    if not members:
        print(f"fdo family: no graph of {args.graph} in the warehouse (ingest its symbols first)",
              file=sys.stderr)
        return EXIT_FAILED
    rows = _members(home, members, families)
    if args.json:
        print_json({"family": family, "members": rows})
        return EXIT_OK
    verified = sum(r["decision"] == KeyDecision.FASTER for r in rows)
    print(f"family {family}: {len(rows)} graph key(s) of {len({r['fingerprint'] for r in rows})} "
          f"program(s); {verified} run a verified config")
    print_table(("fingerprint", "environment", "module", "devices", "compiler", "decision", "entry"),
                [(r["fingerprint"][:12], r["env_key"][:12], r["module_name"], str(r["device_count"]),
                  r["compiler_version"], r["decision"] or "-", _entry_text(r["entry"])) for r in rows],
                "<<<><<<", indent="  ")
    return EXIT_OK


def _family_of(given: str, families: dict[tuple[str, str], str]) -> str | None:
    """The family `given` names: a module file's, a graph fingerprint's (or a unique prefix's),
    or `given` itself where it is a family of the warehouse."""
    if Path(given).is_file():
        from hlo.family import family_fingerprint
        from hlo.module import load_file

        return family_fingerprint(load_file(given))
    by_graph = {fingerprint: family for (fingerprint, _), family in families.items()
                if fingerprint.startswith(given.lower())}
    if len(set(by_graph.values())) == 1:
        return next(iter(by_graph.values()))
    return given.lower() if given.lower() in families.values() else None


def _members(home: Home, members: list[tuple[str, str]], families: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Each member's graph row, decision and live entry, as JSON-ready rows."""
    from ingest.tables import GRAPHS
    from storage.store_reader import StoreReader
    from storage.warehouse import Warehouse
    from tuner.decided import key_statuses
    from tuner.transfer import TransferSources

    graphs = {(g["fingerprint"], g["env_key"]): g for g in Warehouse(home).read(
        GRAPHS, ["fingerprint", "env_key", "module_name", "device_count", "compiler_version"]).to_pylist()}
    statuses = key_statuses(home, TransferSources.load(home, families))
    entries = {(e.fingerprint, e.env_key): e for e in StoreReader(home).live_records() if e.kind == Kind.GRAPH}
    rows = []
    for key in members:
        graph, status, entry = graphs[key], statuses.get(key), entries.get(key)
        rows.append({**graph, "decision": status.decision if status is not None else None,
                     "entry": None if entry is None else {
                         "speedup": entry.speedup, "ci_low": entry.ci_low, "ci_high": entry.ci_high,
                         "config": entry.to_json()["config"], "provenance": entry.provenance,
                         "origin": entry.origin, "transferred_from": entry.transferred_from}})
    return rows


def _entry_text(entry: dict[str, Any] | None) -> str:
    """A live entry in a line: its speedup, and where its config came from."""
    if entry is None:
        return "-"
    came = f" {entry['origin']}" + (f" from {entry['transferred_from'][:12]}" if entry["transferred_from"] else "")
    return f"{entry['speedup']:.3f}x{came if entry['origin'] else ''}"
