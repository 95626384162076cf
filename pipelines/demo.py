"""`make demo`: the whole loop on a simulated fleet, one nightly run per day.

Each simulated day the fleet runs its jobs, picking up the configs the store holds that day
(so savings appear once something is delivered), and hands its dumps and profile drops over to
the home's inbox; then the nightly loop runs for that date: ingest (which lands the inbox),
rank, tune the top graph within a small budget, deliver, validate and account the savings.
Two days by default: the first night delivers, the second day's fleet runs tuned. The fleet's compiler changes under it (a release
every few days, adopted gradually), as a real fleet's does. Part of the fleet runs on this
machine's environment (the simulator's "here" jobs), so the validator re-measures their
configs every night for real: kept while the gain holds, invalidated when it is gone. The
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
from delivery.store import Store
from hlo.environment import current_environment
from pipelines.nightly import NightlySettings, run_nightly
from ranking.tables import SAVINGS
from storage.warehouse import Warehouse
from tuner.tables import TUNING_RESULTS
from validator.tables import OUTCOMES, VALIDATIONS
from workloads.simulator.catalog import build_catalog
from workloads.simulator.run import simulate, store_lookup


@dataclass(frozen=True)
class OwnerConfig:
    """A config a team imports for one of the fleet's programs on this machine."""

    team: str
    workload: str
    config: dict[str, Any]
    claimed_speedup: float


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
    # A graph per night, the best-ranked one not tried yet. A task's race, pruning and
    # verification in fresh workers come after its search's share of the budget, so the stage
    # takes a minute or two; op-level tuning (`fdo tune --kind op`) would not fit in the nights.
    top: int = 1
    top_ops: int = 0
    tune_evals: int = 8
    tune_minutes: float = 0.5
    validate_minutes: float = 0.75
    # A demo's days pass in minutes: the validator re-measures every entry it can each night,
    # where a real one leaves entries measured in the last day alone.
    revalidate_after: datetime.timedelta = datetime.timedelta(0)
    # One process per Beam pipeline: on a small day the multi-process runner's start-up dominates.
    beam_args: tuple[str, ...] = ("--direct_running_mode=in_memory",)
    # A team's hand-set config, imported on the first day as owners import configs they
    # validated themselves (CATWILD 5.2): optimization level 0 for its CNN on this machine,
    # which slows it down on this compiler (about 0.7x), so the validator has one to remove.
    imported: OwnerConfig = OwnerConfig("vision", "cnn-s", {"xla_backend_optimization_level": 0}, 1.2)


def run_demo(home: Path, settings: DemoSettings = DemoSettings()) -> int:
    """Run the demo in `home`; returns the exit code."""
    home.mkdir(parents=True, exist_ok=True)
    first = datetime.date.today() - datetime.timedelta(days=settings.days - 1)
    print(f"fleet-fdo demo: {settings.days} days of a simulated fleet ({settings.jobs} jobs running "
          f"{', '.join(settings.workloads)}), the nightly loop after each; data root {home}\n")
    failed = False
    for offset in range(settings.days):
        date = first + datetime.timedelta(days=offset)
        day = simulate(home, days=1, jobs=settings.jobs, seed=settings.seed, start=date,
                       workloads=list(settings.workloads), tuned=store_lookup(home), progress=True,
                       release_every_days=settings.release_every_days, inbox=home / "inbox" / "fleet")
        print(f"{date}: the fleet ran {day.chip_hours:,.0f} chip-hours and handed over "
              f"{day.graph_runs:,} graph runs, {day.op_runs:,} op runs and {day.symbol_modules} new "
              f"dumps to the inbox")
        if offset == 0:
            version = import_owner_config(home, settings.imported)
            print(f"  team {settings.imported.team} imports its own config for {settings.imported.workload} "
                  f"here, {json.dumps(settings.imported.config)} claimed "
                  f"{settings.imported.claimed_speedup}x: store version {version}")
        report = run_nightly(home, NightlySettings(
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
    graph = build_catalog(home / "simulator" / "catalog", [owned.workload], scales=(1,))[0]
    path = home / "imports" / f"{owned.team}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fingerprint": graph.fingerprint, "env_key": current_environment().key(),
                                "kind": "graph", "config": owned.config,
                                "speedup": owned.claimed_speedup}) + "\n")
    version, _ = import_file(home, path)
    return version


def print_summary(home: Path, first: datetime.date) -> None:
    """What the loop did since `first`, from the warehouse and the store, and the commands
    that show more."""
    warehouse = Warehouse(home)
    results = warehouse.read(TUNING_RESULTS).to_pylist()
    store = Store(home)
    entries = {(e["fingerprint"], e["env_key"]) for e in store.entries().to_pylist()}
    print(f"\n{len(results)} tuning results (graph or op, per environment):")
    for row in results:
        interval = (f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]" if row["ci_low"] is not None else "")
        speed = f"{row['speedup']:.3f}x {interval}" if row["speedup"] is not None else "-"
        live = "in the store" if (row["fingerprint"], row["env_key"]) in entries else "not delivered"
        print(f"  {row['kind']:<5} {row['fingerprint'][:12]}  {row['status']:<22} {speed:<26} "
              f"{live}  {row['config']}")
    versions = store.versions()
    print(f"store: {len(versions)} version(s), live v{store.current()} with {len(entries)} entries; "
          + "; ".join(f"v{m.version} {m.reason}" for m in versions))
    decisions = warehouse.read(VALIDATIONS).sort_by("validated_at").to_pylist()
    outcomes = [d["outcome"] for d in decisions]
    print("validator: " + ", ".join(f"{outcomes.count(o)} {o}" for o in OUTCOMES))
    for d in decisions:
        if d["outcome"] != "unmeasured":
            print(f"  {d['outcome']:<11} {d['key'][:12]}  {d['reason']}")
    saved = warehouse.read(SAVINGS)
    by_day = saved.group_by("dt").aggregate([("chip_seconds_saved", "sum"), ("hit_chip_seconds", "sum")])
    for row in by_day.sort_by("dt").to_pylist():
        print(f"  {row['dt']}: {row['chip_seconds_saved_sum'] / 3600:,.1f} chip-hours saved on "
              f"{row['hit_chip_seconds_sum'] / 3600:,.0f} chip-hours that ran tuned")
    total = (pc.sum(saved.column("chip_seconds_saved")).as_py() or 0.0) / 3600
    print(f"chip-hours saved in all: {total:,.1f}")
    fdo = [*fdo_command(), "--home", str(home)]
    print(f"\ndata written to {home}; to look around:")
    for args, what in ((["serve"], "the dashboards, then open http://127.0.0.1:8470/"),
                       (["store", "versions"], "what each store version changed"),
                       (["validate", "--report"], "the validator's decisions and the entries' staleness"),
                       (["savings", "--from", first.isoformat()], "chip-time saved per day, team and version")):
        print(f"  {shlex.join(fdo + args):<{len(shlex.join(fdo)) + 28}} # {what}")


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
    parser = argparse.ArgumentParser(prog="python -m pipelines.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=DemoSettings.days, metavar="N",
                        help=f"simulated days, the nightly loop after each (default: {DemoSettings.days})")
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error(f"--days {args.days}: at least one day")
    return run_demo(demo_home(), replace(DemoSettings(), days=args.days))


if __name__ == "__main__":
    sys.exit(main())
