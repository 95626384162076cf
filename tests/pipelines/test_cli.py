"""The `fdo` command line itself: help and defaults of every option, examples that parse, each
command's parser beside its handler in one group module of pipelines/cli/, --version, output into
a pipe whose reader is gone, and progress bars only on a terminal."""

from __future__ import annotations

import argparse
import fcntl
import importlib.metadata
import json
import os
import pkgutil
import shlex
import struct
import subprocess
import sys
import termios
from typing import Iterator

import pytest

import pipelines.cli
from console.progress import progress_bar
from pipelines.cli import COMMANDS, EXIT_BROKEN_PIPE, build_parser, main
from tests.support.serving import fdo

FLAG_ACTIONS = (argparse._StoreTrueAction, argparse._HelpAction, argparse._VersionAction)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("fdo",)
              ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the tree with its command path, the top one first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, path + (name,))


def _is_leaf(parser: argparse.ArgumentParser) -> bool:
    return not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


def _examples(help_text: str) -> list[str]:
    """The example lines of a help page: those under its Example(s): heading."""
    _, _, tail = help_text.rpartition("\nExample")
    return [line.strip() for line in tail.splitlines()[1:] if line.startswith("  fdo ")]


def test_every_option_has_help_and_shows_its_default():
    commands = list(_commands(build_parser()))
    assert len(commands) > 15  # the walk reached the subcommands
    for path, parser in commands:
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            where = f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
            assert action.help and action.help.strip(), f"{where}: no help"
            if isinstance(action, FLAG_ACTIONS) or action.required:
                continue  # a flag's help says what it does; a required argument has no default
            shown = formatter._expand_help(action)
            assert "default:" in shown, f"{where}: its help shows no default: {shown!r}"
            assert "(default: None)" not in shown and "(default: [])" not in shown, where


def test_no_usage_shows_a_python_name():
    for path, parser in _commands(build_parser()):
        usage = parser.format_usage()
        assert "_" not in usage, f"{' '.join(path)}: a metavar made of a Python name: {usage}"


def test_each_command_shows_examples_that_parse():
    parser = build_parser()
    for path, command in _commands(parser):
        examples = _examples(command.format_help())
        assert examples, f"{' '.join(path)}: no example in its help"
        for example in examples:
            argv = shlex.split(example)[1:]
            args, extra = parser.parse_known_args(argv)  # SystemExit here fails the test
            if _is_leaf(command):
                assert args.command == path[-1], example
            assert not extra or getattr(args, "takes_beam_args", False), example


def test_each_command_is_defined_beside_its_handler_in_a_group_module():
    defined_by: dict[str, str] = {}
    for listed_command in COMMANDS:
        add = listed_command.adder()
        sub = argparse.ArgumentParser().add_subparsers()
        add(sub)
        (name, command), = sub.choices.items()  # one command per function
        assert name == listed_command.name
        handler = command.get_default("run")
        assert handler.__module__ == add.__module__, f"{name}: parser in {add.__module__}, handler elsewhere"
        defined_by[name] = add.__module__
    listed = [path[-1] for path, _ in _commands(build_parser()) if len(path) == 2]
    assert list(defined_by) == listed  # build_parser adds every group's commands, each once
    groups = {f"pipelines.cli.{m.name}" for m in pkgutil.iter_modules(pipelines.cli.__path__)}
    assert set(defined_by.values()) == groups - {"pipelines.cli.__main__", "pipelines.cli.common"}


@pytest.mark.subprocess
@pytest.mark.subprocess
def test_a_command_imports_its_own_module_and_not_the_others(tmp_path):
    """`fdo hits` (and the `fdo run` before every hooked job) parses with its own parser alone:
    the tuner's modules, which `fdo tune`'s parser needs, stay unimported."""
    check = ("import sys; from pipelines.cli import main; code = main(sys.argv[1:]); "
             "print(code, sorted(m for m in ('pipelines.cli.hits', 'pipelines.cli.tune', 'tuner.kinds') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", check, "--home", str(tmp_path), "hits", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 ['pipelines.cli.hits']"
    # With no command (fdo --help, or a word that is none), every command's parser is built.
    assert len(build_parser("no-such-command")._subparsers._group_actions[0].choices) == len(COMMANDS)


def test_version_is_the_installed_distributions():
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "--version"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["fdo", "(fleet-fdo)", importlib.metadata.version("fleet-fdo")]


@pytest.mark.parametrize("unbuffered", ["1", ""])  # a failed print, or a failed flush at the end
@pytest.mark.parametrize("argv", [["workloads", "list", "--json"], ["workloads", "list"]])
@pytest.mark.subprocess
def test_output_into_a_pipe_whose_reader_is_gone_ends_quietly(argv, unbuffered):
    environment = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (head, a closed pager) has gone before the first write
    try:
        done = subprocess.run([sys.executable, "-m", "pipelines.cli", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, env=environment)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (EXIT_BROKEN_PIPE, "")


@pytest.mark.subprocess
def test_lists_print_as_aligned_tables(tmp_path):
    listed = fdo(tmp_path / "home", "workloads", "list")
    header, *rows = listed.stdout.splitlines()
    assert listed.returncode == 0 and header.split() == ["name", "family", "size", "description"]
    names = [w["name"] for w in json.loads(fdo(tmp_path / "home", "workloads", "list", "--json").stdout)]
    assert [row.split()[0] for row in rows] == names
    column = header.index("description")  # every row's description starts under its heading
    assert all(row[column - 2:column] == "  " and row[column] != " " for row in rows)


@pytest.mark.subprocess
def test_store_versions_says_so_when_the_store_is_empty(tmp_path):
    done = fdo(tmp_path / "home", "store", "versions")
    assert (done.returncode, done.stdout) == (0, "store is empty: no versions\n")
    listed = json.loads(fdo(tmp_path / "home", "store", "versions", "--json").stdout)
    assert listed == {"current": None, "versions": [], "damaged": {}}


@pytest.mark.subprocess
def test_a_store_action_missing_or_given_a_bad_argument_is_bad_input(tmp_path):
    for args, named in ((["show"], "KEY"), (["diff", "1"], "two versions"), (["rollback", "x"], "'x'")):
        done = fdo(tmp_path / "home", "store", *args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert named in done.stderr and "Traceback" not in done.stderr


@pytest.mark.subprocess
def test_a_worker_count_below_one_is_bad_input(tmp_path):
    module = tmp_path / "m.hlo"
    module.write_text("HloModule m\n\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n}\n")
    for args, named in ((["evaluate", str(module), "--workers", "0"], "--workers 0"),
                        (["tune", str(module), "--verify-workers", "0"], "--verify-workers 0"),
                        (["nightly", "--verify-workers", "-1"], "--verify-workers -1"),
                        (["validate", "--once", "--workers", "0"], "--workers 0")):
        done = fdo(tmp_path / "home", *args)
        assert done.returncode == 2 and named in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_bad_measure_scale_is_bad_input_before_any_work(tmp_path, monkeypatch, capsys):
    module = tmp_path / "m.hlo"
    module.write_text("HloModule m\n\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n}\n")
    monkeypatch.setenv("FDO_MEASURE_SCALE", "fast")
    assert main(["--home", str(tmp_path / "home"), "evaluate", str(module)]) == 2
    assert "fdo evaluate: FDO_MEASURE_SCALE='fast': not a number" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()  # refused before the home was touched


def test_progress_bar_is_drawn_on_a_terminal_only(monkeypatch):
    def drawn(enabled: bool = True) -> bool:
        with progress_bar(range(3), desc="x", enabled=enabled) as bar:
            return not bar.disable

    controller, terminal = os.openpty()
    with open(terminal, "w") as tty, open(os.devnull, "w") as not_a_tty:
        monkeypatch.setattr(sys, "stderr", tty)
        assert drawn() and not drawn(enabled=False)
        monkeypatch.setattr(sys, "stderr", not_a_tty)
        assert not drawn()
    os.close(controller)


@pytest.mark.subprocess
def test_cli_draws_no_progress_into_a_pipe_but_does_on_a_terminal(tmp_path):
    drops = tmp_path / "drops"
    drops.mkdir()
    row = {"dt": "2026-11-10", "job_id": "job-1", "team": "ads", "fingerprint": "0" * 32,
           "env_key": "e" * 32, "device_kind": "TPU v5p", "chips": 8, "executions": 10, "seconds": 60.0}
    (drops / "a.graph_runs.jsonl").write_text(json.dumps(row) + "\n")
    piped = fdo(tmp_path / "piped", "ingest", "profiles", str(drops))
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == "" and piped.stdout.startswith("1 inputs")
    watched = _terminal_stderr([sys.executable, "-m", "pipelines.cli", "--home", str(tmp_path / "watched"),
                                "ingest", "profiles", str(drops)])
    assert "profiles: 100%" in watched


def _terminal_stderr(command: list[str]) -> str:
    """What `command` writes to stderr when stderr is a terminal (a pseudo-terminal here)."""
    controller, terminal = os.openpty()
    # A new pseudo-terminal is 0 columns wide, where tqdm draws an empty bar.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=terminal) as process:
        os.close(terminal)
        written = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process closed the terminal's last other end
                break
            if not chunk:
                break
            written += chunk
        process.wait(timeout=300)
    os.close(controller)
    return written.decode(errors="replace")
