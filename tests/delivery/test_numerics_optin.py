"""Relaxed-numerics configs go only to teams and jobs that opted in, nobody by default: the
store version's team policy (kept by every publish, set by `fdo store relaxed-teams`, checked,
served by both look-up sources), the job's own in its fdo-job.json (`fdo run --job-file`), and
the hook's choice between an entry's strict and relaxed configs."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from delivery.compile_plan import Plan
from delivery.hook import Hook, HookSettings, install, uninstall
from delivery.lookup import Found
from delivery.store_writer import Store, StoreError
from hlo.environment import store_key
from storage.store_schema import ENTRIES, StoreEntry
from tests.support.serving import fdo

KEY = store_key("1" * 32, "2" * 32)
STRICT, RELAXED = {"xla_cpu_optimize_for_size": True}, {"xla_cpu_experimental_ynn_fusion_type": []}
JOB_VARIABLES = ("FDO_JOB_ID", "FDO_TEAM", "FDO_RELAXED_NUMERICS", "FDO_OPT_OUT")


def published(home: Path, relaxed: bool = True) -> Store:
    """A store whose one entry holds a relaxed config (speedup 1.5) beside its strict one (1.25)."""
    now = datetime.datetime.now(datetime.UTC)
    row = {**{name: None for name in ENTRIES.names}, "key": KEY, "fingerprint": "1" * 32,
           "env_key": "2" * 32, "kind": "graph", "speedup": 1.25, "provenance": "import",
           "expires_at": now + datetime.timedelta(days=3), "measured_at": now, "source": "test",
           "config": json.dumps(STRICT)}
    if relaxed:
        row.update(relaxed_config=json.dumps(RELAXED), relaxed_speedup=1.5)
    store = Store(home)
    store.publish(pa.Table.from_pylist([row], ENTRIES), store.current(), "test")
    return store


def test_the_team_policy_is_none_by_default_kept_by_every_publish_and_set_on_its_own(tmp_path):
    store = published(tmp_path)
    assert store.manifest(1).relaxed_numerics_teams == []
    assert store.set_relaxed_numerics_teams(["search", "ads", "search"]) == 2
    assert store.manifest(2).relaxed_numerics_teams == ["ads", "search"]
    assert store.set_relaxed_numerics_teams(("search", "ads")) is None  # that policy already
    store.update(lambda live: live.slice(0, 0), "empty")
    store.set_holdout_share(0.2)
    store.rollback(1)
    manifest = store.manifest(store.current())
    assert (manifest.version, manifest.relaxed_numerics_teams) == (5, ["ads", "search"])
    assert manifest.holdout_share == 0.2
    assert store.set_relaxed_numerics_teams([]) == 6
    assert (store.manifest(6).relaxed_numerics_teams, store.manifest(6).holdout_share) == ([], 0.2)

    # A manifest from before the policy reads as none.
    path = tmp_path / "store" / "v1" / "manifest.json"
    old = json.loads(path.read_text())
    del old["relaxed_numerics_teams"]
    path.write_text(json.dumps(old))
    assert store.manifest(1).relaxed_numerics_teams == []


def test_a_bad_team_list_is_refused_naming_it_and_nothing_is_published(tmp_path):
    store = published(tmp_path)
    for bad, named in (("search", "teams 'search'"), (None, "teams None"), (["ads", ""], "team ''"),
                       (["ads", 7], "team 7"), (["x" * 129], "team 'xxxx")):
        with pytest.raises(StoreError, match=f"the version: relaxed-numerics {named}"):
            store.set_relaxed_numerics_teams(bad)
        if bad is not None:  # None: the parent's
            with pytest.raises(StoreError, match=f"the version: relaxed-numerics {named}"):
                store.publish(store.entries(), 1, "bad", relaxed_numerics_teams=bad)
    assert store.set_relaxed_numerics_teams(["x" * 128]) == 2  # at ingest's TEAM bound: taken
    assert store.current() == 2 and [m.version for m in store.versions()] == [1, 2]
    path = tmp_path / "store" / "v2" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "relaxed_numerics_teams": "ads"}))
    with pytest.raises(StoreError, match="manifest.json unreadable: .*relaxed-numerics teams 'ads' refused"):
        store.manifest(2)


@pytest.mark.subprocess
def test_fdo_store_relaxed_teams_sets_and_clears_the_policy(tmp_path):
    store = published(tmp_path)
    result = fdo(tmp_path, "store", "relaxed-teams", "search,ads")
    assert result.returncode == 0, result.stderr
    assert "published v2: relaxed-numerics teams search, ads" in result.stdout
    assert store.manifest(2).relaxed_numerics_teams == ["ads", "search"]
    result = fdo(tmp_path, "store", "relaxed-teams", "", "--json")
    assert result.returncode == 0 and json.loads(result.stdout) == {"version": 3}
    assert store.manifest(3).relaxed_numerics_teams == []
    for bad, said in (("search,,ads", "relaxed-numerics team '' refused"), (None, "relaxed-teams: give")):
        result = fdo(tmp_path, "store", "relaxed-teams", *([] if bad is None else [bad]))
        assert result.returncode == 2 and said in result.stderr, result.stderr
    assert store.current() == 3


def test_the_hook_takes_the_relaxed_config_for_a_listed_team_or_an_opted_in_job_only(tmp_path):
    store = published(tmp_path)

    def chosen(**settings: Any) -> tuple[dict, float]:
        """The config and expected speedup the hook plans for KEY (holdout 0: always tuned)."""
        hook = Hook(HookSettings(tmp_path, holdout=0.0, **settings))
        plan = hook.decider.decide(Plan(key=KEY, found=hook.source.lookup(KEY)))
        return json.loads(plan.config_text), plan.expected_speedup

    strict, relaxed = (STRICT, 1.25), (RELAXED, 1.5)
    assert chosen() == chosen(team="search") == strict  # nobody by default
    assert chosen(relaxed_numerics=True) == relaxed
    store.set_relaxed_numerics_teams(["search"])
    assert chosen(team="search") == chosen(team="ads", relaxed_numerics=True) == relaxed
    assert chosen(team="ads") == chosen() == strict
    published(tmp_path, relaxed=False)  # an entry without a relaxed config: strict for all
    assert chosen(team="search") == chosen(relaxed_numerics=True) == strict

    entry = StoreEntry.from_json({"key": KEY, "fingerprint": "1" * 32, "env_key": "2" * 32, "kind": "graph",
                                  "config": STRICT, "speedup": 1.25})
    found = Found(3, entry, relaxed_numerics_teams=("ads", "search"))
    assert HookSettings(tmp_path, team="ads").takes_relaxed(found)
    assert not HookSettings(tmp_path, team="infra").takes_relaxed(found)
    assert not HookSettings(tmp_path).takes_relaxed(found)


def test_the_team_comes_from_fdo_team_or_install(monkeypatch, tmp_path):
    monkeypatch.delenv("FDO_TEAM", raising=False)
    assert HookSettings.from_environment().team == ""
    monkeypatch.setenv("FDO_TEAM", "search")
    assert HookSettings.from_environment().team == "search"
    try:
        assert install(home=tmp_path, team="ads").settings.team == "ads"
        assert install(home=tmp_path).settings.team == "search"
    finally:
        uninstall()


def test_install_takes_each_setting_it_is_given_and_the_environment_s_for_the_rest(monkeypatch, tmp_path):
    """Every parameter of install() is the HookSettings field of its name (it merges them by
    name): those given replace the environment's settings, the others (None) keep them."""
    assert set(inspect.signature(install).parameters) == {f.name for f in dataclasses.fields(HookSettings)}
    monkeypatch.setenv("FDO_TEAM", "search")
    monkeypatch.setenv("FDO_STORE_TIMEOUT", "0.5")
    try:
        settings = install(home=str(tmp_path), timeout=None, holdout=0.0, opt_out=True, decision_timeout=7.0).settings
        assert settings == dataclasses.replace(HookSettings.from_environment(), home=tmp_path, holdout=0.0,
                                               opt_out=True, decision_timeout=7.0)
        assert (settings.team, settings.timeout) == ("search", 0.5)
        with pytest.raises(ValueError, match="holdout=1.5"):
            install(home=tmp_path, holdout=1.5)
    finally:
        uninstall()


@pytest.mark.subprocess
def test_fdo_run_sets_the_job_from_its_job_file_and_refuses_a_bad_one_naming_it(tmp_path):
    show = f"import json, os; print(json.dumps({{n: os.environ[n] for n in {JOB_VARIABLES!r}}}))"
    unset = {name: "" for name in JOB_VARIABLES}  # whatever the test's own environment holds
    path = tmp_path / "fdo-job.json"

    def run(job: dict | str, *options: str) -> subprocess.CompletedProcess:
        path.write_text(job if isinstance(job, str) else json.dumps(job))
        return fdo(tmp_path, "run", "--job-file", str(path), *options, "--", sys.executable, "-c", show,
                   env=unset)

    def variables(job: dict, *options: str) -> tuple[str, ...]:
        result = run(job, *options)
        assert result.returncode == 0, result.stderr
        return tuple(json.loads(result.stdout).values())

    job = {"job_id": "train-7", "team": "search", "chips": 8}
    assert variables({**job, "relaxed_numerics": True, "opted_out": True}) == ("train-7", "search", "1", "1")
    assert variables({**job, "relaxed_numerics": False}) == ("train-7", "search", "", "")
    assert variables(job, "--job-id", "train-8", "--relaxed-numerics") == ("train-8", "search", "1", "")
    for bad in ({**job, "relaxed_numerics": "yes"}, {**job, "job_id": ""}, "{not json", "[]"):
        result = run(bad)
        assert result.returncode == 2 and result.stderr.startswith(f"fdo run: {path}: "), result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
    missing = fdo(tmp_path, "run", "--job-file", str(tmp_path / "none.json"), "--", sys.executable, "-c", "")
    assert missing.returncode == 2 and missing.stderr.startswith(f"fdo run: {tmp_path / 'none.json'}: ")


def test_a_relaxed_config_without_its_speedup_is_refused_by_the_store_and_from_a_service(tmp_path):
    from delivery.lookup import _parse_answer

    store = published(tmp_path)
    live = store.entries()
    for bad in (None, 0.0, -1.0, float("nan"), float("inf")):
        rows = live.set_column(live.schema.get_field_index("relaxed_speedup"), "relaxed_speedup",
                               pa.array([bad], pa.float64()))
        with pytest.raises(StoreError, match=f"entry {KEY}: relaxed speedup {bad!r} refused"):
            store.publish(rows, store.current(), "bad relaxed speedup")
    assert store.current() == 1

    entry = {"key": KEY, "fingerprint": "1" * 32, "env_key": "2" * 32, "kind": "graph",
             "config": STRICT, "speedup": 1.25, "relaxed_config": RELAXED}
    def answer(**fields: Any) -> Found | None:
        return _parse_answer(json.dumps({"version": 3, "entry": {**entry, **fields}}).encode())
    # A service that sends a relaxed config must send a number with it; else no answer at all.
    for bad in ({}, {"relaxed_speedup": "fast"}, {"relaxed_speedup": True}, {"relaxed_speedup": -2}):
        assert answer(**bad) is None, bad
    assert answer(relaxed_speedup=2).entry.relaxed_speedup == 2
