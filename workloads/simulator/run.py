"""`fdo simulate`: run the simulated fleet for some days and ingest what it hands over.

Per day the fleet writes what a real one would give us, under `<home>/fleet/`:
- `dumps/<env_key>/<graph>/`: an XLA dump (unoptimized and optimized module) and an
  `fdo-environment.json`, for each graph first run in an environment that day;
- `profiles/<dt>/fleet-*.graph_runs.parquet` and `*.op_runs.parquet`: the day's profile drops.
Then both go through `ingest_symbols` and `ingest_profiles`, the same path as real input.
Given an inbox instead, the fleet writes the same files there and ingests nothing: the nightly
run's ingest stage lands them, as it lands a real fleet's. Files are written atomically and
named by mode, seed and size, so a rerun writes the same bytes and ingestion skips them.

The fleet's mode (`fleet.FleetMode`) says what it runs. The default fleet runs the named
workloads at the catalog's `SCALES`, each graph ranked on its own. The reach fleet runs them
(the whole zoo by default) at `REACH_SCALES`, three shapes each, and ranks families: a
long tail of models, each at several shapes, as a real fleet's sweeps, eval and serving
variants and resized runs are. It is the fleet for measuring the loop's reach: how much of
the tunable chip-time the nightly loop decides when a model's time is split over its shapes.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from console.progress import progress_bar
from hlo.environment import ENVIRONMENT_FILE, Environment, current_environment
from ingest.profiles import ingest_profiles
from ingest.quarantine import Quarantined
from ingest.symbols import ingest_symbols
from storage.home import Home
from storage.home_factory import atomic_write, open_home
from storage.store_reader import StoreReader
from storage.store_schema import DEFAULT_HOLDOUT_SHARE, StoreError
from storage.warehouse import ROW_GROUP_ROWS
from vocabulary.tuning import Kind
from workloads.simulator import drops, fleet
from workloads.simulator.catalog import REACH_SCALES, SCALES, CatalogGraph, build_catalog

CHIP_HOUR = 3600.0


@dataclass
class SimulationReport:
    """What the simulated fleet did, in the terms of CATWILD's figures."""

    days: list[dict] = field(default_factory=list)  # per day: graph_runs rows, chip-hours, shares
    graphs: int = 0
    families: int = 0  # workloads the graphs are shapes of
    mode: fleet.FleetMode = fleet.FleetMode.DEFAULT
    chip_hours: float = 0.0
    top_graph_shares: dict[str, float] = field(default_factory=dict)  # top-1/5/10 share
    top_family_shares: dict[str, float] = field(default_factory=dict)  # of families, the same
    size_class_shares: dict[str, float] = field(default_factory=dict)
    opted_out_share: float = 0.0
    long_tail: dict[str, float] = field(default_factory=dict)  # runs under a chip-hour: their share
    # The fleet's truth, which its rows never carry: each hit key's true speedup, and per day
    # (in `days`) the chip-hours its tuned runs really saved and those its holdout arm forwent.
    true_speedups: dict[str, float] = field(default_factory=dict)
    graph_runs: int = 0  # rows ingested (with an inbox: rows handed over, ingested later)
    op_runs: int = 0
    symbol_modules: int = 0  # modules ingested (with an inbox: dumps handed over)
    inbox: str | None = None  # where the fleet's files wait for ingestion (None: ingested)
    quarantined: list[Quarantined] = field(default_factory=list)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {**asdict(self), "quarantined": [asdict(q) for q in self.quarantined]}


def store_lookup(home: Path) -> fleet.TunedLookup | None:
    """The live config store's graph entries as the fleet's jobs find them, each with its
    holdout share (None: no store)."""
    reader = StoreReader(home)
    version = reader.current()
    if version is None:
        return None
    live = reader.live_entries()
    graphs = live.filter(pc.equal(live.column("kind"), Kind.GRAPH))
    shares = _holdout_shares(reader, version)
    hits = {(fingerprint, env_key): fleet.Hit(key, version, speedup, shares.get(key, DEFAULT_HOLDOUT_SHARE))
            for key, fingerprint, env_key, speedup in zip(*(
                graphs.column(name).to_pylist() for name in ("key", "fingerprint", "env_key", "speedup")))}
    return lambda fingerprint, env_key: hits.get((fingerprint, env_key))


def _holdout_shares(reader: StoreReader, version: int) -> dict[str, float]:
    """Each entry's effective holdout share in store version `version`, as the hook takes it
    (delivery.lookup): the entry's own, else the version manifest's (DEFAULT_HOLDOUT_SHARE in
    versions made before shares existed); none for a bare version without its manifest, whose
    entries take DEFAULT_HOLDOUT_SHARE. Worked out here, not by delivery's look-up, which the
    simulator may not import."""
    try:
        manifest = reader.manifest(version)
    except StoreError:  # a bare version, as a test writes one
        return {}
    return {entry.key: manifest.holdout_share if entry.holdout_share is None else entry.holdout_share
            for entry in reader.records(version)}


def simulate(home: Home, days: int, jobs: int, seed: int = 0, start: datetime.date | None = None,
             workloads: list[str] | None = None, scales: tuple[int, ...] | None = None,
             op_sample: float = 1.0, tuned: fleet.TunedLookup | None = None,
             progress: bool = False, release_every_days: int = 4,
             inbox: Path | None = None,
             regressions: tuple[tuple[str, float], ...] = (),
             epoch: datetime.date = fleet.EPOCH,
             mode: fleet.FleetMode = fleet.FleetMode.DEFAULT) -> SimulationReport:
    """Simulate `days` days (ending today unless `start` is given) and ingest them into
    `home` (a local one); with an `inbox`, hand them over there for a later ingest instead.
    `regressions` are (config key, true speedup) pairs: entries that slow the fleet down
    (`fleet.FleetSpec.regressions`). `epoch` is the date of the fleet's day 0
    (`fleet.FleetSpec.epoch`): the same days after the same epoch are the same fleet. `mode`
    is the fleet's (`fleet.FleetMode`): the reach fleet runs the `workloads` (default: all) at
    `REACH_SCALES` with popularity by family; `scales` overrides the mode's shapes."""
    home = open_home(home)
    root = home.local("fdo simulate")
    start = start or datetime.date.today() - datetime.timedelta(days=days - 1)
    first_day = (start - epoch).days
    if first_day < 0:
        raise ValueError(f"--start must be on or after {epoch}")
    if scales is None:
        scales = REACH_SCALES if mode is fleet.FleetMode.REACH else SCALES
    catalog = build_catalog(root / "simulator" / "catalog", workloads, scales, progress)
    spec = fleet.FleetSpec(jobs=jobs, seed=seed, op_sample=op_sample,
                           release_every_days=release_every_days, regressions=regressions, epoch=epoch,
                           mode=mode)
    family = np.array([g.workload for g in catalog])
    run = _Run(home, inbox or root / "fleet", inbox is not None, catalog, spec,
               fleet.make_jobs(spec, len(catalog), family), current_environment(), tuned)
    totals = _Totals(len(catalog))
    report = SimulationReport(graphs=len(catalog), families=len(set(family.tolist())), mode=mode,
                              inbox=str(inbox) if inbox else None)
    for day in progress_bar(range(first_day, first_day + days), desc="fleet days", unit="day",
                            enabled=progress):
        run.day(day, report, totals)
    totals.finish(report, family)
    return report


@dataclass(frozen=True)
class _Run:
    """One simulation: where the fleet hands its files over (`fleet_dir`; `handed_over`: an
    inbox, ingested later, else ingested here into `home`), its programs, spec and jobs, this
    machine's environment, and the store entries its jobs find."""

    home: Home
    fleet_dir: Path
    handed_over: bool
    catalog: list[CatalogGraph]
    spec: fleet.FleetSpec
    population: fleet.Jobs
    here: Environment
    tuned: fleet.TunedLookup | None

    def day(self, day: int, report: SimulationReport, totals: _Totals) -> None:
        """Day `day` of the fleet: its drops and new dumps written (and ingested, without an
        inbox), `report` and `totals` told what it did."""
        spec, catalog = self.spec, self.catalog
        fingerprints = [g.fingerprint for g in catalog]
        rows = fleet.simulate_day(self.population, spec, day, np.array([g.step_seconds for g in catalog]), self.here)
        rows, hits = fleet.apply_hits(rows, fingerprints, self.tuned, spec)
        dt = (spec.epoch + datetime.timedelta(days=day)).isoformat()
        drop_dir = self.fleet_dir / "profiles" / dt
        # A reach fleet's drops are named apart: a default one of the same seed and size differs.
        name = f"fleet{'-reach' if spec.mode is fleet.FleetMode.REACH else ''}-s{spec.seed}-j{spec.jobs}-{dt}"
        graph_runs = _write_drop(drop_dir / f"{name}.graph_runs.parquet", drops.graph_run_batches(
            rows, hits, self.population, day, fingerprints, spec.epoch))
        op_runs = _write_drop(drop_dir / f"{name}.op_runs.parquet", drops.op_run_batches(
            rows, self.population, spec, day, fingerprints,
            [g.op_fingerprints for g in catalog], [g.op_shares for g in catalog]))
        dumps = _hand_over_dumps(self.fleet_dir / "dumps", rows, catalog, spec.epoch + datetime.timedelta(days=day))
        if not self.handed_over:
            symbols = ingest_symbols(dumps, self.home) if dumps else None
            profiles = ingest_profiles([drop_dir], self.home)
            graph_runs, op_runs = profiles.graph_runs, profiles.op_runs
            report.symbol_modules += symbols.modules if symbols else 0
            report.quarantined += (symbols.quarantined if symbols else []) + profiles.quarantined
        else:
            report.symbol_modules += len(dumps)
        report.graph_runs += graph_runs
        report.op_runs += op_runs
        truth = fleet.day_truth(rows, hits, self.population)
        report.true_speedups.update(truth.effects)
        report.days.append({**totals.add_day(dt, rows, self.population),
                            "true_chip_hours_saved": truth.saved / CHIP_HOUR,
                            "holdout_chip_hours_forgone": truth.forgone / CHIP_HOUR})


class _Totals:
    """Chip-time tallies across the simulated days."""

    def __init__(self, n_graphs: int) -> None:
        self.by_graph = np.zeros(n_graphs)
        self.by_class = np.zeros(len(fleet.SIZE_CLASSES))
        self.opted_out = 0.0
        self.runs = 0  # a job's runs of a graph in a day, each its processes' rows
        self.tail_runs = 0
        self.tail_chip_seconds = 0.0

    def add_day(self, dt: str, rows: fleet.DayRows, jobs: fleet.Jobs) -> dict:
        chip_seconds = jobs.chips[rows.job] * rows.seconds
        total = float(chip_seconds.sum())
        self.by_graph += np.bincount(rows.graph, chip_seconds, len(self.by_graph))
        self.by_class += np.bincount(jobs.size_class[rows.job], chip_seconds, len(self.by_class))
        opted = float(chip_seconds[jobs.opted_out[rows.job]].sum())
        self.opted_out += opted
        tail = chip_seconds < CHIP_HOUR
        self.runs += len(chip_seconds)
        self.tail_runs += int(tail.sum())
        self.tail_chip_seconds += float(chip_seconds[tail].sum())
        versions: defaultdict[str, float] = defaultdict(float)
        per_env = np.bincount(rows.env, chip_seconds, len(rows.environments))
        for environment, seconds in zip(rows.environments, per_env):
            versions[environment.compiler_version] += float(seconds)
        # Rows: one per profiled process of each run (fleet.graph_run_batches).
        return {"dt": dt, "rows": int(rows.processes.sum()), "chip_hours": total / CHIP_HOUR,
                "opted_out_share": opted / max(total, 1e-9),
                "compiler_versions": {v: s / max(total, 1e-9) for v, s in sorted(versions.items())}}

    def finish(self, report: SimulationReport, family: np.ndarray) -> None:
        """Fill the report's totals; `family` is each graph's (its workload)."""
        total = max(float(self.by_graph.sum()), 1e-9)
        _, members = np.unique(family, return_inverse=True)
        report.chip_hours = total / CHIP_HOUR
        for shares, tally in ((report.top_graph_shares, self.by_graph),
                              (report.top_family_shares, np.bincount(members.reshape(-1), self.by_graph))):
            ranked = np.sort(tally)[::-1]
            shares.update({f"top{k}": float(ranked[:k].sum() / total) for k in (1, 5, 10)})
        report.size_class_shares = {name: float(s / total) for (name, _, _), s in
                                    zip(fleet.SIZE_CLASSES, self.by_class)}
        report.opted_out_share = self.opted_out / total
        report.long_tail = {"row_share": self.tail_runs / max(self.runs, 1),
                            "chip_time_share": self.tail_chip_seconds / total}


def _write_drop(path: Path, batches) -> int:
    """Write the drop unless it exists; the rows written."""
    if path.exists():
        return 0
    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        return 0
    written = 0

    def write(handle) -> None:
        nonlocal written
        writer = pq.ParquetWriter(handle, first.schema)
        for batch in itertools.chain([first], batches):
            writer.write_table(batch, row_group_size=ROW_GROUP_ROWS)
            written += batch.num_rows
        writer.close()

    atomic_write(path, write, durable=False)
    return written


def _hand_over_dumps(root: Path, rows: fleet.DayRows, catalog: list[CatalogGraph],
                     date: datetime.date) -> list[Path]:
    """Dump directories for the graphs first run in an environment on `date` (hard links to
    the catalog's files, which are the same bytes XLA wrote)."""
    captured = datetime.datetime.combine(date, datetime.time(12), datetime.UTC)
    new = []
    for g, e in fleet.graph_env_pairs(rows)[0]:
        environment = rows.environments[e]
        target = root / environment.key() / catalog[g].name
        if (target / ENVIRONMENT_FILE).exists():
            continue
        target.mkdir(parents=True, exist_ok=True)
        for source in catalog[g].module_files():
            link = target / source.name
            if not link.exists():
                os.link(source, link)
        note = {**environment.to_json(), "captured_at": captured.isoformat()}
        atomic_write(target / ENVIRONMENT_FILE, json.dumps(note, indent=1) + "\n", durable=False)
        new.append(target)
    return new
