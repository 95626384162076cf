"""The queries of the tuner's work in the window: every trial in search order, each task's
verified result, and which flags matter (tuner.analyze over the window's trials)."""

from __future__ import annotations

from pipelines.dashboard import lookups, sql
from pipelines.dashboard.scope import Scope
from pipelines.dashboard.sql import Row
from storage.home import Home
from tuner.analyze import analyze_trials
from tuner.tables import TRIALS, TUNING_RESULTS, results_of, trials_of
from vocabulary.confidence import FLAG_LEVEL, SCREENED_LEVEL, VERIFIED_LEVEL
from vocabulary.tuning import TrialOutcome


def tuner(home: Home, scope: Scope) -> list[Row]:
    """Every tuning trial of the window in search order, with its config and the best
    verified-numerics speedup its task had found so far."""
    rows = sql.query(scope, f"""
        select t.dt, t.task_id, t.kind, t.fingerprint, t.env_key, n.name, t.strategy, t.index, t.config,
               t.outcome, t.speedup, t.ci_low, t.ci_high, t.numerics_ok, t.compile_seconds, t.error,
               max(t.speedup) filter (where t.outcome = '{TrialOutcome.MEASURED}' and t.numerics_ok)
                   over (partition by t.task_id order by t.index
                         rows between unbounded preceding and current row) as best_so_far
        from trials t left join names n using (kind, fingerprint)
        order by t.task_id, t.index
    """, trials=sql.read(home, scope, TRIALS, [f.name for f in TRIALS.schema if f.name != "program"]),
        names=lookups.names(home))
    return [{**row, "ci_level": SCREENED_LEVEL} for row in rows]


def tuning_results(home: Home, scope: Scope) -> list[Row]:
    """One row per tuning task of the window: its verdict and the verified speedup with its
    interval."""
    rows = sql.query(scope, """
        select t.dt, t.task_id, t.kind, t.fingerprint, t.env_key, n.name, t.status, t.accepted,
               t.config, t.speedup, t.ci_low, t.ci_high, t.numerics_ok, t.compiler_version, t.strategy,
               t.evaluations, t.measured
        from results t left join names n using (kind, fingerprint)
        order by t.dt, t.task_id
    """, results=sql.read(home, scope, TUNING_RESULTS), names=lookups.names(home))
    return [{**row, "ci_level": VERIFIED_LEVEL} for row in rows]


def flags(home: Home, scope: Scope) -> list[Row]:
    """Which flags matter, from the window's trials (tuner.analyze, as `fdo analyze flags`):
    per flag its importance (mean |Shapley value| on log speedup) with a bootstrap interval,
    and per value its effect as a speed factor; most important first."""
    trials = trials_of(sql.read(home, scope, TRIALS))
    results = results_of(sql.read(home, scope, TUNING_RESULTS))
    return [{**flag, "ci_level": FLAG_LEVEL} for flag in analyze_trials(trials, results).to_json()["flags"]]
