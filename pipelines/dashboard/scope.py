"""The filters resolved against the warehouse: the environments (with readable labels) and the
keys that they select, and the narrowing of any table by them.

An environment is a hash (`env_key`); the `graphs` table (symbols) says what it is: platform,
device kind and count, compiler version. An environment seen only in profiles (no symbols
ingested yet) takes the device kind and compiler version its `graph_runs` carry. Its label is
"TPU v5 lite x 8, jaxlib-0.10.2", with the key's first digits added where two environments
would read the same (they differ in options such as XLA_FLAGS).

A table is narrowed by the columns it has: the window by its `dt` partitions (when read); the
team by `team`, or, for tables of keys (tuner, store, validator, hook), to the keys (fingerprint,
environment) that the team's jobs ran in the window; device kind and compiler version by
`env_key`; the graph by `fingerprint` (`graph_fingerprint` for the op runs: the graph's ops);
the store entry by `config_key` (the runs that named it: both arms of its holdout) or `key`.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ingest.tables import GRAPH_RUNS, GRAPHS, OP_RUNS
from pipelines.dashboard.filters import Filters, Window
from storage.home import Home
from storage.warehouse import TableSchema, Warehouse

ENVIRONMENTS = pa.schema([
    pa.field("env_key", pa.string()), pa.field("platform", pa.string()), pa.field("device_kind", pa.string()),
    pa.field("device_count", pa.int32()), pa.field("compiler_version", pa.string()),
    pa.field("environment", pa.string()),
])


@dataclass(frozen=True)
class Scope:
    """Filters with what they select in one home's data."""

    filters: Filters
    environments: pa.Table  # ENVIRONMENTS: every environment known, selected or not
    teams: list[str]  # the teams whose jobs ran in the window: the filter's choices
    team_keys: pa.Array | None  # "fingerprint/env_key" the team ran in the window; None: no team filter

    @classmethod
    def resolve(cls, home: Home, filters: Filters) -> Scope:
        """What `filters` select under `home`."""
        window = filters.window
        runs = _distinct(home, GRAPH_RUNS, ["team", "env_key", "device_kind", "compiler_version"], window)
        symbols = Warehouse(home).read(GRAPHS, ["env_key", "platform", "device_kind", "device_count",
                                                "compiler_version"])
        with duckdb.connect() as db:
            db.register("runs", runs)
            db.register("symbols", symbols)
            environments = db.execute("""
                select env_key, any_value(platform), any_value(device_kind), any_value(device_count),
                       any_value(compiler_version)
                from symbols group by env_key
                union all
                select env_key, null, any_value(device_kind), null, any_value(compiler_version)
                from runs where env_key not in (select env_key from symbols) group by env_key
                order by 3, 5, 4, 1
            """).fetchall()
        teams = sorted(set(runs.column("team").to_pylist()))
        team_keys = None
        if filters.team is not None:
            keys = [_distinct(home, GRAPH_RUNS, ["fingerprint", "env_key"], window, filters.team),
                    _distinct(home, OP_RUNS, ["op_fingerprint", "env_key"], window, filters.team)]
            team_keys = pa.concat_arrays([pc.binary_join_element_wise(*t.columns, "/").combine_chunks()
                                          for t in keys]).unique()
        return cls(filters, _labelled(environments), teams, team_keys)

    def label(self, env_key: str) -> str:
        """The environment's label; an environment nothing describes is named by its key."""
        return self._labels.get(env_key) or f"env {env_key[:6]}"

    @functools.cached_property
    def _labels(self) -> dict[str, str]:
        return dict(zip(self.environments.column("env_key").to_pylist(),
                        self.environments.column("environment").to_pylist()))

    def choices(self, column: str) -> list[str]:
        """The values of an environment column (device_kind, compiler_version), for the filters."""
        return sorted({v for v in self.environments.column(column).to_pylist() if v is not None})

    def columns(self, names: Iterable[str]) -> list[str]:
        """The columns, of a table with columns `names`, that `select` narrows it by."""
        return list(dict.fromkeys(column for _, columns in self._rules(set(names)) for column in columns))

    def select(self, table: pa.Table) -> pa.Table:
        """The rows of `table` that the filters select, by the columns it has (module docstring)."""
        conditions = []
        for rule, columns in self._rules(set(table.column_names)):
            values = [table.column(column) for column in columns]
            if rule == "graph":
                conditions.append(pc.equal(values[0], self.filters.graph))
            elif rule == "entry":
                conditions.append(pc.equal(values[0], self.filters.entry))
            elif rule == "team":
                conditions.append(pc.equal(values[0], self.filters.team))
            elif rule == "team_keys":
                conditions.append(pc.is_in(pc.binary_join_element_wise(*values, "/"), value_set=self.team_keys))
            else:
                conditions.append(pc.is_in(values[0], value_set=self._selected_environments()))
        return table.filter(functools.reduce(pc.and_, conditions)) if conditions else table

    def _rules(self, names: set[str]) -> list[tuple[str, tuple[str, ...]]]:
        """How the filters narrow a table with columns `names`: (rule, the columns it reads)."""
        filters = self.filters
        rules: list[tuple[str, tuple[str, ...]]] = []
        graph = next((c for c in ("fingerprint", "graph_fingerprint") if c in names), None)
        if filters.graph is not None and graph is not None:
            rules.append(("graph", (graph,)))
        entry = next((c for c in ("config_key", "key") if c in names), None)
        if filters.entry is not None and entry is not None:
            rules.append(("entry", (entry,)))
        if filters.team is not None and "team" in names:
            rules.append(("team", ("team",)))
        elif filters.team is not None and {"fingerprint", "env_key"} <= names:
            rules.append(("team_keys", ("fingerprint", "env_key")))
        if (filters.device_kind is not None or filters.compiler_version is not None) and "env_key" in names:
            rules.append(("environment", ("env_key",)))
        return rules

    def _selected_environments(self) -> pa.Array:
        environments = self.environments
        for column in ("device_kind", "compiler_version"):
            value = getattr(self.filters, column)
            if value is not None:
                environments = environments.filter(pc.equal(environments.column(column), value))
        return environments.column("env_key").combine_chunks()


def _distinct(home: Home, table: TableSchema, columns: list[str], window: Window,
              team: str | None = None) -> pa.Table:
    """The distinct values of `columns` in the window's rows of `table` (of `team` alone, when
    given), found file by file: a window's runs never sit in memory all at once."""
    distinct = table.schema.empty_table().select(columns)
    read = columns if team is None else list(dict.fromkeys([*columns, "team"]))
    for rows in Warehouse(home).read_files(table, read, window.holds):
        if team is not None:
            rows = rows.filter(pc.equal(rows.column("team"), team))
        found = rows.select(columns).group_by(columns).aggregate([]).select(columns)
        distinct = pa.concat_tables([distinct, found]).group_by(columns).aggregate([]).select(columns)
    return distinct


def environment_label(device_kind: str | None, device_count: int | None, compiler_version: str | None) -> str:
    """"TPU v5 lite x 8, jaxlib-0.10.2": what an environment is, in words."""
    device = device_kind or "unknown device"
    if device_count is not None:
        device = f"{device} x {device_count}"
    return f"{device}, {compiler_version or 'unknown compiler'}"


def _labelled(environments: list[tuple]) -> pa.Table:
    labels = [environment_label(kind, count, compiler) for _, _, kind, count, compiler in environments]
    repeated = Counter(labels)
    labels = [f"{label} (env {env[0][:6]})" if repeated[label] > 1 else label
              for label, env in zip(labels, environments)]
    columns: list[list[Any]] = [list(column) for column in zip(*environments)] or [[] for _ in range(5)]
    return pa.Table.from_arrays([*columns, labels], schema=ENVIRONMENTS)
