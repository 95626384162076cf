"""Realized speedups and savings: what tuned configs did in the fleet, from its own profiles.

The hook sends a small deterministic share of jobs per store key to the compiler defaults (the
holdout arm, `graph_runs.holdout` true); the other runs carrying the key are the tuned arm. Per
(config_key, config_version):

- each arm's seconds per execution is the ratio of sums over its jobs: sum(chip_seconds /
  chips) / sum(executions), so a job weighs as much as it ran;
- the realized speedup is holdout / tuned seconds per execution (above 1: the config helps);
- its interval is a seeded, symmetric bootstrap-t interval (`confidence`, two-sided) that
  resamples jobs, not runs, in each arm independently: runs of one job share its inputs,
  machine and batch size and are not independent. With the default 0.99 each bound is meant
  one-sided at 99.5%.
- an arm with fewer than `min_jobs` jobs leaves the entry undecided (no speedup, no interval,
  the reason in `Realized.undecided`).

Savings follow the booked definition of `ranking.savings` (CATWILD 4.3.1): the chip-time a run
would have used without the config minus what it used. A tuned run that used T chip-seconds
under a config of speedup s would have used T x s, so it saved T x (s - 1): booked with the
tuner's expected s, realized with the fleet's. The realized interval is T x (bound - 1) per
entry, summed bound by bound over entries (conservative: the bounds need not co-occur).
Figures measured with these rules are in docs/ranking.md.
"""

from __future__ import annotations

import datetime
import math
import zlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.ran_tuned import ran_tuned
from ingest.tables import GRAPH_RUNS
from storage.home import Home
from storage.warehouse import Warehouse, partition_days
from vocabulary.interval import Interval, columns
from vocabulary.tuning import Kind

# What the computation reads of `graph_runs`.
RUN_COLUMNS = ["dt", "job_id", "team", "chips", "executions", "chip_seconds", "config_key",
               "config_version", "expected_speedup", "holdout"]
# Bootstrap resamples are drawn in chunks of at most this many job draws per arm (memory stays
# bounded however many jobs an entry has).
_CHUNK_DRAWS = 1 << 22

# Jobs each arm needs for a verdict. With 3, the bootstrap over so few jobs gave intervals too
# narrow: 2 false invalidations in 5,343 nightly checks of the simulated fleet at 20,000 jobs
# (benchmarks/bench_realized.py), none with 5.
MIN_JOBS = 5
_MAX_LOG_HALF_WIDTH = 20.0  # e^20: wider than any speedup can be


@dataclass(frozen=True)
class Arm:
    """One arm (tuned or holdout) of an entry in the fleet."""

    jobs: int
    runs: int
    executions: int
    chip_seconds: float
    seconds_per_execution: float | None  # None: no executions


class Undecided(StrEnum):
    """Why an entry has no realized speedup."""

    NO_HOLDOUT_RUNS = "no holdout runs"
    TOO_FEW_HOLDOUT_JOBS = "too few holdout jobs"
    TOO_FEW_TUNED_JOBS = "too few tuned jobs"
    NO_EXECUTIONS = "an arm recorded no executions"


@dataclass(frozen=True)
class Realized:
    """An entry's speedup in the fleet: holdout over tuned seconds per execution, with its
    interval (None: undecided, `undecided` says why)."""

    key: str
    config_version: int
    kind: Kind  # GRAPH: graph_runs carry the holdout arm
    team: str | None  # None: all teams
    expected_speedup: float  # what the store promised (the tuner's or validator's measurement)
    speedup: Interval | None
    tuned: Arm
    holdout: Arm
    undecided: Undecided | None

    @property
    def decided(self) -> bool:
        """Whether both arms had enough jobs for a speedup and an interval."""
        return self.undecided is None

    @property
    def regressed(self) -> bool:
        """Whether the whole interval lies below 1: the config slows the fleet down."""
        return self.speedup is not None and self.speedup.high < 1.0

    def to_json(self) -> dict[str, Any]:
        """JSON-ready; the realized figures null where undecided, with the reason."""
        return {"key": self.key, "config_version": self.config_version, "kind": self.kind,
                "team": self.team, "expected_speedup": self.expected_speedup,
                **columns(self.speedup, prefix="realized_"),
                "undecided_reason": self.undecided.value if self.undecided else None,
                **{f"{name}_{field}": getattr(arm, field)
                   for name, arm in (("tuned", self.tuned), ("holdout", self.holdout))
                   for field in ("jobs", "runs", "executions", "chip_seconds")}}


@dataclass(frozen=True)
class RealizedSavings:
    """Booked beside realized savings over one slice of the tuned runs (a team, a store
    version, or all), in chip-seconds."""

    team: str | None  # None: all teams
    config_version: int | None  # None: all versions
    tuned_chip_seconds: float
    booked: float  # every tuned run of the slice x (expected - 1)
    booked_decided: float  # the same over the entries with a realized speedup: compare with `realized`
    # Tuned runs of decided entries x (realized - 1), its bounds those of each entry's speedup
    # summed; None where no entry of the slice is decided (`decided` is 0): nothing is known,
    # which is not a saving of 0.
    realized: Interval | None
    decided: int  # entries with a realized speedup
    undecided: int

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, in chip-seconds; the realized figure and its bounds null where no entry
        is decided."""
        return {"team": self.team, "config_version": self.config_version,
                "tuned_chip_seconds": self.tuned_chip_seconds, "booked": self.booked,
                "booked_decided": self.booked_decided,
                "realized": self.realized and self.realized.estimate,
                "realized_ci_low": self.realized and self.realized.low,
                "realized_ci_high": self.realized and self.realized.high,
                "decided": self.decided, "undecided": self.undecided}


@dataclass(frozen=True)
class SavingsBreakdown:
    """Realized savings in total, per team and per store version."""

    total: RealizedSavings
    by_team: list[RealizedSavings]
    by_version: list[RealizedSavings]


def realized_speedups(runs: pa.Table, *, min_jobs: int = MIN_JOBS, confidence: float = 0.99,
                      resamples: int = 2000, seed: int = 0, by_team: bool = False) -> list[Realized]:
    """The realized speedup of each (config_key, config_version) in `runs` (`graph_runs` rows
    with at least RUN_COLUMNS but `dt`), sorted by key and version; per team too if `by_team`.

    Untuned rows (config_key null) are ignored. Deterministic: the bootstrap of an entry is
    seeded by `seed` and the entry's identity, not by the order of the entries."""
    tuned_rows = runs.filter(pc.is_valid(runs.column("config_key")))
    jobs = _job_sums(tuned_rows, by_team)
    found = []
    for group, arms in sorted(_groups(jobs, by_team).items(), key=lambda item: _order(item[0])):
        key, version, team = group
        expected = arms.pop("expected")
        found.append(_realize(key, version, team, expected, arms, min_jobs, confidence, resamples, seed))
    return found


def read_realized(home: Home | str | Path, first: datetime.date, last: datetime.date, *,
                  min_jobs: int = MIN_JOBS, confidence: float = 0.99) -> list[Realized]:
    """`realized_speedups` over the graph_runs of [first, last] in `home` (a path or a URL)."""
    return realized_speedups(read_runs(home, first, last), min_jobs=min_jobs, confidence=confidence)


def read_runs(home: Home | str | Path, first: datetime.date, last: datetime.date) -> pa.Table:
    """The graph_runs of [first, last] that carry a store key, RUN_COLUMNS only."""
    days = set(partition_days(first, last))
    # A file at a time: most of a fleet's runs carry no key, and only the others are kept.
    kept = [rows.filter(pc.is_valid(rows.column("config_key"))) for rows in
            Warehouse(home).read_files(GRAPH_RUNS, columns=RUN_COLUMNS, filter_dt=days.__contains__)]
    return pa.concat_tables(kept) if kept else GRAPH_RUNS.schema.empty_table().select(RUN_COLUMNS)


def realized_savings(runs: pa.Table, realized: Iterable[Realized]) -> SavingsBreakdown:
    """Booked and realized savings of the tuned runs in `runs` (`graph_runs` rows), with the
    fleet-wide realized speedup of each (key, version) in `realized` applied to every team's
    tuned runs of it (one team's arms are seldom large enough for a speedup of its own)."""
    by_entry = {(r.key, r.config_version): r for r in realized if r.team is None}
    tuned = runs.filter(ran_tuned(runs))
    cells = []
    for row in (tuned.group_by(["team", "config_key", "config_version"])
                .aggregate([("chip_seconds", "sum"), ("expected_speedup", "max")]).to_pylist()):
        entry = by_entry.get((row["config_key"], row["config_version"]))
        used = row["chip_seconds_sum"]
        cells.append(_Cell(row["team"], (row["config_key"], row["config_version"]), used,
                           used * ((row["expected_speedup_max"] or 1.0) - 1.0),
                           entry.speedup if entry is not None else None))

    def slice_of(team: str | None, version: int | None) -> RealizedSavings:
        chosen = [c for c in cells if team in (None, c.team) and version in (None, c.entry[1])]
        decided = [c for c in chosen if c.realized is not None]
        gains = [(c.chip_seconds, c.realized) for c in chosen if c.realized is not None]
        entries, decided_entries = {c.entry for c in chosen}, {c.entry for c in decided}

        def saved(bound: str) -> float:
            return sum((chip_seconds * (getattr(speedup, bound) - 1.0) for chip_seconds, speedup in gains), 0.0)

        return RealizedSavings(
            team=team, config_version=version, tuned_chip_seconds=sum(c.chip_seconds for c in chosen),
            booked=sum(c.booked for c in chosen), booked_decided=sum(c.booked for c in decided),
            realized=Interval(saved("estimate"), saved("low"), saved("high")) if decided else None,
            decided=len(decided_entries), undecided=len(entries - decided_entries))

    return SavingsBreakdown(
        total=slice_of(None, None),
        by_team=[slice_of(team, None) for team in sorted({c.team for c in cells})],
        by_version=[slice_of(None, version) for version in sorted({c.entry[1] for c in cells})])


class _Cell(NamedTuple):
    """One team's tuned runs of one entry."""

    team: str
    entry: tuple[str, int]  # (key, version)
    chip_seconds: float
    booked: float
    realized: Interval | None  # the entry's realized speedup; None: it is undecided


def _job_sums(rows: pa.Table, by_team: bool) -> pa.Table:
    """Per job, entry (and team) and arm: runs, executions, chip-seconds and seconds."""
    keys = ["config_key", "config_version", "job_id", "arm"] + (["team"] if by_team else [])
    seconds = pc.divide(pc.cast(rows.column("chip_seconds"), pa.float64()),
                        pc.cast(rows.column("chips"), pa.float64()))
    table = pa.table({
        "config_key": rows.column("config_key"), "config_version": rows.column("config_version"),
        "job_id": rows.column("job_id"), "team": rows.column("team"),
        "arm": pc.fill_null(rows.column("holdout"), False),
        "executions": pc.cast(rows.column("executions"), pa.int64()),
        "chip_seconds": pc.cast(rows.column("chip_seconds"), pa.float64()),
        "seconds": seconds, "expected_speedup": rows.column("expected_speedup")})
    # Sorted, so that a job's place in the resampling does not hang on the order of the rows.
    return table.group_by(keys).aggregate([
        ("executions", "count"), ("executions", "sum"), ("chip_seconds", "sum"), ("seconds", "sum"),
        ("expected_speedup", "max")]).sort_by([(name, "ascending") for name in keys])


def _groups(jobs: pa.Table, by_team: bool) -> dict[tuple, dict]:
    """(key, version, team) -> {'expected': float, False: tuned job columns, True: holdout's}."""
    columns = {name: jobs.column(name).to_numpy(zero_copy_only=False) for name in
               ("config_key", "config_version", "arm", "executions_count", "executions_sum",
                "chip_seconds_sum", "seconds_sum", "expected_speedup_max")}
    teams = jobs.column("team").to_pylist() if by_team else [None] * jobs.num_rows
    index: dict[tuple, dict] = {}
    for i in range(jobs.num_rows):
        group = (columns["config_key"][i], int(columns["config_version"][i]), teams[i])
        arms = index.setdefault(group, {"expected": np.nan, False: [], True: []})
        arms[bool(columns["arm"][i])].append(i)
        expected = columns["expected_speedup_max"][i]
        if expected is not None and not np.isnan(expected):
            arms["expected"] = float(np.fmax(arms["expected"], expected))
    for arms in index.values():
        for arm in (False, True):
            rows = np.asarray(arms[arm], dtype=np.int64)
            arms[arm] = {name: np.asarray(columns[name][rows], dtype=float) for name in
                         ("executions_count", "executions_sum", "chip_seconds_sum", "seconds_sum")}
    return index


def _order(group: tuple) -> tuple:
    key, version, team = group
    return key, version, team or ""


def _arm(jobs: dict[str, np.ndarray]) -> Arm:
    executions = int(jobs["executions_sum"].sum())
    return Arm(jobs=len(jobs["seconds_sum"]), runs=int(jobs["executions_count"].sum()),
               executions=executions, chip_seconds=float(jobs["chip_seconds_sum"].sum()),
               seconds_per_execution=float(jobs["seconds_sum"].sum()) / executions if executions else None)


def _realize(key: str, version: int, team: str | None, expected: float, arms: dict,
             min_jobs: int, confidence: float, resamples: int, seed: int) -> Realized:
    tuned, holdout = _arm(arms[False]), _arm(arms[True])
    if holdout.runs == 0:
        reason = Undecided.NO_HOLDOUT_RUNS
    elif holdout.jobs < min_jobs:
        reason = Undecided.TOO_FEW_HOLDOUT_JOBS
    elif tuned.jobs < min_jobs:
        reason = Undecided.TOO_FEW_TUNED_JOBS
    elif not tuned.executions or not holdout.executions:
        reason = Undecided.NO_EXECUTIONS
    else:
        reason = None
    speedup = None
    # Both arms ran executions (NO_EXECUTIONS otherwise): each has its seconds per execution.
    if reason is None and holdout.seconds_per_execution is not None and tuned.seconds_per_execution is not None:
        rng = np.random.default_rng([seed, zlib.crc32(f"{key}/{version}/{team}".encode())])
        speedup = _interval(holdout.seconds_per_execution / tuned.seconds_per_execution,
                            arms[True], arms[False], confidence, resamples, rng)
    return Realized(key=key, config_version=version, kind=Kind.GRAPH, team=team, expected_speedup=expected,
                    speedup=speedup, tuned=tuned, holdout=holdout, undecided=reason)


def _interval(speedup: float, holdout: dict[str, np.ndarray], tuned: dict[str, np.ndarray],
              confidence: float, resamples: int, rng: np.random.Generator) -> Interval:
    """`speedup` with its symmetric studentized (bootstrap-t) interval, on the log scale.

    Each resample draws each arm's jobs with replacement, and its log speedup is studentized by
    its own standard error (`_log_rates`); the `confidence` quantile of |t| times the
    estimate's standard error is the half-width. Plain percentiles of the resampled ratio, and
    the equal-tailed t quantiles, cover too little with a handful of holdout jobs (skewed job
    costs make a cheap-looking sample look precise too): docs/ranking.md has the figures."""
    log_speedup = float(np.log(speedup))
    se = np.sqrt(sum(_log_rates(arm, np.arange(len(arm["seconds_sum"]))[None, :])[1][0]
                     for arm in (holdout, tuned)))
    if se == 0.0:
        return Interval(speedup, speedup, speedup)  # every job of each arm ran at one rate: nothing to resample
    n_holdout, n_tuned = len(holdout["seconds_sum"]), len(tuned["seconds_sum"])
    per_chunk = max(1, _CHUNK_DRAWS // max(n_holdout, n_tuned))
    studentized = []
    for start in range(0, resamples, per_chunk):
        size = min(per_chunk, resamples - start)
        log_h, var_h = _log_rates(holdout, rng.integers(0, n_holdout, size=(size, n_holdout)))
        log_t, var_t = _log_rates(tuned, rng.integers(0, n_tuned, size=(size, n_tuned)))
        with np.errstate(divide="ignore", invalid="ignore"):
            studentized.append((log_h - log_t - log_speedup) / np.sqrt(var_h + var_t))
    t = np.concatenate(studentized)
    # 0/0: a resample that drew every job of each arm alike gives the estimate back; no evidence.
    t = np.abs(t[~np.isnan(t)])
    # A resample that drew one job for every draw of each arm has no spread: its t is infinite
    # (with 3 jobs an arm, 1 resample in 81). The quantile is taken, not interpolated, since
    # interpolating between two infinite t's is NaN; bounded, so that the interval is wide but
    # finite.
    quantile = float(np.quantile(t, confidence, method="higher")) if t.size else math.inf
    half = min(quantile * se, _MAX_LOG_HALF_WIDTH)
    return Interval(speedup, float(np.exp(log_speedup - half)), float(np.exp(log_speedup + half)))


def _log_rates(jobs: dict[str, np.ndarray], draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `draws` (job indices), the log seconds per execution of the jobs drawn and
    its variance, from the linearization of a ratio of sums R = S/E over n jobs:
    var(log R) = n/(n-1) x sum((s_i - R e_i)^2) / S^2."""
    s, e = jobs["seconds_sum"][draws], jobs["executions_sum"][draws]
    n = draws.shape[1]
    total_s, total_e = s.sum(axis=1), e.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = total_s / total_e
        residual = ((s - rate[:, None] * e) ** 2).sum(axis=1)
        return np.log(rate), n / (n - 1) * residual / total_s ** 2
