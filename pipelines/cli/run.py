"""`fdo run`: a program run with the compiler hook on, pointed at the home's store (or a config
service) by its environment."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipelines.cli.common import EXIT_BAD_INPUT, Subcommands, add_command


def add_run(sub: Subcommands) -> None:
    """`fdo run`."""
    p = add_command(sub, "run", "run a program with the compiler hook on (FDO_HOOK=1)",
                    ["fdo run -- python train.py --steps 100",
                     "fdo run --store-url http://fdo.internal:8470 --job-id train-7 -- python train.py",
                     "fdo run --job-file fdo-job.json -- python train.py"])
    p.add_argument("--store-url", metavar="URL",
                   help="ask this config service (default: the store under --home)")
    p.add_argument("--store-version", type=int, metavar="N", help="pin this store version "
                   "(default: the live one)")
    p.add_argument("--job-id", metavar="ID", help="the job's id in hit records (default: host-pid; in "
                   "a job of several processes, process 0's id for all of them)")
    p.add_argument("--job-file", metavar="PATH",
                   help="the job's fdo-job.json (docs/ingest.md): its job_id (unless --job-id), "
                   "team (FDO_TEAM: the store's relaxed-numerics teams may name it), "
                   "relaxed_numerics (as --relaxed-numerics) and opted_out (as --opt-out) "
                   "(default: none, the options alone)")
    p.add_argument("--spool-hlo", action="store_true",
                   help="spool each module's HLO under HOME/spool/symbols for fdo ingest symbols")
    p.add_argument("--holdout", type=float, metavar="SHARE",
                   help="force the holdout share, 0 to 1 (FDO_HOLDOUT): 1 sends every key of the "
                   "job to the compiler's defaults, 0 none (default: each entry's share in the store)")
    p.add_argument("--opt-out", action="store_true",
                   help="take no part in the holdout arm: always the tuned config (FDO_OPT_OUT=1)")
    p.add_argument("--relaxed-numerics", action="store_true",
                   help="take an entry's relaxed-numerics config where it has one "
                   "(FDO_RELAXED_NUMERICS=1)")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM ...",
                   help="the program and its arguments, after --")
    p.set_defaults(run=cmd_run)


def cmd_run(args: argparse.Namespace, home: Path) -> int:
    """Replace this process with the program, the hook on and pointed at `home` (the hook runs
    inside the program, so the home reaches it through its environment: FDO_HOME) and set by
    the options and the --job-file; a job file it cannot take is a ValueError or OSError naming
    it (ingest.sidecars.read_job_file)."""
    from ingest.sidecars import read_job_file

    command = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not command:
        print("fdo run: give the program to run after --, e.g. fdo run -- python train.py",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.holdout is not None and not 0 <= args.holdout <= 1:  # NaN too
        print(f"fdo run: --holdout {args.holdout}: must be a share from 0 to 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    env = dict(os.environ, FDO_HOOK="1", FDO_HOME=str(home))
    if args.job_file:  # the options below add to it, and --job-id replaces its job_id
        job = read_job_file(Path(args.job_file))
        env.update(FDO_JOB_ID=job.job_id, FDO_TEAM=job.team)
        env.update({name: "1" for name, on in (("FDO_OPT_OUT", job.opted_out),
                                               ("FDO_RELAXED_NUMERICS", job.relaxed_numerics)) if on})
    for name, value in (("FDO_STORE_URL", args.store_url), ("FDO_STORE_VERSION", args.store_version),
                        ("FDO_JOB_ID", args.job_id), ("FDO_HOLDOUT", args.holdout)):
        if value is not None:
            env[name] = str(value)
    for name, on in (("FDO_SPOOL_HLO", args.spool_hlo), ("FDO_OPT_OUT", args.opt_out),
                     ("FDO_RELAXED_NUMERICS", args.relaxed_numerics)):
        if on:
            env[name] = "1"
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"fdo run: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
