"""The queries of the config store and of the validator that keeps it: the live entries' age and
expiry, the store's versions, the validator's decisions (per day and one by one) and the share of
the hits served by entries it last updated."""

from __future__ import annotations

import datetime

from pipelines.dashboard import sql
from pipelines.dashboard.levels import ENTRY_LEVELS
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from ranking.tables import SAVINGS
from storage.home import Home
from storage.store_reader import StoreReader
from storage.store_schema import entries_of
from validator.tables import VALIDATIONS
from vocabulary.confidence import VALIDATED_LEVEL
from vocabulary.tuning import Kind

SECONDS_PER_DAY = 86400.0


def validations(home: Home, scope: Scope) -> list[Row]:
    """The validator's decisions per day and outcome (kept, rekeyed, invalidated, expired)."""
    return sql.query(scope, """
        select dt, outcome, count(*) as entries, sum(fleet_hits) as fleet_hits,
               avg(age_days) as mean_age_days
        from validations group by dt, outcome order by dt, outcome
    """, validations=sql.read(home, scope, VALIDATIONS))


def decisions(home: Home, scope: Scope) -> list[Row]:
    """Each decision of the validator, latest first: the entry, the outcome and why, and the
    re-measured speedup with its interval."""
    rows = sql.query(scope, """
        select dt, validated_at, run_id, key, fingerprint, env_key, kind, outcome, reason, new_key,
               toolchain, compiler_version, speedup, ci_low, ci_high, numerics_ok, age_days,
               store_version
        from validations order by validated_at desc, key
    """, validations=sql.read(home, scope, VALIDATIONS))
    return [{**row, "ci_level": VALIDATED_LEVEL} for row in rows]


def validator_hits(home: Home, scope: Scope) -> list[Row]:
    """Per day, the share of tuned chip-time (hits) served by entries the validator last
    updated, and what those entries saved."""
    return sql.query(scope, """
        select dt,
               sum(hit_chip_seconds) / 3600 as hit_chip_hours,
               coalesce(sum(hit_chip_seconds) filter (where validator_updated), 0) / 3600
                   as validator_hit_chip_hours,
               coalesce(sum(hit_chip_seconds) filter (where validator_updated), 0)
                   / nullif(sum(hit_chip_seconds), 0) as validator_share,
               coalesce(sum(chip_seconds_saved) filter (where validator_updated), 0) / 3600
                   as validator_chip_hours_saved
        from savings group by dt order by dt
    """, savings=sql.read(home, scope, SAVINGS))


def staleness(home: Home, scope: Scope) -> list[Row]:
    """The live store's entries with their age (days since measured) and days to expiry, as
    of the end of the window (today for the default window)."""
    now = min(datetime.datetime.now(datetime.UTC),
              datetime.datetime.combine(scope.filters.window.last, datetime.time.max, datetime.UTC))
    rows = []
    for entry in entries_of(scope.select(StoreReader(home).entries())):
        measured, expires = entry.measured_at, entry.expires_at
        rows.append({
            "key": entry.key, "fingerprint": entry.fingerprint, "env_key": entry.env_key,
            "environment": scope.label(entry.env_key), "kind": entry.kind,
            "provenance": entry.provenance, "speedup": entry.speedup,
            "ci_low": entry.ci_low, "ci_high": entry.ci_high,
            "ci_level": ENTRY_LEVELS.get(entry.provenance) if entry.provenance is not None else None,
            "compiler_version": entry.compiler_version, "config": entry.config,
            "measured_at": measured.isoformat() if measured else None,
            "age_days": (now - measured).total_seconds() / SECONDS_PER_DAY if measured else None,
            "expires_in_days": (expires - now).total_seconds() / SECONDS_PER_DAY if expires else None,
        })
    return sorted(rows, key=lambda r: (r["age_days"] is None, -(r["age_days"] or 0), r["key"]))


def store_versions(home: Home, scope: Scope) -> list[Row]:
    """Every published store version. Fleet-wide and not windowed: the store's whole history
    is short."""
    store = StoreReader(home)
    live = store.current()
    return [{"version": m.version, "parent": m.parent, "created": m.created, "reason": m.reason,
             "graph_entries": m.counts.get(Kind.GRAPH, 0), "op_entries": m.counts.get(Kind.OP, 0),
             "entries": sum(m.counts.values()), "compiler_versions": m.compiler_versions,
             "live": m.version == live} for m in store.versions()]
