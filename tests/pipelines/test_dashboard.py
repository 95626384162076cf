"""The dashboards of `fdo serve`: every /api/ endpoint checked against the tables it reads, with
and without filters, and the pages (overview, tuner, the graphs, a graph's, a store entry's) in a
real headless Chromium against a real server on loopback: full, filtered through their form, and
empty. The realized figures are checked against ranking.realized over the same graph runs.

Screenshots of the full pages are kept under tests/artifacts/ (git-ignored).
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from playwright.sync_api import Page

from delivery.imports import import_file
from delivery.store_writer import Store
from hlo.environment import Environment
from ingest.profiles import ingest_profiles
from ingest.symbols import ingest_symbols
from ingest.tables import GRAPH_RUNS, GRAPHS
from pipelines.dashboard import queries
from pipelines.dashboard.filters import Filters, Window
from pipelines.dashboard.layout import PAGES
from pipelines.dashboard.levels import REALIZED_LEVEL
from pipelines.dashboard.queries import QUERIES
from pipelines.dashboard.scope import Scope
from ranking.cost import loop_cost, return_on_cost
from ranking.realized import Realized, realized_savings, realized_speedups
from ranking.tables import SAVINGS
from storage.warehouse import Warehouse
from tests.support import ROOT
from tests.support.dashboard_home import TASKS, build_home, holdout_key
from tests.support.serving import call, running_server
from tuner.analyze import analyze_flags
from tuner.tables import TRIALS, TUNING_RESULTS
from tuner.tune import SEARCH_SETTINGS, VERIFY_SETTINGS
from validator.tables import VALIDATIONS
from validator.validate import MEASURE_SETTINGS

ARTIFACTS = ROOT / "tests" / "artifacts"  # git-ignored
DEFAULT_DAYS = 30
# ranking.realized's bootstrap draws jobs by their index after Arrow's group_by, whose order
# varies from call to call when Arrow runs it on several threads: the same rows then give
# intervals that differ in the fourth digit. The server and these tests use one Arrow thread
# until ranking.realized orders the jobs itself.
ONE_ARROW_THREAD = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="session")
def dashboard_home(tmp_path_factory) -> Path:
    return build_home(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="module")
def served(dashboard_home):
    with running_server(dashboard_home, ONE_ARROW_THREAD) as base:
        yield base


def _api(base: str, name: str, **params: str) -> list[dict]:
    status, rows, _ = call(f"{base}/api/{name}?{urllib.parse.urlencode(params)}")
    assert status == 200, rows
    assert isinstance(rows, list)
    return rows


def _error(base: str, path: str, **params: str) -> tuple[int, str]:
    status, body, _ = call(f"{base}{path}?{urllib.parse.urlencode(params)}")
    assert isinstance(body, dict), body
    return status, body["error"]["message"]


def _environments(home: Path) -> dict[str, dict]:
    """env_key -> what the symbols say of it (the graphs table), read here without the dashboards."""
    graphs = Warehouse(home).read(GRAPHS, ["env_key", "device_kind", "device_count", "compiler_version"])
    return {row["env_key"]: row for row in graphs.to_pylist()}


def _entry_runs(home: Path, key: str | None = None) -> pa.Table:
    """The graph runs that named a store entry (`key`, else any): both arms of its holdout."""
    runs = Warehouse(home).read(GRAPH_RUNS)
    named = runs.filter(pc.is_valid(runs.column("config_key")))
    return named if key is None else named.filter(pc.equal(named.column("config_key"), key))


def _realized(runs: pa.Table) -> list[Realized]:
    """ranking.realized's speedups of `runs` as the server computes them (on one Arrow thread)."""
    threads = pa.cpu_count()
    pa.set_cpu_count(1)
    try:
        return realized_speedups(runs, confidence=REALIZED_LEVEL)
    finally:
        pa.set_cpu_count(threads)


def _on(runs: pa.Table, day: str) -> pa.Table:
    return runs.filter(pc.equal(runs.column("dt"), pa.scalar(datetime.date.fromisoformat(day))))


def _saved_hours(table: pa.Table) -> float:
    return (pc.sum(table.column("chip_seconds_saved")).as_py() or 0.0) / 3600


def _narrowed_team(home: Path) -> str:
    """The team that saved the most of those whose jobs ran some of the tuned keys but not all:
    a team filter narrows the tuner's rows to some. (Which teams ran which keys is the fleet's
    draw; which of them saved the most hangs on this machine's environment key too.)"""
    saved: Counter[str] = Counter()
    for row in Warehouse(home).read(SAVINGS, ["team", "chip_seconds_saved"]).to_pylist():
        saved[row["team"]] += row["chip_seconds_saved"]
    tuned = {(r["fingerprint"], r["env_key"]) for r in Warehouse(home).read(TUNING_RESULTS).to_pylist()}
    ran: defaultdict[str, set[tuple[str, str]]] = defaultdict(set)
    for row in Warehouse(home).read(GRAPH_RUNS, ["team", "fingerprint", "env_key"]).to_pylist():
        ran[row["team"]].add((row["fingerprint"], row["env_key"]))
    return next(team for team, _ in saved.most_common() if 0 < len(ran[team] & tuned) < len(tuned))


@pytest.mark.xla
@pytest.mark.subprocess
def test_every_endpoint_answers_rows(served):
    status, index, _ = call(f"{served}/api")
    assert status == 200
    assert {row["endpoint"] for row in index} == {f"/api/{name}" for name in [*QUERIES, "summary"]}
    for row in index:
        rows = _api(served, row["endpoint"].removeprefix("/api/"))
        assert rows and all(isinstance(r, dict) for r in rows), row["endpoint"]
    drawn = {card.endpoint for page in PAGES.values() for card in page.cards()}
    assert drawn == set(QUERIES)  # every endpoint is drawn on some page
    # The verified coverage tile is the last night's, as the ledger recorded it.
    (night,) = _api(served, "verified-coverage")
    assert night["night"] == 1 and 0.0 < night["share"] <= 1.0
    summary = _api(served, "summary")[0]
    assert (summary["verified_coverage"], summary["verified_coverage_nights"]) == (night["share"], 1)


@pytest.mark.xla
@pytest.mark.subprocess
def test_savings_and_hits_match_the_warehouse(served, dashboard_home):
    warehouse = Warehouse(dashboard_home)
    table = warehouse.read(SAVINGS)
    rows = _api(served, "savings")
    assert {"dt", "kind", "team", "config_version", "chip_seconds_saved", "chip_hours_saved"} <= rows[0].keys()
    saved = pc.sum(table.column("chip_seconds_saved")).as_py()
    assert saved > 0
    assert sum(r["chip_seconds_saved"] for r in rows) == pytest.approx(saved, rel=1e-9)
    assert all(r["chip_hours_saved"] == pytest.approx(r["chip_seconds_saved"] / 3600) for r in rows)
    assert {r["team"] for r in rows} == set(table.column("team").to_pylist())
    assert _api(served, "summary")[0]["chip_hours_saved"] == pytest.approx(saved / 3600, rel=1e-9)
    per_version: Counter[int] = Counter()
    for row in rows:
        per_version[row["config_version"]] += row["chip_seconds_saved"]
    assert len(per_version) == 2  # the fleet's hits were served by two store versions
    for version, seconds in per_version.items():
        mine = table.filter(pc.equal(table.column("config_version"), version))
        assert seconds == pytest.approx(pc.sum(mine.column("chip_seconds_saved")).as_py(), rel=1e-9)

    runs = warehouse.read(GRAPH_RUNS, ["dt", "chip_seconds", "config_key", "holdout"])
    hits = {r["dt"]: r for r in _api(served, "hits") if r["source"] == "profiles" and r["kind"] == "graph"}
    for dt, row in hits.items():
        day = runs.filter(pc.equal(runs.column("dt"), pa.scalar(datetime.date.fromisoformat(dt))))
        # A holdout run of an entry ran the defaults: a run of the key, not a tuned one.
        tuned = day.filter(pc.and_(pc.is_valid(day.column("config_key")),
                                   pc.invert(pc.fill_null(day.column("holdout"), False))))
        assert row["runs"] == day.num_rows and row["hit_runs"] == tuned.num_rows
        tuned_seconds = pc.sum(tuned.column("chip_seconds")).as_py() or 0.0
        assert row["hit_chip_hours"] == pytest.approx(tuned_seconds / 3600)
        assert row["hit_rate"] == pytest.approx(tuned_seconds / pc.sum(day.column("chip_seconds")).as_py())
    assert hits[min(hits)]["hit_rate"] == 0 < hits[max(hits)]["hit_rate"]  # untuned first days, then hits
    hook = [r for r in _api(served, "hits") if r["source"] == "hook"]
    assert [(r["hit_runs"], r["runs"], r["hit_rate"]) for r in hook] == [(3, 6, 0.5)] * 2

    shares = _api(served, "validator-hits")
    validator = table.filter(table.column("validator_updated"))
    assert sum(r["validator_hit_chip_hours"] for r in shares) == pytest.approx(
        (pc.sum(validator.column("hit_chip_seconds")).as_py() or 0.0) / 3600)
    assert all(0 <= r["validator_share"] <= 1 for r in shares)


@pytest.mark.xla
@pytest.mark.subprocess
def test_store_tuner_and_validator_views_match_their_sources(served, dashboard_home):
    store = Store(dashboard_home)
    entries = {e["key"]: e for e in store.entries().to_pylist()}
    now = datetime.datetime.now(datetime.UTC)
    stale = _api(served, "staleness")
    assert {r["key"] for r in stale} == entries.keys()
    for row in stale:
        expected = (now - entries[row["key"]]["measured_at"]).total_seconds() / 86400
        assert row["age_days"] == pytest.approx(expected, abs=0.01)
    ages = {r["provenance"]: r["age_days"] for r in stale}
    assert ages["validator"] < ages["tuner"]  # the validator re-measured one entry later

    top = [r for r in _api(served, "top") if r["kind"] == "graph"]
    assert [r["rank"] for r in top] == list(range(1, len(top) + 1))
    assert [r["chip_hours"] for r in top] == sorted((r["chip_hours"] for r in top), reverse=True)
    tuned = [r for r in top if r["tuned"]]
    assert {r["provenance"] for r in tuned} == {"tuner", "validator"}
    for row in tuned:
        entry = entries[row["key"]]
        assert (row["speedup"], row["ci_low"], row["ci_high"]) == (entry["speedup"], entry["ci_low"], entry["ci_high"])
        assert row["ci_low"] < row["speedup"] < row["ci_high"]
        # The tuner verifies at 99.9%, the validator re-measures at 99%.
        level = {"tuner": VERIFY_SETTINGS.confidence, "validator": MEASURE_SETTINGS.confidence}[row["provenance"]]
        assert row["ci_level"] == level
    assert VERIFY_SETTINGS.confidence == 0.999

    trials = _api(served, "tuner")
    by_task = defaultdict(list)
    for row in trials:
        by_task[row["task_id"]].append(row)
    assert len(by_task) == TASKS
    for rows in by_task.values():
        measured = [r["speedup"] for r in rows if r["outcome"] == "measured" and r["numerics_ok"]]
        assert rows[-1]["best_so_far"] == max(measured)
        bests = [r["best_so_far"] for r in rows if r["best_so_far"] is not None]
        assert bests == sorted(bests)
    assert {r["ci_level"] for r in trials} == {SEARCH_SETTINGS.confidence}
    results = _api(served, "tuning-results")
    assert sum(r["accepted"] for r in results) == TASKS - 1
    assert {r["ci_level"] for r in results} == {VERIFY_SETTINGS.confidence}

    outcomes: Counter[str] = Counter()
    for row in _api(served, "validations"):
        outcomes[row["outcome"]] += row["entries"]
    audit = Counter(r["outcome"] for r in Warehouse(dashboard_home).read(VALIDATIONS).to_pylist())
    assert outcomes == audit
    # The one delivered entry that runs here kept twice, one removed for the fleet's fallback,
    # the other machines' entries unmeasured, audited once.
    assert audit == {"kept": 2, "invalidated": 1, "unmeasured": TASKS - 1 - 1}
    assert Counter(r["outcome"] for r in _api(served, "decisions")) == outcomes
    versions = _api(served, "store")
    assert [r["version"] for r in versions] == [m.version for m in store.versions()]
    assert [r["version"] for r in versions if r["live"]] == [store.current()]


@pytest.mark.xla
@pytest.mark.subprocess
def test_environments_are_named_by_device_and_compiler(served, dashboard_home):
    environments = _environments(dashboard_home)
    rows = _api(served, "top") + _api(served, "tuner") + _api(served, "staleness") + _api(served, "decisions")
    named = [r for r in rows if r["env_key"] in environments]
    assert len(named) > TASKS
    for row in named:
        env = environments[row["env_key"]]
        assert row["environment"].startswith(
            f"{env['device_kind']} x {env['device_count']}, {env['compiler_version']}"), row
    # The imported op entry's environment ran nowhere: it is named by its key.
    assert {r["environment"] for r in rows if r["env_key"] not in environments} == {"env bbbbbb"}


@pytest.mark.xla
@pytest.mark.subprocess
def test_the_flag_analysis_is_the_tuners(served, dashboard_home):
    ours = _api(served, "flags")
    theirs = analyze_flags(dashboard_home).to_json()["flags"]  # every trial lies in the default window
    assert [r["flag"] for r in ours] == [f["flag"] for f in theirs] and ours
    for row, flag in zip(ours, theirs):
        assert row["importance"] == pytest.approx(flag["importance"], rel=1e-12)
        assert [v["value"] for v in row["values"]] == [v["value"] for v in flag["values"]]


@pytest.mark.xla
@pytest.mark.subprocess
def test_filters_narrow_each_endpoint_by_what_its_rows_are(served, dashboard_home):
    warehouse = Warehouse(dashboard_home)
    savings = warehouse.read(SAVINGS)
    runs = warehouse.read(GRAPH_RUNS, ["team", "fingerprint", "env_key", "device_kind", "chip_seconds"])
    team = _narrowed_team(dashboard_home)

    # A team: its own rows where a table has teams, else the keys its jobs ran.
    rows = _api(served, "savings", team=team)
    assert {r["team"] for r in rows} == {team}
    assert sum(r["chip_hours_saved"] for r in rows) == pytest.approx(
        _saved_hours(savings.filter(pc.equal(savings.column("team"), team))), rel=1e-9)
    ran = {(r["fingerprint"], r["env_key"]) for r in runs.to_pylist() if r["team"] == team}
    tasks = _api(served, "tuning-results", team=team)
    assert 0 < len(tasks) < TASKS
    assert all((r["fingerprint"], r["env_key"]) in ran for r in tasks)
    assert {(r["fingerprint"], r["env_key"]) for r in _api(served, "tuning-results")} & ran == \
           {(r["fingerprint"], r["env_key"]) for r in tasks}

    # A device kind (and a compiler): the environments that have it.
    environments = _environments(dashboard_home)
    device = _api(served, "top")[0]["environment"].split(" x ")[0]
    kind_envs = {key for key, env in environments.items() if env["device_kind"] == device}
    kind_envs |= {r["env_key"] for r in runs.to_pylist() if r["device_kind"] == device}
    rows = _api(served, "savings", device_kind=device)
    assert sum(r["chip_hours_saved"] for r in rows) == pytest.approx(
        _saved_hours(savings.filter(pc.is_in(savings.column("env_key"), pa.array(sorted(kind_envs))))), rel=1e-9)
    top = _api(served, "top", device_kind=device)
    assert top and all(r["env_key"] in kind_envs for r in top)
    compiler = environments[top[0]["env_key"]]["compiler_version"]
    both = _api(served, "top", device_kind=device, compiler_version=compiler)
    assert both and all(environments[r["env_key"]]["compiler_version"] == compiler for r in both)
    assert len(both) <= len(top)
    assert _api(served, "savings", device_kind="no such device") == []

    # A graph: its rows alone, on the endpoints of its page.
    fingerprint = top[0]["fingerprint"]
    assert {r["fingerprint"] for r in _api(served, "tuner", graph=fingerprint)} == {fingerprint}
    assert {r["fingerprint"] for r in _api(served, "symbols", graph=fingerprint)} == {fingerprint}
    assert sum(r["chip_hours"] for r in _api(served, "teams", graph=fingerprint)) == pytest.approx(
        pc.sum(runs.filter(pc.equal(runs.column("fingerprint"), fingerprint)).column("chip_seconds")).as_py()
        / 3600, rel=1e-9)


def _check_graph_rows(rows: list[dict], runs: list[dict], entries: dict, names: dict) -> None:
    """/api/graphs `rows` against the graph `runs` they were drawn from (and the live graph
    `entries` by key, the module `names` by fingerprint): costliest first, every figure."""
    seconds: Counter[str] = Counter()
    per_env: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for run in runs:
        seconds[run["fingerprint"]] += run["chip_seconds"]
        per_env[run["fingerprint"]][run["env_key"]] += run["chip_seconds"]
    costliest = sorted(seconds.items(), key=lambda item: (-item[1], item[0]))
    assert [(r["fingerprint"], r["chip_seconds"]) for r in rows] == [
        (fingerprint, pytest.approx(cost, rel=1e-9)) for fingerprint, cost in costliest]
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    for row in rows:
        mine = [r for r in runs if r["fingerprint"] == row["fingerprint"]]
        envs = per_env[row["fingerprint"]]
        assert row["name"] == names[row["fingerprint"]]
        assert row["runs"] == len(mine) and row["teams"] == len({r["team"] for r in mine})
        assert row["environments"] == len(envs) and row["env_key"] == envs.most_common(1)[0][0]
        assert row["hit_share"] == pytest.approx(
            sum(r["chip_seconds"] for r in mine if r["config_key"] is not None and not r["holdout"])
            / row["chip_seconds"])
        tuned = [env for env, _ in envs.most_common() if (row["fingerprint"], env) in entries]
        assert row["tuned"] == bool(tuned) and row["entries"] == len(tuned)
        # The speedup shown is the entry's in the costliest environment that has one.
        entry = entries.get((row["fingerprint"], tuned[0])) if tuned else {}
        assert (row["entry_env_key"], row["speedup"], row["ci_low"], row["ci_high"], row["provenance"]) == (
            tuned[0] if tuned else None, *(entry.get(k) for k in ("speedup", "ci_low", "ci_high", "provenance")))


@pytest.mark.xla
@pytest.mark.subprocess
def test_the_graphs_endpoint_lists_every_graph_by_cost_under_the_filters(served, dashboard_home):
    warehouse = Warehouse(dashboard_home)
    runs = warehouse.read(GRAPH_RUNS, ["team", "fingerprint", "env_key", "device_kind", "chip_seconds",
                                       "config_key", "holdout"]).to_pylist()
    names = {r["fingerprint"]: r["module_name"]
             for r in warehouse.read(GRAPHS, ["fingerprint", "module_name"]).to_pylist()}
    entries = {(e["fingerprint"], e["env_key"]): e for e in Store(dashboard_home).entries().to_pylist()
               if e["kind"] == "graph"}
    rows = _api(served, "graphs")
    assert len(rows) > 1 and all(r["tuned"] for r in rows)
    _check_graph_rows(rows, runs, entries, names)
    assert {r["ci_level"] for r in rows} == {VERIFY_SETTINGS.confidence}

    # A team: the chip-time of its runs alone, ranked anew.
    team = Counter(r["team"] for r in runs).most_common()[-1][0]
    theirs = _api(served, "graphs", team=team)
    _check_graph_rows(theirs, [r for r in runs if r["team"] == team], entries, names)
    assert theirs and all(r["teams"] == 1 for r in theirs)

    # Each device kind: the environments that have it. (A graph untuned on a kind, and one
    # whose costliest environment has no entry where a cheaper one has: the test after this one,
    # whose data holds both whatever the fleet here does.)
    environments = _environments(dashboard_home)
    for kind in {env["device_kind"] for env in environments.values()}:
        envs = {key for key, env in environments.items() if env["device_kind"] == kind}
        kinds = _api(served, "graphs", device_kind=kind)
        _check_graph_rows(kinds, [r for r in runs if r["env_key"] in envs or r["device_kind"] == kind],
                          entries, names)
        assert kinds and all(r["entry_environment"].startswith(f"{kind} x ") for r in kinds if r["tuned"])
    assert _api(served, "graphs", device_kind="no such device") == []


# Two CPU device kinds (an ISA feature apart), one with two device counts.
AVX2, AVX512 = "cpu:x86_64:avx,avx2,fma,sse4_2", "cpu:x86_64:avx,avx2,avx512bw,avx512f,avx512vl,fma,sse4_2"
WIDE, NARROW, OTHER = (Environment("cpu", AVX2, 256, "jaxlib-0.10.2"), Environment("cpu", AVX2, 8, "jaxlib-0.10.2"),
                       Environment("cpu", AVX512, 8, "jaxlib-0.10.2"))
GRAPH_DAY = datetime.date(2026, 6, 2)


def _graphs_home(root: Path) -> tuple[Path, dict[str, str]]:
    """A home whose data states what /api/graphs must tell apart, landed by ingestion and
    `fdo store import`: graph "train" costs 1024 chip-seconds in WIDE, which has no entry, 128
    in NARROW (the same device kind), which has one of 1.3x, and 64 in OTHER (another kind),
    which has one of 1.1x; graph "serve" costs 512 in WIDE and has no entry. Returns the home
    and each graph's fingerprint by name."""
    home = root / "home"
    dumps = []
    for name, op, environments in (("train", "negate", (WIDE, NARROW, OTHER)), ("serve", "abs", (WIDE,))):
        for environment in environments:
            dump = root / "symbols" / f"{name}-{environment.key()}"
            dump.mkdir(parents=True)
            (dump / f"{name}.hlo").write_text(f"HloModule {name}\n\nENTRY main {{\n"
                                              f"  p = f32[4]{{0}} parameter(0)\n  ROOT r = f32[4]{{0}} {op}(p)\n}}\n")
            (dump / "fdo-environment.json").write_text(json.dumps(environment.to_json()))
            dumps.append(dump)
    assert ingest_symbols(dumps, home).graphs_changed == len(dumps)
    graphs = {r["module_name"]: r["fingerprint"] for r in Warehouse(home).read(GRAPHS).to_pylist()}
    runs = [("train", WIDE, 4.0), ("train", NARROW, 16.0), ("train", OTHER, 8.0), ("serve", WIDE, 2.0)]
    drop = root / "drops" / "graphs.graph_runs.jsonl"
    drop.parent.mkdir()
    drop.write_text("".join(json.dumps({
        "dt": GRAPH_DAY.isoformat(), "job_id": f"job-{n}", "team": "ads", "fingerprint": graphs[name],
        "env_key": environment.key(), "device_kind": environment.device_kind, "chips": environment.device_count,
        "executions": 10, "seconds": seconds}) + "\n" for n, (name, environment, seconds) in enumerate(runs)))
    assert ingest_profiles([drop.parent], home).graph_runs == len(runs)
    owned = root / "owner-configs.jsonl"
    owned.write_text("".join(json.dumps({"fingerprint": graphs["train"], "env_key": environment.key(), "kind": "graph",
                                         "config": {"xla_cpu_use_xnnpack": False}, "speedup": speedup}) + "\n"
                             for environment, speedup in ((NARROW, 1.3), (OTHER, 1.1))))
    import_file(home, owned)
    return home, graphs


def test_a_graph_shows_the_entry_of_its_costliest_tuned_environment_under_each_device_kind(tmp_path):
    home, graphs = _graphs_home(tmp_path)
    train, serve = graphs["train"], graphs["serve"]

    def shown(**filters: str) -> dict[str, dict]:
        rows = queries.graphs(home, Scope.resolve(home, Filters(window=Window(GRAPH_DAY, GRAPH_DAY), **filters)))
        return {row["fingerprint"]: row for row in rows}

    def entry_of(row: dict) -> tuple:
        return (row["tuned"], row["entries"], row["env_key"], row["entry_env_key"], row["speedup"])

    fleet = shown()
    assert list(fleet) == [train, serve] and [fleet[g]["chip_seconds"] for g in fleet] == [1216.0, 512.0]
    # Its costliest environment has no entry: the speedup shown is the costliest tuned one's.
    assert entry_of(fleet[train]) == (True, 2, WIDE.key(), NARROW.key(), 1.3)
    assert fleet[train]["environments"] == 3 and fleet[train]["entry_environment"].startswith(f"{AVX2} x 8, ")
    assert entry_of(fleet[serve]) == (False, 0, WIDE.key(), None, None)
    wide = shown(device_kind=AVX2)
    assert list(wide) == [train, serve] and wide[train]["chip_seconds"] == 1152.0
    assert entry_of(wide[train]) == (True, 1, WIDE.key(), NARROW.key(), 1.3) and wide[train]["environments"] == 2
    assert entry_of(wide[serve]) == (False, 0, WIDE.key(), None, None)
    # On the other kind the graph's one environment has its own entry.
    other = shown(device_kind=AVX512)
    assert list(other) == [train] and entry_of(other[train]) == (True, 1, OTHER.key(), OTHER.key(), 1.1)


@pytest.mark.xla
@pytest.mark.subprocess
def test_realized_speedups_savings_and_cost_match_ranking_on_the_same_runs(served, dashboard_home):
    runs = _entry_runs(dashboard_home)
    found = {(f.key, f.config_version): f for f in _realized(runs)}
    rows = _api(served, "realized")
    assert {(r["key"], r["config_version"]) for r in rows} == found.keys()
    for row in rows:
        entry = found[row["key"], row["config_version"]]
        assert row["expected_speedup"] == entry.expected_speedup and row["decided"] == entry.decided
        assert row["undecided"] == (entry.undecided and entry.undecided.value)
        assert [row[f"{arm}_{n}"] for arm in ("tuned", "holdout") for n in ("jobs", "runs")] == [
            entry.tuned.jobs, entry.tuned.runs, entry.holdout.jobs, entry.holdout.runs]
        if entry.decided:
            assert [row["speedup"], row["ci_low"], row["ci_high"]] == pytest.approx(
                [entry.speedup.estimate, entry.speedup.low, entry.speedup.high], rel=1e-9)
    key = holdout_key(dashboard_home)
    clear = [r for r in rows if r["key"] == key and r["decided"]]
    assert clear and all(r["ci_low"] > 1 for r in clear)  # the holdout written by the test home
    assert any(not r["decided"] for r in rows)  # entries whose holdout arm is too small yet
    assert {r["key"] for r in _api(served, "realized", entry=key)} == {key}

    breakdown = realized_savings(runs, found.values())
    savings = _api(served, "realized-savings")
    for name, parts, label in (("total", [breakdown.total], None), ("team", breakdown.by_team, "team"),
                               ("version", breakdown.by_version, "config_version")):
        shown = [r for r in savings if r["slice"] == name]
        assert len(shown) == len(parts) and (label is None or [r[label] for r in shown] == [
            getattr(part, label) for part in parts])
        for row, part in zip(shown, parts):
            assert row["booked_chip_hours"] == pytest.approx(part.booked / 3600, rel=1e-9)
            assert row["booked_decided_chip_hours"] == pytest.approx(part.booked_decided / 3600, rel=1e-9)
            assert (row["decided_entries"], row["undecided_entries"]) == (part.decided, part.undecided)
            if part.realized is None:  # nothing decided: no figure, not a saving of 0
                assert part.decided == 0 and row["realized_chip_hours"] is None
            else:
                assert [row["realized_chip_hours"], row["realized_low"], row["realized_high"]] == pytest.approx(
                    [part.realized.estimate / 3600, part.realized.low / 3600, part.realized.high / 3600],
                    rel=1e-9)
    assert breakdown.total.decided >= 1 and breakdown.total.undecided >= 1

    today = datetime.date.today()
    warehouse = Warehouse(dashboard_home)
    cost = loop_cost(warehouse.read(TRIALS, ["dt", "task_id", "elapsed_seconds"]),
                     warehouse.read(VALIDATIONS, ["dt", "run_id", "validated_at"]), found.values(),
                     today - datetime.timedelta(days=DEFAULT_DAYS - 1), today)
    [shown] = _api(served, "loop-cost")
    assert [shown[f"{part}_chip_hours"] for part in ("tuning", "validation", "holdout")] == pytest.approx(
        [cost.tuning / 3600, cost.validation / 3600, cost.holdout / 3600], rel=1e-9)
    assert cost.tuning > 0 and cost.validation > 0 and cost.holdout > 0
    assert shown["return_on_cost"] == pytest.approx(return_on_cost(breakdown.total.realized.estimate, cost),
                                                    rel=1e-9)
    assert _api(served, "summary")[0]["return_on_cost"] == pytest.approx(shown["return_on_cost"], rel=1e-9)


@pytest.mark.xla
@pytest.mark.subprocess
def test_bad_filters_are_400_naming_the_parameter(served):
    today = datetime.date.today()
    two_days = _api(served, "savings", days="2")
    assert two_days and {r["dt"] for r in two_days} <= {str(today), str(today - datetime.timedelta(days=1))}
    assert _api(served, "savings", **{"from": str(today), "to": str(today)}) == [
        r for r in _api(served, "savings") if r["dt"] == str(today)]
    cases = [
        ("/api/savings", {"from": "2026-13-01"}, "from: '2026-13-01' is not a date"),
        ("/api/hits", {"from": str(today), "to": str(today - datetime.timedelta(days=3))}, "is after to"),
        ("/api/hits", {"days": "two"}, "days: 'two' is not a whole number"),
        ("/api/top", {"team": "x" * 129}, "team: 129 characters"),
        ("/api/top", {"compiler_version": "jaxlib\n"}, "compiler_version: 'jaxlib\\n' holds control characters"),
        ("/api/tuner", {"graph": "d5ad13b1"}, "graph: 'd5ad13b1' is not a fingerprint"),
        ("/api/coverage", {"team": "ads"}, "team: /api/coverage cannot be narrowed by team"),
        ("/api/savings", {"graph": "a" * 32}, "graph: /api/savings cannot be narrowed by graph"),
        ("/", {"to": "yesterday"}, "to: 'yesterday' is not a date"),
        ("/graphs/xyz", {}, "fingerprint: 'xyz' is not a fingerprint"),
        ("/entries/xyz", {}, "key: 'xyz' is not a store key"),
        ("/api/realized", {"entry": "xyz"}, "entry: 'xyz' is not a store key"),
        ("/api/savings", {"entry": "a" * 32}, "entry: /api/savings cannot be narrowed by store entry"),
        ("/api/tuner", {"entry": "a" * 32}, "entry: /api/tuner cannot be narrowed by store entry"),
        ("/api/graphs", {"days": "0"}, "days: '0' is not a whole number"),
        ("/graphs", {"device_kind": "TPU\tv5"}, "device_kind: 'TPU\\tv5' holds control characters"),
    ]
    for path, params, message in cases:
        status, text = _error(served, path, **params)
        assert status == 400 and message in text, (path, params, text)
    status, text = _error(served, f"/graphs/{'0' * 32}")
    assert status == 404 and f"graph {'0' * 32}: no symbols" in text
    status, text = _error(served, f"/entries/{'0' * 32}")
    assert status == 404 and f"store entry {'0' * 32}: not live, and no runs" in text


class Visit:
    """One browser tab on the dashboards: what it loaded, its console errors, the hosts it asked."""

    def __init__(self, browser, base: str) -> None:
        self.base = base
        self.errors: list[str] = []
        self.hosts: set[str] = set()
        self.page: Page = browser.new_page(viewport={"width": 1440, "height": 900})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.hosts.add(urllib.parse.urlsplit(r.url).netloc))

    def open(self, path: str) -> dict:
        response = self.page.goto(self.base + path)
        assert response is not None and response.status == 200, path
        return self.shown()

    def submit(self) -> dict:
        """Apply the filter form, as a user does."""
        with self.page.expect_navigation():
            self.page.click("form.filters button")
        return self.shown()

    def follow(self, selector: str) -> dict:
        with self.page.expect_navigation():
            self.page.click(selector)
        return self.shown()

    def shown(self) -> dict:
        """What the page shows once drawn: charts (their traces), grids (their cells), tiles, links."""
        self.page.wait_for_selector("body[data-ready=true]", timeout=60_000)
        charts = self.page.eval_on_selector_all(".chart", """els => els.map(e => ({
            id: e.dataset.chart, state: e.dataset.state, points: Number(e.dataset.points || 0), text: e.innerText,
            traces: (e.data || []).map(t => ({name: t.name, x: t.x, y: t.y, customdata: t.customdata,
                                              error_y: t.error_y ? [t.error_y.arrayminus, t.error_y.array] : null})),
            xtitle: e.layout && e.layout.xaxis && e.layout.xaxis.title ? e.layout.xaxis.title.text : null}))""")
        grids = self.page.eval_on_selector_all(".rows", """els => els.map(e => ({
            id: e.dataset.grid, state: e.dataset.state, text: e.innerText,
            headers: [...e.querySelectorAll('th')].map(th => th.innerText),
            cells: [...e.querySelectorAll('tbody tr')].map(tr => [...tr.cells].map(td => td.innerText))}))""")
        fleet_wide = self.page.eval_on_selector_all(
            ".badge", "els => els.map(e => e.closest('article').querySelector('[data-chart], [data-grid]'))"
                      ".map(e => e.dataset.chart || e.dataset.grid)")
        return {"url": self.page.url, "fleet_wide": fleet_wide,
                "charts": {c["id"]: c for c in charts}, "grids": {g["id"]: g for g in grids},
                "tiles": self.page.eval_on_selector_all(".tile .value", "els => els.map(e => e.innerText)"),
                "tile_notes": self.page.eval_on_selector_all(".tile .sub", "els => els.map(e => e.innerText)"),
                "links": self.page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")}

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.page.close()
        assert self.errors == []
        assert self.hosts == {self.base.removeprefix("http://")}  # offline: no CDN, nothing external


@pytest.fixture
def visit(browser, served):
    tab = Visit(browser, served)
    yield tab
    tab.close()


def _all_drawn(shown: dict) -> None:
    for chart_id, chart in shown["charts"].items():
        assert chart["state"] == "ready" and chart["traces"] and chart["points"] > 0, chart_id
    for grid_id, grid in shown["grids"].items():
        assert grid["state"] == "ready" and grid["cells"], grid_id


@pytest.mark.xla
@pytest.mark.subprocess
@pytest.mark.browser
def test_the_overview_draws_every_card_over_every_day_of_the_window(visit):
    shown = visit.open("/")
    shot = visit.screenshot("dashboard")
    assert shown["charts"].keys() | shown["grids"].keys() == {card.id for card in PAGES["overview"].cards()}
    _all_drawn(shown)
    assert "—" not in shown["tiles"] and float(shown["tiles"][0].replace(",", "")) > 0
    today = datetime.date.today()
    window = [str(today - datetime.timedelta(days=DEFAULT_DAYS - 1 - i)) for i in range(DEFAULT_DAYS)]
    for chart_id in ("savings-by-kind", "hits", "validations", "validator-hits"):
        for trace in shown["charts"][chart_id]["traces"]:
            assert trace["x"] == window, chart_id  # a continuous date axis, days without rows too
    versions = shown["charts"]["savings-by-version"]["traces"][0]["x"]
    assert len(versions) == 2 and all(v.startswith("v") for v in versions)
    top = shown["charts"]["top-graphs"]["traces"]
    assert {t["name"] for t in top[1:]} == {"tuner entry, 99.9% interval", "validator entry, 99% interval"}
    assert shot.stat().st_size > 50_000


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
@pytest.mark.browser
def test_filters_change_what_the_cards_show_and_stay_in_every_link(visit, dashboard_home):
    everyone = visit.open("/")
    savings = Warehouse(dashboard_home).read(SAVINGS)
    team = _narrowed_team(dashboard_home)
    mine = savings.filter(pc.equal(savings.column("team"), team))

    visit.page.select_option("select[name=team]", team)
    shown = visit.submit()
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(shown["url"]).query)
    assert query["team"] == [team] and "device_kind" not in query  # unchosen filters stay out of the URL
    assert shown["tiles"][0] == f"{_saved_hours(mine):,.0f}" != everyone["tiles"][0]
    assert [t["y"] for t in shown["charts"]["savings-by-team"]["traces"]] == [[team]]
    assert shown["tiles"][6] != everyone["tiles"][6]  # the tuning tasks of the team's keys
    kept = [link for link in shown["links"] if link != "/api"]
    without = [link for link in kept if f"team={urllib.parse.quote_plus(team)}" not in link]
    # Every link keeps the team, but "clear filters" and the rows of the fleet-wide cards.
    assert {link.split("?")[0] for link in without} == {"/", "/api/coverage", "/api/store",
                                                        "/api/verified-coverage"}
    assert {"/tuner", "/api/savings", "/api/top"} <= {link.split("?")[0] for link in kept}
    assert any(link.startswith("/graphs/") for link in kept)
    assert everyone["fleet_wide"] == [] and shown["fleet_wide"] == ["coverage", "verified-coverage", "store"]

    device = shown["charts"]["top-graphs"]["traces"][0]["customdata"][-1][1].split(" x ")[0]
    visit.page.select_option("select[name=device_kind]", device)
    both = visit.submit()
    environments = [c[1] for c in both["charts"]["top-graphs"]["traces"][0]["customdata"]]
    assert environments and all(e.startswith(f"{device} x ") for e in environments)
    envs = {k for k, env in _environments(dashboard_home).items() if env["device_kind"] == device}
    narrowed = mine.filter(pc.is_in(mine.column("env_key"), pa.array(sorted(envs))))
    assert both["tiles"][0] == f"{_saved_hours(narrowed):,.0f}"

    page = visit.follow(".graph-links a")
    assert urllib.parse.urlsplit(page["url"]).path.startswith("/graphs/")
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(page["url"]).query)["team"] == [team]
    assert [t["y"] for t in page["charts"]["graph-teams"]["traces"]] == [[team]] * 3
    assert all(row[0].startswith(f"{device} x ") for row in page["grids"]["symbols"]["cells"])

    yesterday = datetime.date.today() - datetime.timedelta(days=1)
    visit.open("/")
    visit.page.fill("input[name=from]", str(yesterday))
    two_days = visit.submit()
    recent = savings.filter(pc.greater_equal(savings.column("dt"), pa.scalar(yesterday)))
    assert two_days["tiles"][0] == f"{_saved_hours(recent):,.0f}"
    assert all(len(t["x"]) == 2 for t in two_days["charts"]["savings-by-kind"]["traces"])


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
@pytest.mark.browser
def test_a_graph_page_shows_its_cost_teams_trials_entries_and_decisions(visit, served, dashboard_home):
    overview = visit.open("/")
    link = next(link for link in overview["links"] if link.startswith("/graphs/"))
    fingerprint = urllib.parse.urlsplit(link).path.removeprefix("/graphs/")
    shown = visit.follow(f'.graph-links a[href^="/graphs/{fingerprint}"]')
    visit.screenshot("graph")
    assert shown["charts"].keys() | shown["grids"].keys() == {card.id for card in PAGES["graph"].cards()}
    _all_drawn(shown)

    warehouse = Warehouse(dashboard_home)
    runs = warehouse.read(GRAPH_RUNS, ["team", "fingerprint"])
    ran = {r["team"] for r in runs.to_pylist() if r["fingerprint"] == fingerprint}
    assert set(shown["charts"]["graph-teams"]["traces"][0]["y"]) == ran
    trials = [r for r in warehouse.read(TRIALS).to_pylist() if r["fingerprint"] == fingerprint]
    assert len(shown["grids"]["trials"]["cells"]) == len(trials) > 0
    entries = [e for e in Store(dashboard_home).entries().to_pylist() if e["fingerprint"] == fingerprint]
    assert len(shown["grids"]["entries"]["cells"]) == len(entries) > 0
    decided = [r for r in warehouse.read(VALIDATIONS).to_pylist() if r["fingerprint"] == fingerprint]
    assert len(shown["grids"]["decisions"]["cells"]) == len(decided) > 0
    symbols = [r for r in warehouse.read(GRAPHS, ["fingerprint"]).to_pylist() if r["fingerprint"] == fingerprint]
    assert len(shown["grids"]["symbols"]["cells"]) == len(symbols)
    assert "99.9% interval" in shown["charts"]["tuning-results"]["xtitle"]
    cost = sum(sum(trace["y"]) for trace in shown["charts"]["graph-cost"]["traces"])
    assert cost == pytest.approx(sum(r["chip_hours"] for r in _api(served, "teams", graph=fingerprint)), rel=1e-9)


@pytest.mark.xla
@pytest.mark.subprocess
@pytest.mark.browser
def test_an_entry_page_shows_expected_against_realized_and_the_overview_both(visit, dashboard_home):
    key = holdout_key(dashboard_home)
    runs = _entry_runs(dashboard_home)
    found = _realized(runs)
    breakdown = realized_savings(runs, found)
    total = breakdown.total

    # The overview: realized beside booked, in the tiles and per team.
    overview = visit.open("/")
    assert overview["tiles"][1] == f"{total.realized.estimate / 3600:,.0f}"
    note = overview["tile_notes"][1]
    assert f"booked {total.booked_decided / 3600:,.0f} on {total.decided} entr" in note
    assert f"{total.undecided} undecided" in note
    assert note.startswith(f"[{total.realized.low / 3600:,.0f}, {total.realized.high / 3600:,.0f}], 99%; ")
    booked, realized = overview["charts"]["realized-by-team"]["traces"]
    assert booked["x"] == realized["x"] == [t.team for t in breakdown.by_team]
    assert booked["y"] == pytest.approx([t.booked_decided / 3600 for t in breakdown.by_team], rel=1e-9)
    assert [y is None for y in realized["y"]] == [t.realized is None for t in breakdown.by_team]
    assert [y for y in realized["y"] if y is not None] == pytest.approx(
        [t.realized.estimate / 3600 for t in breakdown.by_team if t.realized is not None], rel=1e-9)
    assert overview["tiles"][2].endswith("×")  # the return on cost

    # The entry's page, from the overview's list of entries.
    page = visit.follow(f'[data-grid=realized] a[href^="/entries/{key}?"]')
    visit.screenshot("entry")
    assert urllib.parse.urlsplit(page["url"]).path == f"/entries/{key}"
    assert page["charts"].keys() | page["grids"].keys() == {card.id for card in PAGES["entry"].cards()}
    _all_drawn(page)
    grid = page["grids"]["realized"]
    column = {header: n for n, header in enumerate(grid["headers"])}
    cells = {row[column["version"]]: row for row in grid["cells"]}
    mine = [f for f in found if f.key == key]
    assert cells.keys() == {str(f.config_version) for f in mine}
    decided = [f for f in mine if f.decided]
    assert decided and all(f.speedup.low > 1 for f in decided)  # a clear realized speedup
    for entry in mine:
        row = cells[str(entry.config_version)]
        assert [row[column[c]] for c in ("tuned jobs", "tuned runs", "holdout jobs", "holdout runs")] == [
            f"{n:,}" for n in (entry.tuned.jobs, entry.tuned.runs, entry.holdout.jobs, entry.holdout.runs)]
        if not entry.decided:
            assert row[column["realized"]] == "—" and row[column["verdict"]] == f"undecided: {entry.undecided}"
            continue
        assert row[column["realized"]] == (f"{entry.speedup.estimate:.3f}× [{entry.speedup.low:.3f}, "
                                           f"{entry.speedup.high:.3f}]")
        assert row[column["verdict"]] == "realized"

    # Expected against realized over time: per day, that day's runs alone.
    traces = {t["name"].split(",")[0]: t for t in page["charts"]["realized-days"]["traces"]}
    mine_runs = _entry_runs(dashboard_home, key)
    for version in {f.config_version for f in decided}:
        days = [(day, f) for day in sorted({str(d) for d in mine_runs.column("dt").to_pylist()})
                for f in _realized(_on(mine_runs, day))
                if f.config_version == version and f.decided]
        realized = traces[f"v{version} realized"]
        assert realized["x"] == [day for day, _ in days] and days
        assert realized["y"] == pytest.approx([f.speedup.estimate for _, f in days], rel=1e-9)
        below, above = realized["error_y"]
        assert [y - b for y, b in zip(realized["y"], below)] == pytest.approx(
            [f.speedup.low for _, f in days], rel=1e-9)
        assert [y + a for y, a in zip(realized["y"], above)] == pytest.approx(
            [f.speedup.high for _, f in days], rel=1e-9)
        expected = {y for y in traces[f"v{version} expected"]["y"] if y is not None}
        assert expected == {f.expected_speedup for f in mine if f.config_version == version}

    decisions = [r for r in Warehouse(dashboard_home).read(VALIDATIONS).to_pylist() if r["key"] == key]
    assert len(page["grids"]["decisions"]["cells"]) == len(decisions) > 0


@pytest.mark.xla
@pytest.mark.subprocess
@pytest.mark.browser
def test_the_tuner_page_lists_every_trial_and_which_flags_matter(visit, dashboard_home):
    shown = visit.open("/tuner")
    visit.screenshot("tuner")
    assert shown["charts"].keys() | shown["grids"].keys() == {card.id for card in PAGES["tuner"].cards()}
    _all_drawn(shown)
    trials = shown["grids"]["trials"]
    assert len(trials["cells"]) == TASKS * 8
    analysis = analyze_flags(dashboard_home)
    importance = shown["charts"]["flag-importance"]["traces"][0]
    assert importance["y"][::-1] == [f.flag for f in analysis.flags if f.importance is not None]
    assert importance["x"][::-1] == pytest.approx([f.importance for f in analysis.flags if f.importance is not None])
    assert len(shown["grids"]["flag-values"]["cells"]) == sum(len(f.values) for f in analysis.flags)
    title = shown["charts"]["tuning-results"]["xtitle"]
    assert "99.9% interval" in title and "99% interval" not in title

    column = trials["headers"].index("speedup")
    visit.page.click(f"[data-grid=trials] th:nth-child({column + 1})")
    visit.page.click(f"[data-grid=trials] th:nth-child({column + 1})")  # the second click: descending
    cells = visit.page.eval_on_selector_all(
        f"[data-grid=trials] tbody td:nth-child({column + 1})", "els => els.map(e => e.dataset.sort)")
    values = [float(v) for v in cells if v]
    assert values == sorted(values, reverse=True) and cells[len(values):] == [""] * (len(cells) - len(values))


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.subprocess
def test_the_graphs_page_lists_the_graphs_by_cost_each_linking_to_its_page(visit, served):
    overview = visit.open("/")
    team = _api(served, "teams")[0]["team"]  # the costliest team: its graphs ran where entries are
    visit.page.select_option("select[name=team]", team)
    visit.submit()
    shown = visit.follow('nav.pages a[href^="/graphs?"]')  # the index is in every page's nav
    shot = visit.screenshot("graphs")
    assert "/graphs?from=" in " ".join(overview["links"])
    assert urllib.parse.urlsplit(shown["url"]).path == "/graphs"
    assert shown["grids"].keys() == {card.id for card in PAGES["graphs"].cards()}
    _all_drawn(shown)
    grid = shown["grids"]["graphs"]
    rows = _api(served, "graphs", team=team)
    assert [cells[0] for cells in grid["cells"]] == [f"{r['name']} · {r['fingerprint'][:8]}" for r in rows]
    share = grid["headers"].index("share")
    assert [cells[share] for cells in grid["cells"]] == [f"{r['share']:.1%}" for r in rows]
    speedup = grid["headers"].index("speedup")
    assert [cells[speedup] for cells in grid["cells"]] == [
        f"{r['speedup']:.3f}× [{r['ci_low']:.3f}, {r['ci_high']:.3f}], {100 * r['ci_level']:g}%" if r["tuned"]
        else "—" for r in rows]
    assert any(r["tuned"] for r in rows)
    assert shot.stat().st_size > 20_000

    hours = grid["headers"].index("chip-hours")
    visit.page.click(f"[data-grid=graphs] th:nth-child({hours + 1})")  # ascending: the cheapest first
    first = visit.page.inner_text("[data-grid=graphs] tbody tr:first-child td:first-child")
    assert first == grid["cells"][-1][0]
    page = visit.follow("[data-grid=graphs] tbody tr:first-child td:first-child a")
    url = urllib.parse.urlsplit(page["url"])
    assert url.path == f"/graphs/{rows[-1]['fingerprint']}"
    assert urllib.parse.parse_qs(url.query)["team"] == [team]  # the filters go along
    assert visit.page.inner_text("h1 span") == f"{rows[-1]['name']} · {rows[-1]['fingerprint']}"
    assert {t["y"][0] for t in page["charts"]["graph-teams"]["traces"]} == {team}


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.browser
def test_an_empty_home_says_no_data_yet_and_names_unreadable_data(tmp_path, browser):
    home = tmp_path / "home"
    broken = home / "warehouse" / "validations" / f"dt={datetime.date.today()}" / "run-1.parquet"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not parquet")
    with running_server(home) as base:
        assert _api(base, "savings") == [] and _api(base, "staleness") == [] and _api(base, "tuner") == []
        status, body, _ = call(f"{base}/api/validations")
        assert status == 500 and body["error"]["code"] == "bad_data" and str(broken) in body["error"]["message"]
        tab = Visit(browser, base)
        pages = {"overview": tab.open("/"), "tuner": tab.open("/tuner"), "graphs": tab.open("/graphs")}
        tab.close()
    for chart_id in ("validations", "loop-cost"):  # the loop's cost counts the validator's time
        unreadable = pages["overview"]["charts"].pop(chart_id)
        assert unreadable["state"] == "error" and str(broken) in unreadable["text"], chart_id
    for shown in pages.values():
        for card_id, card in [*shown["charts"].items(), *shown["grids"].items()]:
            assert card["state"] == "empty" and "No data yet" in card["text"], card_id
    assert pages["overview"]["tiles"][0] == "0" and "—" in pages["overview"]["tiles"]
