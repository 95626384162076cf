"""The validator's rules without measuring: validator.rules (outcomes, expiry, applying
decisions to the live entries, audit rows) and validator.plan (what a run decides for free, what
it measures and in which order), on entries and tables built here. No compile, no worker."""

from __future__ import annotations

import dataclasses
import datetime
import json

import pyarrow as pa
import pytest

from execution.evaluate import EvaluationResult, failed_result
from execution.numerics import OutputCheck
from hlo.environment import Environment, GpuDescription, Partitioning, gpu_environment, store_key
from storage.store_schema import StoreEntry, entries_of
from storage.warehouse import Warehouse
from tests.support.validator_records import (
    BAND,
    CONFIG,
    DAY,
    EDGE,
    HERE,
    MAX_AGE,
    NOW,
    TTL,
    Home,
    entry,
    fp,
    result,
    table,
)
from validator import rules
from validator.plan import Queued
from validator.rules import Decision
from validator.tables import VALIDATIONS
from validator.toolchains import Toolchain
from vocabulary.decisions import Applied, DecisionOutcome, StoreChange
from vocabulary.failures import Failure
from vocabulary.interval import Interval
from vocabulary.store import Provenance
from vocabulary.tuning import Origin

OLDER = dataclasses.replace(HERE, compiler_version="jaxlib-old")


def queued(row: StoreEntry, same_compiler: bool = True, origin: datetime.datetime | None = None) -> Queued:
    """A queued entry as the planner makes it (its decision base included)."""
    origin = origin or row.measured_at
    base = {"key": row.key, "fingerprint": row.fingerprint, "env_key": row.env_key,
            "kind": row.kind, "config": row.config, "source": row.source, "relaxed_config": row.relaxed_config,
            "config_origin": row.origin, "transferred_from": row.transferred_from, "toolchain": "default",
            "compiler_version": HERE.compiler_version, "fleet_hits": 0, "age_days": 3.0,
            "decided_at": NOW.isoformat(), "origin_at": origin.isoformat(),
            "entry_measured_at": row.measured_at.isoformat(),
            "entry_expires_at": row.expires_at.isoformat()}
    new_env = None if same_compiler else HERE.key()
    new_key = None if same_compiler else store_key(row.fingerprint, HERE.key())
    return Queued(row, base, "blob", same_compiler, new_key, new_env, origin, ())


def measured(row: StoreEntry, found: EvaluationResult, same_compiler: bool = True,
             origin: datetime.datetime | None = None) -> Decision:
    return queued(row, same_compiler, origin).measured(found, HERE.compiler_version, BAND, NOW, TTL, MAX_AGE)


def by_key(entries: pa.Table) -> dict[str, StoreEntry]:
    return {entry.key: entry for entry in entries_of(entries)}


# --- validator.rules: outcomes of a measurement -------------------------------------------

def test_a_program_identical_to_the_defaults_is_invalidated_however_fast_it_looked():
    outcome, reason = rules.measured_outcome(result(speedup=2.0, ci_low=1.9, ci_high=2.1, identical=True),
                                             True, "jaxlib-new", BAND)
    assert outcome == "invalidated" and "same program as the defaults on jaxlib-new" in reason


def test_numerics_off_invalidates_naming_the_failed_checks():
    checks = [OutputCheck(0, True, 1e-7, "max error 1.00e-07 of scale 1", 2e-3),
              OutputCheck(1, False, 3.0, "max error 3.00e+00 of scale 1", 2e-3)]
    outcome, reason = rules.measured_outcome(result(numerics_ok=False, numerics=checks), True, "jaxlib-new", BAND)
    assert outcome == "invalidated" and reason.endswith(
        "numerics off on jaxlib-new: differ, failed on 1 of 1 set of inputs: "
        "output 1: error 3.00e+00 > tolerance 2.00e-03")


@pytest.mark.parametrize("ci_high, outcome", [
    (EDGE, "kept"),  # the interval still reaches a gain worth having
    (EDGE - 1e-9, "invalidated"),  # the data rule such a gain out
])
def test_on_its_own_compiler_only_an_interval_under_the_band_invalidates(ci_high, outcome):
    found = result(speedup=ci_high - 0.02, ci_low=ci_high - 0.04, ci_high=ci_high)
    assert rules.measured_outcome(found, True, "jaxlib-new", BAND)[0] == outcome


def test_an_inconclusive_interval_keeps_the_entry():
    outcome, reason = rules.measured_outcome(result(1.005, 0.98, 1.03), True, "jaxlib-new", BAND)
    assert outcome == "kept" and "1.005x [0.980, 1.030]" in reason


@pytest.mark.parametrize("ci_low, outcome", [
    (EDGE, "invalidated"),  # a new key needs the whole interval above the band, as the tuner's
    (EDGE + 1e-9, "rekeyed"),
])
def test_on_another_compiler_only_a_clear_gain_rekeys(ci_low, outcome):
    found = result(speedup=ci_low + 0.1, ci_low=ci_low, ci_high=ci_low + 0.2)
    found_outcome, reason = rules.measured_outcome(found, False, "jaxlib-new", BAND)
    assert found_outcome == outcome
    assert ("not re-keyed" in reason) == (outcome == "invalidated")


# --- validator.rules: expiry ---------------------------------------------------------------

def test_expired_at_its_expiry_not_a_moment_before():
    row = entry(1, expires_in=0)
    assert "past its expiry" in rules.expired_reason(row, row.measured_at, NOW, MAX_AGE)
    assert rules.expired_reason(row, row.measured_at, NOW - datetime.timedelta(microseconds=1), MAX_AGE) is None


def test_the_absolute_lifetime_runs_from_the_first_measurement_whatever_was_refreshed():
    row = entry(1, days_old=1, expires_in=29)  # re-validated yesterday, a fresh lease
    assert rules.expired_reason(row, NOW - MAX_AGE + DAY, NOW, MAX_AGE) is None
    reason = rules.expired_reason(row, NOW - MAX_AGE, NOW, MAX_AGE)
    assert "absolute lifetime of 180 days" in reason


def test_a_fresh_lease_never_runs_past_the_lifetime():
    assert rules.expiry(NOW, NOW - 10 * DAY, TTL, MAX_AGE) == NOW + TTL
    assert rules.expiry(NOW, NOW - 170 * DAY, TTL, MAX_AGE) == NOW + 10 * DAY


# --- validator.plan.Queued: the decision a measurement makes -----------------------------------

def test_kept_refreshes_with_the_measured_figures_and_a_capped_lease():
    row = entry(1)
    kept = measured(row, result(1.4, 1.2, 1.6), origin=NOW - 175 * DAY)
    assert (kept.outcome, kept.change) == ("kept", StoreChange.REFRESH)
    assert (kept.speedup, kept.numerics_ok) == (Interval(1.4, 1.2, 1.6), True)
    assert kept.decided_at == NOW.isoformat() and kept.expires_at == (NOW + 5 * DAY).isoformat()
    assert kept.new_key is None


def test_invalidated_removes_on_its_own_compiler_and_leaves_another_compilers_entry():
    row = entry(1, OLDER)
    slower = result(0.9, 0.85, 0.95)
    assert measured(row, slower).change == StoreChange.REMOVE
    elsewhere = measured(row, slower, same_compiler=False)
    assert (elsewhere.outcome, elsewhere.change, elsewhere.new_key) == ("invalidated", StoreChange.NONE, None)
    assert elsewhere.expires_at is None


def test_rekeyed_adds_under_the_new_environments_key():
    row = entry(1, OLDER)
    rekeyed = measured(row, result(1.4, 1.2, 1.6), same_compiler=False)
    assert (rekeyed.outcome, rekeyed.change) == ("rekeyed", StoreChange.ADD)
    assert rekeyed.new_key == store_key(row.fingerprint, HERE.key()) != row.key
    assert rekeyed.new_env_key == HERE.key() and rekeyed.expires_at == (NOW + TTL).isoformat()
    assert Decision.from_json(json.loads(json.dumps(rekeyed.to_json()))) == rekeyed


# --- validator.rules: applying decisions to the live entries -------------------------------

def test_a_removal_applies_to_the_entry_decided_on_and_leaves_the_others():
    gone, other = entry(1), entry(2)
    after, status = rules.apply([measured(gone, result(0.9, 0.85, 0.95))], table(gone, other))
    assert status == [Applied.IN_EFFECT] and by_key(after) == {other.key: other}
    again, status = rules.apply([measured(gone, result(0.9, 0.85, 0.95))], after)
    assert status == [Applied.IN_EFFECT] and again.equals(after)  # a rerun after a kill: a no-op


@pytest.mark.parametrize("change", [{"config": json.dumps({"xla_cpu_use_thunk_runtime": False})},
                                    {"measured_at": NOW}, {"expires_at": NOW + 40 * DAY}])
def test_an_entry_replaced_since_it_was_decided_on_is_left_alone(change):
    row = entry(1)
    replaced = dataclasses.replace(row, **change)  # deliver or an import wrote the key again meanwhile
    for decision in (measured(row, result(0.9, 0.85, 0.95)), measured(row, result(1.4, 1.2, 1.6))):
        after, status = rules.apply([decision], table(replaced))
        assert status == [Applied.STALE] and by_key(after) == {row.key: replaced}


def test_a_kept_entry_is_refreshed_in_place_once():
    row = entry(1)
    kept = measured(row, result(1.4, 1.2, 1.6))
    after, status = rules.apply([kept], table(row))
    refreshed = by_key(after)[row.key]
    assert status == [Applied.IN_EFFECT]
    assert refreshed == dataclasses.replace(row, provenance=Provenance.VALIDATOR, speedup=1.4, ci_low=1.2,
                                            ci_high=1.6, measured_at=NOW, expires_at=NOW + TTL)
    again, status = rules.apply([kept], after)
    assert status == [Applied.IN_EFFECT] and again.equals(after)
    assert rules.apply([kept], table())[1] == [Applied.STALE]  # removed meanwhile: not brought back


def test_a_rekeyed_entry_is_added_once_beside_the_old_one():
    row = entry(1, OLDER)
    rekeyed = measured(row, result(1.4, 1.2, 1.6), same_compiler=False)
    after, status = rules.apply([rekeyed], table(row))
    rows = by_key(after)
    assert status == [Applied.IN_EFFECT] and rows[row.key] == row
    new = rows[rekeyed.new_key]
    assert (new.env_key, new.config, new.source, new.provenance) == (
        HERE.key(), row.config, row.source, Provenance.VALIDATOR)
    again, status = rules.apply([rekeyed], after)
    assert status == [Applied.IN_EFFECT] and again.equals(after)
    other = dataclasses.replace(new, config=json.dumps({"xla_cpu_use_thunk_runtime": False}),
                                provenance=Provenance.TUNER)
    kept_other, status = rules.apply([rekeyed], table(row, other))
    assert status == [Applied.STALE] and by_key(kept_other)[rekeyed.new_key] == other


def test_a_rekeyed_transfer_stays_a_transfer_from_its_source_key():
    row = dataclasses.replace(entry(1, OLDER), origin=Origin.TRANSFER, transferred_from="ab" * 32 + "/env")
    rekeyed = measured(row, result(1.4, 1.2, 1.6), same_compiler=False)
    assert Decision.from_json(json.loads(json.dumps(rekeyed.to_json()))) == rekeyed  # as journaled
    new = by_key(rules.apply([rekeyed], table(row))[0])[rekeyed.new_key]
    assert (new.origin, new.transferred_from, new.provenance) == (
        Origin.TRANSFER, row.transferred_from, Provenance.VALIDATOR)


def test_an_unmeasured_decision_changes_nothing():
    row = entry(1)
    unmeasured = queued(row).decide(DecisionOutcome.UNMEASURED, "no symbols", StoreChange.NONE, NOW, TTL, MAX_AGE)
    after, status = rules.apply([unmeasured], table(row))
    assert status == [Applied.IN_EFFECT] and after.equals(table(row))


def test_the_audit_row_says_when_a_decision_was_not_applied():
    kept = measured(entry(1), result(1.4, 1.2, 1.6))
    applied = rules.audit_row(kept, "run-1", 7, Applied.IN_EFFECT)
    stale = rules.audit_row(kept, "run-1", 7, Applied.STALE)
    assert applied["store_version"] == 7 and applied["reason"] == kept.reason
    assert stale["store_version"] is None and stale["reason"].endswith("not applied: the entry changed meanwhile")
    assert (applied["dt"], applied["validated_at"]) == (NOW.date(), NOW)
    assert pa.Table.from_pylist([applied, stale], VALIDATIONS.schema).num_rows == 2  # the table's shape
    assert (applied["speedup"], applied["ci_low"], applied["ci_high"]) == (1.4, 1.2, 1.6)
    assert (applied["fleet_speedup"], applied["fleet_ci_low"], applied["fleet_ci_high"]) == (None,) * 3


def test_a_decision_reads_back_as_journaled_and_a_journal_line_from_before_still_reads():
    kept = dataclasses.replace(measured(entry(1), result(1.4, 1.2, 1.6)),
                               fleet_speedup=Interval(1.3, 1.1, 1.5), fleet_tuned_jobs=9)
    written = json.loads(json.dumps(kept.to_json()))
    assert (written["speedup"], written["ci_low"], written["ci_high"]) == (1.4, 1.2, 1.6)
    assert (written["fleet_speedup"], written["fleet_ci_low"], written["fleet_ci_high"]) == (1.3, 1.1, 1.5)
    assert Decision.from_json(written) == kept
    # A line journaled before the speedups were intervals: the same keys, flat.
    old = {**{k: v for k, v in written.items()
              if k not in ("fleet_speedup", "fleet_ci_low", "fleet_ci_high")},
           "speedup": 1.4, "ci_low": 1.2, "ci_high": 1.6}
    read = Decision.from_json(old)
    assert read.speedup == Interval(1.4, 1.2, 1.6) and read.fleet_speedup is None
    # And one from before relaxed configs were measured.
    read = Decision.from_json({k: v for k, v in old.items() if not k.startswith("relaxed_")})
    assert (read.relaxed_config, read.relaxed_outcome, read.relaxed_speedup) == (None, None, None)


# --- validator.rules: an entry's relaxed-numerics config ------------------------------------

RELAXED = json.dumps({"xla_cpu_enable_fast_math": True}, sort_keys=True)


def relaxed_entry(n: int, env: Environment = HERE) -> StoreEntry:
    return dataclasses.replace(entry(n, env), relaxed_config=RELAXED, relaxed_speedup=1.8)


def with_relaxed(decision: Decision, found: EvaluationResult, same_compiler: bool = True) -> Decision:
    """`decision` with its relaxed config decided on `found`, as validator.validate does."""
    return rules.with_relaxed(decision, *rules.relaxed_outcome(found, same_compiler, "new", BAND), found)


def test_a_relaxed_config_is_decided_by_the_strict_ones_rules_and_a_failed_measurement_drops_it():
    def outcome(found: EvaluationResult, same_compiler: bool = True) -> str:
        return rules.relaxed_outcome(found, same_compiler, "new", BAND)[0]

    assert outcome(result(1.9, 1.7, 2.1)) == outcome(result(1.02, 0.98, 1.06)) == "kept"
    assert outcome(result(0.9, 0.85, 0.95)) == outcome(result(identical=True)) == "invalidated"
    assert outcome(result(1.9, 1.7, 2.1, numerics_ok=False)) == "invalidated"
    assert outcome(result(1.9, 1.7, 2.1), False) == "rekeyed"
    assert outcome(result(1.05, 0.95, 1.2), False) == "invalidated"
    failed = failed_result(Failure.CANDIDATE_FAILS, "candidate config does not compile")
    assert rules.relaxed_outcome(failed, True, "new", BAND) == (
        "invalidated", "candidate config does not compile on new")


def test_a_kept_entry_refreshes_its_relaxed_config_or_drops_it_keeping_its_strict_one():
    row = relaxed_entry(1)
    kept = measured(row, result(1.4, 1.2, 1.6))
    assert (kept.relaxed_config, kept.relaxed_outcome, kept.relaxed_speedup) == (RELAXED, None, None)
    faster, slower = with_relaxed(kept, result(1.9, 1.7, 2.1)), with_relaxed(kept, result(0.9, 0.85, 0.95))
    assert (faster.relaxed_outcome, faster.relaxed_speedup, faster.outcome) == ("kept", Interval(1.9, 1.7, 2.1), "kept")
    assert slower.outcome == "kept" and "its relaxed-numerics config dropped: no longer faster" in slower.reason
    refreshed = by_key(rules.apply([faster], table(row))[0])[row.key]
    assert (refreshed.config, refreshed.speedup, refreshed.relaxed_config, refreshed.relaxed_speedup) == (
        row.config, 1.4, RELAXED, 1.9)
    stripped = by_key(rules.apply([slower], table(row))[0])[row.key]
    assert (stripped.config, stripped.speedup, stripped.relaxed_config, stripped.relaxed_speedup) == (
        row.config, 1.4, None, None)
    # Not measured (the run left it): the entry's relaxed config stays as it was.
    assert by_key(rules.apply([kept], table(row))[0])[row.key].relaxed_speedup == 1.8
    # Decided on one relaxed config: an entry whose relaxed config changed since is left alone.
    other = dataclasses.replace(row, relaxed_config=json.dumps({"xla_cpu_enable_fast_min_max": True}))
    assert rules.apply([slower], table(other))[1] == [Applied.STALE]
    # Journaled and audited with its figure.
    assert Decision.from_json(json.loads(json.dumps(faster.to_json()))) == faster
    audit = rules.audit_row(faster, "run-1", 7, Applied.IN_EFFECT)
    assert (audit["relaxed_config"], audit["relaxed_outcome"]) == (RELAXED, "kept")
    assert (audit["relaxed_speedup"], audit["relaxed_ci_low"], audit["relaxed_ci_high"]) == (1.9, 1.7, 2.1)
    assert pa.Table.from_pylist([audit], VALIDATIONS.schema).num_rows == 1


def test_audit_rows_landed_before_the_relaxed_columns_still_read(tmp_path):
    from storage.warehouse import TableSchema

    row = rules.audit_row(measured(entry(1), result(1.4, 1.2, 1.6)), "run-0", 3, Applied.IN_EFFECT)
    version_5 = TableSchema(VALIDATIONS.name, 5, pa.schema([f for f in VALIDATIONS.schema
                                                            if not f.name.startswith("relaxed_")]))
    Warehouse(tmp_path).append(version_5, pa.Table.from_pylist([row], version_5.schema), "run-0")
    read = Warehouse(tmp_path).read(VALIDATIONS).to_pylist()
    assert [(r["speedup"], r["relaxed_outcome"], r["relaxed_speedup"]) for r in read] == [(1.4, None, None)]


def test_a_rekeyed_entry_carries_its_relaxed_config_only_where_that_was_rekeyed_too():
    row = relaxed_entry(1, OLDER)
    rekeyed = measured(row, result(1.4, 1.2, 1.6), same_compiler=False)
    for found, carried in ((result(1.9, 1.7, 2.1), (RELAXED, 1.9)), (result(1.05, 0.95, 1.2), (None, None))):
        after = by_key(rules.apply([with_relaxed(rekeyed, found, same_compiler=False)], table(row))[0])
        assert after[row.key] == row  # the old compiler's entry stays as it was
        assert (after[rekeyed.new_key].relaxed_config, after[rekeyed.new_key].relaxed_speedup) == carried


@pytest.mark.parametrize("recorded, matches", [
    (None, True), (json.dumps({"xla_cpu_use_xnnpack": False}), True),
    ('{"xla_cpu_use_xnnpack":  false}', True), (json.dumps({"xla_cpu_use_xnnpack": True}), False),
    ("not json", False)])
def test_a_fallback_counts_against_the_entry_only_for_its_config(recorded, matches):
    assert rules.config_matches(recorded, CONFIG) is matches


# --- validator.plan.Planner: what a run decides for free, measures, skips ----------------------

@pytest.fixture
def home(tmp_path) -> Home:
    return Home(tmp_path / "home")


def test_expired_comes_before_every_other_rule(home):
    home.graph(1, HERE)
    past_expiry, past_lifetime = entry(1, days_old=40, expires_in=-1), entry(2, days_old=181, expires_in=5)
    home.hits(past_expiry, 2, "fallback", at=NOW - DAY)
    free, queue, _ = home.plan(past_expiry, past_lifetime)
    assert {k: (d.outcome, d.change) for k, d in free.items()} == {
        past_expiry.key: ("expired", StoreChange.REMOVE), past_lifetime.key: ("expired", StoreChange.REMOVE)}
    assert "absolute lifetime" in free[past_lifetime.key].reason and queue == []


def test_the_lifetime_of_a_validator_entry_runs_from_its_first_measurement(home):
    home.graph(1, HERE)
    row = entry(1, days_old=2, provenance=Provenance.VALIDATOR)  # refreshed two days ago
    first = NOW - 181 * DAY
    home.decided(dataclasses.replace(queued(row, origin=first).decide(
        DecisionOutcome.KEPT, "still faster", StoreChange.REFRESH, NOW - 2 * DAY, TTL, MAX_AGE)), "run-0")
    free, queue, _ = home.plan(row)
    assert free[row.key].outcome == "expired" and "absolute lifetime" in free[row.key].reason
    assert free[row.key].origin_at == first.isoformat()


def test_fleet_fallbacks_since_the_last_measurement_invalidate_without_measuring(home):
    for n in (1, 2, 3):
        home.graph(n, HERE)
    failing, earlier, other_config = entry(1), entry(2), entry(3)
    home.hits(failing, 2, "fallback", at=NOW - DAY)
    home.hits(earlier, 1, "fallback", at=earlier.measured_at)  # not after it was measured
    home.hits(other_config, 1, "fallback", config=json.dumps({"xla_cpu_use_xnnpack": True}))
    free, queue, _ = home.plan(failing, earlier, other_config)
    decision = free[failing.key]
    assert (decision.outcome, decision.change) == ("invalidated", StoreChange.REMOVE)
    assert "failed 2 time(s)" in decision.reason and "tuned compile failed" in decision.reason
    assert {q.entry.key for q in queue} == {earlier.key, other_config.key}


def test_what_cannot_be_measured_here_is_left_unmeasured_with_why(home):
    elsewhere = dataclasses.replace(HERE, device_kind="TPU v5p", platform="tpu")
    home.graph(2, HERE, blob=False)
    home.graph(4, elsewhere)
    rows = {"op": entry(1, kind="op"), "no blob": entry(2), "no symbols": entry(3),
            "another machine": entry(4, elsewhere), "unknown environment": entry(5, Environment("cpu", "x", 2, "j"))}
    home.graph(5, HERE)  # symbols, but only in this machine's environment
    free, queue, skipped = home.plan(*rows.values())
    reasons = {name: free[row.key].reason for name, row in rows.items()}
    assert all(free[row.key].outcome == "unmeasured" and free[row.key].change == StoreChange.NONE
               for row in rows.values())
    assert "op-level" in reasons["op"] and "blob" in reasons["no blob"]
    assert "no symbols" in reasons["no symbols"] and "TPU v5p" in reasons["another machine"]
    assert "environment is unknown" in reasons["unknown environment"]
    assert (queue, skipped) == ([], 0)


def test_a_gpu_entry_is_left_unmeasured_on_a_cpu_machine_saying_where_it_runs(home):
    h100 = gpu_environment(GpuDescription("NVIDIA H100 80GB HBM3", "9.0", 1, "0.11.2",
                                          (("jax-cuda13-pjrt", "0.11.2"),)))
    home.graph(1, h100)
    row = entry(1, h100, config=json.dumps({"xla_gpu_enable_triton_gemm": False}))
    free, queue, skipped = home.plan(row)
    decision = free[row.key]
    assert (decision.outcome, decision.change, queue, skipped) == ("unmeasured", StoreChange.NONE, [], 0)
    assert decision.reason == ("measured for gpu NVIDIA H100 80GB HBM3 (compute capability 9.0) x1; "
                               "toolchain default runs on cpu test-cpu x1")


def test_an_unmeasured_entry_is_audited_once_per_compiler_and_reason(home):
    row = entry(3)
    first, _, _ = home.plan(row)
    assert first[row.key].audited
    home.decided(first[row.key], "run-1")
    again, _, _ = home.plan(row)
    assert not again[row.key].audited


@pytest.mark.parametrize("days_old, measured", [(1, True), (0.99, False)])
def test_on_the_same_compiler_only_entries_measured_a_while_ago_are_measured(home, days_old, measured):
    home.graph(1, HERE)
    row = entry(1, days_old=days_old)
    free, queue, skipped = home.plan(row)
    assert free == {} and (len(queue), skipped) == ((1, 0) if measured else (0, 1))
    if measured:
        assert queue[0].same_compiler and queue[0].new_key is None


def test_another_compilers_entry_is_measured_for_a_new_key_once(home):
    home.graph(1, OLDER)
    row = entry(1, OLDER, days_old=0.1)  # however fresh
    _, queue, _ = home.plan(row)
    assert len(queue) == 1 and not queue[0].same_compiler
    assert (queue[0].new_key, queue[0].new_env_key) == (store_key(fp(1), HERE.key()), HERE.key())
    rekeyed = entry(1, days_old=0.5)  # the new key is live already (and fresh: skipped too)
    assert home.plan(row, rekeyed)[1:] == ([], 2)
    home.decided(measured(row, result(1.005, 0.98, 1.03), same_compiler=False), "run-1")
    assert home.plan(row)[1:] == ([], 1)  # decided for this compiler already: not re-keyed


def test_a_partitioned_entry_is_rebuilt_with_its_partitioning_and_rekeyed_in_it(home):
    # A step partitioned over 4 host devices, tuned on the old compiler; the toolchain runs 4.
    sharded = Partitioning(partitions=4, spmd=True, shardy=True, mesh=(("data", 2), ("model", 2)),
                           local_devices=4)
    here = dataclasses.replace(HERE, device_count=4)
    chain = Toolchain("default", "python", "new", here.to_json(), NOW.isoformat())
    older = dataclasses.replace(here, compiler_version="jaxlib-old", partitioning=sharded)
    home.graph(1, older)
    home.graph(2, here.with_partitioning(sharded))
    old, same = entry(1, older), entry(2, here.with_partitioning(sharded))
    free, queue, _ = home.plan(old, same, chain=chain)
    assert free == {} and {q.entry.key: q.same_compiler for q in queue} == {old.key: False, same.key: True}
    [rekeyed] = [q for q in queue if not q.same_compiler]
    # The new key is of this compiler in the entry's own partitioning, not the toolchain's bare one.
    new_env = here.with_partitioning(sharded).key()
    assert (rekeyed.new_env_key, rekeyed.new_key) == (new_env, store_key(fp(1), new_env))
    assert new_env not in (here.key(), older.key())


def test_the_queue_runs_by_fleet_hits_then_least_recently_measured(home):
    rows = [entry(n, days_old=days) for n, days in ((1, 3), (2, 9), (3, 5), (4, 2))]
    for row in rows:
        home.graph(int(row.fingerprint, 16), HERE)
    home.hits(rows[3], 4)
    home.hits(rows[0], 2, at=NOW - 40 * DAY)  # outside the window: not counted
    _, queue, _ = home.plan(*rows, decided=frozenset({rows[2].key}))
    assert [q.entry.key for q in queue] == [rows[3].key, rows[1].key, rows[0].key]
    assert queue[0].base["fleet_hits"] == 4 and queue[1].base["fleet_hits"] == 0
