"""What every command module of `fdo` shares: exit codes, the home, help pages, tables and JSON.

A command's module (pipelines/cli/ingest.py), or a group's (rank.py: rank and savings), adds
each of its commands with `add_command` and gives it a handler: `handler(args, home) -> exit
code`, where `home` is the data root the dispatcher resolved once (`resolve_home`) and hands to
every command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterable

from pipelines.extras import MissingExtra, require
from storage.home import Home
from storage.home_factory import open_home

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_QUARANTINED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_DEFAULT_FAILS, EXIT_BROKEN_PIPE = 4, 141
JSON_HELP = "print the result as JSON (one document on one line) instead of text"
BEAM_NOTE = ("Other --flags go to Apache Beam (e.g. --runner=FlinkRunner --flink_master=HOST:PORT); "
             "default: Beam's in-process runner, multi-process.")

# A command's handler: its parsed arguments and the home, to its exit code.
Handler = Callable[[argparse.Namespace, Any], int]
Subcommands = argparse._SubParsersAction


def resolve_home(given: str | None) -> Home:
    """The data root of every stage: `given` (--home), else `FDO_HOME`, else ~/.fdo; a local
    directory or a URL (gs://, s3://, ...: read and written through Beam's FileSystems)."""
    text = os.environ.get("FDO_HOME", "") if given is None else given
    if "://" in text:  # reached through Beam's file systems: without Beam, one line, not a traceback
        require("pipeline")
    return open_home(text or Path.home() / ".fdo")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that keeps the epilogs' example lines as written and shows every option's default.
    Unlike ArgumentDefaultsHelpFormatter, it says nothing where the default is no value (None, an
    empty string or list: the help says what happens then) or a flag's False."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        nothing = action.default in (None, argparse.SUPPRESS) or action.default in ("", [])
        if action.nargs == 0 or nothing or "default:" in text:
            return text
        return f"{text} (default: %(default)s)"


def epilog(examples: list[str], *notes: str) -> str:
    """A command's help epilog: its notes as wrapped paragraphs, then its examples, one a line as
    typed (each parses: tests/pipelines/test_cli.py checks)."""
    heading = "Example:" if len(examples) == 1 else "Examples:"
    return "\n\n".join([textwrap.fill(note, 78) for note in notes]
                       + [heading + "".join(f"\n  {example}" for example in examples)])


def add_command(sub: Subcommands, name: str, help: str, examples: list[str],
                *notes: str) -> argparse.ArgumentParser:
    """Add the subcommand `name` to `fdo`: `help` in the command list and atop its page, then its
    notes and examples. The caller adds its arguments and sets `run` (its Handler) and, where the
    command differs from the default, `home_use` (None: never uses the home; "read"; the
    default "write"), `home_url` (True: takes a URL home) and `takes_beam_args` (True: other
    --flags go to Beam)."""
    return sub.add_parser(name, help=help, description=help, epilog=epilog(examples, *notes),
                          formatter_class=HelpFormatter)


def add_validation_options(p: argparse.ArgumentParser, budget_minutes: float) -> None:
    """`--validate-every MINUTES` and `--validate-budget-minutes` of a daemon that also runs the
    validator in the background (`--validate-every-minutes` is the scheduler's older name)."""
    p.add_argument("--validate-every", "--validate-every-minutes", dest="validate_every", type=float,
                   default=None, metavar="MINUTES",
                   help="also run the validator in the background at this interval (default: never)")
    p.add_argument("--validate-budget-minutes", type=float, default=budget_minutes, metavar="MINUTES",
                   help="time budget of each background validation run")


def print_json(payload: Any) -> None:
    """`payload` as one JSON document on one line: what --json prints."""
    print(json.dumps(payload, indent=None, sort_keys=True))


def print_table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]], align: str,
                indent: str = "") -> None:
    """`rows` of text cells under `header`, each column as wide as its widest cell; `align` holds
    one `<` (left) or `>` (right, for numbers) per column."""
    lines = [header, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print(indent + "  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(line, align, widths)).rstrip())


def json_rows(table: Any) -> list[dict]:
    """An Arrow table's rows as JSON-ready dicts: dates and times in ISO 8601."""
    return [{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}
            for row in table.to_pylist()]


def config_text(config: dict[str, Any]) -> str:
    """A compiler config as the `--set` arguments that give it: `flag=value flag=a,b`."""
    def value_text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return ",".join(value) if isinstance(value, (list, tuple)) else str(value)

    text = " ".join(f"{name}={value_text(value)}" for name, value in sorted(config.items()))
    return text or "default config"


def guarded(command: str, run: Callable[[], int]) -> int:
    """`run()`'s exit code, or a failure it raised told in one line on stderr (`fdo COMMAND:
    ...`) and turned into its exit code. A reader of stdout that went away is left to
    `closing_stdout`."""
    from execution.compile import CompileError
    from storage.home import LockHeld

    try:
        return run()
    except BrokenPipeError:  # the reader of stdout is gone: main ends quietly
        raise
    # Bad input of every stage (HloLoadError, FlagError, StoreError, bad dates...) is a ValueError;
    # an install without the extra the command needs is a usage problem; a path the stage was
    # given (or the home) that cannot be read or written too.
    except (CompileError, KeyError, ValueError, MissingExtra, OSError) as exc:
        print(f"fdo {command}: {_os_error_line(exc) if isinstance(exc, OSError) else exc}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except LockHeld as exc:
        print(f"fdo {command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"fdo {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def closing_stdout(run: Callable[[], int]) -> int:
    """`run()`'s exit code, with stdout flushed before it returns; EXIT_BROKEN_PIPE, quietly, when
    the reader of stdout went away (`fdo ... | head`)."""
    try:
        try:
            return run()
        finally:
            sys.stdout.flush()  # a reader gone before the last buffered lines shows here, not at exit
    except BrokenPipeError:
        # The recipe of Python's signal docs: stdout's buffer goes to /dev/null, so the flush at
        # exit raises nothing more, and the exit status says the output was cut short.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _os_error_line(exc: OSError) -> str:
    """An OSError in one line: the path it names and what went wrong."""
    if exc.filename is None:
        return exc.strerror or str(exc)
    return f"{exc.filename}: {exc.strerror}"
