"""GPU kernels (issue 32): autotune results delivered to a compile through the execution layer,
the kernels tuning kind (which refuses where XLA autotunes nothing), deliver publishing its
results, and the validator's rules for entries that carry them. Tested on XLA:CPU, which takes
the per-fusion directory and reads nothing: what only a GPU shows is benchmarks/gpu_check.py's."""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import pickle
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest

from delivery.deliver import accepted_as_entries
from delivery.store_writer import Store
from execution.autotune.per_fusion_directory import (
    CACHE_DIR_OPTION,
    DUMP_FILE,
    DUMP_OPTION,
    AutotuneOutcome,
    Delivery,
    Uptake,
    process_directory,
)
from execution.autotune.results import AutotuneResults, parse_results
from execution.compile import compile_module, compile_options
from execution.evaluate import REFERENCE_CONFIG, EvaluationResult, compile_with_results, evaluate_built
from execution.measure import MeasureSettings
from execution.session import autotune_exhaustively, compile_serialized, measurable_module, program_key
from hlo.environment import current_environment, environment_from_json, store_key
from hlo.fingerprint import graph_fingerprint
from hlo.module import from_text
from pipelines.cli import main
from storage.store_schema import StoreEntry, entries_table
from tasks.records import MeasureTask
from tuner.kinds import KINDS, check_platform, make_target
from tuner.tables import TUNING_RESULTS
from tuner.target import TuneTarget, graph_subject
from validator import rules
from validator.plan import Queued
from validator.rules import Decision, ResultsCheck, ResultsFate
from validator.toolchains import Toolchain
from validator.validate import ValidateSettings
from vocabulary.decisions import Applied, StoreChange
from vocabulary.interval import Interval
from vocabulary.store import Provenance
from vocabulary.tuning import Kind

DEVICE = "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 3352 GB/s, L2 cache: 50 MB"
MODULE = from_text("""HloModule gemm
ENTRY e {
  a = f32[32,32]{1,0} parameter(0)
  b = f32[32,32]{1,0} parameter(1)
  d = f32[32,32]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[32,32]{1,0} tanh(d)
}
""", "gemm")


def results(device: str = DEVICE, version: int = 24, count: int = 2) -> AutotuneResults:
    """Results of `count` fusions as XLA's dump lays them out, for `device` under key `version`;
    the costliest last."""
    entries = "".join(
        f'results {{ device: {json.dumps(device)} hlo: "fusion {i}" version: {version} '
        f'result {{ run_time {{ nanos: {1000 * (i + 1)} }} triton {{ block_m: 32 block_n: 64 block_k: 32 '
        f'split_k: 1 num_stages: 2 num_warps: 4 num_ctas: 1 }} }} }}\n' for i in range(count))
    return parse_results(f"version: 3\n{entries}")


# --- the execution layer's channel ------------------------------------------------------------

@pytest.mark.xla
def test_a_compile_gets_its_results_in_a_directory_of_the_process_own_and_leaves_nothing():
    given = results(device="../../../escape", count=3)  # the data names no path: files are hashes
    own = process_directory()
    assert own.parent == Path(tempfile.gettempdir()) and own.name.startswith("fdo-autotune-")
    with Delivery(given, own, dump=True) as delivery:
        overrides = dict(delivery.options(compile_options({})).env_option_overrides)
        assert delivery.directory.parent == own
        assert overrides[CACHE_DIR_OPTION] == str(delivery.directory)
        assert overrides[DUMP_OPTION] == str(delivery.directory / DUMP_FILE)
        assert sorted(p.name for p in delivery.directory.iterdir()) == sorted(
            f.cache_file_name() for f in given.fusions)
    # A real XLA:CPU compile: it takes the directory, reads nothing, autotunes and dumps nothing.
    compiled = compile_module(MODULE.proto, {}, given)
    outcome = compiled.autotune
    assert outcome.uptake.delivered == 3 and outcome.uptake.taken in (0, None)
    assert outcome.uptake.autotuned == 0 and outcome.dumped is None and outcome.keying() is None
    assert list(own.iterdir()) == []  # removed after the compile
    assert not (own.parent / "escape").exists()
    # Without results: no directory, and (on XLA:CPU) the very same program.
    plain = compile_module(MODULE.proto, {})
    assert plain.autotune is None
    assert program_key(plain.optimized_proto, (), {}) == program_key(compiled.optimized_proto, (), {})


@pytest.mark.xla
def test_xla_s_exhaustive_autotuning_runs_in_a_directory_of_its_own_and_on_a_cpu_finds_nothing():
    offline = autotune_exhaustively(measurable_module(MODULE.proto), {})
    assert offline.error is None and offline.compile_seconds > 0
    assert offline.autotune.uptake == Uptake(0, offline.autotune.uptake.taken, 0)
    assert offline.autotune.dumped is None and offline.autotune.readable == 0
    assert list(process_directory().iterdir()) == []


@pytest.mark.xla
@pytest.mark.subprocess
def test_results_compiled_in_a_fresh_worker_then_a_built_candidate_timed_against_the_default():
    built = compile_with_results(MODULE, results())
    assert built.error is None and built.executable
    assert built.autotune.uptake.delivered == 2 and built.autotune.uptake.taken in (0, None)
    # A candidate built elsewhere (here: another program) timed in a fresh worker, as the
    # kernels tuner and the validator time the compile with results.
    other = compile_serialized(measurable_module(MODULE.proto), REFERENCE_CONFIG)
    short = MeasureSettings(min_pairs=10, batch_pairs=10, max_pairs=20, max_seconds=0.5)
    measured = evaluate_built(MODULE, other, 1, REFERENCE_CONFIG, settings=short)
    assert measured.error is None and measured.pairs >= 10 and measured.speedups
    assert measured.numerics_ok is not None


# --- the kernels kind -------------------------------------------------------------------------

def test_the_kernels_kind_refuses_where_xla_autotunes_nothing_in_one_line(tmp_path, capsys):
    assert current_environment().platform == "cpu"
    with pytest.raises(ValueError, match=r"^kernel tuning on cpu: XLA:CPU does not autotune"):
        make_target(Kind.KERNELS, graph_subject(MODULE))
    check_platform(Kind.KERNELS, "gpu")  # where it runs: nothing of ours to search
    assert KINDS[Kind.KERNELS].space(graph_subject(MODULE), "gpu").params == ()
    with pytest.raises(ValueError, match="op-level tuning on gpu is not built"):
        check_platform(Kind.OP, "gpu")
    path = tmp_path / "gemm.hlo"
    path.write_text(MODULE.to_text())
    for files in ([], [str(path)]):
        code = main(["--home", str(tmp_path / "home"), "tune", "--kind", "kernels", *files, "--json"])
        out, err = capsys.readouterr()
        assert code == 2 and out == ""
        assert err.splitlines() == ["fdo tune: kernel tuning on cpu: XLA:CPU does not autotune its kernels, "
                                    "so it has no autotune results to tune (a GPU's only)"]


def test_kernel_candidates_are_ranked_graphs_of_gpu_environments_only(tmp_path):
    from ingest.symbols import ingest_symbols
    from ranking.tables import CANDIDATES
    from storage.warehouse import Warehouse

    home = tmp_path / "home"
    here = current_environment()
    gpu = dataclasses.replace(here, platform="gpu", device_kind="NVIDIA H100 (compute capability 9.0)")
    keys = {}
    for name, environment in (("cpu", here), ("gpu", gpu)):
        dump = tmp_path / name
        dump.mkdir()
        (dump / "gemm.hlo").write_text(MODULE.to_text())
        (dump / "fdo-environment.json").write_text(json.dumps(environment.to_json()))
        keys[name] = environment_from_json(environment.to_json()).key()
    ingest_symbols([tmp_path / "cpu", tmp_path / "gpu"], home)
    fingerprint = graph_fingerprint(MODULE)
    rows = [{"dt": datetime.date.today(), "kind": "graph", "fingerprint": fingerprint, "env_key": keys[name],
             "graph_fingerprint": fingerprint, "chip_seconds": 1.0, "share": 0.5, "rank": rank}
            for rank, name in ((1, "cpu"), (2, "gpu"))]
    Warehouse(home).append(CANDIDATES, pa.Table.from_pylist(rows, CANDIDATES.schema), "test")
    both = frozenset(keys.values())  # a cluster whose nodes offer both
    kernels = KINDS[Kind.KERNELS].candidates(home, 5, False, both).tunable
    assert [c.env_key for c in kernels] == [keys["gpu"]]
    assert KINDS[Kind.KERNELS].candidates(home, 5, False, None).tunable == []  # this CPU: none
    graphs = KINDS[Kind.GRAPH].candidates(home, 5, False, both).tunable
    assert [c.env_key for c in graphs] == [keys["cpu"], keys["gpu"]]


@pytest.mark.xla
@pytest.mark.subprocess
def test_a_kernels_task_where_xla_autotunes_nothing_lands_a_result_without_results(tmp_path):
    from storage.warehouse import Warehouse
    from tuner.kernels import run_kernels_task
    from tuner.space import SearchSpace
    from tuner.tune import TuneSettings

    # The task itself, past the kind's refusal: on a CPU, XLA's exhaustive compile dumps nothing.
    target = TuneTarget(MODULE, graph_fingerprint(MODULE), Kind.KERNELS, SearchSpace(()), "gemm")
    settings = TuneSettings(budget_evals=KINDS[Kind.KERNELS].budget_evals, strategy=KINDS[Kind.KERNELS].strategy)
    result = run_kernels_task(target, tmp_path, settings)
    assert (result.kind, result.accepted, result.config, result.autotune_results) == (Kind.KERNELS, False, {}, None)
    assert (result.status, result.reason) == (
        "no significant gain", "XLA autotuned no fusion of this graph (it dumped no results)")
    assert [p.phase for p in result.phases] == ["search"] and result.phases[0].compiles == 1
    (row,) = Warehouse(tmp_path).read(TUNING_RESULTS).to_pylist()
    assert (row["kind"], row["task_id"], row["autotune_results"]) == ("kernels", result.task_id, None)
    assert run_kernels_task(target, tmp_path, settings) == result  # finished: landed again, not run


# --- deliver ----------------------------------------------------------------------------------

def _tuning_row(task_id: str, kind: str, fingerprint: str, autotune_results: str | None) -> dict:
    return {"dt": datetime.date(2026, 11, 24), "task_id": task_id, "kind": kind, "fingerprint": fingerprint,
            "env_key": "e" * 32, "config": "{}", "speedup": 1.2, "ci_low": 1.1, "ci_high": 1.3,
            "numerics_ok": True, "compiler_version": "jaxlib-0.11.2", "accepted": True,
            "status": "accepted", "strategy": "exhaustive", "evaluations": 1, "measured": 1,
            "autotune_results": autotune_results}


def test_deliver_publishes_a_kernels_result_with_its_autotune_results_and_refuses_bad_ones(tmp_path, caplog):
    good = results().to_text()
    bad = 'version: 3\nresults { device: "d" hlo: "x" version: 1 result { run_time { nanos: 5 } } }\n'
    table = pa.Table.from_pylist([_tuning_row("kernels-ok", "kernels", "a" * 32, good),
                                  _tuning_row("kernels-bad", "kernels", "b" * 32, bad),
                                  _tuning_row("flags", "graph", "c" * 32, None),
                                  _tuning_row("an-op", "op", "d" * 32, None)], TUNING_RESULTS.schema)
    with caplog.at_level(logging.WARNING, logger="fleet_fdo.deliver"):
        entries = accepted_as_entries(table)
    assert entries.column("source").to_pylist() == ["kernels-ok", "flags"]
    assert set(entries.column("kind").to_pylist()) == {"graph"}  # each applies to a whole compile
    assert entries.column("autotune_results").to_pylist() == [good, None]
    assert [r.getMessage() for r in caplog.records] == [
        "deliver: tuning result kernels-bad: result 0: its result chose no config; not delivered"]
    store = Store(tmp_path)
    store.publish(entries, None, "test")  # the store's gate passes them
    live = {row["source"]: row for row in store.entries().to_pylist()}
    assert parse_results(live["kernels-ok"]["autotune_results"]) == results()
    assert json.loads(live["kernels-ok"]["config"]) == {}


# --- the validator ----------------------------------------------------------------------------

NOW = datetime.datetime(2026, 11, 24, 12, tzinfo=datetime.UTC)
TTL, MAX_AGE = datetime.timedelta(days=30), datetime.timedelta(days=180)


def _queued(same_compiler: bool, stored: AutotuneResults) -> Queued:
    entry = StoreEntry(key="k" * 32, fingerprint="f" * 32, env_key="e" * 32, kind="graph", config="{}",
                       source="kernels-task", speedup=1.2, ci_low=1.1, ci_high=1.3,
                       measured_at=NOW - datetime.timedelta(days=3), expires_at=NOW + datetime.timedelta(days=20),
                       provenance=Provenance.TUNER, compiler_version="jaxlib-0.11.2",
                       autotune_results=stored.to_text())
    base = {"key": entry.key, "fingerprint": entry.fingerprint, "env_key": entry.env_key,
            "kind": "graph", "config": "{}", "source": entry.source, "toolchain": "default",
            "compiler_version": "jaxlib-0.12.0", "fleet_hits": 0, "age_days": 3.0,
            "decided_at": NOW.isoformat(), "origin_at": entry.measured_at.isoformat(),
            "entry_measured_at": entry.measured_at.isoformat(),
            "entry_expires_at": entry.expires_at.isoformat()}
    new_key = None if same_compiler else store_key(entry.fingerprint, "n" * 32)
    return Queued(entry, base, "blob", same_compiler, new_key, None if same_compiler else "n" * 32,
                  entry.measured_at, (0,), results=stored)


def _measured(speedup: float, low: float, high: float) -> EvaluationResult:
    return EvaluationResult(speedup=Interval(speedup, low, high), significant=low > 1.01, numerics_ok=True,
                            identical_program=False, compile_seconds=1.0, default_compile_seconds=1.0,
                            pairs=40, speedups=[speedup])


def _decide(queued: Queued, check: ResultsCheck, result: EvaluationResult | None) -> Decision:
    return queued.measured(result, "jaxlib-0.12.0", 0.01, NOW, TTL, MAX_AGE, check)


def test_results_xla_takes_are_kept_on_the_measurement_and_carried_on():
    stored = results()
    check = ResultsCheck(stored, Uptake(2, 2, 0))
    assert check.fate == ResultsFate.TAKEN
    kept = _decide(_queued(True, stored), check, _measured(1.2, 1.1, 1.3))
    assert (kept.outcome, kept.change, kept.autotune_fate) == ("kept", StoreChange.REFRESH, ResultsFate.TAKEN)
    assert kept.reason.startswith("still faster on jaxlib-0.12.0: 1.200x")
    assert "2 of its 2 autotune results taken" in kept.reason
    slower = _decide(_queued(True, stored), check, _measured(0.9, 0.85, 0.95))
    assert (slower.outcome, slower.change, slower.autotune_results) == ("invalidated", StoreChange.REMOVE, None)
    # No access times: the measurement alone decides, and the reason says so.
    unknown = _decide(_queued(True, stored), ResultsCheck(stored, Uptake(2, None, 0)), _measured(1.2, 1.1, 1.3))
    assert unknown.outcome == "kept" and unknown.autotune_fate == ResultsFate.UNKNOWN
    assert "unknown how many (no access times here) of its 2" in unknown.reason
    # Journaled and read back as typed as it was.
    assert Decision.from_json(json.loads(json.dumps(kept.to_json()))) == kept


def test_results_xla_does_not_take_invalidate_the_entry_without_a_measurement():
    stored = results()
    check = ResultsCheck(stored, Uptake(2, 0, 2))
    assert check.fate == ResultsFate.NOT_TAKEN
    for same_compiler, change in ((True, StoreChange.REMOVE), (False, StoreChange.NONE)):
        decision = _decide(_queued(same_compiler, stored), check, None)
        assert (decision.outcome, decision.change, decision.speedup) == ("invalidated", change, None)
        assert decision.reason == ("XLA does not take its autotune results on jaxlib-0.12.0: 0 of its 2 autotune "
                                   "results taken (the fusions they were made for are not this compile's)")
    # Some taken is not all: the claim was measured with every one.
    assert ResultsCheck(stored, Uptake(2, 1, 1)).fate == ResultsFate.NOT_TAKEN


def test_results_xla_keys_otherwise_are_relabelled_and_re_keyed_when_they_still_measure_faster():
    stored = results(version=24)
    # XLA's dump of the compile they were delivered to keys its results under version 25.
    dumped = results(version=25, count=5)
    outcome = AutotuneOutcome(Uptake(2, 0, 5), dumped, readable=5, named=5)
    relabelled = rules.relabelled(stored, outcome)
    assert relabelled == stored.for_device(DEVICE, 25)
    assert rules.relabelled(stored, AutotuneOutcome(Uptake(2, 2, 0), stored, 2, 2)) is None  # taken
    assert rules.relabelled(stored, AutotuneOutcome(Uptake(2, 0, 2), None, 0, 0)) is None  # no dump
    assert rules.relabelled(stored, AutotuneOutcome(Uptake(2, 0, 2), stored, 2, 2)) is None  # same key
    check = ResultsCheck(relabelled, Uptake(2, 2, 0), stored.keying())
    assert check.fate == ResultsFate.REKEYED
    # On the entry's own compiler: the same key, its results replaced by the relabelled ones.
    same = _decide(_queued(True, stored), check, _measured(1.2, 1.1, 1.3))
    assert (same.outcome, same.change, same.new_key) == ("rekeyed", StoreChange.REFRESH, None)
    assert "relabelled from " in same.reason and "key version 24 to " in same.reason
    live = entries_table([_queued(True, stored).entry])
    applied, statuses = rules.apply([same], live)
    (row,) = applied.to_pylist()
    assert statuses == [Applied.IN_EFFECT] and row["key"] == "k" * 32
    assert parse_results(row["autotune_results"]) == relabelled
    # On another compiler: a new entry under the new key, carrying the relabelled results.
    other = _decide(_queued(False, stored), check, _measured(1.2, 1.1, 1.3))
    assert (other.outcome, other.change) == ("rekeyed", StoreChange.ADD)
    added = {r["key"]: r for r in rules.apply([other], live)[0].to_pylist()}
    assert parse_results(added[other.new_key]["autotune_results"]) == relabelled
    assert added["k" * 32]["autotune_results"] == stored.to_text()  # the old entry stays as it was
    # Relabelled and taken, but no longer faster: invalidated.
    slower = _decide(_queued(True, stored), check, _measured(0.9, 0.85, 0.95))
    assert slower.outcome == "invalidated" and slower.autotune_fate == ResultsFate.REKEYED


def test_a_measure_task_carries_the_entry_s_results_to_the_node_that_measures():
    stored = results()
    chain = Toolchain("default", sys.executable, "0.11.2", current_environment().to_json(), NOW.isoformat())
    task = MeasureTask("entry k", _queued(True, stored), chain, chain.env().key(), ValidateSettings(workers=1))
    back = pickle.loads(pickle.dumps(task))
    assert back == task and back.queued.results == stored and back.key == task.key
