"""`fdo nightly`, `scheduler`: the whole loop for a date, and the daemon that runs it on a cron."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipelines.cli.cluster import add_cluster_option
from pipelines.cli.common import (
    BEAM_NOTE,
    EXIT_FAILED,
    EXIT_OK,
    Subcommands,
    add_command,
    add_validation_options,
    print_json,
    print_table,
)
from pipelines.extras import needs
from storage.home import Home


def add_nightly(sub: Subcommands) -> None:
    """`fdo nightly`."""
    p = add_command(sub, "nightly", "one turn of the loop for a date: ingest, rank, tune, deliver, "
                    "validate, savings",
                    ["fdo nightly", "fdo nightly --date 2025-01-31 --inbox /data/drops --top 2 --force",
                     "fdo --home /shared/fdo nightly --cluster 10.0.0.5:6379"],
                    BEAM_NOTE, "Exit status 1: a stage failed (the others still ran where they could).")
    p.add_argument("--date", metavar="DATE", help="YYYY-MM-DD (default: today)")
    p.add_argument("--inbox", action="append", default=[], metavar="DIR",
                   help="where drops, traces and dumps arrive; repeat for more (default: HOME/inbox)")
    p.add_argument("--window-days", type=int, default=7, metavar="DAYS",
                   help="days ranked, ending with --date")
    p.add_argument("--top", type=int, default=3, metavar="N",
                   help="graph searches, worthiest first (transfer checks and results shared with "
                   "keys measured alike come first and on top: docs/nightly.md)")
    p.add_argument("--rank-top", type=int, default=20, metavar="N",
                   help="graph candidates the ranking keeps: the keys a night may reach")
    p.add_argument("--rank-min-share", type=float, default=0.001, metavar="SHARE",
                   help="the ranking's long tail: keys under this share of the fleet's chip-time "
                   "are no candidates (a night reaches them only by results shared with keys "
                   "measured alike)")
    p.add_argument("--no-transfer", action="store_true",
                   help="each key searched on its own, from the defaults: no transfer checks, no "
                   "seeds, no result shared by keys measured alike (for comparisons)")
    p.add_argument("--top-ops", type=int, default=2, metavar="N",
                   help="ops to tune, then fold into their graphs")
    p.add_argument("--top-kernels", type=int, default=2, metavar="N",
                   help="GPU graphs whose kernels XLA's autotuner tunes offline (none where no "
                   "machine of the run autotunes: a CPU's)")
    p.add_argument("--tune-evals", type=int, default=24, metavar="N", help="evaluations per graph")
    p.add_argument("--tune-minutes", type=float, default=20.0, metavar="MINUTES",
                   help="budget of the tune stage")
    p.add_argument("--validate-minutes", type=float, default=10.0, metavar="MINUTES",
                   help="budget of the validator")
    p.add_argument("--verify-workers", type=int, default=None, metavar="N",
                   help="fresh workers that compare finalists, verify each tuned winner and "
                   "re-measure each validated entry (default: the tuner's, 3)")
    p.add_argument("--force", action="store_true", help="run every stage again for a finished date")
    add_cluster_option(p)
    p.add_argument("--json", action="store_true", help="print each stage's status and counts as JSON")
    p.set_defaults(run=cmd_nightly, takes_beam_args=True, home_url=True)


@needs("pipeline")
def cmd_nightly(args: argparse.Namespace, home: Home) -> int:
    """Run the stages of the date not yet done; print each stage's outcome."""
    import datetime

    from pipelines.nightly import NightlySettings, StageStatus, run_nightly

    if args.verify_workers is not None and args.verify_workers < 1:
        raise ValueError(f"--verify-workers {args.verify_workers}: at least one is needed")
    settings = NightlySettings(
        date=datetime.date.fromisoformat(args.date) if args.date else datetime.date.today(),
        inbox=tuple(Path(p) for p in args.inbox), window_days=args.window_days, top=args.top,
        top_ops=args.top_ops, top_kernels=args.top_kernels, tune_evals=args.tune_evals,
        tune_minutes=args.tune_minutes, validate_minutes=args.validate_minutes,
        verify_workers=args.verify_workers, rank_top=args.rank_top, rank_min_share=args.rank_min_share,
        transfer=not args.no_transfer,
        beam_args=tuple(args.beam_args), force=args.force)
    from pipelines.stages import cluster_address, open_runner

    with open_runner(cluster_address(args.cluster)) as runner:
        report = run_nightly(home, settings, progress=not args.json, runner=runner)
    if args.json:
        print_json(report.to_json())
    else:
        print_table(("date", "stage", "status", "seconds", "outcome"),
                    [(str(report.date), stage.stage, stage.status, f"{stage.seconds:.1f}",
                      stage.error.splitlines()[0] if stage.error else _counts_text(stage.counts))
                     for stage in report.stages], "<<<><")
        if all(s.status == StageStatus.SKIPPED for s in report.stages):
            print(f"{report.date}: finished before; nothing to do (--force runs it again)")
    return EXIT_OK if report.ok else EXIT_FAILED


def _counts_text(counts: dict[str, Any]) -> str:
    """A stage's counts in one line: `name=value ...` (- for none)."""
    return " ".join(f"{name}={'-' if value is None else value}" for name, value in counts.items()) or "-"


def add_scheduler(sub: Subcommands) -> None:
    """`fdo scheduler`."""
    p = add_command(sub, "scheduler", "the daemon: fdo nightly on a cron, the validator on an interval",
                    ["fdo scheduler", "fdo scheduler --cron '30 1 * * *' --nightly-args='--top 2 "
                     "--top-ops 1' --validate-every 120"])
    p.add_argument("--cron", default="0 2 * * *",
                   help="when the nightly run starts: a crontab line in UTC, 5 fields (or 6, seconds first)")
    p.add_argument("--misfire-grace-minutes", type=float, default=360.0, metavar="MINUTES",
                   help="a run missed while the daemon was down still runs within this time")
    p.add_argument("--nightly-args", default="", metavar="ARGS", help="arguments for each fdo nightly, "
                   "as one string: --nightly-args=\"--top 2 ...\" (default: none)")
    add_validation_options(p, budget_minutes=10.0)
    p.set_defaults(run=cmd_scheduler)


@needs("service")
def cmd_scheduler(args: argparse.Namespace, home: Path) -> int:
    """Run the daemon on `home` until SIGTERM or SIGINT."""
    import shlex

    from pipelines.scheduler import SchedulerSettings, run_scheduler
    from storage.home_factory import open_home

    settings = SchedulerSettings(cron=args.cron, misfire_grace_minutes=args.misfire_grace_minutes,
                                 nightly_args=tuple(shlex.split(args.nightly_args)),
                                 validate_every_minutes=args.validate_every,
                                 validate_budget_minutes=args.validate_budget_minutes)
    return run_scheduler(open_home(home), settings)
