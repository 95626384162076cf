"""`fdo toolchain`, `validate`: re-checking stored configs, on this compiler or a registered one,
on a local or a URL home."""

from __future__ import annotations

import argparse
import json
import sys

from pipelines.cli.cluster import add_cluster_option
from pipelines.cli.common import EXIT_OK, JSON_HELP, Subcommands, add_command, json_rows, print_json, print_table
from pipelines.extras import needs
from storage.home import Home


def add_toolchain(sub: Subcommands) -> None:
    """`fdo toolchain`."""
    p = add_command(sub, "toolchain", "compilers the validator measures with (python + jaxlib)",
                    ["fdo toolchain list", "fdo toolchain add jax-0.10 /opt/jax-0.10/bin/python",
                     "fdo toolchain create next 0.10.1", "fdo toolchain remove next"])
    p.add_argument("action", choices=["add", "create", "list", "remove"],
                   help="add: register an interpreter; create: install a jax version in a new venv and "
                   "register it; list: this interpreter and the registered ones; remove: forget one")
    p.add_argument("name", nargs="?", metavar="NAME", help="the toolchain's name (default: none, "
                   "which only list accepts)")
    p.add_argument("arg", nargs="?", metavar="ARG", help="add: PYTHON interpreter; create: "
                   "JAX_VERSION to install in a venv (default: none, which only list and remove accept)")
    p.add_argument("--standalone", action="store_true",
                   help="create: install jax's dependencies too instead of sharing this interpreter's")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(run=cmd_toolchain, home_url=True)


def cmd_toolchain(args: argparse.Namespace, home: Home) -> int:
    """List, add, create or remove the toolchains registered in `home`. A ToolchainError is a
    ValueError: bad input, told in one line by the dispatcher."""
    from validator.toolchains import Registry, ToolchainError, build_venv, probe, venv_dir

    registry = Registry(home)
    if args.action == "list":
        chains = [probe(sys.executable)] + registry.list()
        if args.json:
            print_json([c.to_json() for c in chains])
        else:
            print_table(("name", "compiler", "python"),
                        [(c.name, c.compiler_version, c.python) for c in chains], "<<<")
        return EXIT_OK
    if not args.name:
        raise ToolchainError(f"fdo toolchain {args.action}: give a toolchain NAME")
    if args.action == "remove":
        registry.remove(args.name)
        print(json.dumps({"removed": args.name}) if args.json else f"removed toolchain {args.name}")
        return EXIT_OK
    if not args.arg:
        what = "PYTHON (an interpreter)" if args.action == "add" else "JAX_VERSION (e.g. 0.10.0)"
        raise ToolchainError(f"fdo toolchain {args.action} {args.name}: give {what}")
    python = args.arg
    if args.action == "create":
        python = build_venv(venv_dir(home, args.name), args.arg, standalone=args.standalone)
    chain = registry.add(args.name, python)
    if args.json:
        print_json(chain.to_json())
    else:
        print(f"toolchain {chain.name}: {chain.python} runs {chain.compiler_version} "
              f"(env {chain.env().key()[:8]})")
    return EXIT_OK


def add_validate(sub: Subcommands) -> None:
    """`fdo validate`."""
    p = add_command(sub, "validate", "re-check stored configs on the current compiler: keep, re-key, "
                    "invalidate, expire",
                    ["fdo validate --once --budget-minutes 20", "fdo validate --once --toolchain next",
                     "fdo validate --report --json",
                     "fdo --home gs://bucket/fdo validate --once --cluster auto"])
    p.add_argument("--once", action="store_true", help="one pass, then exit (without it: a pass every "
                   "--every-minutes until interrupted)")
    p.add_argument("--budget-minutes", type=float, default=None, metavar="MINUTES",
                   help="stop measuring after this long (default: no limit)")
    p.add_argument("--every-minutes", type=float, default=60.0, metavar="MINUTES",
                   help="without --once: the interval")
    p.add_argument("--toolchain", metavar="NAME",
                   help="the compiler to validate on (fdo toolchain; default: this interpreter)")
    p.add_argument("--max-seconds", type=float, default=10.0, metavar="SECONDS",
                   help="timing budget per entry, in each worker")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="fresh workers that measure each entry, one after another; the entry is "
                        "decided on their median (default: 3)")
    p.add_argument("--ttl-days", type=float, default=30.0, metavar="DAYS",
                   help="the fresh lease of a kept or re-keyed entry")
    p.add_argument("--max-age-days", type=float, default=180.0, metavar="DAYS",
                   help="absolute lifetime of a config since first measured")
    p.add_argument("--revalidate-after-hours", type=float, default=24.0, metavar="HOURS",
                   help="entries measured more recently on the same compiler are skipped")
    p.add_argument("--report", action="store_true",
                   help="print staleness, outcomes per day and the validator's share of fleet hits")
    add_cluster_option(p)
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(run=cmd_validate, home_url=True)


@needs("pipeline")
def cmd_validate(args: argparse.Namespace, home: Home) -> int:
    """One validation pass (--once), passes on an interval, or the validator's report. A bad
    toolchain (ValueError) and a validation already running (LockHeld) are told in one line by
    the dispatcher."""
    import dataclasses
    import datetime

    from validator.validate import MEASURE_SETTINGS, ValidateSettings, validate

    if args.cluster is not None and not args.once:
        raise ValueError("--cluster: measures the entries of one pass (--once) only")
    if args.report:
        return _validation_report(home, args.json)
    if not args.once:
        return _validate_forever(home, args)
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers {args.workers}: at least one is needed")
    settings = ValidateSettings(
        workers=args.workers or ValidateSettings.workers, budget_minutes=args.budget_minutes,
        ttl=datetime.timedelta(days=args.ttl_days),
        max_age=datetime.timedelta(days=args.max_age_days),
        revalidate_after=datetime.timedelta(hours=args.revalidate_after_hours),
        measure=dataclasses.replace(MEASURE_SETTINGS, max_seconds=args.max_seconds))
    from pipelines.stages import cluster_address, measurer, open_runner

    with open_runner(cluster_address(args.cluster)) as runner:
        report = validate(home, args.toolchain, settings, progress=not args.json,
                          measurer=measurer(runner))
    if args.json:
        print_json(report.to_json())
        return EXIT_OK
    if report.decisions:
        print_table(("outcome", "key", "new key", "fleet hits", "reason"),
                    [(d.outcome, d.key[:12], (d.new_key or "")[:12], str(d.fleet_hits), d.reason)
                     for d in report.decisions], "<<<><", indent="  ")
    counts = ", ".join(f"{n} {outcome}" for outcome, n in report.counts().items())
    print(f"validated on {report.compiler_version} ({report.toolchain}): {counts}; "
          f"{report.skipped} skipped, {report.deferred} deferred; store version {report.version}"
          f"{'' if report.published else ' (unchanged)'}")
    return EXIT_OK


@needs("service")
def _validate_forever(home: Home, args: argparse.Namespace) -> int:
    import logging

    from apscheduler.schedulers.blocking import BlockingScheduler

    from validator.validation_job import add_validation_job

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    scheduler = BlockingScheduler()
    add_validation_job(scheduler, home, args.every_minutes, args.budget_minutes, args.toolchain)
    scheduler.start()  # until Ctrl-C
    return EXIT_OK


def _validation_report(home: Home, as_json: bool) -> int:
    from validator.report import outcomes_over_time, staleness, validator_hit_share

    tables = {"staleness": staleness(home), "outcomes": outcomes_over_time(home),
              "hit_share": validator_hit_share(home)}
    if as_json:
        print_json({name: json_rows(table) for name, table in tables.items()})
        return EXIT_OK
    sections = {
        "staleness": ("staleness of live entries (since last measured):", "no live entries",
                      ("since measured", "entries", "share", "by the validator"), "<>>>",
                      lambda r: (r["bucket"], str(r["entries"]), f"{r['share']:.1%}",
                                 str(r["validator_entries"]))),
        "outcomes": ("decisions per day:", "no validation runs yet",
                     ("date", "outcome", "decisions"), "<<>",
                     lambda r: (str(r["dt"]), r["outcome"], str(r["decisions"]))),
        "hit_share": ("fleet hits served by validator-updated entries:", "no hits recorded",
                      ("date", "source", "validator hits", "hits", "share"), "<<>>>",
                      lambda r: (str(r["dt"]), r["source"], str(r["validator_hits"]), str(r["hits"]),
                                 f"{r['share']:.1%}")),
    }
    for name, (title, empty, header, align, cells) in sections.items():
        print(title)
        rows = [cells(row) for row in tables[name].to_pylist()]
        if rows:
            print_table(header, rows, align, indent="  ")
        else:
            print(f"  {empty}")
    return EXIT_OK
