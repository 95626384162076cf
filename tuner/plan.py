"""A night's tune stage: cover the fleet's tunable chip-time before deepening it.

A fleet runs each program in many keys (releases, device counts, partitionings, shapes), and
the loop's reach is the share of the tunable chip-time it has decided (`tuner.decided`). A night
spends its stage on what covers the most first:

1. share: a key that the tuner measures exactly as one whose conclusion stands (the same graph,
   platform, device kind and partitioning: another compiler release of a program here, which
   the tuner does not run) takes that key's result as its own (`tuner.persist.share_result`):
   no task;
2. group: the other keys without a standing conclusion, by how the tuner measures them
   (`MeasuredAlike`); one task per group, on its worthiest key, whose result every key of the
   group then shares (`land_shared`);
3. checks (`plan_checks`): each group that has transfers (`tuner.transfer`: configs verified for
   its siblings, or that won broadly on its platform) gets a transfer check, worthiest first: a
   few compiles and screens and one verification, where a search is dozens. Each carries the
   seconds it is expected to take (`tuner.task_seconds`: they grow with its program's step time),
   and a runner does not start one the stage's time left cannot hold. (Ordered by what each
   decides a second instead, the reach fleet's faster share fell on each of 4 nights:
   docs/bench_reach.md, 4ad5bed.) A check runs before
   the searches where it is expected to decide at least as much chip-time a second as the
   worthiest search would (`checks_first`); the others wait for step 5;
4. searches (`plan_searches`, planned once the checks have run): the groups still without a
   conclusion and not waiting for a check, worthiest first, at most `top`, each seeded with its
   transfers and allotted its share of the stage's evaluations by worth (`tuner.allot`). A group
   whose check was accepted tonight competes too, its worth discounted by `DEEPEN_DISCOUNT` (the
   transfer took part of the gain): by what it is worth, a transferred config is where a search
   starts, not where it must end. With transfer, one search a night per kin (a family, or a graph
   without one): its other groups wait for the check its result makes possible;
5. late checks (`plan_checks(..., late=True)`, planned once the searches have run): the checks
   tonight's results made possible and those that waited, in the time left, which holds at least
   a share of the searches' time (`LATE_CHECK_SHARE` in pipelines.nightly) where searches left
   kin waiting.

A group's worth is its keys' fleet chip-seconds together, times the share a tuning of it is
expected to save (`tuner.allot.worths`). Each list is written once per date under the home's
pipelines (`tune-plans/<date>.checks.json`, `.searches.json`), so a resumed stage runs what is
left of it, each task with the budget it had.
"""

from __future__ import annotations

import datetime
import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from execution.evaluate import per_device_programs
from execution.per_device import gain_bar
from execution.sharded import choose_placement, whole_capacity
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule, from_text
from ingest.tables import partitioning_of
from storage.blobs import BlobStore
from storage.home import Home
from tuner.allot import Allotment, Worth, allot, worths
from tuner.candidates import RankedGraph, _measurable_graphs, ranked_graphs
from tuner.decided import KeyStatus, key_statuses
from tuner.persist import finished_result, share_result
from tuner.result import TuneResult
from tuner.task_seconds import TaskSeconds
from tuner.transfer import GraphKey, Kinship, Transfer, TransferSources
from tuner.tune import VERIFY_SETTINGS, TuneSettings
from vocabulary.measure import MeasureMode
from vocabulary.tuning import Verdict

# A group whose transfer was accepted tonight competes for a search with this share of its worth.
DEEPEN_DISCOUNT = 0.5
# The chance a transfer check holds up, by its nearest kin, where that kin's verified figure
# clears the bar the group's measurement must clear: a prior the checks are ordered by, not yet
# fitted. On four runs of the reach fleet's 3 nights (docs/bench_reach.md, 4ece688 to e7989dc)
# the accepted shares were 18 of 18 (the same program elsewhere), 46 of 47 (family) and 53 of
# 81 (platform).
CHECK_PRIOR = {Kinship.SAME_PROGRAM: 0.95, Kinship.FAMILY: 0.9, Kinship.PLATFORM: 0.6}
# The chance where it does not (a sibling's 1.04x, for a group measured per device, whose bar is
# the mode's 11% error): 3 of 21 on those runs. A sibling seldom gains much more than its source.
UNDER_BAR_PRIOR = 0.15


class Path(StrEnum):
    """How a planned task reaches its group: a transfer check, or a search."""

    CHECK = "transfer check"
    SEARCH = "search"


@dataclass(frozen=True)
class MeasuredAlike:
    """What decides the measurement the tuner makes for a graph key: its graph and the program
    it compiles (the graph's fingerprint; measured per device, its per-device program's), how it measures it
    (whole, compiled for the job's partitioning; or per device), and the platform and device
    kind. Two keys alike differ only in what the tuner does not run: the compiler release their
    jobs ran (the tuner measures with its own), the job's own options, and, measured per device,
    a partitioning that gives the same per-device program."""

    fingerprint: str
    program: str
    mode: MeasureMode
    compiled_for: str | None
    platform: str
    device_kind: str


def measured_alike(home: Home, graphs: dict[GraphKey, dict], built: set[GraphKey]) -> dict[GraphKey, MeasuredAlike]:
    """How the tuner measures each graph key of `graphs` (`graphs` rows by key). A key measured
    per device is known by its per-device program's fingerprint where that is known: built for
    the keys of `built` (in one worker, `execution.evaluate.per_device_programs`) and kept per
    (graph, partitioning, compiler) under the home's pipelines, so every key of that graph and
    partitioning is known by it; a key whose per-device program is not known, by its graph and
    partitioning."""
    from hlo.environment import current_environment

    here = current_environment()
    capacity = whole_capacity(here.platform)
    where = home.location("pipelines", "per-device-programs.json")
    known: dict[str, str | None] = json.loads(home.read_bytes(where)) if home.exists(where) else {}

    def cache_key(graph: dict) -> str:
        return f"{here.compiler_version}/{graph['fingerprint']}/{graph['partitioning']}"

    placements = {key: choose_placement(partitioning_of(g["partitioning"]), capacity) for key, g in graphs.items()}
    missing = sorted({cache_key(graphs[key]): key for key in built
                      if placements[key].mode is MeasureMode.PER_DEVICE
                      and cache_key(graphs[key]) not in known}.items())
    if missing:
        blobs = BlobStore(home)
        jobs = [(from_text(blobs.get_text(graphs[key]["hlo_blob"]), source=graphs[key]["hlo_blob"]),
                 placements[key].partitioning) for _, key in missing]
        for (text, _), program in zip(missing, per_device_programs([(m, p) for m, p in jobs if p is not None])):
            known[text] = graph_fingerprint(program) if isinstance(program, HloModule) else None
        home.atomic_write(where, json.dumps(known, sort_keys=True) + "\n")
    found = {}
    for key, graph in graphs.items():
        placement = placements[key]
        measured = graph["fingerprint"]
        if placement.mode is MeasureMode.PER_DEVICE:
            measured = known.get(cache_key(graph)) or f"{graph['fingerprint']}/{graph['partitioning']}"
        compiled = graph["partitioning"] if placement.mode is MeasureMode.WHOLE else None
        found[key] = MeasuredAlike(graph["fingerprint"], measured, placement.mode, compiled, graph["platform"],
                                   graph["device_kind"])
    return found


@dataclass(frozen=True)
class PlannedTask:
    """One task of a night: its path, the graph key it measures, the other environments of the
    graph measured alike (they share its result), its transfers, its share of the stage's
    evaluations (a search's), its attempt (inconclusive tasks of the key before it: a new
    task is one of its own), the seconds a check is expected to take, and those a search's
    verification is."""

    path: Path
    key: GraphKey
    alike: tuple[str, ...] = ()
    transfers: tuple[Transfer, ...] = ()
    allotment: Allotment | None = None
    attempt: int = 0
    expected_seconds: float | None = None  # a check's (`TaskSeconds.check_of`)
    verify_seconds: float | None = None  # a search's verification's (`TaskSeconds.verify_of`)

    def settings(self, base: TuneSettings) -> TuneSettings:
        """The task's settings, from the stage's: a check tries its transfers alone, a search
        starts from them within its allotment."""
        if self.path is Path.CHECK:
            return replace(base, transfers=self.transfers, transfer_check=True, budget_evals=len(self.transfers),
                           allotment=None, seed=base.seed + self.attempt, expected_seconds=self.expected_seconds)
        budget = self.allotment.budget_evals if self.allotment is not None else base.budget_evals
        return replace(base, transfers=self.transfers, transfer_check=False, budget_evals=budget,
                       allotment=self.allotment, seed=base.seed + self.attempt, verify_seconds=self.verify_seconds)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"path": str(self.path), "key": list(self.key), "alike": list(self.alike),
                "transfers": [t.to_json() for t in self.transfers],
                "allotment": self.allotment.to_json() if self.allotment is not None else None,
                "attempt": self.attempt, "expected_seconds": self.expected_seconds,
                "verify_seconds": self.verify_seconds}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedTask:
        """The task `to_json` wrote (a plan written before tasks were timed: none expected)."""
        allotment = data.get("allotment")
        return cls(Path(data["path"]), (data["key"][0], data["key"][1]), tuple(data["alike"]),
                   tuple(Transfer.from_json(t) for t in data["transfers"]),
                   Allotment.from_json(allotment) if allotment is not None else None, data["attempt"],
                   data.get("expected_seconds"), data.get("verify_seconds"))


@dataclass
class Group:
    """The keys of one graph measured alike that the night still owes a conclusion, worthiest
    first, with their fleet chip-seconds together."""

    alike: MeasuredAlike
    ranked: list[RankedGraph] = field(default_factory=list)

    @property
    def key(self) -> GraphKey:
        """The key its task measures: the worthiest."""
        return self.ranked[0].key

    @property
    def chip_seconds(self) -> float:
        """Its keys' fleet chip-seconds together."""
        return sum(r.chip_seconds for r in self.ranked)


@dataclass
class NightState:
    """What a plan is made from: the ranking's measurable graphs, the transfer evidence, and
    where each key stands."""

    ranked: list[RankedGraph]
    measurable: dict[GraphKey, dict]
    sources: TransferSources
    statuses: dict[GraphKey, KeyStatus]
    measured: dict[GraphKey, MeasuredAlike]  # how each measurable key is measured

    @classmethod
    def load(cls, home: Home, environments: frozenset[str] | None, today: datetime.date,
             families: dict[GraphKey, str] | None = None, compiler: str | None = None,
             share_alike: bool = True) -> NightState:
        """`home`'s, for the machines of `environments` (None: this one), its graphs' families
        (default: `ingest.families.graph_families`) and results on `compiler` (default: this
        machine's) given. `share_alike` False: every key is measured as its own, as before keys
        measured alike shared a result (for comparisons)."""
        if families is None:
            from ingest.families import graph_families

            families = graph_families(home)
        sources = TransferSources.load(home, families)
        ranked, measurable = ranked_graphs(home, environments), _measurable_graphs(home, environments)
        measured = measured_alike(home, measurable, {r.key for r in ranked} if share_alike else set())
        if not share_alike:
            measured = {key: replace(alike, program=f"{alike.program}@{key[1]}") for key, alike in measured.items()}
        return cls(ranked, measurable, sources, key_statuses(home, sources, today, compiler), measured)

    def status(self, key: GraphKey) -> KeyStatus:
        """Where `key` stands (nothing done: an empty status)."""
        return self.statuses.get(key, KeyStatus())

    def open_groups(self) -> list[Group]:
        """The ranked keys whose conclusion does not stand (or whose evidence moved), grouped by
        how they are measured, worthiest group first."""
        groups: dict[MeasuredAlike, Group] = {}
        for ranked in self.ranked:
            if not self.status(ranked.key).stands:
                alike = self.measured[ranked.key]
                groups.setdefault(alike, Group(alike)).ranked.append(ranked)
        for group in groups.values():
            group.ranked.sort(key=lambda r: (-r.chip_seconds, r.key))
        return sorted(groups.values(), key=lambda g: (-g.chip_seconds, g.key))

    def alike(self, key: GraphKey) -> tuple[str, ...]:
        """The environments of the other measurable keys measured as `key` is whose conclusion
        does not stand: those that take its task's result (ranked or not)."""
        measured = self.measured[key]
        return tuple(sorted(other[1] for other, alike in self.measured.items()
                            if other != key and alike == measured and not self.status(other).stands))

    def shares(self) -> list[tuple[str, str]]:
        """(task id of a standing conclusion, environment) for each measurable key without a
        standing conclusion of its own that is measured alike with one that has one."""
        standing: dict[MeasuredAlike, tuple[str, GraphKey]] = {}
        for key, status in sorted(self.statuses.items()):
            if key in self.measured and status.stands and status.result_task is not None:
                standing.setdefault(self.measured[key], (status.result_task, key))
        found = []
        for key, alike in sorted(self.measured.items()):
            source = standing.get(alike)
            if source is not None and source[1] != key and not self.status(key).stands:
                found.append((source[0], key[1]))
        return found


def share_standing(home: Home, state: NightState, on: datetime.date | None = None) -> list[TuneResult]:
    """Step 1: every key measured alike with a key whose conclusion stands takes its result,
    landed under the day `on` (default today)."""
    shared = []
    for task_id, env_key in state.shares():
        result = finished_result(home, task_id)
        if result is not None:
            shared.append(share_result(home, result, env_key, on))
    return shared


def plan_checks(home: Home, date: datetime.date, state: NightState, seconds: TaskSeconds,
                force: bool = False, late: bool = False) -> list[PlannedTask]:
    """Steps 2 and 3 (`late`: step 5, a plan of its own): a transfer check for each open group
    that has transfers, by what it is expected to decide (`check_value`), most first, each with
    the seconds it is expected to take (`seconds.check_of`); read back where planned before for
    `date` (unless `force`). A group whose checks found nothing gets none of configs that only
    won on its platform again (its next step is a search), and a concluded group whose evidence
    moved is checked with its siblings' new configs alone."""
    def make() -> list[PlannedTask]:
        checks = []
        for group in state.open_groups():
            status = state.status(group.key)
            transfers = tuple(state.sources.candidates(group.key))
            if status.concluded or status.checked:
                transfers = tuple(t for t in transfers if t.kinship is not Kinship.PLATFORM)
            if transfers:
                checks.append((check_value(group, transfers), PlannedTask(
                    Path.CHECK, group.key, state.alike(group.key), transfers, attempt=status.attempts,
                    expected_seconds=round(seconds.check_of(group.key, len(transfers)), 1))))
        return [task for _, task in sorted(checks, key=lambda c: (-c[0], c[1].key))]

    return _planned(home, date, "late-checks" if late else "checks", make, force)


def checks_first(state: NightState, checks: list[PlannedTask],
                 seconds: TaskSeconds) -> tuple[list[PlannedTask], list[PlannedTask]]:
    """`checks` (in order) split into those a night runs before its searches and those that wait
    until after them. A check goes first where what it is expected to decide a second
    (`check_value` over `seconds.check`) is at least what the worthiest open group's search
    would: its chip-seconds times the chance it needs one (1 without a check tonight, else the
    chance its check finds nothing), over `seconds.search`. So a large group whose check found
    nothing, a search's, does not wait a night behind the checks of groups a fraction its size."""
    groups = {g.key: g for g in state.open_groups() if not state.status(g.key).concluded}
    planned = {c.key: c for c in checks}

    def searched(group: Group) -> float:  # chip-seconds a search of it is expected to decide
        check = planned.get(group.key)
        return group.chip_seconds - (check_value(group, check.transfers) if check is not None else 0.0)

    bar = max(map(searched, groups.values()), default=0.0) / seconds.search
    first: list[PlannedTask] = []
    later: list[PlannedTask] = []
    for check in checks:
        group = groups.get(check.key)
        goes_first = group is not None and check_value(group, check.transfers) / seconds.check >= bar
        (first if goes_first else later).append(check)
    return first, later


def check_value(group: Group, transfers: tuple[Transfer, ...]) -> float:
    """What a check of `transfers` is expected to decide: the group's chip-seconds times the
    best chance one of them holds up (`check_chance`)."""
    return group.chip_seconds * max(check_chance(t, group.alike.mode) for t in transfers)


def check_chance(transfer: Transfer, mode: MeasureMode) -> float:
    """The chance `transfer` holds up in a check of a group measured in `mode`: its kinship's
    `CHECK_PRIOR` where its verified figure (the lower end) clears the bar the group's
    verification must clear (`execution.per_device.gain_bar`), else at most `UNDER_BAR_PRIOR`."""
    prior = CHECK_PRIOR[transfer.kinship]
    if transfer.speedup > 1.0 + gain_bar(VERIFY_SETTINGS.noise_band, mode):
        return prior
    return min(prior, UNDER_BAR_PRIOR)


def plan_searches(home: Home, date: datetime.date, state: NightState, top: int, per_task_evals: int,
                  accepted_tonight: dict[GraphKey, Transfer], transfer: bool = True,
                  force: bool = False, waiting: frozenset[GraphKey] = frozenset(),
                  seconds: TaskSeconds = TaskSeconds()) -> list[PlannedTask]:
    """Step 4: the searches of the night, at most `top`, worthiest first, each allotted its share
    of `per_task_evals` evaluations a task by worth, seeded with its transfers, and with the
    seconds its verification is expected to take (`seconds.verify_of`);
    `accepted_tonight`: the keys whose transfer check was accepted tonight, with the transfer
    that was (they compete with a discounted worth, their search seeded with it); `transfer`
    False: no search is seeded, and kin may be searched the same night (else one group of a kin:
    `_kin`); `waiting`: the keys of groups whose check comes later tonight (`checks_first`),
    searched on no night before it. Read back where planned before for `date` (unless `force`)."""
    def make() -> list[PlannedTask]:
        groups = [g for g in state.open_groups() if not state.status(g.key).concluded and g.key not in waiting]
        deepen = _groups_of(state, set(accepted_tonight))
        candidates = groups + deepen
        valued: list[tuple[float, Group, Worth, tuple[Transfer, ...]]] = []
        for index, (group, worth) in enumerate(zip(candidates, worths(home, [g.key for g in candidates]))):
            worth = replace(worth, chip_seconds=group.chip_seconds)
            if index < len(groups):
                seeds = tuple(state.sources.candidates(group.key)) if transfer else ()
                valued.append((worth.chip_seconds_saved, group, worth, seeds))
            else:
                valued.append((worth.chip_seconds_saved * DEEPEN_DISCOUNT, group, worth,
                               (accepted_tonight[group.key],)))
        valued.sort(key=lambda v: (-v[0], v[1].key))
        if transfer:  # a kin's worthiest group; the others wait for the check its result allows
            seen: set[str] = set()
            kept = []
            for value in valued:
                kin = _kin(state, value[1].key)
                if kin not in seen:
                    seen.add(kin)
                    kept.append(value)
            valued = kept
        chosen = valued[:max(top, 0)]
        allotted = allot([worth for _, _, worth, _ in chosen], per_task_evals) if chosen else []
        return [PlannedTask(Path.SEARCH, group.key, state.alike(group.key), transfers, allotment,
                            state.status(group.key).attempts,
                            verify_seconds=round(seconds.verify_of(group.key), 1))
                for (_, group, _, transfers), allotment in zip(chosen, allotted)]

    return _planned(home, date, "searches", make, force)


def deferred_kin(state: NightState, searches: list[PlannedTask]) -> int:
    """How many open groups share a kin with one of `searches` without being searched: the
    groups a late check may reach once those searches land."""
    searched = {task.key for task in searches}
    kins = {_kin(state, key) for key in searched}
    return sum(1 for group in state.open_groups()
               if group.key not in searched and _kin(state, group.key) in kins)


def _kin(state: NightState, key: GraphKey) -> str:
    """What `key` shares with the groups a result of it transfers to first: its family, or its
    graph where it has none."""
    facts = state.sources.graphs.get(key)
    return (facts.family if facts is not None else None) or key[0]


def _groups_of(state: NightState, keys: set[GraphKey]) -> list[Group]:
    """The groups measured alike of `keys`, each measured on its key of `keys`."""
    groups: dict[MeasuredAlike, Group] = {}
    for ranked in state.ranked:
        alike = state.measured[ranked.key]
        groups.setdefault(alike, Group(alike)).ranked.append(ranked)
    found = []
    for group in groups.values():
        chosen = [r for r in group.ranked if r.key in keys]
        if chosen:
            group.ranked = chosen[:1] + [r for r in group.ranked if r is not chosen[0]]
            found.append(group)
    return sorted(found, key=lambda g: g.key)


def land_shared(home: Home, task: PlannedTask, result: TuneResult,
                on: datetime.date | None = None) -> list[TuneResult]:
    """The other keys of `task`'s group take its result, where it concludes (an accepted or a
    searched one: a check that found nothing leaves them to their own search with it), landed
    under the day `on` (default today)."""
    if task.path is Path.CHECK and result.status != Verdict.ACCEPTED:
        return []
    return [share_result(home, result, env_key, on) for env_key in task.alike]


def _planned(home: Home, date: datetime.date, part: str, make: Any, force: bool) -> list[PlannedTask]:
    """The plan's `part` for `date`: as written before (unless `force`), else made and written."""
    where = home.location("pipelines", "tune-plans", f"{date}.{part}.json")
    if home.exists(where) and not force:
        return [PlannedTask.from_json(t) for t in json.loads(home.read_bytes(where))]
    tasks = make()
    home.atomic_write(where, json.dumps([t.to_json() for t in tasks]) + "\n")
    return tasks


def night_counts(checks: list[PlannedTask], check_results: list[TuneResult | None],
                 searches: list[PlannedTask], search_results: list[TuneResult | None],
                 shared: int) -> dict[str, Any]:
    """What each path of a night reached, for the run ledger: tasks run and accepted per path,
    the keys their results reached (the group's), and the keys shared with no task."""
    counts: dict[str, Any] = defaultdict(int)
    for path, tasks, results in ((Path.CHECK, checks, check_results), (Path.SEARCH, searches, search_results)):
        name = "checks" if path is Path.CHECK else "searches"
        counts[f"{name}_planned"] = len(tasks)
        for task, result in zip(tasks, results):
            if result is None:
                continue
            counts[name] += 1
            counts[f"{name}_accepted"] += result.accepted
            counts[f"{name}_keys"] += 1 + (len(task.alike) if path is Path.SEARCH or result.accepted else 0)
            counts[f"{name}_seconds"] += sum(p.seconds for p in result.phases)
    counts["shared_keys"] = shared
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in counts.items()}
