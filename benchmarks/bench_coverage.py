"""Verified coverage after N nights of the demo's fleet: the loop of another checkout against
this one's.

    python benchmarks/bench_coverage.py --before DIR [--days 3] [--json]

Runs the demo (`pipelines.demo`: its simulated fleet, its owner's import, its injected fleet
regression and its nightly settings, each checkout's own) for `--days` days twice, each in a
fresh home and a process of its own: with the code of the checkout DIR (on PYTHONPATH: "before")
and with this one's ("after"). The second home starts with the first one's fleet catalog, so
both fleets run the very same programs at the very same measured step times (the fleet itself is
a function of its seed). Then, per night and home, from the home's ledger and store:
- the verified coverage the night left (`ranking.verified_coverage`: the share of the tunable
  chip-time of the night's window, this machine's platform and device kind, whose graph has a
  live config the loop measured), under the store version live when the night's savings stage
  ended (store versions are immutable, so an old code's night is read back the same way);
- the tune stage's seconds, the graph tasks tuned and accepted, and the night's seconds in all.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import describe

import tuner
from pipelines.nightly import ledger_rows
from ranking.verified_coverage import verified_coverage
from storage.home_factory import open_home
from storage.store_reader import StoreReader

HERE = Path(tuner.__file__).resolve().parent.parent  # this checkout
WINDOW_DAYS = 7  # the nightly's savings window (NightlySettings.window_days)


def run_demo(root: Path, home: Path, days: int) -> float:
    """The demo with the code of `root`, in `home`; its wall seconds."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pipelines.demo", "--days", str(days)], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root), "FDO_HOME": str(home)},
                          capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a stage failed, which the ledger shows
        raise RuntimeError(f"the demo ({root}) exited {done.returncode}: {done.stderr[-2000:]}")
    (home / "demo.log").write_text(done.stdout + done.stderr)
    return time.perf_counter() - started


def nights(home: Path) -> list[dict[str, Any]]:
    """Per night of `home`'s ledger: its coverage, tune stage and seconds (module docstring)."""
    store = StoreReader(home)
    created = sorted((datetime.datetime.fromisoformat(m.created), m.version) for m in store.versions())
    rows = ledger_rows(home).to_pylist()
    found = []
    for number, date in enumerate(sorted({r["dt"] for r in rows}), start=1):
        stages = {r["stage"]: r for r in rows if r["dt"] == date and r["status"] == "done"}
        if "savings" not in stages:
            continue
        ended = stages["savings"]["started_at"] + datetime.timedelta(seconds=stages["savings"]["seconds"])
        live = max((v for at, v in created if at <= ended), default=None)
        entries = store.entries(live) if live is not None else None
        first = date - datetime.timedelta(days=WINDOW_DAYS - 1)
        covered = verified_coverage(open_home(home), first, date, None, entries) if entries is not None else None
        tune = stages.get("tune")
        counts = json.loads(tune["counts"]) if tune else {}
        found.append({"night": number, "date": date.isoformat(), "store_version": live,
                      "coverage": covered.share if covered is not None else 0.0,
                      "covered_keys": covered.covered_keys if covered is not None else 0,
                      "tunable_keys": covered.tunable_keys if covered is not None else None,
                      "tune_seconds": tune["seconds"] if tune else None,
                      "tuned": counts.get("tuned"), "accepted": counts.get("accepted"),
                      "night_seconds": sum(r["seconds"] for r in stages.values())})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True,
                        help="a checkout of the code to compare with (its root: pipelines/, tuner/, ...)")
    parser.add_argument("--days", type=int, default=3, help="simulated days, a night after each")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the two homes under this directory (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="machine-readable results")
    args = parser.parse_args()
    if not (args.before / "pipelines" / "demo.py").exists():
        parser.error(f"--before {args.before}: no checkout of this project there (no pipelines/demo.py)")
    parent = args.keep or Path(tempfile.mkdtemp(prefix="bench-coverage-"))
    homes = {"before": parent / "before", "after": parent / "after"}
    results: dict[str, Any] = {}
    for code, root in (("before", args.before.resolve()), ("after", HERE)):
        home = homes[code]
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        catalog = homes["before"] / "simulator" / "catalog"
        if code == "after" and catalog.exists():
            shutil.copytree(catalog, home / "simulator" / "catalog")
        seconds = run_demo(root, home, args.days)
        results[code] = {"demo_seconds": seconds, "nights": nights(home)}
    if args.keep is None:
        shutil.rmtree(parent, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{'night':>5} {'code':<7} {'coverage':>9} {'graphs':>7} {'tuned':>6} {'accepted':>9} "
          f"{'tune s':>7} {'night s':>8}")
    for night in range(args.days):
        for code in ("before", "after"):
            rows = results[code]["nights"]
            if night >= len(rows):
                continue
            r = rows[night]
            tuned = r['tuned'] if r['tuned'] is not None else '-'
            accepted = r['accepted'] if r['accepted'] is not None else '-'
            print(f"{r['night']:>5} {code:<7} {r['coverage']:>9.1%} {r['covered_keys']:>3}/{r['tunable_keys'] or 0:<3} "
                  f"{tuned:>6} {accepted:>9} "
                  f"{r['tune_seconds'] or 0:>7.0f} {r['night_seconds']:>8.0f}")
    for code in ("before", "after"):
        print(f"{code}: the demo took {results[code]['demo_seconds'] / 60:.1f} minutes")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
