"""The dashboards' tables ("grids", not to be mixed up with the warehouse's tables): each lists
the rows of one query, a column per field, sortable in the browser by a click on its header.

A grid names the endpoint (query) it lists, how its rows are picked from the endpoint's, and its
columns: the text shown, the value it sorts by, and whether the cell links to a graph's page or
to a store entry's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Callable

from pipelines.dashboard.figures import level_text
from pipelines.dashboard.levels import REALIZED_LEVEL
from pipelines.dashboard.sql import Row
from vocabulary.confidence import FLAG_LEVEL, SCREENED_LEVEL, VALIDATED_LEVEL, VERIFIED_LEVEL
from vocabulary.tuning import Kind

MAX_ROWS = 500  # more are in the JSON: a page of thousands of rows helps nobody


@dataclass(frozen=True)
class Column:
    """One column of a grid."""

    header: str
    text: Callable[[Row], str]
    sort: Callable[[Row], float | str | None] | None = None  # default: the text
    numeric: bool = False  # right-aligned, sorted as numbers
    graph_link: bool = False  # the cell links to the page of the row's graph
    entry_link: bool = False  # the cell links to the page of the row's store entry (`key`)


@dataclass(frozen=True)
class Grid:
    """One table card: what it lists, the endpoint of its rows, its columns."""

    id: str
    title: str
    note: str
    endpoint: str  # a key of queries.QUERIES
    columns: tuple[Column, ...]
    fills: str  # the command whose output it lists, for the "No data yet" note
    pick: Callable[[list[Row]], list[Row]] = field(default=list)  # the rows listed, in order
    wide: bool = True


def _speedup(row: Row) -> str:
    """"1.220× [1.170, 1.270]", the interval left out when unknown, "—" without a speedup."""
    if row["speedup"] is None:
        return "—"
    if row["ci_low"] is None or row["ci_high"] is None:
        return f"{row['speedup']:.3f}×"
    return f"{row['speedup']:.3f}× [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _number(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _text(header: str, key: str) -> Column:
    """A column of one text of the row ("—" when there is none)."""
    return Column(header, lambda r: r[key] or "—")


def _time(header: str, key: str) -> Column:
    """A column of one timestamp of the row, to the minute."""
    return Column(header, lambda r: _when(r[key]))


def _numeric(header: str, key: str, fmt: str) -> Column:
    """A column of one number of the row, shown with `fmt` and sorted by its value."""
    return Column(header, lambda r: _number(r[key], fmt), sort=lambda r: r[key], numeric=True)


def _entry_speedup(row: Row) -> str:
    """A store entry's speedup with its interval and the level its writer measured it at."""
    if row["ci_low"] is None or row["ci_high"] is None:
        return _speedup(row)
    return f"{_speedup(row)}, {level_text(row['ci_level'])}"


def _config(row: Row) -> str:
    """A config's flags as `name=value` pairs; "defaults" for the empty config."""
    flags = json.loads(row["config"]) if row.get("config") else {}
    return ", ".join(f"{name}={json.dumps(value)}" for name, value in sorted(flags.items())) or "defaults"


def _graph(row: Row) -> str:
    """"mlp_step · d5ad13b1": the module's name (else the key's kind) and the fingerprint's start."""
    return f"{row.get('name') or row.get('kind', Kind.GRAPH)} · {row['fingerprint'][:8]}"


def _flag_values(rows: list[Row]) -> list[Row]:
    """One row per flag value, flags by importance, each flag's values by effect."""
    return [{"flag": flag["flag"], **value} for flag in rows for value in flag["values"]]


def _effect(row: Row) -> str:
    """A flag value's speed factor with its interval (the analysis gives both in log speedup)."""
    if row["effect"] is None:
        return "all failed"
    return f"{row['speedup']:.3f}× [{math.exp(row['low']):.3f}, {math.exp(row['high']):.3f}]"


def _verdict(row: Row) -> str:
    """What the fleet's holdout says of an entry: a regression, a realized speedup, or why not yet."""
    if row["regressed"]:
        return "regressed in the fleet"
    return "realized" if row["decided"] else f"undecided: {row['undecided']}"


def _when(timestamp: str | None) -> str:
    """An ISO timestamp to the minute, as "2026-11-22 06:00"."""
    return "—" if timestamp is None else timestamp[:16].replace("T", " ")


ENVIRONMENT = _text("environment", "environment")
ENTRY_SPEEDUP = Column("speedup", _entry_speedup, sort=lambda r: r["speedup"], numeric=True)
DATE = _text("date", "dt")

TRIALS = Grid(
    "trials", "Trials", f"Every config the tuner tried, in search order: the speedup over the default "
    f"with its {level_text(SCREENED_LEVEL)} interval (the search's measurement), numerics and compile time. "
    "Click a header to sort.",
    "tuner", (
        DATE,
        Column("graph", _graph, graph_link=True),
        Column("trial", lambda r: str(r["index"] + 1), sort=lambda r: r["index"], numeric=True),
        _text("outcome", "outcome"),
        Column("speedup", _speedup, sort=lambda r: r["speedup"], numeric=True),
        Column("numerics", lambda r: {True: "ok", False: "off", None: "—"}[r["numerics_ok"]]),
        Column("config", _config),
        ENVIRONMENT,
        _text("strategy", "strategy"),
        _numeric("compile s", "compile_seconds", ".2f"),
        _text("error", "error"),
    ), "fdo tune")

FLAG_VALUES = Grid(
    "flag-values", "Flag values", "Each value a trial set: its effect as a speed factor over the default "
    f"({level_text(FLAG_LEVEL)} bootstrap interval), and how many trials set it, failed, and won",
    "flags", (
        _text("flag", "flag"),
        _text("value", "value"),
        Column("effect", _effect, sort=lambda r: r["speedup"], numeric=True),
        _numeric("trials", "trials", ","),
        _numeric("failed", "failed", ","),
        _numeric("winners", "winners", ","),
    ), "fdo tune", pick=_flag_values)

ENTRIES = Grid(
    "entries", "Store entries", "The live store's entries of this graph or entry: the config, its speedup "
    "with the interval its writer measured (tuner: verification, validator: re-measurement), age and expiry",
    "staleness", (
        ENVIRONMENT,
        _text("written by", "provenance"),
        ENTRY_SPEEDUP,
        _text("compiler", "compiler_version"),
        _time("measured", "measured_at"),
        _numeric("age (days)", "age_days", ".1f"),
        _numeric("expires in (days)", "expires_in_days", ".1f"),
        Column("config", _config),
        Column("key", lambda r: r["key"], entry_link=True),
    ), "fdo deliver")

DECISIONS = Grid(
    "decisions", "Validator decisions", "What the validator decided about this graph's entries, latest "
    f"first, with the re-measured speedup ({level_text(VALIDATED_LEVEL)} interval)",
    "decisions", (
        _time("when", "validated_at"),
        _text("outcome", "outcome"),
        ENVIRONMENT,
        _text("reason", "reason"),
        Column("speedup", _speedup, sort=lambda r: r["speedup"], numeric=True),
        _text("toolchain", "toolchain"),
        _numeric("store version", "store_version", "d"),
    ), "fdo validate")

SYMBOLS = Grid(
    "symbols", "Environments", "Where this graph was compiled (its symbols): the module, its size, "
    "and when each environment was first and last seen",
    "symbols", (
        ENVIRONMENT,
        _text("module", "module_name"),
        _numeric("instructions", "n_instructions", ","),
        _time("first seen", "first_seen"),
        _time("last seen", "last_seen"),
        _text("environment key", "env_key"),
    ), "fdo ingest symbols")

GRAPHS = Grid(
    "graphs", "Graphs", "Every graph that ran in the window, costliest first (chip-hours of all its runs): "
    "its share of the graphs' chip-time, the share that ran with a tuned config, its live store entries for "
    "the environments it ran in, and the speedup of the entry in the costliest of them, with the interval "
    f"its writer measured (tuner: {level_text(VERIFIED_LEVEL)}, validator: {level_text(VALIDATED_LEVEL)}). "
    "Each links to its page; click a header to sort.",
    "graphs", (
        Column("graph", _graph, graph_link=True),
        _numeric("chip-hours", "chip_hours", ",.2f"),
        _numeric("share", "share", ".1%"),
        _numeric("ran tuned", "hit_share", ".1%"),
        _numeric("runs", "runs", ","),
        _numeric("teams", "teams", ","),
        _numeric("environments", "environments", ","),
        _text("costliest environment", "environment"),
        _numeric("live entries", "entries", ","),
        ENTRY_SPEEDUP,
    ), "fdo ingest profiles")

REALIZED = Grid(
    "realized", "Realized per entry", "Each store entry (key and version) that ran in the window: the speedup "
    "expected of it and the one realized in the fleet, holdout arm (defaults) against tuned arm, with its "
    f"{level_text(REALIZED_LEVEL)} interval over jobs; each arm's jobs and runs. Each links to its page.",
    "realized", (
        Column("entry", _graph, entry_link=True),
        ENVIRONMENT,
        _numeric("version", "config_version", "d"),
        _numeric("expected", "expected_speedup", ".3f"),
        Column("realized", _speedup, sort=lambda r: r["speedup"], numeric=True),
        Column("verdict", _verdict),
        _numeric("tuned jobs", "tuned_jobs", ","),
        _numeric("tuned runs", "tuned_runs", ","),
        _numeric("holdout jobs", "holdout_jobs", ","),
        _numeric("holdout runs", "holdout_runs", ","),
        _numeric("tuned chip-hours", "tuned_chip_hours", ",.2f"),
    ), "fdo ingest profiles (holdout runs)")
