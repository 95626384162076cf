"""The platform prior that ships with the tuner (tuner.platform_prior), measured on this machine.

    python benchmarks/build_prior.py [--workloads mlp-s,cnn-s] [--device-kinds cpu:x86_64:]
        [--out tuner/priors/cpu-x86_64.json] [--cache DIR] [--json]

Every one-move config of the graph space (`tuner.schedule.neighbourhood`) is compiled for every
workload (default: the zoo's small size of each) and screened as the tuner's search screens
(bench_search_quality's `Bench`: the search's worker, early stops and catastrophe rule; screens
cached on disk in the same place, so a killed run resumes and that benchmark reuses them). What
each move did is summarized (`tuner.platform_prior.summarize`) and written to `--out` with the
commit, CPU, device kind and compiler it was measured on. The table printed: per move, the
workloads whose program it changed, on how many it screened faster and was catastrophic, its
mean log speedup, and whether a search skips it. Then, leaving each workload out in turn, what
the prior of the others would have skipped on it: the seconds of its one-move screens that
saves, and the best speedup among the moves skipped (a gain the skip would give up: the
search's later phases can still propose such a move).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search_quality import Bench  # noqa: E402
from provenance import commit, describe

from hlo.environment import cpu_model_name, current_environment  # noqa: E402
from storage.home_factory import atomic_write  # noqa: E402
from tuner.platform_prior import Measured, MoveScreen, PlatformPrior, summarize  # noqa: E402
from tuner.schedule import Move, neighbourhood  # noqa: E402
from vocabulary.tuning import TrialOutcome  # noqa: E402
from workloads import zoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def screened(bench: Bench) -> tuple[dict[Move, MoveScreen], dict[Move, float]]:
    """Every one-move config of the workload's space, screened (from the cache where it holds
    the screen), and the seconds each took when first screened (its compile and timing)."""
    found, seconds = {}, {}
    for move in tqdm(neighbourhood(bench.space), desc=bench.name, leave=False):
        screen = bench.screen(dict([move]))
        found[move] = MoveScreen(TrialOutcome(screen.outcome), screen.speedup, screen.numerics_ok)
        seconds[move] = screen.seconds
    return found, seconds


@dataclass(frozen=True)
class HeldOut:
    """A workload's screens against the prior of the other workloads: what its skip would have
    saved of the one-move screens' seconds, and the best speedup among the moves it skips."""

    workload: str
    skipped: int
    seconds_saved: float
    seconds_all: float
    best_skipped: float


def held_out(screens: dict[str, dict[Move, MoveScreen]], seconds: dict[str, dict[Move, float]],
             device_kinds: str, measured: Measured) -> list[HeldOut]:
    """Per workload, leave one out: the prior of the others, judged on its screens."""
    rows = []
    for name, mine in screens.items():
        others = summarize({k: v for k, v in screens.items() if k != name}, device_kinds, measured)
        skipped = others.skipped() & mine.keys()
        rows.append(HeldOut(name, len(skipped), sum(seconds[name][m] for m in skipped),
                            sum(seconds[name].values()),
                            max((mine[m].speedup or 0.0 for m in skipped), default=0.0)))
    return rows


def report(prior: PlatformPrior) -> None:
    measured = prior.measured
    print(f"prior for {prior.device_kinds} from {len(measured.workloads)} workloads on {measured.cpu} "
          f"({measured.compiler_version}, commit {measured.commit})")
    print(f"  {'move':<52} {'changed':>7} {'faster':>6} {'catastr.':>8} {'mean log':>9}  skipped")
    for m in prior.moves:
        move = f"{m.move[0]}={m.move[1]}"
        print(f"  {move:<52} {m.changed:>4}/{m.workloads:<2} {m.faster:>6} {m.catastrophic:>8} "
              f"{m.mean_log_speedup:>9.3f}  {'yes' if m.skipped else ''}")


def report_held_out(rows: list[HeldOut]) -> None:
    print("\nleave one out: each workload against the prior of the others")
    print(f"  {'workload':<16} {'skipped':>7} {'saved s':>8} {'of s':>7} {'share':>6} {'best skipped':>12}")
    for row in rows:
        print(f"  {row.workload:<16} {row.skipped:>7} {row.seconds_saved:>8.1f} {row.seconds_all:>7.1f} "
              f"{row.seconds_saved / row.seconds_all:>6.1%} {row.best_skipped:>11.3f}x")
    saved, spent = sum(r.seconds_saved for r in rows), sum(r.seconds_all for r in rows)
    print(f"  {'all':<16} {'':>7} {saved:>8.1f} {spent:>7.1f} {saved / spent:>6.1%} "
          f"{max(r.best_skipped for r in rows):>11.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    small = [w.name for w in zoo.all_workloads() if w.name.endswith("-s")]
    parser.add_argument("--workloads", default=",".join(small),
                        help="comma-separated zoo workloads (default: each one's small size)")
    parser.add_argument("--device-kinds", default=None,
                        help="the device kinds the prior is for, a prefix of theirs (default: this "
                        "machine's platform and architecture, e.g. cpu:x86_64:)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write it (default: tuner/priors/<platform>-<arch>.json)")
    parser.add_argument("--cache", type=Path,
                        default=Path.home() / ".cache" / "fleet-fdo" / "search_quality")
    parser.add_argument("--json", action="store_true", help="print the prior as JSON")
    args = parser.parse_args()
    names = args.workloads.split(",")
    strangers = sorted(set(names) - {w.name for w in zoo.all_workloads()})
    if strangers:
        parser.error(f"--workloads: unknown {', '.join(strangers)} (`fdo workloads list`)")
    here = current_environment()
    device_kinds = args.device_kinds or ":".join(here.device_kind.split(":")[:2]) + ":"
    out = args.out or ROOT / "tuner" / "priors" / f"{device_kinds.strip(':').replace(':', '-')}.json"
    args.cache.mkdir(parents=True, exist_ok=True)
    screens, seconds = {}, {}
    for name in tqdm(names, desc="workloads"):
        bench = Bench(name, args.cache)
        try:
            screens[name], seconds[name] = screened(bench)
        finally:
            bench.close()
    measured = Measured(commit() or "unknown", cpu_model_name(), here.device_kind, here.compiler_version,
                        datetime.date.today().isoformat(), tuple(names))
    prior = summarize(screens, device_kinds, measured)
    rows = held_out(screens, seconds, device_kinds, measured)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(prior.to_json(), indent=1) + "\n")
    if args.json:
        print(json.dumps({"prior": prior.to_json(), "held_out": [asdict(r) for r in rows]}, indent=1))
    else:
        report(prior)
        report_held_out(rows)
        print(f"written to {out}")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
