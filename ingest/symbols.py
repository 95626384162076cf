"""Symbol ingestion: HLO modules from XLA dumps, single files and the hook's spool, into
the `graphs` and `ops` tables and the blob store.

A module is the unit: its unoptimized HLO (`*.before_optimizations.txt`) gives the graph
fingerprint, the key the compiler hook computes at compile time; its optimized HLO
(`*after_optimizations.txt`) gives the op fingerprints. Files XLA writes beside them (buffer
assignments, LLVM IR, ...) are not modules and are skipped. The environment comes from an
`fdo-environment.json` in the module's directory or above it (see ingest.sidecars), else the
running machine's; the time it was seen from that file's `captured_at`, else the file's mtime.
How the job partitioned the module across devices and processes (the environment's
`partitioning`, which its key covers) lands beside it in `graphs.partitioning`, and the family
of the module that keys the graph (`hlo.family`: the same program at other shapes) in
`graphs.family`.

A module that cannot be read, parsed or stored in the tables (a name over its bound) is
quarantined with the reason, and the other modules of the run land (see ingest.input_files).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from hlo.environment import ENVIRONMENT_FILE, Environment, current_environment
from hlo.family import family_fingerprint
from hlo.fingerprint import ModuleFingerprint, fingerprint_module
from hlo.module import load_file
from ingest.input_files import INPUT_ERRORS, Unlisted, reason, walk
from ingest.quarantine import Quarantine, Quarantined, file_digest
from ingest.sidecars import Capture, nearest_file, read_environment_file
from ingest.tables import GRAPHS, OPS, partitioning_text
from storage.blobs import BlobStore
from storage.home import Home
from storage.home_factory import open_home
from storage.warehouse import TableSchema, Warehouse, split_rows

_UNOPTIMIZED = "before_optimizations"
_OPTIMIZED = "after_optimizations"
_SUFFIXES = (".txt", ".hlo.pb", ".pb")
_PLAIN_SUFFIXES = (".hlo", ".hlo.txt", ".hlo.pb")


@dataclass
class ModuleFiles:
    """The files of one compiled module: unoptimized and optimized HLO (either may be missing)."""

    unoptimized: Path | None = None
    optimized: Path | None = None

    @property
    def main(self) -> Path:
        """The file whose fingerprint keys the graph."""
        return self.unoptimized or self.optimized  # type: ignore[return-value]


@dataclass
class SymbolReport:
    """What one `ingest symbols` run did."""

    modules: int = 0
    graphs_changed: int = 0
    ops_changed: int = 0
    quarantined: list[Quarantined] = field(default_factory=list)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"modules": self.modules, "graphs_changed": self.graphs_changed,
                "ops_changed": self.ops_changed,
                "quarantined": [q.__dict__ for q in self.quarantined]}


def find_modules(paths: Iterable[Path]) -> tuple[list[ModuleFiles], list[Unlisted]]:
    """(the HLO files under `paths` grouped into modules, in a stable order; the directories
    that could not be listed)."""
    groups: dict[tuple[Path, str], ModuleFiles] = {}
    found, unlisted = walk(paths)
    for root, path in found:
        role_of = _role(path, explicit=path == root)
        if role_of is not None:
            role, module_id = role_of
            setattr(groups.setdefault((path.parent, module_id), ModuleFiles()), role, path)
    return [groups[key] for key in sorted(groups)], unlisted


def ingest_symbols(paths: Iterable[Path], home: Home, progress: bool = False) -> SymbolReport:
    """Ingest every module under `paths` (local) into `home` (local or a URL): blobs first,
    then ops, then graphs (so a graph row means its blobs and ops are there); bad files go to
    quarantine."""
    from console.progress import progress_bar

    home = open_home(home)
    paths = [Path(p) for p in paths]
    warehouse, blobs, quarantine = Warehouse(home), BlobStore(home), Quarantine(home)
    warehouse.remove_temporaries()
    report = SymbolReport()
    graph_rows: list[dict] = []
    op_rows: list[dict] = []
    captures: dict[Path, Capture | Quarantined] = {}
    here: list[Capture] = []  # this machine's environment, computed once if needed
    missing = [p for p in paths if not p.exists()]
    for path in missing:
        report.quarantined.append(Quarantined(str(path), "no such file or directory", ""))
    modules, unlisted = find_modules(p for p in paths if p.exists())
    report.quarantined += [Quarantined(str(u.path), u.reason, "") for u in unlisted]
    loader = _Loader(blobs, quarantine, report)
    for files in progress_bar(modules, desc="symbols", unit="module", enabled=progress):
        capture = _capture_for(files.main, paths, captures, quarantine)
        if capture is None:
            here = here or [Capture(current_environment(), None)]
            capture = here[0]
        if isinstance(capture, Quarantined):
            report.quarantined.append(Quarantined(str(files.main), capture.reason, ""))
            continue
        try:
            seen = capture.captured_at or datetime.datetime.fromtimestamp(
                files.main.stat().st_mtime, datetime.UTC)
        except OSError as exc:  # gone since it was listed
            report.quarantined.append(Quarantined(str(files.main), reason(files.main, exc), ""))
            continue
        rows = _module_rows(files, capture.environment, seen.astimezone(datetime.UTC), loader)
        if rows is None:
            continue
        problem = _row_problem(GRAPHS, [rows[0]]) or _row_problem(OPS, rows[1])
        if problem:
            report.quarantined.append(quarantine.put_file(files.main, f"{files.main}: {problem}"))
            continue
        graph_rows.append(rows[0])
        op_rows.extend(rows[1])
        report.modules += 1
    report.ops_changed = warehouse.upsert(OPS, pa.Table.from_pylist(op_rows, OPS.schema), _merge_ops)
    report.graphs_changed = warehouse.upsert(
        GRAPHS, pa.Table.from_pylist(graph_rows, GRAPHS.schema), _merge_graphs)
    return report


@dataclass(frozen=True)
class _Stored:
    """A module file, fingerprinted and its text in the blob store; its family if it keys a
    graph."""

    name: str
    fingerprint: ModuleFingerprint
    blob: str
    family: str | None


class _Loader:
    """Loads, fingerprints and stores module files, once per distinct content: a fleet hands
    over the same module for many environments."""

    def __init__(self, blobs: BlobStore, quarantine: Quarantine, report: SymbolReport) -> None:
        self.blobs, self.quarantine, self.report = blobs, quarantine, report
        self.done: dict[str, _Stored | None] = {}

    def load(self, path: Path, with_ops: bool, keys_graph: bool) -> _Stored | None:
        """The module in `path`, stored, with its family if it `keys_graph`; None (and `path`
        quarantined) if it cannot be read."""
        digest = None
        try:
            digest = file_digest(path)
            if digest in self.done:
                done = self.done[digest]
                # An optimized module that keys another graph too is loaded again, for its family.
                if done is None or done.family or not keys_graph:
                    return done
            module = load_file(path)
            result = fingerprint_module(module, with_ops=with_ops)
            family = family_fingerprint(module) if keys_graph else None
            text = module.to_text()
        except INPUT_ERRORS as exc:
            if digest is not None:
                self.done[digest] = None
            self.report.quarantined.append(self.quarantine.put_file(path, reason(path, exc)))
            return None
        # Outside the try: a blob store that cannot be written is no fault of the input.
        self.done[digest] = _Stored(module.name, result, self.blobs.put_text(result.fingerprint, text), family)
        return self.done[digest]


def _module_rows(files: ModuleFiles, environment: Environment, seen: datetime.datetime,
                 loader: _Loader) -> tuple[dict, list[dict]] | None:
    graph = loader.load(files.main, with_ops=files.unoptimized is None, keys_graph=True)
    if graph is None:
        return None
    optimized = graph if files.unoptimized is None else (
        loader.load(files.optimized, with_ops=True, keys_graph=False) if files.optimized else None)
    env_key = environment.key()
    row = {
        "dt": seen.date(), "fingerprint": graph.fingerprint.fingerprint, "env_key": env_key,
        "module_name": graph.name, "n_instructions": graph.fingerprint.n_instructions,
        "hlo_blob": graph.blob, "optimized_blob": None, "optimized_fingerprint": None,
        "platform": environment.platform, "device_kind": environment.device_kind,
        "device_count": environment.device_count, "compiler_version": environment.compiler_version,
        "first_seen": seen, "last_seen": seen, "partitioning": partitioning_text(environment.partitioning),
        "family": graph.family,
    }
    ops: list[dict] = []
    if optimized is not None:
        row["optimized_blob"] = optimized.blob
        row["optimized_fingerprint"] = optimized.fingerprint.fingerprint
        ops = [{"dt": seen.date(), "fingerprint": op.fingerprint,
                "graph_fingerprint": row["fingerprint"], "env_key": env_key, "kind": op.kind,
                "n_instructions": op.n_instructions, "name": op.name, "hlo_blob": optimized.blob}
               for op in optimized.fingerprint.ops]
    return row, ops


def _row_problem(table: TableSchema, rows: list[dict]) -> str | None:
    """Why some of a module's rows cannot land in `table` (the reason of the first), if so."""
    typed = pa.Table.from_pylist(rows, table.schema)
    _, bad, reasons = split_rows(typed, table.row_checks(typed))
    return f"{table.name}: {reasons[0]}" if bad.num_rows else None


def _merge_graphs(rows: pa.Table) -> pa.Table:
    """One row per (fingerprint, env_key): earliest first_seen, latest last_seen, the optimized
    module from the latest sighting that had one, a family over none (rows landed before
    `graphs.family` have none)."""
    merged: dict[tuple[str, str], dict] = {}
    for row in sorted(rows.to_pylist(), key=lambda r: (r["last_seen"], r["optimized_blob"] or "")):
        key = (row["fingerprint"], row["env_key"])
        old = merged.get(key)
        if old is not None:
            row["first_seen"] = min(old["first_seen"], row["first_seen"])
            if row["optimized_blob"] is None:
                row["optimized_blob"] = old["optimized_blob"]
                row["optimized_fingerprint"] = old["optimized_fingerprint"]
            row["family"] = row["family"] or old["family"]
        row["dt"] = row["first_seen"].date()
        merged[key] = row
    return pa.Table.from_pylist(list(merged.values()), GRAPHS.schema)


def _merge_ops(rows: pa.Table) -> pa.Table:
    """One row per (op, graph, environment): the earliest sighting."""
    merged: dict[tuple[str, str, str], dict] = {}
    for row in sorted(rows.to_pylist(), key=lambda r: (r["dt"], r["name"], r["hlo_blob"])):
        merged.setdefault((row["fingerprint"], row["graph_fingerprint"], row["env_key"]), row)
    return pa.Table.from_pylist(list(merged.values()), OPS.schema)


def _capture_for(path: Path, roots: list[Path], cache: dict[Path, Capture | Quarantined],
                 quarantine: Quarantine) -> Capture | Quarantined | None:
    """What the environment file that applies to `path` says, if there is one."""
    found = nearest_file(path, roots, ENVIRONMENT_FILE)
    if found is None:
        return None
    if found not in cache:
        try:
            cache[found] = read_environment_file(found)
        except (ValueError, OSError) as exc:
            cache[found] = quarantine.put_file(found, str(exc))
    return cache[found]


def _role(path: Path, explicit: bool) -> tuple[str, str] | None:
    """("unoptimized" or "optimized", module id) of an HLO file, None if not a module file."""
    name = path.name
    suffix = next((s for s in _SUFFIXES if name.endswith(s)), None)
    if suffix is not None:
        stem = name[: -len(suffix)]
        # XLA names dump files `module_<id>.<name>.<stage>`: the first part ties them together.
        if stem.endswith(_UNOPTIMIZED):
            return "unoptimized", name.split(".", 1)[0]
        if stem.endswith(_OPTIMIZED):
            return "optimized", name.split(".", 1)[0]
    if explicit or name.endswith(_PLAIN_SUFFIXES):
        return "unoptimized", name
    return None
