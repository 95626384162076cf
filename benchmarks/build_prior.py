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
mean log speedup, and whether a search skips it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search_quality import Bench  # noqa: E402

from hlo.environment import cpu_model_name, current_environment  # noqa: E402
from storage.home_factory import atomic_write  # noqa: E402
from tuner.platform_prior import Measured, MoveScreen, PlatformPrior, summarize  # noqa: E402
from tuner.schedule import Move, neighbourhood  # noqa: E402
from vocabulary.tuning import TrialOutcome  # noqa: E402
from workloads import zoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def screened(bench: Bench) -> dict[Move, MoveScreen]:
    """Every one-move config of the workload's space, screened (from the cache where it holds
    the screen)."""
    found = {}
    for move in tqdm(neighbourhood(bench.space), desc=bench.name, leave=False):
        screen = bench.screen(dict([move]))
        found[move] = MoveScreen(TrialOutcome(screen.outcome), screen.speedup, screen.numerics_ok)
    return found


def commit() -> str:
    """The checkout's commit, "+dirty" where it has uncommitted changes."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return f"{head}+dirty" if dirty else head


def report(prior: PlatformPrior) -> None:
    measured = prior.measured
    print(f"prior for {prior.device_kinds} from {len(measured.workloads)} workloads on {measured.cpu} "
          f"({measured.compiler_version}, commit {measured.commit})")
    print(f"  {'move':<52} {'changed':>7} {'faster':>6} {'catastr.':>8} {'mean log':>9}  skipped")
    for m in prior.moves:
        move = f"{m.move[0]}={m.move[1]}"
        print(f"  {move:<52} {m.changed:>4}/{m.workloads:<2} {m.faster:>6} {m.catastrophic:>8} "
              f"{m.mean_log_speedup:>9.3f}  {'yes' if m.skipped else ''}")


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
    screens = {}
    for name in tqdm(names, desc="workloads"):
        bench = Bench(name, args.cache)
        try:
            screens[name] = screened(bench)
        finally:
            bench.close()
    measured = Measured(commit(), cpu_model_name(), here.device_kind, here.compiler_version,
                        datetime.date.today().isoformat(), tuple(names))
    prior = summarize(screens, device_kinds, measured)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(prior.to_json(), indent=1) + "\n")
    if args.json:
        print(json.dumps(prior.to_json(), indent=1))
    else:
        report(prior)
        print(f"written to {out}")


if __name__ == "__main__":
    main()
