"""The configurations validator: real re-measurements keep, re-key, invalidate and expire store
entries; a second jaxlib in its own venv; concurrent deliver; kill -9 and resume; the job."""

from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
import threading
from pathlib import Path

import jax
import pyarrow as pa
import pytest

from delivery.deliver import deliver
from delivery.store_writer import Store
from execution.evaluate import EvaluationResult, median_of
from hlo.environment import current_environment, store_key
from ingest.tables import HITS
from storage.blobs import BlobStore
from storage.home_factory import open_home
from storage.journal import read_records
from storage.store_schema import StoreEntry
from storage.warehouse import Warehouse
from tests.support.processes import kill_9_once_journaled
from tests.support.serving import fdo
from tests.support.url_home import UrlFileSystem, url_of
from tests.support.validator_graphs import NO_YNN_REDUCE, SLOWER, entry, ingest_graph, publish
from tuner.tables import TUNING_RESULTS
from validator import rules
from validator.report import outcomes_over_time, staleness, validator_hit_share
from validator.run import Run, run_file
from validator.tables import VALIDATIONS
from validator.toolchains import Registry, RegistryUnreachable, build_venv, cache_dir, cached_venv_dir, venv_dir
from validator.validate import MEASURE_SETTINGS, ValidateSettings, validate
from vocabulary.decisions import DecisionOutcome, StoreChange
from vocabulary.interval import Interval

OLD_JAX = "0.10.0"  # a second compiler: YNN's reductions apply there only to some shapes
# Relaxed-numerics configs for the entries whose strict config holds up: one that compiles to the
# defaults' very program (fast math is off by default): no gain left, on any CPU; and the strict
# config with fast min/max, which these sums (no min or max) leave as fast as the strict one.
RELAXED_NOTHING = {"xla_cpu_enable_fast_math": False}
RELAXED_FAST = {**NO_YNN_REDUCE, "xla_cpu_enable_fast_min_max": True}
UTC = datetime.UTC


def fdo_json(home: Path, *args: str) -> dict:
    done = fdo(home, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def hit_rows(key: str, n: int, outcome: str = "applied", reason: str | None = None,
             config: str | None = None, version: int = 1) -> list[dict]:
    now = datetime.datetime.now(UTC)
    return [{"dt": now.date(), "at": now, "job_id": f"job-{i}", "key": key, "fingerprint": "f" * 32,
             "env_key": "e" * 32, "module_name": "m", "outcome": outcome, "kind": "graph",
             "config_version": version, "expected_speedup": 2.0, "config": config,
             "optimized_fingerprint": None, "reason": reason, "hook_seconds": 0.001,
             "compile_seconds": 0.1} for i in range(n)]


def land_hits(home: Path, rows: list[dict], part: str) -> None:
    Warehouse(home).append(HITS, pa.Table.from_pylist(rows, HITS.schema), part)


def land_results(home: Path, rows: list[dict], part: str) -> None:
    Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist(rows, TUNING_RESULTS.schema), part)


def live(home: Path) -> dict[str, dict]:
    return {row["key"]: row for row in Store(home).entries().to_pylist()}


def same(found: dict, written: dict) -> bool:
    """Whether a live row is the entry `written` held (columns added since read null)."""
    return StoreEntry.from_row(found) == StoreEntry.from_row(written)


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """A store with one entry for every outcome, validated once on this machine's compiler."""
    home = tmp_path_factory.mktemp("validated") / "home"
    fast = ingest_graph(home, "narrow_sum")
    slow = ingest_graph(home, "row_sq_sum")
    old = ingest_graph(home, "column_sum", compiler_version="jaxlib-0.0.1-older")
    flaky = ingest_graph(home, "narrow_sum_b")
    rows = {
        "kept": entry(*fast, NO_YNN_REDUCE, source="t-fast", relaxed=RELAXED_NOTHING),
        "slower": entry(*slow, SLOWER, source="t-slow"),
        "other_compiler": entry(*old, NO_YNN_REDUCE, compiler_version="jaxlib-0.0.1-older", source="t-old",
                                relaxed=RELAXED_FAST),
        "fallback": entry(*flaky, NO_YNN_REDUCE, source="t-flaky"),
        "expired": entry("1" * 32, fast[1], NO_YNN_REDUCE, days_old=40, expires_in_days=-10, source="t-exp"),
        "too_old": entry("2" * 32, fast[1], NO_YNN_REDUCE, days_old=200, expires_in_days=5, source="t-old2"),
        "no_symbols": entry("3" * 32, fast[1], NO_YNN_REDUCE, source="t-nosym"),
    }
    before = publish(home, list(rows.values()))
    keys = {name: row["key"] for name, row in rows.items()}
    land_hits(home, hit_rows(keys["kept"], 5) + hit_rows(keys["slower"], 3)
              + hit_rows(keys["fallback"], 2, "fallback", "INTERNAL: tuned compile failed",
                         config=rows["fallback"]["config"]), "fleet")
    report = fdo_json(home, "validate", "--once", "--max-seconds", "2")
    return {"home": home, "rows": rows, "keys": keys, "before": before, "report": report}


@pytest.mark.slow
@pytest.mark.subprocess
def test_every_outcome_after_real_measurement(validated):
    home, rows, keys, report = validated["home"], validated["rows"], validated["keys"], validated["report"]
    assert {k: report[k] for k in ("kept", "rekeyed", "invalidated", "expired", "unmeasured")} == {
        "kept": 1, "rekeyed": 1, "invalidated": 2, "expired": 2, "unmeasured": 1}, report
    assert report["version"] == validated["before"] + 1 and report["published"]
    after = live(home)
    # Still faster: kept, re-measured now, by the validator, with a fresh expiry.
    kept = after[keys["kept"]]
    assert kept["provenance"] == "validator" and kept["speedup"] > 1.01, kept
    audit = {r["key"]: r for r in Warehouse(home).read(VALIDATIONS).to_pylist()}
    # Decided on the median of three fresh workers, as the tuner verifies: one process can draw
    # a slow library kernel and would remove a good config on its own.
    assert "the median of 3 workers" in audit[keys["kept"]]["reason"], audit[keys["kept"]]
    assert kept["measured_at"] > rows["kept"]["measured_at"] + datetime.timedelta(days=2)
    assert kept["expires_at"] - kept["measured_at"] == datetime.timedelta(days=30)
    # Its relaxed config, measured in the same run, compiles to the defaults' program: dropped,
    # and the entry keeps its strict config.
    assert (kept["relaxed_config"], kept["relaxed_speedup"]) == (None, None), kept
    assert kept["config"] == rows["kept"]["config"]
    relaxed = audit[keys["kept"]]
    assert (relaxed["relaxed_config"], relaxed["relaxed_outcome"]) == (rows["kept"]["relaxed_config"], "invalidated")
    assert "its relaxed-numerics config dropped: compiles to the same program as the defaults" in relaxed["reason"]
    # Slower, reported failing in the fleet, expired, past its absolute lifetime: gone.
    for name in ("slower", "fallback", "expired", "too_old"):
        assert keys[name] not in after, name
    # Another compiler's entry: re-keyed for this one, the old key stays until it expires.
    assert same(after[keys["other_compiler"]], rows["other_compiler"])
    new_key = store_key(rows["other_compiler"]["fingerprint"], current_environment().key())
    rekeyed = after[new_key]
    assert (rekeyed["config"], rekeyed["source"], rekeyed["provenance"]) == (
        rows["other_compiler"]["config"], "t-old", "validator")
    assert rekeyed["compiler_version"] == current_environment().compiler_version, rekeyed
    assert rekeyed["ci_low"] > 1.01, rekeyed
    # Its relaxed config, as fast as the strict one here, is re-keyed with it, at its new figure.
    assert rekeyed["relaxed_config"] == rows["other_compiler"]["relaxed_config"], rekeyed
    assert rekeyed["relaxed_speedup"] > 1.01 and rekeyed["relaxed_speedup"] != 2.5, rekeyed
    assert audit[keys["other_compiler"]]["relaxed_outcome"] == "rekeyed"
    # Without symbols it cannot be measured: left as it is.
    assert same(after[keys["no_symbols"]], rows["no_symbols"])


def test_a_removal_one_worker_disputes_is_not_settled():
    def median(*speedups: float) -> EvaluationResult:
        return median_of([EvaluationResult(
            speedup=Interval(s, s - 0.02, s + 0.02), significant=s > 1.03, numerics_ok=True,
            identical_program=False, compile_seconds=0.1, default_compile_seconds=0.1,
            default_seconds=0.01, candidate_seconds=0.01 / s) for s in speedups], 0.01)

    # Two slow processes of three would remove a config the third measured faster.
    disputed = median(1.03, 0.80, 0.82)
    assert rules.measured_outcome(disputed, True, "c", 0.01)[0] == "invalidated"
    assert not rules.settled(disputed, same_compiler=True, noise_band=0.01)
    # Settled: a removal every worker agrees with, a keep, or nothing to remove (on another
    # compiler a failed re-key leaves the old entry as it is).
    assert rules.settled(median(0.95, 0.80, 0.82), same_compiler=True, noise_band=0.01)
    assert rules.settled(median(1.03, 1.02, 0.80), same_compiler=True, noise_band=0.01)
    assert rules.settled(disputed, same_compiler=False, noise_band=0.01)


@pytest.mark.slow
@pytest.mark.subprocess
def test_one_audit_row_per_decision_in_priority_order(validated):
    keys, report = validated["keys"], validated["report"]
    audit = Warehouse(validated["home"]).read(VALIDATIONS).sort_by("validated_at").to_pylist()
    assert len(audit) == 7 and {r["run_id"] for r in audit} == {report["run_id"]}
    by_key = {r["key"]: r for r in audit}
    assert by_key[keys["slower"]]["outcome"] == "invalidated" and by_key[keys["slower"]]["ci_high"] < 1.01
    assert "no longer faster" in by_key[keys["slower"]]["reason"]
    assert "fell back" in by_key[keys["fallback"]]["reason"] and by_key[keys["fallback"]]["speedup"] is None
    assert "absolute lifetime" in by_key[keys["too_old"]]["reason"]
    assert by_key[keys["other_compiler"]]["new_key"] is not None
    assert all(r["store_version"] == report["version"] for r in audit)
    assert by_key[keys["kept"]]["fleet_hits"] == 5 and 2.9 < by_key[keys["kept"]]["age_days"] < 3.1
    # Measured in priority order: most fleet hits first.
    measured = [r["key"] for r in audit if r["speedup"] is not None]
    assert measured == [keys["kept"], keys["slower"], keys["other_compiler"]]


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_second_run_skips_what_is_fresh_or_decided(validated):
    home = validated["home"]
    again = fdo_json(home, "validate", "--once", "--max-seconds", "2")
    assert {k: again[k] for k in ("kept", "rekeyed", "invalidated", "expired", "unmeasured")} == {
        "kept": 0, "rekeyed": 0, "invalidated": 0, "expired": 0, "unmeasured": 1}, again
    assert again["skipped"] == 3 and not again["published"]
    assert again["version"] == validated["report"]["version"]
    assert Warehouse(home).read(VALIDATIONS).num_rows == 7  # the repeated 'unmeasured' is not re-audited


@pytest.mark.slow
@pytest.mark.subprocess
def test_report_tables(validated):
    home, keys = validated["home"], validated["keys"]
    version = validated["report"]["version"]
    land_hits(home, hit_rows(keys["kept"], 3, version=version)
              + hit_rows(keys["no_symbols"], 1, version=version), "after-validation")
    ages = staleness(home)
    assert sum(ages.column("entries").to_pylist()) == len(live(home))
    fresh = ages.to_pylist()[0]
    assert fresh["min_days"] == 0 and fresh["entries"] == fresh["validator_entries"] == 2
    outcomes = {r["outcome"]: r["decisions"] for r in outcomes_over_time(home).to_pylist()}
    assert outcomes == {"kept": 1, "rekeyed": 1, "invalidated": 2, "expired": 2, "unmeasured": 1}
    share = {r["source"]: r for r in validator_hit_share(home).to_pylist()}["hook"]
    # Before validation, 8 hits on v1 (all tuner entries); after, 3 of 4 on validator entries.
    assert (share["hits"], share["validator_hits"]) == (12, 3)
    printed = fdo_json(home, "validate", "--report")
    assert set(printed) == {"staleness", "outcomes", "hit_share"} and printed["hit_share"][0]["hits"] == 12


@pytest.fixture(scope="module")
def old_toolchain():
    """A venv with jax/jaxlib OLD_JAX (cached between runs), or a skip if PyPI is unreachable."""
    try:
        return build_venv(cached_venv_dir(OLD_JAX), OLD_JAX)
    except RegistryUnreachable as exc:
        pytest.skip(f"the package index is unreachable, cannot install jaxlib {OLD_JAX}: {exc}")


@pytest.mark.slow
@pytest.mark.subprocess
def test_rekeyed_and_invalidated_under_a_real_second_jaxlib(tmp_path, old_toolchain):
    home = tmp_path / "home"
    added = fdo_json(home, "toolchain", "add", "old", old_toolchain)
    assert added["jaxlib"] == OLD_JAX and added["compiler_version"] == f"jaxlib-{OLD_JAX}"
    listed = {t["name"]: t for t in fdo_json(home, "toolchain", "list")}
    assert set(listed) == {"default", "old"} and listed["default"]["jaxlib"] == jax.__version__
    carries = entry(*ingest_graph(home, "narrow_sum"), NO_YNN_REDUCE, source="t-carries")
    lost = entry(*ingest_graph(home, "narrow_sum_b"), NO_YNN_REDUCE, source="t-lost")
    publish(home, [carries, lost])
    report = fdo_json(home, "validate", "--once", "--toolchain", "old", "--max-seconds", "2", "--workers", "1")
    assert (report["rekeyed"], report["invalidated"], report["compiler_version"]) == (1, 1, f"jaxlib-{OLD_JAX}")
    after = live(home)
    old_env = dataclasses.replace(current_environment(), compiler_version=f"jaxlib-{OLD_JAX}")
    moved = after[store_key(carries["fingerprint"], old_env.key())]
    # How much faster moves with the machine's load; that it is, beyond the noise band, does not.
    assert moved["compiler_version"] == f"jaxlib-{OLD_JAX}" and moved["ci_low"] > 1.01, moved
    assert store_key(lost["fingerprint"], old_env.key()) not in after
    # Both stay for the jobs still on this compiler until they expire.
    assert same(after[carries["key"]], carries) and same(after[lost["key"]], lost)
    audit = {r["key"]: r for r in Warehouse(home).read(VALIDATIONS).to_pylist()}
    assert audit[lost["key"]]["toolchain"] == "old" and "same program" in audit[lost["key"]]["reason"]
    # Decided for this compiler (and the re-keyed entry is fresh): nothing measured again.
    assert fdo_json(home, "validate", "--once", "--toolchain", "old")["skipped"] == 3


@pytest.mark.subprocess
def test_bad_toolchains_are_refused_by_name(tmp_path):
    home = tmp_path / "home"
    missing = fdo(home, "toolchain", "add", "gone", str(tmp_path / "no-python"))
    assert missing.returncode == 2 and "no-python" in missing.stderr and "not an executable" in missing.stderr
    no_jax = fdo(home, "toolchain", "add", "nojax", "/bin/true")
    assert no_jax.returncode == 2 and "cannot run jaxlib" in no_jax.stderr
    assert fdo(home, "toolchain", "add", "default", sys.executable).returncode == 2
    unknown = fdo(home, "validate", "--once", "--toolchain", "nope")
    assert unknown.returncode == 2 and "nope: not registered" in unknown.stderr


def _accepted(i: int, env_key: str, config: dict = NO_YNN_REDUCE) -> dict:
    return {"dt": datetime.date.today(), "task_id": f"new-{i}", "kind": "graph",
            "fingerprint": f"{i:032x}", "env_key": env_key, "config": json.dumps(config),
            "speedup": 1.5, "ci_low": 1.3, "ci_high": 1.7, "numerics_ok": True,
            "compiler_version": "jaxlib-x", "accepted": True, "status": "accepted",
            "strategy": "evolution", "evaluations": 10, "measured": 5}


@pytest.mark.slow
@pytest.mark.subprocess
def test_validate_and_deliver_at_the_same_time_lose_nothing(tmp_path):
    home = tmp_path / "home"
    fast, slow = ingest_graph(home, "narrow_sum"), ingest_graph(home, "row_sq_sum")
    tuned = [{**_accepted(i, env_key, config), "fingerprint": fingerprint, "task_id": f"t-{i}",
              "dt": datetime.date.today() - datetime.timedelta(days=3)}
             for i, ((fingerprint, env_key), config) in enumerate([(fast, NO_YNN_REDUCE), (slow, SLOWER)])]
    land_results(home, tuned, "tuned")
    assert deliver(home) == 1
    rows = sorted(live(home).values(), key=lambda r: r["source"])
    rows.append(entry("1" * 32, fast[1], NO_YNN_REDUCE, days_old=40, expires_in_days=-1))
    publish(home, rows)
    validating = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "--home", str(home), "validate",
                                   "--once", "--json", "--max-seconds", "4", "--workers", "1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    delivered, versions, batch = [], [], 0
    while validating.poll() is None and batch < 8:  # deliver batch after batch while it validates
        results = [_accepted(100 * batch + i, fast[1]) for i in range(3)]
        land_results(home, results, f"b{batch}")
        done = fdo(home, "deliver", "--json", "--direct_running_mode=in_memory")
        assert done.returncode == 0, done.stderr
        versions.append(json.loads(done.stdout)["version"])
        delivered += [store_key(r["fingerprint"], r["env_key"]) for r in results]
        batch += 1
    out, err = validating.communicate(timeout=600)
    assert validating.returncode == 0, err
    report = json.loads(out)
    assert batch >= 1 and (report["kept"], report["invalidated"], report["expired"]) == (1, 1, 1)
    # A deliver published while the validator measured, so the validator's publish had to build
    # on it (its first attempt, built on the version it started from, would be refused).
    assert versions and min(versions) < report["version"]
    after = live(home)
    assert set(delivered) <= set(after)  # every delivered entry survived the validator's publish
    assert after[rows[0]["key"]]["provenance"] == "validator"
    assert rows[1]["key"] not in after and rows[2]["key"] not in after
    assert deliver(home) is None  # and deliver does not bring back what the validator removed
    assert rows[1]["key"] not in live(home)


@pytest.mark.subprocess
def test_a_publish_that_loses_the_race_is_redone_on_the_new_live_entries(tmp_path):
    home = tmp_path / "home"
    old = entry("a" * 32, "e" * 32, NO_YNN_REDUCE, source="t-a")
    publish(home, [old])
    now = datetime.datetime.now(UTC)
    removal = rules.Decision(
        key=old["key"], fingerprint=old["fingerprint"], env_key=old["env_key"], kind="graph",
        config=old["config"], source="t-a", outcome=DecisionOutcome.INVALIDATED, reason="test",
        change=StoreChange.REMOVE,
        toolchain="default", compiler_version="x", fleet_hits=0, age_days=3.0,
        decided_at=now.isoformat(), origin_at=old["measured_at"].isoformat(),
        entry_measured_at=old["measured_at"].isoformat(), entry_expires_at=old["expires_at"].isoformat())
    land_results(home, [_accepted(7, "e" * 32)], "t")
    calls = []

    def change(entries: pa.Table) -> pa.Table:
        calls.append(entries.num_rows)
        if len(calls) == 1:  # another process publishes between this read and this publish
            assert fdo(home, "deliver").returncode == 0
        return rules.apply([removal], entries)[0]

    version = Store(home).update(change, "validate test")
    assert calls == [1, 2] and version == 3
    assert set(live(home)) == {store_key(f"{7:032x}", "e" * 32)}


@pytest.mark.subprocess
def test_a_corrupt_hlo_blob_leaves_its_entry_unmeasured_and_the_run_goes_on(tmp_path):
    home = tmp_path / "home"
    corrupt = entry(*ingest_graph(home, "narrow_sum"), NO_YNN_REDUCE, source="t-corrupt")
    expired = entry("1" * 32, corrupt["env_key"], NO_YNN_REDUCE, days_old=40, expires_in_days=-1)
    publish(home, [corrupt, expired])
    blob = home / "blobs" / BlobStore.name(corrupt["fingerprint"])
    blob.write_bytes(b"not zstd")
    report = fdo_json(home, "validate", "--once", "--workers", "1")
    assert (report["unmeasured"], report["expired"]) == (1, 1), report
    audit = {r["key"]: r for r in Warehouse(home).read(VALIDATIONS).to_pylist()}
    assert BlobStore.name(corrupt["fingerprint"]) in audit[corrupt["key"]]["reason"]
    assert "corrupt" in audit[corrupt["key"]]["reason"]
    assert corrupt["key"] in live(home) and expired["key"] not in live(home)


@pytest.mark.slow
@pytest.mark.subprocess
def test_kill_9_mid_run_then_resume_redoes_nothing(tmp_path):
    home = tmp_path / "home"
    names = ["narrow_sum", "narrow_sum_b", "row_sq_sum", "column_sum"]
    rows = [entry(*ingest_graph(home, name), NO_YNN_REDUCE, source=name) for name in names]
    publish(home, rows)
    command = [sys.executable, "-m", "pipelines.cli", "--home", str(home), "validate", "--once",
               "--json", "--max-seconds", "2", "--workers", "1"]
    journal = kill_9_once_journaled(command, home / "validator" / "runs", "*/journal.jsonl", lines=2)
    assert journal is not None
    before = journal.read_text().splitlines()
    assert 2 <= len(before) < 4 and Store(home).current() == 1  # killed before publishing
    resumed = fdo_json(home, "validate", "--once", "--max-seconds", "2", "--workers", "1")
    assert resumed["resumed"] and resumed["run_id"] == journal.parent.name
    after = journal.read_text().splitlines()
    assert after[: len(before)] == before  # nothing decided again
    decided = [json.loads(line)["decision"]["key"] for line in after if "decision" in line]
    assert sorted(decided) == sorted(r["key"] for r in rows)
    audit = Warehouse(home).read(VALIDATIONS)
    assert sorted(audit.column("key").to_pylist()) == sorted(decided)
    assert Store(home).current() == 2 and resumed["version"] == 2
    assert fdo_json(home, "validate", "--once")["run_id"] != resumed["run_id"]  # that run is done
    assert Warehouse(home).read(VALIDATIONS).num_rows == 4


@pytest.mark.slow
@pytest.mark.subprocess
def test_validate_on_a_url_home_measures_publishes_and_audits(tmp_path):
    local = tmp_path / "home"
    fast = ingest_graph(local, "narrow_sum")  # ingest wants a local home: the URL reaches the same files
    rows = [entry(*fast, NO_YNN_REDUCE, source="t-fast"),
            entry("1" * 32, fast[1], NO_YNN_REDUCE, days_old=40, expires_in_days=-10, source="t-exp"),
            entry("3" * 32, fast[1], NO_YNN_REDUCE, source="t-nosym")]
    home = open_home(url_of(local))
    publish(home, rows)
    # The registry record stays in the home; a venv it would install goes to the local cache.
    assert Registry(home).add("this", sys.executable).python == sys.executable
    assert (local / "toolchains" / "this.json").exists() and venv_dir(home, "this").is_relative_to(cache_dir())
    UrlFileSystem.used.clear()
    settings = ValidateSettings(measure=dataclasses.replace(MEASURE_SETTINGS, max_seconds=2.0),
                                workers=1)
    report = validate(home, "this", settings)
    assert {k: n for k, n in report.counts().items() if n} == {"kept": 1, "expired": 1, "unmeasured": 1}
    assert (report.version, report.published, report.toolchain) == (2, True, "this")
    assert Store(local).manifest(2).writer == f"validator/{report.run_id}"
    assert live(local)[rows[0]["key"]]["provenance"] == "validator" and rows[1]["key"] not in live(local)
    audit = Warehouse(local).read(VALIDATIONS).to_pylist()
    assert sorted(r["key"] for r in audit) == sorted(r["key"] for r in rows)
    assert {(r["run_id"], r["store_version"]) for r in audit} == {(report.run_id, 2)}
    assert (local / "validator" / "runs" / report.run_id / "done.json").exists()
    for place in ("/validator/runs/", "/store/v2/", "/warehouse/validations/", "/toolchains/this.json"):
        assert any(place in path for path in UrlFileSystem.used), place
    assert not [p for p in local.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize("url", [False, True], ids=["local", "url"])
def test_a_run_resumes_the_unfinished_run_of_its_toolchain_and_compiler_only(tmp_path, url):
    home = open_home(url_of(tmp_path / "home") if url else tmp_path / "home")
    chain = Registry(home).get(None)
    finished = Run.open(home, chain)
    home.atomic_write(run_file(home, finished.run_id, "done.json"), "{}")
    other = Run.open(home, dataclasses.replace(chain, name="next"))  # unfinished, another toolchain
    newer = dataclasses.replace(chain, environment={**chain.environment,  # another compiler
                                                    "compiler_version": "jaxlib-99"})
    runs = [finished, other, Run.open(home, newer)]
    mine = Run.open(home, chain)
    assert not any(run.resumed for run in [*runs, mine])
    assert len({run.run_id for run in [*runs, mine]}) == 4
    home.atomic_write(home.location("validator", "runs", "zz-no-run-json", "journal.jsonl"), "")
    again = Run.open(home, chain)
    assert again.resumed and again.run_id == mine.run_id
    home.atomic_write(run_file(home, mine.run_id, "done.json"), "{}")
    requests = []  # on an object store, each past run must not cost a request of its own
    for _ in range(3):
        start = len(UrlFileSystem.used)
        run = Run.open(home, chain)
        requests.append(len(UrlFileSystem.used) - start)
        assert not run.resumed
        home.atomic_write(run_file(home, run.run_id, "done.json"), "{}")
    assert not url or requests[0] == requests[1] == requests[2], requests


@pytest.mark.parametrize("url", [False, True], ids=["local", "url"])
def test_a_run_killed_after_publishing_finds_its_version_by_its_writer(tmp_path, url):
    home = open_home(url_of(tmp_path / "home") if url else tmp_path / "home")
    expired = entry("1" * 32, "e" * 32, NO_YNN_REDUCE, days_old=40, expires_in_days=-1)
    publish(home, [expired, entry("2" * 32, "e" * 32, NO_YNN_REDUCE)])
    manifest = home.location("store", "v1", "manifest.json")  # as written before versions named their writer
    home.atomic_write(manifest, json.dumps({k: v for k, v in json.loads(home.read_bytes(manifest)).items()
                                            if k != "writer"}))
    run = Run.open(home, Registry(home).get(None))  # a run killed as it started
    store = Store(home)
    # Another writer's version whose reason reads as the run's would: the writer tells them apart.
    store.publish(store.entries(), 1, f"validate {run.run_id}: not this run's")
    first = validate(home)
    assert (first.resumed, first.run_id, first.version) == (True, run.run_id, 3)
    assert [m.writer for m in store.versions()] == [None, None, f"validator/{run.run_id}"]
    # Killed between its publish and journaling it: the journal without its last record, not done.
    journal = run_file(home, run.run_id, "journal.jsonl")
    decided = read_records(home, journal)[:-1]
    home.atomic_write(journal, "".join(json.dumps(record) + "\n" for record in decided))
    home.delete([run_file(home, run.run_id, "done.json")])
    again = validate(home)
    assert (again.resumed, again.run_id, again.version, again.published) == (True, run.run_id, 3, True)
    assert store.current() == 3 and read_records(home, journal)[-1]["version"] == 3
    assert Warehouse(home).read(VALIDATIONS).column("store_version").to_pylist() == [3, 3]


def test_the_interval_job_runs_in_a_real_scheduler(tmp_path):
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED
    from apscheduler.schedulers.background import BackgroundScheduler

    from validator.validation_job import add_validation_job

    home = tmp_path / "home"
    expired = entry("1" * 32, "e" * 32, NO_YNN_REDUCE, days_old=40, expires_in_days=-1)
    unmeasured = entry("2" * 32, "e" * 32, NO_YNN_REDUCE)
    publish(home, [expired, unmeasured])
    finished = threading.Event()
    events = []
    scheduler = BackgroundScheduler()
    scheduler.add_listener(lambda event: (events.append(event), finished.set()),
                           EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    job = add_validation_job(scheduler, home, minutes=60, budget_minutes=1)
    scheduler.start()
    try:
        assert finished.wait(timeout=300)
    finally:
        scheduler.shutdown(wait=True)
    assert job.id == "fdo-validate" and events[0].exception is None
    report = events[0].retval
    assert (report.counts()["expired"], report.counts()["unmeasured"]) == (1, 1)
    assert set(live(home)) == {unmeasured["key"]}
    assert Warehouse(home).read(VALIDATIONS).num_rows == 2
