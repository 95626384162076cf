"""`fdo`: the command line of fleet-fdo, one subcommand per stage of the loop.

`main` runs one command in this process and `console` is the `fdo` console script; `build_parser`
gathers each command's parser (`COMMANDS`) from the module named for it, or for its group of
commands (`store`: deliver, store and serve; `loop`: nightly and scheduler; `rank`: rank and
savings; `validate`: toolchain and validate); `common` holds what they share (exit codes, the
home, help pages, tables and JSON). A command imports its own module alone: `fdo hits` or the
`fdo run` before a job does not import the tuner's. `fdo --help` shows the first line of this and
`EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import importlib.metadata
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Callable, NoReturn

from pipelines.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    Handler,
    HelpFormatter,
    closing_stdout,
    epilog,
    guarded,
    resolve_home,
)
from pipelines.extras import MissingExtra
from storage.beam_logging import quiet_beam_logging
from storage.home import Home

__all__ = ["COMMANDS", "EXIT_BROKEN_PIPE", "build_parser", "console", "main"]

# What `fdo --help` says after its commands, one paragraph.
EXIT_CODES = """Exit codes: 0 success; 1 the work ran but its outcome is a failure (a failed
evaluation, numerics off); 2 bad usage or bad input (unreadable module, unknown flag, a home that
is no writable directory, a global option such as --home given after the subcommand), told in one
line; 3 the good inputs landed but some inputs (or rows) were quarantined; 4 (evaluate, tune) a
module fails with the compiler's default config, so there is nothing to measure against; 130
interrupted; 141 the reader of stdout went away (`fdo ... | head`): the rest of the output is
dropped quietly, as a command killed by SIGPIPE is reported by the shell (128 + 13)."""

HOME_OPTION = "--home"
# The commands whose process starts JAX beside the workers that measure (see `_main`).
MEASURING_COMMANDS = frozenset({"evaluate", "tune", "validate", "nightly"})
# fdo's own options, before the subcommand. After it, Beam commands would take them for Beam's.
GLOBAL_OPTIONS = (HOME_OPTION,)


@dataclass(frozen=True)
class Command:
    """A command of `fdo`: its name, and the module of this package whose `add_<name>` adds its
    parser (and holds its handler), imported only when the parser is built."""

    name: str
    module: str

    def adder(self) -> Callable[[argparse._SubParsersAction], None]:
        """The function that adds this command's parser to a subparsers action."""
        return getattr(importlib.import_module(f"pipelines.cli.{self.module}"), f"add_{self.name}")


# Each command, in the order `fdo --help` lists them: the loop's order, from a module's
# fingerprint to the savings of tuned configs.
COMMANDS = tuple(Command(name, module) for name, module in (
    ("fingerprint", "fingerprint"), ("family", "family"), ("evaluate", "evaluate"),
    ("workloads", "workloads"), ("ingest", "ingest"), ("simulate", "simulate"), ("rank", "rank"),
    ("tune", "tune"), ("analyze", "analyze"), ("deliver", "store"), ("store", "store"),
    ("serve", "store"), ("nightly", "loop"), ("scheduler", "loop"), ("run", "run"), ("hits", "hits"),
    ("toolchain", "validate"), ("validate", "validate"), ("savings", "rank"), ("cluster", "cluster")))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of `fdo`: with every command's parser, or with `command`'s alone
    where it names one."""
    parser = argparse.ArgumentParser(
        prog="fdo", description=__doc__.splitlines()[0], formatter_class=HelpFormatter,
        epilog=epilog(["fdo workloads list", "fdo --home /data/fdo rank --top 10",
                       "fdo evaluate module.txt --set xla_cpu_enable_fast_math=true"],
                      "fdo COMMAND --help tells each command's options, defaults and examples.",
                      " ".join(EXIT_CODES.split())))
    parser.add_argument("--version", action="version", version=_version_text())
    parser.add_argument(HOME_OPTION, default=None, metavar="DIR",  # a string: `rank` and `savings` take URLs
                        help="data root, given before the command (default: $FDO_HOME, else ~/.fdo)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    named = [c for c in COMMANDS if c.name == command]
    for each in named or COMMANDS:
        each.adder()(sub)
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is neither an option of fdo's nor the value
    of one (None where there is none)."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: list[str] | None = None) -> int:
    """Run one `fdo` command in this process; its exit code."""
    return closing_stdout(lambda: _main(argv))


def console() -> NoReturn:
    """The `fdo` console script: `main()`, then the exit Python makes (its threads joined, its exit
    handlers run, stdout and stderr flushed), less the C++ static destructors after it. There,
    now and then, a native thread pool still running (Arrow's: apache/arrow#34314) aborts the
    process, "terminate called without an active exception", exit 134 after the command's work
    was done and printed."""
    code = main()
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001 -- what Python's own exit runs; os._exit skips it
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader gone, a stream closed: nothing to lose
            pass
    os._exit(code)


def _main(argv: list[str] | None) -> int:
    """Parse `argv`, resolve and check the home and run the command on it; bad input is one line
    and EXIT_BAD_INPUT."""
    quiet_beam_logging()  # Beam's notices, from the pipelines some commands run, are no answer
    parser = build_parser(_command_of(sys.argv[1:] if argv is None else argv))
    args, extra = parser.parse_known_args(argv)
    misplaced = [arg for arg in extra if arg.split("=", 1)[0] in GLOBAL_OPTIONS]
    if misplaced:
        option = misplaced[0].split("=", 1)[0]
        print(f"fdo {args.command}: {option} is an option of fdo, not of {args.command}: give it "
              f"before the subcommand (fdo {option} ... {args.command})", file=sys.stderr)
        return EXIT_BAD_INPUT
    if extra and not getattr(args, "takes_beam_args", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.beam_args = extra
    try:
        home = resolve_home(args.home)
    except MissingExtra as exc:
        print(f"fdo {args.command}: a URL home {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    home_use = getattr(args, "home_use", "write")
    takes_url = getattr(args, "home_url", False)
    # A URL home is checked only where it is taken: the others refuse it below (Home.local).
    checked = home_use and (home.is_local or takes_url)
    problem = _home_problem(home, home_use == "write", args.beam_args) if checked else None
    if problem:
        print(f"fdo {args.command}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command in MEASURING_COMMANDS:
        # These compile probes and read the compiler's defaults in this process, on the device
        # their workers measure on: it must leave the GPU's memory to them rather than take the
        # three quarters JAX preallocates (execution.worker). Not for `fdo run`: a job keeps
        # its own allocator settings.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        from execution.measure import time_scale
        try:  # once, here: a bad value would otherwise fail every measurement in the workers
            time_scale()
        except ValueError as exc:
            print(f"fdo {args.command}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    handler: Handler = args.run
    # A command that works on any home (it sets home_url) gets the home as it is; the others
    # take a local one, and a URL home is refused by name (Home.local).
    return guarded(args.command, lambda: handler(args, home if takes_url
                                                     else home.local(f"fdo {args.command}")))


def _home_problem(given: Home, writes: bool, beam_args: list[str]) -> str | None:
    """What is wrong with the home (None if nothing): a local one must be a directory, created
    if missing, and writable if the command writes; a URL home must answer (`Home.reach`, with
    Beam's file systems set up from `beam_args`)."""
    if not given.is_local:
        from storage.beam_runner import pipeline_options

        try:
            given.reach(pipeline_options(beam_args))
        except ValueError as exc:
            return str(exc)
        return None
    home = given.local("the home check")
    where = f"home {home} (--home or $FDO_HOME)"
    if home.exists() and not home.is_dir():
        return f"{where} is not a directory"
    try:
        home.mkdir(parents=True, exist_ok=True)
        if writes:  # trying is the only test that holds for ACLs, read-only mounts and root
            with tempfile.TemporaryFile(dir=home):
                pass
    except OSError as exc:
        return f"{where} is not writable: {exc.strerror}"
    return None


def _version_text() -> str:
    """`fdo --version`: the installed distribution's version."""
    try:
        return f"fdo (fleet-fdo) {importlib.metadata.version('fleet-fdo')}"
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "fdo (fleet-fdo) unknown: not installed (pip install -e .)"
