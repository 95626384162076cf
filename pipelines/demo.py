"""`make demo`: the whole loop on a simulated fleet, one nightly run per day.

Each simulated day the fleet runs its jobs, picking up the configs the store holds that day
(so savings appear once something is delivered), and hands its dumps and profile drops over to
the home's inbox; then the nightly loop runs for that date: ingest (which lands the inbox),
rank, tune the top graph within a small budget, deliver, validate and account the savings.
Two days by default: the first night delivers, the second day's fleet runs tuned. The fleet's
compiler changes under it (a release
every few days, adopted gradually), as a real fleet's does. Part of the fleet runs on this
machine's environment (the simulator's "here" jobs), so the validator re-measures their
configs every night for real: kept while the gain holds, invalidated when it is gone. The
fleet holds a share of each key's jobs out to the defaults, so its profiles tell what a config
really did (realized savings: docs/realized.md); the first config the tuner delivers slows the
simulated fleet down although it won here, and the validator's fleet guard removes it. The
summary at the end comes from the warehouse and the store, the same tables the dashboards read.

Data goes to `$FDO_HOME` when it is set, else to `.fdo-demo` in the current directory (never
to the default data root, ~/.fdo). Run it with `make demo` or `python -m pipelines.demo`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from delivery.imports import import_file
from delivery.store_writer import Store
from execution.measure import TIME_SCALE_VARIABLE
from hlo.environment import current_environment, store_key
from pipelines.nightly import NightlySettings, coverage_by_night, run_nightly
from ranking.realized import read_realized, read_runs, realized_savings
from ranking.tables import SAVINGS
from storage.beam_logging import quiet_beam_logging
from storage.home_factory import open_home
from storage.store_reader import StoreReader
from storage.warehouse import Warehouse
from tuner.tables import TUNING_RESULTS, ResultRow, results_of
from validator.tables import VALIDATIONS
from vocabulary.decisions import DecisionOutcome
from vocabulary.tuning import Kind
from workloads.simulator.catalog import CatalogGraph, build_catalog
from workloads.simulator.run import simulate, store_lookup


@dataclass(frozen=True)
class OwnerConfig:
    """A config a team imports for one of the fleet's programs on this machine."""

    team: str
    workload: str
    config: dict[str, Any]
    claimed_speedup: float
    fleet_speedup: float  # what it really does in the simulated fleet: about what it measures here


@dataclass(frozen=True)
class DemoSettings:
    """The demo fleet and the loop's budgets: sized to finish in a few minutes on a laptop."""

    days: int = 2  # the first night tunes and delivers, the second day's fleet runs tuned
    jobs: int = 2000
    # The fleet's mix is drawn from the seed; other seeds run the same loop on other mixes.
    # Library routing is where XLA's CPU backend has headroom, and which routing wins depends
    # on the CPU: convolutions off YNNPACK won on Intel machines, reductions off YNNPACK on
    # AMD ones (the n-body step, the two-tower model), so the fleet runs both kinds and the
    # demo's small budget has something to find on either.
    seed: int = 7
    workloads: tuple[str, ...] = ("cnn-s", "nbody-s", "two_tower-s", "mlp-s")
    # A compiler release every week: one lands during the demo and is adopted gradually, so
    # some tuned keys go out of use mid-demo, as in a real fleet.
    release_every_days: int = 7
    # The best-ranked graphs not tried yet, each with its share of the stage's evaluations and
    # minutes by what it is worth (tuner.allot): a task searches until it stalls or its share is
    # spent, and a task the stage's minutes leave no time for waits for the next night. A task's
    # race, pruning and verification in fresh workers come after its search, so the stage takes
    # a few minutes; op-level tuning (`fdo tune --kind op`) would not fit in the nights.
    top: int = 4
    top_ops: int = 0
    tune_evals: int = 6
    tune_minutes: float = 1.5
    # An entry or two a night, the most used first (each is three fresh workers, 10 to 15 s
    # here; the others wait for the next night); the fleet guard's decisions need no measuring
    # and take no budget.
    validate_minutes: float = 0.3
    # The demo's effects are several-fold or none (8x, 1.4x, 0.6x), so its measurements take
    # half their time budgets (`FDO_MEASURE_SCALE`, docs/tuner.md; set, it wins): intervals stay
    # honest, a small gain is left undecided more often.
    measure_scale: float = 0.5
    # A demo's days pass in minutes: the validator re-measures every entry it can each night,
    # where a real one leaves entries measured in the last day alone.
    revalidate_after: datetime.timedelta = datetime.timedelta(0)
    # One process per Beam pipeline: on a small day the multi-process runner's start-up dominates.
    beam_args: tuple[str, ...] = ("--direct_running_mode=in_memory",)
    # A team's hand-set config, imported on the first day as owners import configs they
    # validated themselves (CATWILD 5.2): optimization level 0 for its CNN on this machine,
    # which slows it down on this compiler (about 0.7x), so the validator has one to remove.
    imported: OwnerConfig = OwnerConfig("vision", "cnn-s", {"xla_backend_optimization_level": 0}, 1.2, 0.7)
    # The share of each key's jobs held out to the defaults. A real fleet's 5% decides a key in
    # a day at tens of thousands of jobs (docs/realized.md); the demo's 2,000 need more.
    holdout_share: float = 0.2
    # The fleet's true speedup under the first config the tuner delivers: it won on this
    # machine and slows the fleet down (as a config tuned on one input can), so the validator's
    # fleet guard (realized interval wholly below 1) has one to remove.
    fleet_regression: float = 0.8


def run_demo(home: Path, settings: DemoSettings = DemoSettings()) -> int:
    """Run the demo in `home`; returns the exit code."""
    home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault(TIME_SCALE_VARIABLE, str(settings.measure_scale))  # its workers' too
    root = open_home(home)  # the stages take a Home
    first = datetime.date.today() - datetime.timedelta(days=settings.days - 1)
    print(f"fleet-fdo demo: {settings.days} days of a simulated fleet ({settings.jobs} jobs running "
          f"{', '.join(settings.workloads)}), the nightly loop after each; data root {home}\n")
    failed = False
    owned = (owned_key(home, settings.imported), settings.imported.fleet_speedup)
    slowed: tuple[tuple[str, float], ...] = ()  # the tuner's first entry, once delivered
    for offset in range(settings.days):
        date = first + datetime.timedelta(days=offset)
        injected = () if slowed else tuple(
            (key, settings.fleet_regression) for key in first_tuned(home, settings.imported)[:1])
        slowed += injected
        day = simulate(root, days=1, jobs=settings.jobs, seed=settings.seed, start=date,
                       workloads=list(settings.workloads), tuned=store_lookup(home), progress=True,
                       release_every_days=settings.release_every_days, inbox=home / "inbox" / "fleet",
                       regressions=(owned, *slowed))
        truth = day.days[0]
        print(f"{date}: the fleet ran {day.chip_hours:,.0f} chip-hours and handed over "
              f"{day.graph_runs:,} graph runs, {day.op_runs:,} op runs and {day.symbol_modules} new "
              f"dumps to the inbox; its tuned runs really saved {truth['true_chip_hours_saved']:,.1f} "
              f"chip-hours (the simulator's truth, which the loop never sees)")
        for key, speedup in injected:
            print(f"  the tuner's {key[:12]} won on this machine; in the fleet it runs at {speedup}x")
        if offset == 0:
            version = import_owner_config(home, settings.imported)
            print(f"  team {settings.imported.team} imports its own config for {settings.imported.workload} "
                  f"here, {json.dumps(settings.imported.config)} claimed "
                  f"{settings.imported.claimed_speedup}x: store version {version}")
            version = Store(home).set_holdout_share(settings.holdout_share)
            print(f"  the fleet holds {settings.holdout_share:.0%} of each key's jobs out to the "
                  f"defaults: store version {version}")
        report = run_nightly(root, NightlySettings(
            date=date, top=settings.top, top_ops=settings.top_ops, tune_evals=settings.tune_evals,
            tune_minutes=settings.tune_minutes, validate_minutes=settings.validate_minutes,
            revalidate_after=settings.revalidate_after, beam_args=settings.beam_args), progress=True)
        for stage in report.stages:
            detail = stage.error.splitlines()[0] if stage.error else json.dumps(stage.counts, default=str)
            print(f"  {stage.stage:<9} {stage.status:<8} {stage.seconds:6.1f} s  {detail}")
        failed |= not report.ok
    print_summary(home, first)
    return 1 if failed else 0


def import_owner_config(home: Path, owned: OwnerConfig) -> int | None:
    """Import `owned` into the store as `fdo store import` does, keyed to the workload's graph in
    this machine's environment; returns the new store version."""
    graph = owned_graph(home, owned)
    path = home / "imports" / f"{owned.team}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fingerprint": graph.fingerprint, "env_key": current_environment().key(),
                                "kind": Kind.GRAPH, "config": owned.config,
                                "speedup": owned.claimed_speedup}) + "\n")
    version, _ = import_file(open_home(home), path)
    return version


def owned_graph(home: Path, owned: OwnerConfig) -> CatalogGraph:
    """The catalog graph of the workload a team owns a config for."""
    return build_catalog(home / "simulator" / "catalog", [owned.workload], scales=(1,))[0]


def owned_key(home: Path, owned: OwnerConfig) -> str:
    """The store key of a team's config on this machine."""
    return store_key(owned_graph(home, owned).fingerprint, current_environment().key())


def first_tuned(home: Path, owned: OwnerConfig) -> list[str]:
    """The keys of the live store's graph entries other than the team's `owned` one, in order."""
    return sorted(e.key for e in StoreReader(home).records()
                  if e.kind == Kind.GRAPH and e.key != owned_key(home, owned))


def print_summary(home: Path, first: datetime.date) -> None:
    """What the loop did since `first`, from the warehouse and the store, and the commands
    that show more."""
    warehouse = Warehouse(home)
    results = results_of(warehouse.read(TUNING_RESULTS))
    store = StoreReader(home)
    version = store.current()  # read once: the entries and the summary line tell one version
    entries = {(e.fingerprint, e.env_key) for e in store.records(version)}
    print(f"\n{len(results)} tuning results (graph or op, per environment):")
    for result in results:
        live = "in the store" if (result.fingerprint, result.env_key) in entries else "not delivered"
        print(f"  {result.kind:<5} {result.fingerprint[:12]}  {result.status:<22} {_speed(result):<26} "
              f"{live}  {result.config}")
        relaxed = result.relaxed_interval
        if relaxed is not None:  # the search's best config relaxed numerics, and verified faster
            print(f"        opt-in for jobs that relax numerics: {relaxed.as_speedup()}  "
                  f"{result.relaxed_config}")
    versions = store.versions()
    print(f"store: {len(versions)} version(s), live v{version} with {len(entries)} entries; "
          + "; ".join(f"v{m.version} {m.reason}" for m in versions))
    decisions = warehouse.read(VALIDATIONS).sort_by("validated_at").to_pylist()
    outcomes = [d["outcome"] for d in decisions]
    print("validator: " + ", ".join(f"{outcomes.count(o)} {o}" for o in DecisionOutcome))
    for d in decisions:
        if d["outcome"] != DecisionOutcome.UNMEASURED:
            print(f"  {d['outcome']:<11} {d['key'][:12]}  {d['reason']}")
    saved = warehouse.read(SAVINGS)
    by_day = saved.group_by("dt").aggregate([("chip_seconds_saved", "sum"), ("hit_chip_seconds", "sum")])
    for row in by_day.sort_by("dt").to_pylist():
        print(f"  {row['dt']}: {row['chip_seconds_saved_sum'] / 3600:,.1f} chip-hours saved on "
              f"{row['hit_chip_seconds_sum'] / 3600:,.0f} chip-hours that ran tuned")
    total = (pc.sum(saved.column("chip_seconds_saved")).as_py() or 0.0) / 3600
    print(f"chip-hours saved in all: {total:,.1f}")
    last = datetime.date.today()
    realized = read_realized(home, first, last)
    print("realized in the fleet (holdout arm against tuned arm, 99% interval over jobs):")
    for r in realized:
        figure = r.speedup.as_speedup() if r.speedup is not None else f"undecided ({r.undecided})"
        verdict = ": regressed in the fleet" if r.regressed else ""
        print(f"  {r.key[:12]} v{r.config_version}: expected {r.expected_speedup:.3f}x, realized {figure} "
              f"over {r.holdout.jobs} holdout / {r.tuned.jobs} tuned jobs{verdict}")
    booked = realized_savings(read_runs(home, first, last), realized).total
    print(f"booked {booked.booked / 3600:,.1f} chip-hours on the tuned runs; on the entries the fleet "
          f"decided, booked {booked.booked_decided / 3600:,.1f}, realized "
          + ("-" if booked.realized is None else f"{booked.realized.estimate / 3600:,.1f}"))
    nights = coverage_by_night(open_home(home))
    print("reach (shares of the tunable chip-time, this machine's platform and device kind: running a "
          "config the loop verified faster / decided, that or its defaults verified best): " + (", ".join(
              f"after night {n.night} {_share(n.share)} / {_share(n.decided_share)}" for n in nights)
              or "no night recorded one"))
    fdo = [*fdo_command(), "--home", str(home)]
    print(f"\ndata written to {home}; to look around:")
    for args, what in ((["serve"], "the dashboards, then open http://127.0.0.1:8470/"),
                       (["store", "versions"], "what each store version changed"),
                       (["validate", "--report"], "the validator's decisions and the entries' staleness"),
                       (["savings", "--from", first.isoformat()], "chip-time saved per day, team and version")):
        print(f"  {shlex.join(fdo + args):<{len(shlex.join(fdo)) + 28}} # {what}")


def _speed(result: ResultRow) -> str:
    """A result's verified speedup with its interval, as the summary shows it; "-" for none."""
    if result.speedup is None:
        return "-"
    interval = result.interval
    return f"{result.speedup:.3f}x " + (f"[{interval.low:.3f}, {interval.high:.3f}]" if interval else "")


def _share(value: float | None) -> str:
    """A share as a percentage; "-" for none."""
    return "-" if value is None else format(value, ".1%")


def fdo_command() -> list[str]:
    """How to run `fdo` with this interpreter: its console script beside it (a venv's bin/fdo,
    which needs no PATH), else the CLI module."""
    script = Path(sys.executable).with_name("fdo")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pipelines.cli"]


def demo_home() -> Path:
    """`$FDO_HOME`, else `.fdo-demo` in the current directory: the demo's data stays apart from
    the default data root (~/.fdo) unless asked."""
    return Path(os.environ.get("FDO_HOME") or ".fdo-demo").absolute()


def main(argv: list[str] | None = None) -> int:
    """Entry point of `make demo` (`make demo DAYS=4`: the longer story)."""
    quiet_beam_logging()  # Beam's start-up notices, at each pipeline of each night, tell no story
    parser = argparse.ArgumentParser(prog="python -m pipelines.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=DemoSettings.days, metavar="N",
                        help=f"simulated days, the nightly loop after each (default: {DemoSettings.days})")
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error(f"--days {args.days}: at least one day")
    return run_demo(demo_home(), replace(DemoSettings(), days=args.days))


if __name__ == "__main__":
    sys.exit(main())
