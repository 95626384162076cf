"""Reach without a compile: the transfers a graph gets (tuner.transfer), what is decided per key
(tuner.decided), the night's plan that covers before it deepens (tuner.plan), a result shared
with the keys measured alike, what deliver publishes of it, and the decided share of the
coverage. A warehouse and a store written by hand."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace

import pyarrow as pa
import pytest

from delivery.deliver import accepted_as_entries
from delivery.store_writer import Store
from hlo.environment import Environment, Partitioning, store_key
from ingest.tables import GRAPH_RUNS, GRAPHS, partitioning_text
from ranking.tables import CANDIDATES
from ranking.verified_coverage import verified_coverage
from storage.home_factory import open_home
from storage.store_reader import StoreReader
from storage.store_schema import ENTRIES
from storage.warehouse import Warehouse
from tuner.decided import DECISION_DAYS, conclusive, key_statuses
from tuner.persist import finished_result, save_result, share_result
from tuner.plan import (
    CHECK_PRIOR,
    UNDER_BAR_PRIOR,
    NightState,
    Path,
    PlannedTask,
    check_chance,
    checks_first,
    deferred_kin,
    land_shared,
    plan_checks,
    plan_searches,
)
from tuner.result import TuneResult
from tuner.tables import TRIALS, TUNING_RESULTS
from tuner.task_seconds import TaskSeconds
from tuner.transfer import MAX_TRANSFERS, TRANSFER_CHECK, Kinship, Transfer, TransferSources, key_text
from tuner.tune import TuneSettings
from vocabulary.interval import Interval
from vocabulary.measure import MeasureMode
from vocabulary.store import Provenance
from vocabulary.tuning import KeyDecision, Kind, Origin, StopReason, Verdict

DAY = datetime.date(2026, 5, 2)
NOW = datetime.datetime(2026, 5, 2, 12, tzinfo=datetime.UTC)
COMPILER = "jaxlib-new"
HERE = Environment("cpu", "test-cpu", 1, COMPILER)
OLD_RELEASE = Environment("cpu", "test-cpu", 1, "jaxlib-new+20260401")  # measured as HERE is
EIGHT = Environment("cpu", "test-cpu", 8, COMPILER, partitioning=Partitioning(partitions=8, spmd=True))
OTHER_CPU = Environment("cpu", "another-cpu", 1, COMPILER)
REDUCE = {"placement:REDUCE": "xla"}
SCHEDULER = {"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"}
REGION = {"xla_cpu_copy_insertion_use_region_analysis": True}
FAST_MATH = {"xla_cpu_enable_fast_math": True}


def fp(n: int) -> str:
    return f"{n:032x}"


def graph(home, n: int, env: Environment = HERE) -> None:
    Warehouse(home).append(GRAPHS, pa.Table.from_pylist([{
        "dt": DAY, "fingerprint": fp(n), "env_key": env.key(), "module_name": f"m{n}", "n_instructions": 3,
        "hlo_blob": f"{fp(n)}.hlo.zst", "optimized_blob": None, "optimized_fingerprint": None,
        "platform": env.platform, "device_kind": env.device_kind, "device_count": env.device_count,
        "compiler_version": env.compiler_version, "first_seen": NOW, "last_seen": NOW,
        "partitioning": partitioning_text(env.partitioning),
        "family": next((f"{family:0>32}" for family, members in FAMILIES.items() if n in members), None)}],
        GRAPHS.schema), f"graph-{n}-{env.key()}")


def entry(n: int, env: Environment, config: dict, low: float, measured: datetime.datetime = NOW,
          provenance: str = "tuner") -> dict:
    return {"key": store_key(fp(n), env.key()), "fingerprint": fp(n), "env_key": env.key(), "kind": "graph",
            "speedup": low + 0.1, "expires_at": NOW + datetime.timedelta(days=365), "provenance": provenance,
            "config": json.dumps(config), "ci_low": low, "ci_high": low + 0.2, "compiler_version": COMPILER,
            "measured_at": measured, "source": f"task-{n}-{env.key()[:6]}"}


def publish(home, *entries: dict) -> None:
    Store(home).publish(pa.Table.from_pylist(list(entries), ENTRIES), None, "test")


def result_row(n: int, env: Environment, status: Verdict, config: dict | None = None, *,
               strategy: str = "evolution", stop: StopReason | None = StopReason.STALLED,
               evaluations: int = 12, dt: datetime.date = DAY, low: float | None = None,
               origin: Origin = Origin.SEARCH, task: str | None = None) -> dict:
    accepted = status == Verdict.ACCEPTED
    return {"dt": dt, "task_id": task or f"{n}-{env.key()[:6]}-{status}-{strategy}-{dt}", "kind": "graph",
            "fingerprint": fp(n), "env_key": env.key(), "config": json.dumps(config or {}),
            "speedup": (low or 1.0) + 0.05, "ci_low": low, "ci_high": None, "numerics_ok": True,
            "compiler_version": COMPILER, "accepted": accepted, "status": str(status), "strategy": strategy,
            "evaluations": evaluations, "measured": evaluations, "search_stop": stop,
            "origin": str(origin)}


def results(home, *rows: dict) -> None:
    for row in rows:
        Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist([row], TUNING_RESULTS.schema), row["task_id"])


def tried(home, n: int, env: Environment, config: dict) -> None:
    Warehouse(home).append(TRIALS, pa.Table.from_pylist([{
        "dt": DAY, "trial_id": f"t-{n}-{json.dumps(config)}", "task_id": f"t-{n}", "kind": "graph",
        "fingerprint": fp(n), "env_key": env.key(), "strategy": "evolution", "index": 1,
        "config": json.dumps(config, separators=(",", ":"), sort_keys=True), "outcome": "measured",
        "speedup": 0.99, "ci_low": 0.97, "ci_high": 1.01, "numerics_ok": True}], TRIALS.schema),
        f"trials-{n}-{json.dumps(config)}")


def ranked(home, *keys: tuple[int, Environment, float]) -> None:
    Warehouse(home).replace(CANDIDATES, pa.Table.from_pylist([
        {"dt": DAY, "kind": "graph", "fingerprint": fp(n), "env_key": env.key(), "graph_fingerprint": fp(n),
         "chip_seconds": hours * 3600, "share": 0.1, "rank": rank}
        for rank, (n, env, hours) in enumerate(keys, start=1)], CANDIDATES.schema), "candidates", [DAY.isoformat()])


# Graphs 1, 2 and 3 are one model at three shapes (family "A"); 4 is another model (family "B").
FAMILIES = {"A": (1, 2, 3), "B": (4,)}


def families_of(*envs: Environment) -> dict[tuple[str, str], str]:
    return {(fp(n), env.key()): family for family, members in FAMILIES.items() for n in members for env in envs}


def sources(home) -> TransferSources:
    return TransferSources.load(open_home(home), families_of(HERE, OLD_RELEASE, EIGHT, OTHER_CPU))


def state(home) -> NightState:
    environments = frozenset(e.key() for e in (HERE, OLD_RELEASE, EIGHT))
    return NightState.load(open_home(home), environments, DAY, families_of(HERE, OLD_RELEASE, EIGHT, OTHER_CPU),
                           COMPILER)


def test_transfers_come_nearest_kin_first_strict_untried_and_of_the_same_device_kind(tmp_path):
    for n, env in ((1, HERE), (1, EIGHT), (2, HERE), (3, HERE), (3, OTHER_CPU), (4, HERE)):
        graph(tmp_path, n, env)
    publish(tmp_path,
            entry(1, EIGHT, SCHEDULER, 1.10),  # the same program on 8 devices
            entry(2, HERE, REDUCE, 1.50),  # the family, at another shape
            entry(3, HERE, REGION, 1.20),  # the family too, a lower bound below graph 2's
            entry(3, OTHER_CPU, {"placement:INDIVIDUAL_DOT": "xla"}, 3.0),  # another CPU: never
            entry(4, HERE, FAST_MATH, 2.0))  # relaxes numerics: never a transfer
    found = sources(tmp_path).candidates((fp(1), HERE.key()))
    assert [(t.config, t.kinship) for t in found] == [
        (SCHEDULER, Kinship.SAME_PROGRAM), (REDUCE, Kinship.FAMILY), (REGION, Kinship.FAMILY)]
    assert found[0].source == key_text((fp(1), EIGHT.key())) and found[1].speedup == 1.5
    assert len(found) == MAX_TRANSFERS
    tried(tmp_path, 1, HERE, REDUCE)  # a config the key tried already is no transfer
    assert [t.config for t in sources(tmp_path).candidates((fp(1), HERE.key()))] == [SCHEDULER, REGION]


def test_a_graph_without_kin_gets_the_configs_that_won_on_the_most_graphs_of_its_platform(tmp_path):
    for n in (1, 4, 5, 6, 7):
        graph(tmp_path, n)
    results(tmp_path,
            result_row(5, HERE, Verdict.ACCEPTED, REGION, low=1.05),
            result_row(6, HERE, Verdict.ACCEPTED, REGION, low=1.03),
            result_row(7, HERE, Verdict.ACCEPTED, SCHEDULER, low=1.40),
            result_row(5, HERE, Verdict.NO_GAIN, REDUCE, low=0.99, task="no-gain"))
    found = sources(tmp_path).candidates((fp(4), HERE.key()))
    # REGION won on two graphs, SCHEDULER on one, REDUCE on none.
    assert [(t.config, t.kinship, t.graphs) for t in found] == [
        (REGION, Kinship.PLATFORM, 2), (SCHEDULER, Kinship.PLATFORM, 1)]
    assert found[0].source == key_text((fp(5), HERE.key()))  # where it verified best


def test_a_search_decides_a_transfer_check_that_found_nothing_does_not(tmp_path):
    for n in (1, 2, 3, 4, 5):
        graph(tmp_path, n)
    results(tmp_path,
            result_row(1, HERE, Verdict.NO_GAIN),  # a search: the defaults are best
            result_row(2, HERE, Verdict.NO_GAIN, REDUCE, strategy=TRANSFER_CHECK, stop=StopReason.BUDGET,
                       origin=Origin.TRANSFER),  # a check: nothing of its siblings' held up
            result_row(3, HERE, Verdict.NO_GAIN, stop=StopReason.TIME, evaluations=3),  # cut short
            result_row(4, HERE, Verdict.ACCEPTED, REDUCE, low=1.4),  # accepted, not live (invalidated)
            result_row(5, HERE, Verdict.NO_GAIN, strategy=TRANSFER_CHECK, stop=StopReason.TIME,
                       evaluations=0, origin=Origin.TRANSFER))  # a check out of time before a screen
    statuses = key_statuses(open_home(tmp_path), sources(tmp_path), DAY, COMPILER)
    one, two, three, four, five = (statuses[(fp(n), HERE.key())] for n in (1, 2, 3, 4, 5))
    assert (one.decision, one.stands) == (KeyDecision.DEFAULTS, True)
    assert (two.decision, two.concluded, two.checked) == (None, False, True)
    assert (three.decision, three.concluded, three.attempts) == (None, False, 1)
    # A check that measured nothing found nothing: the key is not "checked", and its next check
    # is a task of its own (a finished task's id would hand back its empty result).
    assert (five.decision, five.concluded, five.checked, five.attempts) == (None, False, False, 1)
    check = PlannedTask(Path.CHECK, (fp(5), HERE.key()), transfers=(
        Transfer(REDUCE, key_text((fp(2), HERE.key())), Kinship.FAMILY, 1.4),))
    base = TuneSettings()
    assert check.settings(base).seed != replace(check, attempt=five.attempts).settings(base).seed
    assert (four.decision, four.concluded) == (None, True)  # no new search: its config did not hold up
    publish(tmp_path, entry(4, HERE, REDUCE, 1.4))
    assert key_statuses(open_home(tmp_path), sources(tmp_path), DAY, COMPILER)[(fp(4), HERE.key())].decision \
        == KeyDecision.FASTER
    later = DAY + datetime.timedelta(days=DECISION_DAYS)
    expired = key_statuses(open_home(tmp_path), sources(tmp_path), later, COMPILER)
    assert (fp(1), HERE.key()) not in expired  # older than a decision lives: nothing stands
    assert not conclusive(TRANSFER_CHECK, Verdict.NO_GAIN, StopReason.EXHAUSTED, 3)
    assert conclusive(TRANSFER_CHECK, Verdict.ACCEPTED, StopReason.EXHAUSTED, 3)


def test_a_decision_is_reopened_when_a_sibling_verifies_a_config_it_has_not_tried(tmp_path):
    graph(tmp_path, 1)
    graph(tmp_path, 2)
    results(tmp_path, result_row(1, HERE, Verdict.NO_GAIN))
    publish(tmp_path, entry(2, HERE, REDUCE, 1.3, measured=NOW + datetime.timedelta(days=2)))
    status = key_statuses(open_home(tmp_path), sources(tmp_path), DAY, COMPILER)[(fp(1), HERE.key())]
    assert status.moved and not status.stands and status.decision is None
    tried(tmp_path, 1, HERE, REDUCE)  # its transfer check tried it: the decision stands again
    status = key_statuses(open_home(tmp_path), sources(tmp_path), DAY, COMPILER)[(fp(1), HERE.key())]
    assert status.stands and status.decision == KeyDecision.DEFAULTS


def test_keys_measured_alike_share_a_conclusion_and_form_one_task(tmp_path):
    # Graph 1 runs here, on an old release (measured alike: the tuner runs its own compiler)
    # and on 8 devices (measured otherwise); graph 2 is its family's, verified 1.5x.
    for env in (HERE, OLD_RELEASE, EIGHT):
        graph(tmp_path, 1, env)
        graph(tmp_path, 4, env)
    graph(tmp_path, 2)
    publish(tmp_path, entry(2, HERE, REDUCE, 1.5))
    ranked(tmp_path, (1, HERE, 50.0), (1, OLD_RELEASE, 30.0), (1, EIGHT, 10.0), (4, HERE, 5.0),
           (4, OLD_RELEASE, 4.0))
    home = open_home(tmp_path)
    night = state(tmp_path)
    assert night.measured[(fp(1), HERE.key())] == night.measured[(fp(1), OLD_RELEASE.key())]
    assert night.measured[(fp(1), HERE.key())] != night.measured[(fp(1), EIGHT.key())]
    checks = plan_checks(home, DAY, night, TaskSeconds())
    # Graph 1 here and on the old release: one check (its family's config); on 8 devices,
    # another; graph 4 has no kin and nothing won broadly: no check.
    assert [(c.key, c.alike, [t.config for t in c.transfers]) for c in checks] == [
        ((fp(1), HERE.key()), (OLD_RELEASE.key(),), [REDUCE]), ((fp(1), EIGHT.key()), (), [REDUCE])]
    assert plan_checks(home, DAY, night, TaskSeconds()) == checks  # read back as planned
    # Graph 4 concluded here by a search: its old release takes the result, no task.
    results(tmp_path, result_row(4, HERE, Verdict.NO_GAIN, task="four-here"))
    save_result(home, _result(4, HERE, "four-here"))
    night = state(tmp_path)
    assert night.shares() == [("four-here", OLD_RELEASE.key())]
    shared = share_result(home, finished_result(home, "four-here"), OLD_RELEASE.key())
    assert (shared.origin, shared.transferred_from) == (Origin.SHARED, key_text((fp(4), HERE.key())))
    statuses = key_statuses(home, sources(tmp_path), DAY, COMPILER)
    assert statuses[(fp(4), OLD_RELEASE.key())].decision == KeyDecision.DEFAULTS
    assert share_result(home, finished_result(home, "four-here"), OLD_RELEASE.key()) == shared  # idempotent


def test_searches_go_by_worth_seeded_with_transfers_and_a_transferred_win_competes_discounted(tmp_path):
    for n in (1, 2, 3, 4):
        graph(tmp_path, n)
    publish(tmp_path, entry(2, HERE, REDUCE, 1.5))
    ranked(tmp_path, (1, HERE, 40.0), (4, HERE, 30.0), (3, HERE, 15.0))
    home = open_home(tmp_path)
    accepted = {(fp(1), HERE.key()): Transfer(REDUCE, key_text((fp(2), HERE.key())), Kinship.FAMILY, 1.5)}
    results(tmp_path, result_row(1, HERE, Verdict.ACCEPTED, REDUCE, strategy=TRANSFER_CHECK, low=1.45,
                                 origin=Origin.TRANSFER))
    searches = plan_searches(home, DAY, state(tmp_path), 2, 10, accepted,
                             seconds=TaskSeconds(steps={(fp(4), HERE.key()): 0.05}))
    # Graph 1 is concluded by its accepted check: at half its worth (20) it ranks behind graph 4
    # (30) and before graph 3 (15).
    assert [s.key for s in searches] == [(fp(4), HERE.key()), (fp(1), HERE.key())]
    assert searches[1].transfers == (accepted[(fp(1), HERE.key())],)
    assert [t.config for t in searches[0].transfers] == [REDUCE]  # graph 4 has no kin: the broad winner
    assert all(s.path is Path.SEARCH and s.allotment is not None for s in searches)
    # Each carries what its verification is expected to take: graph 4's pairs at its 50 ms step
    # on top of the workers' starts, graph 1's (no step known) the starts alone.
    assert searches[0].verify_seconds > searches[1].verify_seconds == TaskSeconds().verify_of(searches[1].key) > 0
    unseeded = plan_searches(home, DAY + datetime.timedelta(days=1), state(tmp_path), 2, 10, {}, transfer=False)
    assert all(s.transfers == () for s in unseeded)


def test_a_transfer_whose_figure_is_under_the_groups_bar_is_given_little_chance():
    # A sibling's 1.04x clears a whole program's 1% bar, not the per-device mode's 11%: a check
    # there is seldom accepted, whatever the kinship; a 1.3x clears both.
    small, large = (Transfer(REDUCE, "a/b", kinship, figure)
                    for kinship, figure in ((Kinship.SAME_PROGRAM, 1.04), (Kinship.FAMILY, 1.3)))
    assert check_chance(small, MeasureMode.WHOLE) == CHECK_PRIOR[Kinship.SAME_PROGRAM]
    assert check_chance(small, MeasureMode.PER_DEVICE) == UNDER_BAR_PRIOR
    assert check_chance(large, MeasureMode.PER_DEVICE) == CHECK_PRIOR[Kinship.FAMILY] > UNDER_BAR_PRIOR
    assert check_chance(Transfer(REDUCE, "a/b", Kinship.FAMILY, 1.005), MeasureMode.WHOLE) == UNDER_BAR_PRIOR


def test_a_planned_task_runs_as_a_check_or_a_seeded_search_and_survives_json(tmp_path):
    transfer = Transfer(REDUCE, "a/b", Kinship.FAMILY, 1.4)
    check = PlannedTask(Path.CHECK, (fp(1), HERE.key()), (OLD_RELEASE.key(),), (transfer,))
    settings = check.settings(TuneSettings(budget_evals=24))
    assert (settings.transfer_check, settings.budget_evals, settings.transfers) == (True, 1, (transfer,))
    search = PlannedTask(Path.SEARCH, (fp(1), HERE.key()), (), (transfer,), attempt=2, verify_seconds=36.0)
    settings = search.settings(TuneSettings(budget_evals=24, seed=5))
    assert (settings.transfer_check, settings.budget_evals, settings.seed) == (False, 24, 7)
    assert settings.verify_seconds == 36.0
    assert PlannedTask.from_json(json.loads(json.dumps(check.to_json()))) == check
    assert PlannedTask.from_json(json.loads(json.dumps(search.to_json()))) == search
    with pytest.raises(ValueError, match="transfer check needs transfers"):
        TuneSettings(transfer_check=True)


def test_a_check_that_found_nothing_is_not_shared_an_accepted_one_is(tmp_path):
    home = open_home(tmp_path)
    check = PlannedTask(Path.CHECK, (fp(1), HERE.key()), (OLD_RELEASE.key(),),
                        (Transfer(REDUCE, "a/b", Kinship.FAMILY, 1.4),))
    nothing = TuneResult("c1", fp(1), HERE.key(), Verdict.NO_GAIN, REDUCE, Interval(1.0, 0.98, 1.02), True,
                         1, 1, TRANSFER_CHECK, COMPILER, origin=Origin.TRANSFER)
    assert land_shared(home, check, nothing) == []
    won = TuneResult("c2", fp(1), HERE.key(), Verdict.ACCEPTED, REDUCE, Interval(1.5, 1.4, 1.6), True,
                     1, 1, TRANSFER_CHECK, COMPILER, origin=Origin.TRANSFER, transferred_from="a/b")
    [shared] = land_shared(home, check, won)
    assert (shared.env_key, shared.accepted, shared.origin) == (OLD_RELEASE.key(), True, Origin.SHARED)


def test_deliver_publishes_where_a_config_came_from_and_reads_old_results_as_searched(tmp_path):
    today = datetime.date.today()  # deliver's entries live a month from their result's day
    rows = [result_row(1, HERE, Verdict.ACCEPTED, REDUCE, low=1.4, origin=Origin.TRANSFER, dt=today) |
            {"transferred_from": "a/b"},
            result_row(2, HERE, Verdict.ACCEPTED, REDUCE, low=1.3, dt=today) | {"origin": None}]
    table = pa.Table.from_pylist(rows, TUNING_RESULTS.schema)
    entries = accepted_as_entries(table).to_pylist()
    assert [(e["origin"], e["transferred_from"]) for e in entries] == [("transfer", "a/b"), ("search", None)]
    publish(tmp_path, *entries)
    records = StoreReader(open_home(tmp_path)).live_records()
    assert [r.origin for r in records] == [Origin.TRANSFER, Origin.SEARCH]
    assert records[0].provenance is Provenance.TUNER


def test_the_decided_share_counts_the_defaults_verified_best_beside_the_faster(tmp_path):
    for n, hours in ((1, 50.0), (2, 30.0), (3, 20.0)):
        graph(tmp_path, n)
        Warehouse(tmp_path).append(GRAPH_RUNS, pa.Table.from_pylist([{
            "dt": DAY, "job_id": f"job-{n}", "team": "t", "fingerprint": fp(n), "env_key": HERE.key(),
            "device_kind": HERE.device_kind, "compiler_version": COMPILER, "chips": 1, "executions": 10,
            "chip_seconds": hours * 3600, "opted_out": False, "config_key": None, "config_version": None,
            "expected_speedup": None, "holdout": None}], GRAPH_RUNS.schema), f"runs-{n}")
    publish(tmp_path, entry(1, HERE, REDUCE, 1.4))
    covered = verified_coverage(open_home(tmp_path), DAY, DAY, frozenset({HERE.key()}),
                                defaults_kept={(fp(2), HERE.key())})
    assert covered.share == pytest.approx(0.5) and covered.decided_share == pytest.approx(0.8)
    assert (covered.covered_keys, covered.decided_keys) == (1, 2)


def _result(n: int, env: Environment, task_id: str) -> TuneResult:
    return TuneResult(task_id, fp(n), env.key(), Verdict.NO_GAIN, {}, Interval(1.0, 0.98, 1.02), True, 12, 12,
                      "evolution", COMPILER, search_stop=StopReason.STALLED)


def test_a_check_and_a_search_of_one_key_are_tasks_of_their_own_that_travel_to_a_node():
    import pickle

    from hlo.module import HloModule
    from tasks.records import TuneTask
    from tuner.target import Subject

    subject = Subject(HloModule(b"", "m", "m"), fp(1), "m")
    transfer = Transfer(REDUCE, "a/b", Kinship.FAMILY, 1.4)
    check = PlannedTask(Path.CHECK, (fp(1), HERE.key()), (), (transfer,)).settings(TuneSettings(budget_evals=1))
    search = TuneSettings(budget_evals=1, transfers=(transfer,))
    tasks = [TuneTask.of(Kind.GRAPH, "m", subject, HERE.key(), settings) for settings in (check, search)]
    assert tasks[0].key != tasks[1].key  # a check's attempts are not a search's
    assert pickle.loads(pickle.dumps(tasks[0])).settings == check  # a node gets its transfers
    assert search.transfers == check.transfers


def test_fdo_family_lists_a_graphs_family_with_what_is_decided_and_live_for_each(tmp_path, capsys):
    from pipelines.cli import main

    for n, env in ((1, HERE), (1, OLD_RELEASE), (2, HERE), (3, HERE), (4, HERE)):
        graph(tmp_path, n, env)
    source = key_text((fp(3), HERE.key()))
    publish(tmp_path, entry(2, HERE, REDUCE, 1.5) | {"origin": "transfer", "transferred_from": source})
    results(tmp_path, result_row(3, HERE, Verdict.NO_GAIN, dt=datetime.date.today())
            | {"compiler_version": current_compiler()})
    assert main(["--home", str(tmp_path), "family", fp(2), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["family"] == f"{'A':0>32}"
    members = {(m["fingerprint"], m["env_key"]): m for m in shown["members"]}
    assert set(members) == {(fp(1), HERE.key()), (fp(1), OLD_RELEASE.key()), (fp(2), HERE.key()), (fp(3), HERE.key())}
    assert members[(fp(2), HERE.key())]["decision"] == "faster"
    assert members[(fp(2), HERE.key())]["entry"]["origin"] == "transfer"
    assert members[(fp(3), HERE.key())]["decision"] == "defaults" and members[(fp(1), HERE.key())]["decision"] is None
    assert main(["--home", str(tmp_path), "family", "f" * 32]) == 1  # no graph of it: said, exit 1


def current_compiler() -> str:
    from hlo.environment import current_environment

    return current_environment().compiler_version


def test_checks_go_by_what_they_may_decide_and_a_group_whose_check_failed_waits_for_kin(tmp_path):
    for n in (1, 2, 3, 4, 5):
        graph(tmp_path, n)
    publish(tmp_path, entry(2, HERE, REDUCE, 1.5))  # graph 1's family (A)
    results(tmp_path, result_row(5, HERE, Verdict.ACCEPTED, SCHEDULER, low=1.2))  # won on the platform
    ranked(tmp_path, (1, HERE, 15.0), (4, HERE, 20.0))
    home = open_home(tmp_path)
    checks = plan_checks(home, DAY, state(tmp_path), TaskSeconds())
    # Graph 1 (15 h, its family's config: 0.6 of it, 9) before graph 4 (20 h, a platform winner: 0.35, 7).
    assert [(c.key[0], [t.kinship for t in c.transfers]) for c in checks] == [
        (fp(1), [Kinship.FAMILY, Kinship.PLATFORM]), (fp(4), [Kinship.PLATFORM])]
    # Graph 4's check found nothing: no more platform winners for it, a search next.
    results(tmp_path, result_row(4, HERE, Verdict.NO_GAIN, SCHEDULER, strategy=TRANSFER_CHECK,
                                 stop=StopReason.BUDGET, origin=Origin.TRANSFER))
    results(tmp_path, result_row(3, HERE, Verdict.ACCEPTED, REGION, low=1.1))  # a new platform winner
    later = plan_checks(home, DAY + datetime.timedelta(days=1), state(tmp_path), TaskSeconds())
    assert fp(4) not in {c.key[0] for c in later}
    searches = plan_searches(home, DAY + datetime.timedelta(days=1), state(tmp_path), 3, 10, {})
    assert fp(4) in {s.key[0] for s in searches}


def test_with_transfer_a_night_searches_one_group_of_a_kin_and_checks_the_others_after(tmp_path):
    # Graph 1 here and on 8 devices (two groups), graph 2 its family's; graph 4 another model.
    for n, env in ((1, HERE), (1, EIGHT), (2, HERE), (4, HERE)):
        graph(tmp_path, n, env)
    ranked(tmp_path, (1, HERE, 50.0), (1, EIGHT, 40.0), (2, HERE, 30.0), (4, HERE, 20.0))
    home = open_home(tmp_path)
    assert plan_checks(home, DAY, state(tmp_path), TaskSeconds()) == []  # nothing verified anywhere yet
    searches = plan_searches(home, DAY, state(tmp_path), 3, 10, {})
    assert [s.key for s in searches] == [(fp(1), HERE.key()), (fp(4), HERE.key())]
    assert deferred_kin(state(tmp_path), searches) == 2  # graph 1 on 8 devices, graph 2
    assert deferred_kin(state(tmp_path), searches[1:]) == 0  # graph 4 has no kin
    each = plan_searches(home, DAY + datetime.timedelta(days=1), state(tmp_path), 3, 10, {}, transfer=False)
    assert [s.key for s in each] == [(fp(1), HERE.key()), (fp(1), EIGHT.key()), (fp(2), HERE.key())]
    # Graph 1's search is accepted (graph 4's found nothing): its kin get checks in the time the
    # night has left, nearest kin first (the same program on 8 devices: 40 h x 0.8, before the
    # sibling's 30 h x 0.6), before the deliver stage has published the result.
    results(tmp_path, result_row(1, HERE, Verdict.ACCEPTED, REDUCE, low=1.4), result_row(4, HERE, Verdict.NO_GAIN))
    assert StoreReader(tmp_path).current() is None
    late = plan_checks(home, DAY, state(tmp_path), TaskSeconds(), late=True)
    assert [(c.key, [t.kinship for t in c.transfers]) for c in late] == [
        ((fp(1), EIGHT.key()), [Kinship.SAME_PROGRAM]), ((fp(2), HERE.key()), [Kinship.FAMILY])]
    assert plan_checks(home, DAY, state(tmp_path), TaskSeconds()) == []  # the first pass's plan, as written


def test_an_undelivered_accepted_result_is_a_source_until_a_store_version_holds_it(tmp_path):
    for n in (1, 2):
        graph(tmp_path, n, HERE)
    sibling = (fp(2), HERE.key())
    won = result_row(1, HERE, Verdict.ACCEPTED, REDUCE, low=1.4)
    results(tmp_path, won, result_row(1, HERE, Verdict.ACCEPTED, REGION, low=1.2, task="a-weaker-one"),
            result_row(1, HERE, Verdict.ACCEPTED, FAST_MATH, low=2.0, task="relaxes-numerics"))
    # Not yet delivered: the best strict one transfers, dated as deliver will date it.
    found = sources(tmp_path).candidates(sibling)
    assert [(t.config, t.kinship, t.speedup) for t in found[:1]] == [(REDUCE, Kinship.FAMILY, 1.4)]
    assert sources(tmp_path).verified[(fp(1), HERE.key())].measured_at == datetime.datetime(
        DAY.year, DAY.month, DAY.day, tzinfo=datetime.UTC)
    # Delivered, then taken out (the validator invalidated it): the old result does not come back.
    publish(tmp_path, {**entry(1, HERE, REDUCE, 1.4), "source": won["task_id"]})
    Store(tmp_path).update(lambda live: live.slice(0, 0), "invalidated")
    assert (fp(1), HERE.key()) not in sources(tmp_path).verified
    assert [t.kinship for t in sources(tmp_path).candidates(sibling)] == [Kinship.PLATFORM] * 2
    # A later night's result for the key is a source again, until it is delivered.
    results(tmp_path, result_row(1, HERE, Verdict.ACCEPTED, SCHEDULER, low=1.3, dt=DAY + datetime.timedelta(days=1)))
    assert sources(tmp_path).verified[(fp(1), HERE.key())].config == SCHEDULER


def checkable(home, graph_6_hours: float) -> None:
    """Graph 1 with a family transfer (30 h), graph 6 with a platform one (`graph_6_hours`), and
    graph 4 (40 h), whose check found nothing: a search next."""
    for n in (1, 2, 4, 6, 7):
        graph(home, n)
    publish(home, entry(2, HERE, REDUCE, 1.5))  # graph 1's family (A)
    results(home, result_row(7, HERE, Verdict.ACCEPTED, SCHEDULER, low=1.2))  # won on the platform
    results(home, result_row(4, HERE, Verdict.NO_GAIN, SCHEDULER, strategy=TRANSFER_CHECK,
                                 stop=StopReason.BUDGET, origin=Origin.TRANSFER))  # graph 4: a search next
    ranked(home, (1, HERE, 30.0), (4, HERE, 40.0), (6, HERE, graph_6_hours))


def test_a_small_groups_check_waits_behind_the_search_of_a_large_group_whose_check_found_nothing(tmp_path):
    checkable(tmp_path, 2.0)
    home = open_home(tmp_path)
    checks = plan_checks(home, DAY, state(tmp_path), TaskSeconds())
    assert [c.key[0] for c in checks] == [fp(1), fp(6)]
    # A second of graph 4's search decides 40 h / 120 s; of graph 1's check 30 h x 0.6 / 30 s,
    # more; of graph 6's, 2 h x 0.35 / 30 s, far less: it waits until after the searches.
    first, waiting = checks_first(state(tmp_path), checks, TaskSeconds(check=30.0, search=120.0))
    assert [c.key[0] for c in first] == [fp(1)] and [c.key[0] for c in waiting] == [fp(6)]
    searches = plan_searches(home, DAY, state(tmp_path), 3, 10, {}, waiting=frozenset(c.key for c in waiting))
    assert fp(4) in {s.key[0] for s in searches} and fp(6) not in {s.key[0] for s in searches}
    # Where a search took as long as 70 checks, both checks come first.
    first, waiting = checks_first(state(tmp_path), checks, TaskSeconds(check=30.0, search=2100.0))
    assert [c.key[0] for c in first] == [fp(1), fp(6)] and waiting == []


def test_each_planned_check_carries_the_seconds_its_programs_step_time_says_it_will_take(tmp_path):
    checkable(tmp_path, 8.0)
    home = open_home(tmp_path)
    # Past checks took 12 s on a 1 ms program and 130 s on a 1 s one; graph 1 runs 1 s a step.
    seconds = TaskSeconds(steps={(fp(1), HERE.key()): 1.0, (fp(6), HERE.key()): 0.001},
                          checks=((0.001, 12.0), (0.03, 40.0), (1.0, 130.0)))
    checks = plan_checks(home, DAY, state(tmp_path), seconds)
    # By what each decides (30 h x 0.6 against 8 h x 0.35), whatever it takes.
    assert [c.key[0] for c in checks] == [fp(1), fp(6)]
    assert checks[0].expected_seconds > 100 > 20 > checks[1].expected_seconds
    assert checks[0].settings(TuneSettings()).expected_seconds == checks[0].expected_seconds
    assert plan_checks(home, DAY, state(tmp_path), TaskSeconds()) == checks  # read back as planned
    # Without past checks, each is expected to take the ledger's average.
    again = plan_checks(home, DAY, state(tmp_path), TaskSeconds(check=25.0), force=True)
    assert [c.expected_seconds for c in again] == [25.0, 25.0]
