"""`fdo rank`, `savings`: the Beam stages over fleet costs, on a local or a URL home."""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.cli.common import BEAM_NOTE, EXIT_OK, Subcommands, add_command, json_rows, print_json, print_table
from pipelines.extras import needs
from storage.home import Home


def add_rank(sub: Subcommands) -> None:
    """`fdo rank`."""
    p = add_command(sub, "rank", "rank graphs and ops by fleet cost (Beam)",
                    ["fdo rank --date 2025-01-31 --top 10",
                     "fdo rank --runner=FlinkRunner --flink_master=localhost:8081"], BEAM_NOTE)
    p.add_argument("--date", metavar="DATE", help="ranking date, YYYY-MM-DD (default: today)")
    p.add_argument("--window-days", type=int, default=7, metavar="DAYS",
                   help="days ranked, ending with --date")
    p.add_argument("--top", type=int, default=20, metavar="K", help="candidates per kind")
    p.add_argument("--min-share", type=float, default=0.001, metavar="SHARE",
                   help="the long tail: keys under this share of fleet chip-time are not ranked")
    p.add_argument("--json", action="store_true", help="print candidates and coverage as JSON")
    p.set_defaults(run=cmd_rank, takes_beam_args=True, home_url=True)


@needs("pipeline")
def cmd_rank(args: argparse.Namespace, home: Home) -> int:
    """Rank the window's graphs and ops by fleet cost; print the candidates and the coverage."""
    import datetime

    from ranking.rank import RankSettings, rank

    settings = RankSettings(date=datetime.date.fromisoformat(args.date) if args.date else datetime.date.today(),
                            window_days=args.window_days, top_k=args.top, min_share=args.min_share)
    candidates, coverage = rank(home, settings, args.beam_args)
    if args.json:
        print_json({"candidates": json_rows(candidates), "coverage": json_rows(coverage)})
        return EXIT_OK
    print(f"ranking {settings.first_day} .. {settings.date}: top {settings.top_k} per kind")
    print_ranking(candidates, coverage)
    return EXIT_OK


def print_ranking(candidates: Any, coverage: Any) -> None:
    """Candidates by kind and rank, then where each kind's fleet chip-time went."""
    if candidates.num_rows:
        print_table(("kind", "rank", "fingerprint", "env", "chip-hours", "share"),
                    [(r["kind"], f"#{r['rank']}", r["fingerprint"], r["env_key"][:8],
                      f"{r['chip_seconds'] / 3600:,.1f}", f"{r['share']:.2%}")
                     for r in candidates.to_pylist()],
                    "<<<<>>", indent="  ")
    else:
        print("  no candidates (where the chip-time went is below)")
    print("coverage of fleet chip-time:")
    if coverage.num_rows:
        print_table(("kind", "category", "share", "keys"),
                    [(r["kind"], r["category"], f"{r['share']:.2%}", str(r["keys"]))
                     for r in coverage.to_pylist()],
                    "<<>>", indent="  ")
    else:
        print("  no fleet chip-time in the window: ingest profiles first (fdo ingest profiles)")


def add_savings(sub: Subcommands) -> None:
    """`fdo savings`."""
    p = add_command(sub, "savings", "chip-seconds saved by tuned configs, at run and at compile time: booked "
                    "(Beam) and realized",
                    ["fdo savings", "fdo savings --from 2025-01-01 --to 2025-01-31 --json"], BEAM_NOTE)
    p.add_argument("--from", dest="from_", metavar="DATE",
                   help="first date, YYYY-MM-DD (default: 29 days before --to, 30 days in all)")
    p.add_argument("--to", metavar="DATE", help="last date, YYYY-MM-DD (default: today)")
    p.add_argument("--json", action="store_true",
                   help='print {"rows": booked savings rows, "booked": their runtime, compile-time and '
                        'total sums, "entries": realized speedups, "totals", "teams", "versions": booked '
                        'and realized savings, "cost": the loop\'s}')
    p.set_defaults(run=cmd_savings, takes_beam_args=True, home_url=True)


@needs("pipeline")
def cmd_savings(args: argparse.Namespace, home: Home) -> int:
    """Book the chip-time tuned configs saved per day, kind, team and store version, at run
    time and at compile time (Beam); then what they realized in the fleet (holdout arm against
    tuned arm), the loop's cost, and its verified coverage (the share of the tunable chip-time
    that runs a verified config: now, over these days, and after each nightly run)."""
    import datetime

    from pipelines.nightly import coverage_by_night
    from ranking.cost import loop_cost, return_on_cost
    from ranking.realized import read_runs, realized_savings, realized_speedups
    from ranking.savings import MIN_HOLDOUT_COMPILES, BookedSavings, savings
    from ranking.verified_coverage import verified_coverage
    from storage.warehouse import Warehouse, partition_days
    from tuner.decided import defaults_kept
    from tuner.tables import TRIALS
    from validator.tables import VALIDATIONS

    last = datetime.date.fromisoformat(args.to) if args.to else datetime.date.today()
    first = datetime.date.fromisoformat(args.from_) if args.from_ else last - datetime.timedelta(days=29)
    rows = savings(home, first, last, args.beam_args)
    runs = read_runs(home, first, last)
    realized = realized_speedups(runs)
    split = realized_savings(runs, realized)
    warehouse, last_day = Warehouse(home), last.isoformat()
    days = set(partition_days(first, last))
    cost = loop_cost(warehouse.read(TRIALS, ["dt", "task_id", "elapsed_seconds"], lambda dt: dt <= last_day),
                     warehouse.read(VALIDATIONS, ["dt", "run_id", "validated_at"], days.__contains__),
                     realized, first, last)
    ratio = return_on_cost(split.total.realized.estimate if split.total.realized is not None else None, cost)
    booked = BookedSavings.of(rows)
    covered = verified_coverage(home, first, last, defaults_kept=defaults_kept(home, last))
    nights = [n for n in coverage_by_night(home) if n.date <= last]
    if args.json:
        print_json({"rows": json_rows(rows), "booked": booked.to_json(), "entries": [r.to_json() for r in realized],
                    "totals": split.total.to_json(), "teams": [s.to_json() for s in split.by_team],
                    "versions": [s.to_json() for s in split.by_version],
                    "cost": {**cost.to_json(), "return_on_cost": ratio},
                    "coverage": {**covered.to_json(), "nights": [n.to_json() for n in nights]}})
        return EXIT_OK
    unmeasured = (f"; {_count(booked.compile_unmeasured, 'compile')} unmeasured: under {MIN_HOLDOUT_COMPILES} "
                  "holdout compiles of their key" if booked.compile_unmeasured else "")
    print(f"savings {first} .. {last}: {_chip_time(booked.total)} saved in {rows.num_rows} rows: runtime "
          f"{_chip_time(booked.runtime)}, compile time {_chip_time(booked.compile)}{unmeasured}")
    if rows.num_rows:
        print_table(("date", "kind", "team", "version", "validator-updated", "runtime", "compiles", "compile time",
                     "saved"),
                    [(str(r["dt"]), r["kind"], r["team"], f"v{r['config_version']}",
                      "yes" if r["validator_updated"] else "no", _chip_time(r["chip_seconds_saved"]),
                      *_compiles(r), _chip_time(r["chip_seconds_saved"] + r["compile_chip_seconds_saved"]))
                     for r in rows.to_pylist()],
                    "<<<<<>>>>", indent="  ")
    else:
        print("  no hits on tuned configs in these days")
    print_realized(realized, split)
    print(f"loop cost: {_chip_time(cost.total)} ({_chip_time(cost.per_day)} a day): tuning "
          f"{_chip_time(cost.tuning)}, validation {_chip_time(cost.validation)}, holdout "
          f"{_chip_time(cost.holdout)} forgone; return on cost: "
          + (f"{ratio:,.2f}x" if ratio is not None else "none spent"))
    print_coverage(covered, nights)
    return EXIT_OK


def print_coverage(covered: Any, nights: list[Any]) -> None:
    """The verified coverage now (over the days asked): the share of the tunable chip-time
    running a verified faster config and the share decided; then both after each nightly run."""
    if covered.share is None:
        print("verified coverage: no tunable chip-time in these days")
    else:
        print(f"verified coverage: {covered.share:.1%} of the tunable chip-time runs a verified config "
              f"({_chip_time(covered.covered_chip_seconds)} of {_chip_time(covered.tunable_chip_seconds)}; "
              f"{covered.covered_keys} of {covered.tunable_keys} graphs); decided: {covered.decided_share:.1%} "
              f"(a verified config, or the defaults verified best; {covered.decided_keys} graphs)")
        if covered.unmeasurable_chip_seconds:
            print(f"  beside it, {_chip_time(covered.unmeasurable_chip_seconds)} of this platform's runs no machine "
                  "here can measure (keys spanning more devices than a per-device program is built for)")
    if nights:
        print("  after each night (faster / decided): " + ", ".join(
            f"{n.night} ({n.date}) {_share(n.share)} / {_share(n.decided_share)}" for n in nights))


def _share(value: float | None) -> str:
    """A share as a percentage; "-" for none."""
    return "-" if value is None else format(value, ".1%")


def print_realized(realized: Any, split: Any) -> None:
    """Booked against realized savings per team, per store version and in total, then each
    entry's realized speedup (or why it has none)."""
    print("realized in the fleet (holdout arm against tuned; booked on the same tuned runs):")
    if not realized:
        print("  no tuned runs in these days")
        return
    slices = ([(f"team {s.team}", s) for s in split.by_team]
              + [(f"v{s.config_version}", s) for s in split.by_version] + [("total", split.total)])
    scale, unit = _chip_unit([abs(v) for _, s in slices
                              for v in (s.booked, s.realized.estimate if s.realized else 0.0)])
    # A slice with no decided entry has no realized figure: "-", never a saving of 0.
    print_table(("slice", f"booked ({unit})", "on decided entries", "realized", "interval", "decided", "undecided"),
                [(name, f"{s.booked / scale:,.1f}", f"{s.booked_decided / scale:,.1f}",
                  f"{s.realized.estimate / scale:,.1f}" if s.realized else "-",
                  f"[{s.realized.low / scale:,.1f}, {s.realized.high / scale:,.1f}]" if s.realized else "-",
                  str(s.decided), str(s.undecided)) for name, s in slices],
                "<>>>>>>", indent="  ")
    print_table(("key", "version", "expected", "realized", "tuned jobs/runs", "holdout jobs/runs"),
                [(r.key[:12], f"v{r.config_version}", f"{r.expected_speedup:.3f}x",
                  r.speedup.as_speedup() if r.decided
                  else f"undecided: {r.undecided}",
                  f"{r.tuned.jobs}/{r.tuned.runs}", f"{r.holdout.jobs}/{r.holdout.runs}") for r in realized],
                "<<><>>", indent="  ")


def _compiles(row: dict[str, Any]) -> tuple[str, str]:
    """A savings row's compiles (measured, then unmeasured after a '+') and their compile time
    saved; '-' where it has none measured."""
    hits, unmeasured = row["compile_hits"], row["compile_unmeasured"]
    counted = f"{hits}" + (f" +{unmeasured} unmeasured" if unmeasured else "")
    return counted, _chip_time(row["compile_chip_seconds_saved"]) if hits else "-"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _chip_unit(seconds: list[float]) -> tuple[float, str]:
    """One unit for a table of chip-times: hours, or seconds while all are under a tenth of one."""
    return (3600.0, "chip-hours") if max(seconds, default=0.0) >= 360 else (1.0, "chip-seconds")


def _chip_time(seconds: float) -> str:
    """Chip-time in hours, or in seconds below a tenth of an hour (one job's savings)."""
    return f"{seconds / 3600:,.1f} chip-hours" if abs(seconds) >= 360 else f"{seconds:,.1f} chip-seconds"
