"""Profile ingestion: profile drops and JAX profiler traces into `graph_runs` and `op_runs`.

Each input lands as one part per date partition, named after the input's content digest, and
a marker under `warehouse/_ingested/` records that the input is complete: ingesting the same
input again adds nothing, and a run killed half-way finishes what it started when rerun. Rows
are also identified by their content (ingest.rowids): rows the warehouse already holds, sent
again in another drop, are counted as duplicates and not landed twice.

An input that cannot be read or parsed is quarantined with the reason, and the run goes on
with the next (ingest.input_files); bad rows of a readable input are quarantined one by one (ingest.drops).

A trace (`*.xplane.pb`) says which modules ran for how long; who ran them comes from an
`fdo-job.json` beside the trace or above it (see ingest.sidecars), else the trace's directory
name, team "unknown" and one chip. The environment comes from an `fdo-environment.json`
likewise, else the running machine's. A traced module is keyed by the graph whose optimized
module it is (from `graphs`, matched by the module's fingerprint or by that of its text form,
which is what dumps and the hook's spool hold): the graph of the trace's environment, else the
graph of the environment the hook recorded for the job's own compiles (the hits of its job id:
a sharded job's environment says how it partitioned the module, which no file beside the trace
tells); without symbols, by its own fingerprint.

Chip-time: a trace is one process's. A module partitioned over devices runs once on each per
step, and the trace times every device's run, so its seconds are device-seconds; a row counts
the module's time per device (its wall time on the job's devices) times the row's `chips`: the
process's share of the job's chips (the job file's `chips` over the processes of the module's
partitioning), and never fewer than the devices the module ran on in the trace. Its executions
are per device likewise. A 4-device step of a second is 4 chip-seconds, and the rows of a
job's processes add up to its chip-time once (`process_chips`).
A module the compiler hook compiled with a tuned config is found through the hook's hit record
(ingest.hits), which gives its graph, environment, config key, store version and expected
speedup: the hit metadata savings accounting reads (`holdout` false). A module of the holdout
arm (compiled with the defaults although the store had an entry) is found likewise through
its 'holdout' hit, of the same job only: its optimized module is the default one, which other
jobs run without a hit. Its row names the entry and has `holdout` true; other rows null.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from hlo.environment import ENVIRONMENT_FILE, Partitioning, current_environment
from ingest import drops
from ingest.input_files import INPUT_ERRORS, Unlisted, reason, walk
from ingest.quarantine import Quarantine, Quarantined, file_digest
from ingest.rowids import SeenRows
from ingest.sidecars import JOB_FILE, Job, nearest_file, read_environment_file, read_job_file
from ingest.tables import GRAPH_RUNS, GRAPHS, OP_RUNS, partitioning_of
from storage.home import Home
from storage.home_factory import open_home
from storage.warehouse import TableSchema, Warehouse, split_rows
from vocabulary.hits import SERVED, HitOutcome

if TYPE_CHECKING:
    from ingest.xplane import ModuleTime

TRACE_SUFFIX = ".xplane.pb"


@dataclass
class ProfileReport:
    """What one `ingest profiles` run did."""

    inputs: int = 0
    skipped: int = 0  # already ingested
    graph_runs: int = 0
    op_runs: int = 0
    duplicates: int = 0  # good rows the warehouse already held, from another input
    quarantined: list[Quarantined] = field(default_factory=list)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"inputs": self.inputs, "skipped": self.skipped, "graph_runs": self.graph_runs,
                "op_runs": self.op_runs, "duplicates": self.duplicates,
                "quarantined": [q.__dict__ for q in self.quarantined]}


def find_profiles(paths: Iterable[Path]) -> tuple[list[Path], list[Unlisted]]:
    """(drops and traces under `paths`, in a stable order, a named file taken as given; the
    directories that could not be listed)."""
    found, unlisted = walk(paths)
    return [path for root, path in found if path == root or _is_profile(path)], unlisted


@dataclass
class _Run:
    """What the inputs of one run share."""

    warehouse: Warehouse
    quarantine: Quarantine
    roots: list[Path]
    report: ProfileReport
    graphs: Callable[[], _Graphs]
    hits: Callable[[], pa.Table]
    seen: dict[str, SeenRows]  # by table name

    def land(self, table: TableSchema, rows: pa.Table, part: str) -> int:
        """Append the rows of `rows` the warehouse does not hold yet (see SeenRows) as `part`;
        how many that was. The others are counted as duplicates."""
        with self.seen[table.name].input() as admit:
            fresh = admit(rows)
            self.warehouse.append(table, fresh, part)
        self.report.duplicates += rows.num_rows - fresh.num_rows
        return fresh.num_rows


def ingest_profiles(paths: Iterable[Path], home: Home, progress: bool = False) -> ProfileReport:
    """Ingest every drop and trace under `paths` (local) into `home` (local or a URL); bad
    inputs and rows go to quarantine."""
    from console.progress import progress_bar

    home = open_home(home)
    warehouse = Warehouse(home)
    warehouse.remove_temporaries()
    roots = [Path(p) for p in paths]
    run = _Run(warehouse, Quarantine(home), roots, ProfileReport(),
               # Each read once, if a trace needs it.
               functools.cache(lambda: _Graphs.read(warehouse)), functools.cache(lambda: _all_hits(home)),
               {t.name: SeenRows(warehouse, t) for t in (GRAPH_RUNS, OP_RUNS)})
    inputs, unlisted = find_profiles(roots)
    run.report.quarantined += [Quarantined(str(u.path), u.reason, "") for u in unlisted]
    for path in progress_bar(inputs, desc="profiles", unit="input", enabled=progress):
        run.report.inputs += 1
        try:
            _ingest_input(path, run)
        except INPUT_ERRORS as exc:
            run.report.quarantined.append(run.quarantine.put_file(path, reason(path, exc)))
    return run.report


def _ingest_input(path: Path, run: _Run) -> None:
    """Land one input; an INPUT_ERRORS exception if it cannot be read."""
    if not path.exists():
        run.report.quarantined.append(Quarantined(str(path), "no such file", ""))
        return
    if not _is_profile(path):
        run.report.quarantined.append(run.quarantine.put_file(
            path, f"{path}: not a profile: expected *{TRACE_SUFFIX} or a drop named "
                  "*.graph_runs.parquet|jsonl or *.op_runs.parquet|jsonl"))
        return
    digest = file_digest(path)
    home = run.warehouse.home
    marker = home.location("warehouse", "_ingested", f"{digest}.json")
    if home.exists(marker):
        run.report.skipped += 1
        return
    if path.name.endswith(TRACE_SUFFIX):
        _ingest_trace(path, digest, run)
    else:
        _ingest_drop(path, digest, run)
    _write_marker(home, marker, path)


def _ingest_drop(path: Path, digest: str, run: _Run) -> None:
    fmt = drops.drop_format(path)
    assert fmt is not None
    bad_rows: list[pa.Table] = []
    reasons: list[str] = []
    landed = duplicates = 0
    with run.seen[fmt.table.name].input() as admit, \
            run.warehouse.part_writer(fmt.table, f"drop-{digest}") as write:
        for batch in drops.read_batches(path, fmt):
            good, bad, why = drops.validate(batch, fmt)
            fresh = admit(good)
            write(fresh)
            landed += fresh.num_rows
            duplicates += good.num_rows - fresh.num_rows
            if bad.num_rows:
                bad_rows.append(bad)
                reasons += why
    if fmt.table is GRAPH_RUNS:
        run.report.graph_runs += landed
    else:
        run.report.op_runs += landed
    run.report.duplicates += duplicates
    if bad_rows:
        run.report.quarantined.append(run.quarantine.put_rows(
            path, digest, pa.concat_tables(bad_rows), reasons))


def _ingest_trace(path: Path, digest: str, run: _Run) -> None:
    from ingest.xplane import read_trace

    modules = read_trace(path)
    job_file = nearest_file(path, run.roots, JOB_FILE)
    job = read_job_file(job_file) if job_file else Job(path.parent.name, "unknown", 1, False)
    env_file = nearest_file(path, run.roots, ENVIRONMENT_FILE)
    environment = read_environment_file(env_file).environment if env_file else current_environment()
    env_key = environment.key()
    dt = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC).date()
    graphs = run.graphs()
    hits = run.hits()
    hit_of = _hits_by_optimized_fingerprint(hits, job.job_id)
    compiled = _compiled_by(hits, job.job_id)
    graph_rows, op_rows = [], []
    for module in modules:
        hit = hit_of.get(module.optimized_fingerprint or "", {})
        if hit:
            graph = graphs.by_key.get((hit["fingerprint"], hit["env_key"]))
            fingerprint, run_env_key = hit["fingerprint"], hit["env_key"]
        else:
            graph = graphs.of(module, env_key, compiled)
            fingerprint, run_env_key = (graph.fingerprint, graph.env_key) if graph else (
                module.optimized_fingerprint, env_key)
        if fingerprint is None:
            raise ValueError(f"{path}: module {module.module_name} carries no HLO to fingerprint")
        partitioning = graph.partitioning() if graph else environment.partitioning
        chips = process_chips(job.chips, partitioning.processes if partitioning else 1, module.devices)
        graph_rows.append({
            "dt": dt, "job_id": job.job_id, "team": job.team, "fingerprint": fingerprint,
            "env_key": run_env_key, "device_kind": graph.device_kind if graph else environment.device_kind,
            "compiler_version": graph.compiler_version if graph else environment.compiler_version,
            "chips": chips, "executions": max(1, round(module.executions / module.devices)),
            "chip_seconds": chips * module.seconds / module.devices,
            "opted_out": job.opted_out, "config_key": hit.get("key"),
            "config_version": hit.get("config_version"), "expected_speedup": hit.get("expected_speedup"),
            "holdout": hit["outcome"] == HitOutcome.HOLDOUT if hit else None,
        })
        op_rows += [{
            "dt": dt, "job_id": job.job_id, "team": job.team, "op_fingerprint": op.op_fingerprint,
            "graph_fingerprint": fingerprint, "env_key": run_env_key,
            "chip_seconds": chips * op.seconds / module.devices, "opted_out": job.opted_out,
            "config_key": None, "config_version": None, "expected_speedup": None,
        } for op in module.ops if op.op_fingerprint is not None]
    part = f"trace-{digest}"
    # Rows a trace cannot make whole (a job id over its bound, say) are set aside, like a drop's.
    landed = {}
    for table, rows in ((OP_RUNS, op_rows), (GRAPH_RUNS, graph_rows)):
        typed = pa.Table.from_pylist(rows, table.schema)
        good, bad, why = split_rows(typed, table.row_checks(typed))
        if bad.num_rows:
            run.report.quarantined.append(run.quarantine.put_rows(
                path, digest, bad, why, label=f"bad-{table.name}-rows"))
        landed[table.name] = run.land(table, good, part)
    run.report.graph_runs += landed[GRAPH_RUNS.name]
    run.report.op_runs += landed[OP_RUNS.name]


def process_chips(job_chips: int, processes: int, devices: int) -> int:
    """The chips a trace's row of a module counts: a trace is one process's, which holds its
    share of the job's chips (`job_chips`, the job file's, over the job's `processes`, rounded
    up), and at least every device the module ran on in the trace (`devices`)."""
    return max(devices, -(-job_chips // processes))


@dataclass(frozen=True)
class _Graph:
    """A `graphs` row, as a trace's module is keyed by it."""

    fingerprint: str
    env_key: str
    device_kind: str
    compiler_version: str
    partitioning_text: str | None

    def partitioning(self) -> Partitioning | None:
        """How its job partitioned it (None: one device of one process)."""
        return partitioning_of(self.partitioning_text)


@dataclass(frozen=True)
class _Graphs:
    """The `graphs` table, by (fingerprint, env_key) and by optimized module."""

    by_key: dict[tuple[str, str], _Graph]
    by_optimized: dict[str, list[_Graph]]

    @classmethod
    def read(cls, warehouse: Warehouse) -> _Graphs:
        """Every graph, by key; those with an optimized module by it too."""
        table = warehouse.read(GRAPHS, ["fingerprint", "env_key", "optimized_fingerprint", "device_kind",
                                        "compiler_version", "partitioning"])
        by_key: dict[tuple[str, str], _Graph] = {}
        by_optimized: dict[str, list[_Graph]] = defaultdict(list)
        for row in sorted(table.to_pylist(), key=lambda r: (r["fingerprint"], r["env_key"])):
            graph = _Graph(row["fingerprint"], row["env_key"], row["device_kind"], row["compiler_version"],
                           row["partitioning"])
            by_key[(graph.fingerprint, graph.env_key)] = graph
            if row["optimized_fingerprint"] is not None:
                by_optimized[row["optimized_fingerprint"]].append(graph)
        return cls(by_key, dict(by_optimized))

    def of(self, module: ModuleTime, env_key: str, compiled: set[tuple[str, str]]) -> _Graph | None:
        """The graph whose optimized module ran as `module`: in the trace's environment
        (`env_key`), else in the one environment the job's own compiles (`compiled`: the hook's
        records of the job, (fingerprint, env_key)) put it in; None if none is known.

        The module is matched by its fingerprint, else by that of its text form, as dumps and
        the hook's spool hold it (`ModuleTime.dumped_fingerprint`)."""
        found = self.by_optimized.get(module.optimized_fingerprint or "")
        if not found:
            found = self.by_optimized.get(module.dumped_fingerprint() or "", [])
        here = [graph for graph in found if graph.env_key == env_key]
        if here:
            return here[0]
        mine = [graph for graph in found if (graph.fingerprint, graph.env_key) in compiled]
        return mine[0] if len({graph.env_key for graph in mine}) == 1 else None


def _all_hits(home: Home) -> pa.Table:
    """Every hit record, landed or still spooled (ingest.hits.read_hits)."""
    from ingest.hits import read_hits

    return read_hits(home)


def _compiled_by(hits: pa.Table, job_id: str) -> set[tuple[str, str]]:
    """The (fingerprint, env_key) of every compile the hook recorded for job `job_id`."""
    mine = hits.filter(pc.equal(hits.column("job_id"), job_id))
    return set(zip(mine.column("fingerprint").to_pylist(), mine.column("env_key").to_pylist()))


def _hits_by_optimized_fingerprint(hits: pa.Table, job_id: str) -> dict[str, dict]:
    """The hook's tuned and held-out compiles by optimized module (of `hits`, the ones whose
    optimized module the hook fingerprinted): a traced module that is one of them ran with that
    config (CATWILD's hit metadata), or with the defaults in that entry's holdout arm. The hook
    knew the job's environment, so its record keys the run. A tuned compile of another job
    counts too (its optimized module is the config's), a holdout only of this job (its
    optimized module is the default, which any job without a hit runs). The job's own compile
    wins over another job's, later over earlier."""
    served = hits.filter(pc.and_(pc.is_in(hits.column("outcome"), value_set=pa.array(SERVED)),
                                 pc.is_valid(hits.column("optimized_fingerprint"))))
    found: dict[str, dict] = {}
    for row in sorted(served.to_pylist(), key=lambda r: (r["job_id"] == job_id, r["at"])):
        if HitOutcome(row["outcome"]).ran_tuned or row["job_id"] == job_id:
            found[row["optimized_fingerprint"]] = row
    return found


def _is_profile(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIX) or drops.drop_format(path) is not None


def _write_marker(home: Home, marker: Any, source: Path) -> None:
    ingested_at = datetime.datetime.now(datetime.UTC).isoformat()
    home.atomic_write(marker, json.dumps({"source": str(source), "ingested_at": ingested_at}) + "\n")
