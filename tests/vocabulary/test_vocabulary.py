"""The vocabulary's enums are the strings the loop wrote before they were enums: what earlier
versions wrote (Parquet rows, spool lines, journals) reads back as their members, and what is
written with the members is byte for byte what was written with the strings, but for the values
respelled in the one style (`vocabulary.closed_set`) and the one renamed (`Applied`'s "applied"),
whose old spelling reads as the member."""

from __future__ import annotations

import datetime
import importlib
import io
import json
import pkgutil
import re
from dataclasses import dataclass
from enum import StrEnum

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import vocabulary
from ingest.hits import parse_spool
from ingest.ran_tuned import hit_ran_tuned, ran_tuned, ran_tuned_sql, sql_list
from ingest.tables import GRAPH_RUNS, HITS
from storage.home_factory import open_home
from storage.warehouse import TableSchema, Warehouse
from tuner.tables import TUNING_RESULTS, results_of
from validator import rules
from validator.run import Publication
from validator.signals import fallbacks, fleet_hits
from validator.tables import VALIDATIONS
from vocabulary.closed_set import ClosedSet
from vocabulary.decisions import Applied, DecisionOutcome, StoreChange
from vocabulary.failures import Failure, Fault
from vocabulary.flags import Channel, FlagType
from vocabulary.hits import RAN_TUNED, SERVED, TRIED, HitOutcome, run_ran_tuned
from vocabulary.interval import Interval, as_flat, from_flat
from vocabulary.measure import MeasureMode
from vocabulary.store import Provenance
from vocabulary.tasks import TaskStatus
from vocabulary.tuning import KeyDecision, Kind, Origin, Phase, StopReason, TrialOutcome, Verdict

UTC = datetime.UTC
NOW = datetime.datetime(2026, 11, 20, 12, tzinfo=UTC)
KEY, OTHER = "ab" * 16, "cd" * 16

# Each closed set as the code before the vocabulary spelled it (tuples, Literals, constants,
# the enums of the packages before they moved to the vocabulary).
WRITTEN_BEFORE: dict[type[StrEnum], tuple[str, ...]] = {
    HitOutcome: ("applied", "holdout", "miss", "fallback", "refused", "no store", "error"),
    DecisionOutcome: ("kept", "rekeyed", "invalidated", "expired", "unmeasured"),
    StoreChange: ("refresh", "remove", "add", "none"),
    Applied: ("applied", "stale"),
    Kind: ("graph", "op", "kernels"),
    Verdict: ("accepted", "no significant gain", "numerics differ", "verification failed",
              "default fails"),
    Origin: ("search", "transfer", "shared"),
    KeyDecision: ("faster", "defaults"),
    TrialOutcome: ("measured", "duplicate", "identical", "failed"),
    Phase: ("search", "race", "prune", "verify"),
    StopReason: ("budget", "stalled", "time", "exhausted"),
    Fault: ("error", "crash", "oom", "timeout"),
    Failure: ("default_fails", "candidate_fails", "worker_error", "worker_crash", "worker_oom",
              "worker_timeout"),
    FlagType: ("bool", "int", "float", "enum", "repeated_enum", "string", "placement"),
    Channel: ("option", "backend_extra", "placement", "build_option"),
    Provenance: ("tuner", "validator", "import"),
    MeasureMode: ("whole", "per-device"),
    TaskStatus: ("done", "failed", "unroutable", "not started"),
}
# The values written since in another spelling: respelled in the one style (spaces between
# words, vocabulary.closed_set), or renamed (Applied's "applied": HitOutcome's alone now).
WRITTEN_NOW = {
    "default_fails": "default fails", "candidate_fails": "candidate fails", "worker_error": "worker error",
    "worker_crash": "worker crash", "worker_oom": "worker oom", "worker_timeout": "worker timeout",
    "repeated_enum": "repeated enum", "backend_extra": "backend extra", "build_option": "build option",
    "per-device": "per device", "applied": "in effect",
}


def test_each_closed_set_reads_the_strings_written_before_and_json_holds_them_as_they_were():
    for enum, strings in WRITTEN_BEFORE.items():
        now = tuple(WRITTEN_NOW.get(s, s) if enum is not HitOutcome else s for s in strings)
        assert tuple(enum) == now, enum  # members equal their strings, in the old order
        assert [enum(s) for s in strings] == [enum(s) for s in now] == list(enum)  # the old spellings read
        assert json.dumps({m: m for m in enum}) == json.dumps({s: s for s in now})
    assert (RAN_TUNED, TRIED, SERVED) == (("applied",), ("applied", "fallback"), ("applied", "holdout"))
    assert [Failure.of_fault(f) for f in Fault] == ["worker error", "worker crash", "worker oom", "worker timeout"]
    assert [f.died for f in Fault] == [False, True, True, True]


def _vocabulary_enums() -> list[type[StrEnum]]:
    """Every enum the vocabulary's modules declare."""
    found = []
    for module in pkgutil.iter_modules(vocabulary.__path__):
        loaded = importlib.import_module(f"vocabulary.{module.name}")
        found += [value for value in vars(loaded).values() if isinstance(value, type)
                  and issubclass(value, StrEnum) and value is not ClosedSet and value.__module__ == loaded.__name__]
    return found


# Values that two closed sets share, each meaning one thing in both.
SHARED = {
    "default fails": "a task's verdict (Verdict) and its evaluation's failure (Failure): the default "
                     "config does not compile or run",
    "search": "where a config came from (Origin) and the phase that found it (Phase): the task's search",
    "placement": "a flag's type (FlagType) and how it reaches XLA (Channel): a library routing move",
    "failed": "a trial (TrialOutcome) and a task (TaskStatus): it did not run to its result",
    "error": "the hook (HitOutcome) and a job in its worker (Fault): our code raised where it ran",
}


def test_every_closed_set_is_spelled_one_way_and_a_value_means_one_thing():
    """Each enum of the vocabulary is a ClosedSet, its values lower-case words with single
    spaces between them; a value two of them share is one of SHARED, which says why it means
    one thing in both (Applied's "applied" was renamed: HitOutcome's is the warehouse's)."""
    enums = _vocabulary_enums()
    assert set(WRITTEN_BEFORE) == set(enums)  # each is listed above, with what earlier versions wrote
    owners: dict[str, list[str]] = {}
    for enum in enums:
        assert issubclass(enum, ClosedSet), enum
        for member in enum:
            assert re.fullmatch(r"[a-z0-9]+( [a-z0-9]+)*", member), (enum, member)
            owners.setdefault(member, []).append(enum.__name__)
    assert {value for value, names in owners.items() if len(names) > 1} == set(SHARED)
    # Underscores and hyphens for the spaces read as the member; an unknown value still refuses.
    assert HitOutcome("no_store") is HitOutcome.NO_STORE and MeasureMode("per-device") is MeasureMode.PER_DEVICE
    assert Applied("applied") is Applied.IN_EFFECT
    for enum, wrong in ((Kind, "graphs"), (Applied, "apply"), (MeasureMode, "per_devices")):
        with pytest.raises(ValueError):
            enum(wrong)


def _hit_line(outcome: str, key: str, minutes: int) -> str:
    """A spool line as the hook wrote it before its outcome was an enum."""
    return json.dumps({"at": (NOW - datetime.timedelta(minutes=minutes)).isoformat(), "job_id": "job-1",
                       "key": key, "fingerprint": "f" * 32, "env_key": "e" * 32, "module_name": "m",
                       "outcome": outcome, "kind": "graph", "config_version": 3,
                       "config": "{}" if outcome in ("applied", "fallback") else None,
                       "reason": "tuned compile failed: x" if outcome == "fallback" else None,
                       "hook_seconds": 0.01, "compile_seconds": 1.5})


def test_hits_and_runs_written_before_read_as_outcomes_and_ran_tuned_counts_what_it_counted(tmp_path):
    home = open_home(tmp_path)
    lines = [_hit_line(outcome, KEY if outcome in ("applied", "fallback") else OTHER, i)
             for i, outcome in enumerate(WRITTEN_BEFORE[HitOutcome])]
    good, bad, reasons = parse_spool("host-1-0.jsonl", ("\n".join(lines) + "\n").encode())
    assert not bad and not reasons and len(good) == len(WRITTEN_BEFORE[HitOutcome])
    warehouse = Warehouse(home)
    warehouse.append(HITS, pa.Table.from_pylist(good, HITS.schema), "hits-old")
    runs = [{"dt": NOW.date(), "job_id": f"job-{i}", "team": "t", "fingerprint": "f" * 32,
             "env_key": "e" * 32, "device_kind": "cpu", "compiler_version": "jaxlib-old", "chips": 1,
             "executions": 10, "chip_seconds": 2.0, "opted_out": False, "config_key": key,
             "config_version": 3 if key else None, "expected_speedup": 1.2 if key else None,
             "holdout": holdout}
            for i, (key, holdout) in enumerate([(KEY, False), (KEY, True), (KEY, None), (None, None)])]
    warehouse.append(GRAPH_RUNS, pa.Table.from_pylist(runs, GRAPH_RUNS.schema), "runs-old")

    hits = warehouse.read(HITS).sort_by([("at", "descending")])
    assert [HitOutcome(o) for o in hits.column("outcome").to_pylist()] == list(HitOutcome)
    assert hit_ran_tuned(hits).to_pylist() == [o is HitOutcome.APPLIED for o in HitOutcome]
    # A holdout run (true) ran the defaults; a run that names its entry without saying ran it.
    graph_runs = warehouse.read(GRAPH_RUNS).sort_by("job_id")
    assert ran_tuned(graph_runs).to_pylist() == [True, False, True, False]
    # The Arrow filters and the SQL conditions (ingest.ran_tuned) are the vocabulary's rule.
    assert [run_ran_tuned(key, holdout) for key, holdout in zip(graph_runs.column("config_key").to_pylist(),
                                                                 graph_runs.column("holdout").to_pylist())] == [
        True, False, True, False]
    op_runs = graph_runs.drop_columns(["holdout"])
    assert ran_tuned(op_runs).to_pylist() == [run_ran_tuned(k) for k in op_runs.column("config_key").to_pylist()]
    sql = duckdb.connect()
    assert [r[0] for r in sql.sql(f"select {ran_tuned_sql()} from graph_runs").fetchall()] == [True, False, True, False]
    assert [r[0] for r in sql.sql(f"select {ran_tuned_sql(holdout=False)} from op_runs").fetchall()] == [
        True, True, True, False]
    assert [r[0] for r in sql.sql(f"select outcome in {sql_list(RAN_TUNED)} from hits").fetchall()] == (
        hit_ran_tuned(hits).to_pylist())
    # The validator's signals read them as before: the applied compile and two tuned runs are
    # hits of KEY; the fallback is its fallback.
    assert fleet_hits(home, NOW) == {KEY: 3}
    assert [f.reason for f in fallbacks(home)[KEY]] == ["tuned compile failed: x"]


def _decision_json() -> dict:
    """A decision as the validator's journal held it before its outcome and change were enums."""
    return {"key": KEY, "fingerprint": "f" * 32, "env_key": "e" * 32, "kind": "graph", "config": "{}",
            "source": None, "outcome": "kept", "reason": "still faster", "change": "refresh",
            "toolchain": "default", "compiler_version": "jaxlib-old", "fleet_hits": 4, "age_days": 3.0,
            "decided_at": NOW.isoformat(), "origin_at": NOW.isoformat(), "entry_measured_at": NOW.isoformat(),
            "entry_expires_at": NOW.isoformat(), "expires_at": NOW.isoformat(),
            "speedup": 1.2, "ci_low": 1.1, "ci_high": 1.3, "numerics_ok": True}


def _parquet(rows: list[dict], schema: pa.Schema) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema), sink)
    return sink.getvalue()


def test_a_journaled_decision_reads_as_members_and_its_audit_row_is_the_bytes_it_was():
    written = _decision_json()
    decision = rules.Decision.from_json(written)
    assert decision.outcome is DecisionOutcome.KEPT and decision.change is StoreChange.REFRESH
    assert json.dumps(decision.to_json()) == json.dumps(rules.Decision.from_json(decision.to_json()).to_json())
    assert {k: decision.to_json()[k] for k in ("outcome", "change")} == {"outcome": "kept", "change": "refresh"}
    row = rules.audit_row(decision, "run-1", 7, Applied("applied"))  # as an old journal holds it
    as_strings = {**row, "outcome": "kept"}
    assert _parquet([row], VALIDATIONS.schema) == _parquet([as_strings], VALIDATIONS.schema)
    assert "not applied" in rules.audit_row(decision, "run-1", 7, Applied("stale"))["reason"]
    # A run's journal written before Applied's value was "in effect" reads; one written now holds it.
    published = Publication.from_json({"version": 7, "published": True, "statuses": ["applied", "stale"]})
    assert published.statuses == (Applied.IN_EFFECT, Applied.STALE)
    assert json.dumps(published.to_json()["statuses"]) == '["in effect", "stale"]'


def test_tuning_results_written_before_read_as_kinds_and_verdicts(tmp_path):
    warehouse = Warehouse(tmp_path)
    rows = [{"dt": NOW.date(), "task_id": f"t{i}", "kind": kind, "fingerprint": "f" * 32, "env_key": "e",
             "strategy": "evolution", "config": "{}", "compiler_version": "jaxlib-old", "accepted": False,
             "status": status, "evaluations": 3, "measured": 2}
            for i, (kind, status) in enumerate([("graph", "accepted"), ("op", "no significant gain"),
                                                ("kernels", "default fails: does not compile: x")])]
    # Rows as earlier versions wrote them: the status a string (a verdict, or a verdict, a colon
    # and the reason), beside `accepted`, in a file of schema version 1.
    old = TableSchema(TUNING_RESULTS.name, 1, TUNING_RESULTS.schema)
    warehouse.append(old, pa.Table.from_pylist(rows, old.schema), "task-old")
    read = warehouse.read(TUNING_RESULTS).sort_by("task_id").to_pylist()
    assert [Kind(r["kind"]) for r in read] == [Kind.GRAPH, Kind.OP, Kind.KERNELS]
    assert [Verdict.parse(r["status"]) for r in read] == [
        (Verdict.ACCEPTED, ""), (Verdict.NO_GAIN, ""), (Verdict.DEFAULT_FAILS, "does not compile: x")]
    # The measure mode, as version 5 spelled it, reads as its member (null, before it: whole).
    fifth = TableSchema(TUNING_RESULTS.name, 5, TUNING_RESULTS.schema)
    warehouse.append(fifth, pa.Table.from_pylist([{**rows[0], "task_id": "t3", "measure_mode": "per-device"}],
                                                 fifth.schema), "task-per-device")
    records = results_of(warehouse.read(TUNING_RESULTS).sort_by("task_id"))
    assert [r.measure_mode for r in records] == [MeasureMode.WHOLE] * 3 + [MeasureMode.PER_DEVICE]


@dataclass(frozen=True)
class _Figures:
    name: str
    speedup: Interval | None
    fleet_speedup: Interval | None = None


def test_a_records_intervals_travel_as_flat_keys_and_come_back_whole():
    figures = _Figures("a", Interval(1.2, 1.1, 1.3), None)
    flat = as_flat(figures, "", "fleet_")
    assert flat == {"name": "a", "speedup": 1.2, "ci_low": 1.1, "ci_high": 1.3,
                    "fleet_speedup": None, "fleet_ci_low": None, "fleet_ci_high": None}
    assert _Figures(**from_flat(json.loads(json.dumps(flat)), "", "fleet_")) == figures
    # Without prefixes, the one `speedup`; another interval stays a field as `asdict` has it.
    both = _Figures("a", None, Interval(0.9, 0.8, 1.0))
    assert as_flat(both) == {"name": "a", "speedup": None, "ci_low": None, "ci_high": None,
                             "fleet_speedup": {"estimate": 0.9, "low": 0.8, "high": 1.0}}
    assert from_flat({"name": "b"}) == {"name": "b", "speedup": None}  # written before it had one
