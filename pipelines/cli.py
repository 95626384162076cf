"""`fdo`: the command line of fleet-fdo, one subcommand per stage of the loop.

Exit codes: 0 success; 1 the work ran but its outcome is a failure (a failed evaluation, numerics
off); 2 bad usage or bad input (unreadable module, unknown flag, a home that is no writable
directory, a global option such as --home given after the subcommand), told in one line; 3 the
good inputs landed but some inputs (or rows) were quarantined; 4 (evaluate, tune) a module fails
with the compiler's default config, so there is nothing to measure against; 130 interrupted;
141 the reader of stdout went away (`fdo ... | head`): the rest of the output is dropped
quietly, as a command killed by SIGPIPE is reported by the shell (128 + 13).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import socket
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from pipelines.extras import MissingExtra, needs
from storage.home import Home
from tuner.strategies import STRATEGIES

if TYPE_CHECKING:
    from delivery.store import Store

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_QUARANTINED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_DEFAULT_FAILS, EXIT_BROKEN_PIPE = 4, 141
HOME_OPTION = "--home"
# fdo's own options, before the subcommand. After it, Beam commands would take them for Beam's.
GLOBAL_OPTIONS = (HOME_OPTION,)
JSON_HELP = "print the result as JSON (one document on one line) instead of text"


def default_home() -> Home:
    """`--home` (as `FDO_HOME`), else ~/.fdo: the data root of every stage, a local directory
    or a URL (gs://, s3://, ...: read and written through Beam's FileSystems)."""
    return Home.of(os.environ.get("FDO_HOME") or Path.home() / ".fdo")


def _print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=None, sort_keys=True))


def _print_table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]], align: str,
                 indent: str = "") -> None:
    """`rows` of text cells under `header`, each column as wide as its widest cell; `align` holds
    one `<` (left) or `>` (right, for numbers) per column."""
    lines = [header, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print(indent + "  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(line, align, widths)).rstrip())


def _config_text(config: dict[str, Any]) -> str:
    """A compiler config as the `--set` arguments that give it: `flag=value flag=a,b`."""
    def value_text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return ",".join(value) if isinstance(value, (list, tuple)) else str(value)

    text = " ".join(f"{name}={value_text(value)}" for name, value in sorted(config.items()))
    return text or "default config"


def _counts_text(counts: dict[str, Any]) -> str:
    """A stage's counts in one line: `name=value ...` (- for none)."""
    return " ".join(f"{name}={'-' if value is None else value}" for name, value in counts.items()) or "-"


def cmd_fingerprint(args: argparse.Namespace) -> int:
    from hlo.environment import current_environment, store_key
    from hlo.fingerprint import fingerprint_module
    from hlo.module import load_file

    module = load_file(args.file)
    result = fingerprint_module(module, with_ops=args.ops)
    if args.json:
        env_key = current_environment().key()
        payload: dict[str, Any] = {
            "fingerprint": result.fingerprint,
            "env_key": env_key,
            "key": store_key(result.fingerprint, env_key),
            "n_instructions": result.n_instructions,
        }
        if args.ops:
            payload["ops"] = [op.__dict__ for op in result.ops]
        _print_json(payload)
    elif args.ops:
        _print_table(("op fingerprint", "kind", "instructions", "name"),
                     [(op.fingerprint, op.kind, str(op.n_instructions), op.name) for op in result.ops],
                     "<<><")
    else:
        print(result.fingerprint)
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    from hlo.module import load_file
    from execution.compile import check_options
    from execution.evaluate import DEFAULT_FAILS, evaluate
    from execution.flags import parse_assignment, to_json
    from execution.measure import MeasureSettings

    module = load_file(args.file)
    candidate = dict(parse_assignment(item) for item in args.set)
    check_options(candidate)
    settings = MeasureSettings(max_seconds=args.max_seconds)
    result = evaluate(module, candidate, settings=settings, timeout=args.timeout)
    if args.json:
        _print_json({**result.to_json(), "config": to_json(candidate)})
    else:
        _print_evaluation(module.source, candidate, result)
    if result.failure == DEFAULT_FAILS:
        return EXIT_DEFAULT_FAILS
    if result.error is not None or result.numerics_ok is False:
        return EXIT_FAILED
    return EXIT_OK


def _print_evaluation(source: str, candidate: dict, result: Any) -> None:
    from execution.evaluate import DEFAULT_FAILS

    label = _config_text(candidate) if candidate else "A/A (default vs default)"
    print(f"{source}: {label}")
    if result.failure == DEFAULT_FAILS:
        print(f"  {result.error}")  # "default fails: <reason>"
        if result.candidate_runs is not None:
            print(f"  {_without_default(result)}")
        return
    if result.error:
        print(f"  failed: {result.error}")
        return
    if result.identical_program:
        print("  the candidate compiles to the same program as the default: nothing to measure")
        return
    verdict = "significant gain" if result.significant else "no significant gain"
    print(f"  speedup {result.speedup:.3f}x  (99% CI {result.ci_low:.3f} .. {result.ci_high:.3f}, "
          f"{result.pairs} pairs, {verdict})")
    print(f"  numerics {'ok' if result.numerics_ok else 'FAILED'}; "
          f"compile {result.compile_seconds:.2f} s")


def _without_default(result: Any) -> str:
    """What the candidate did where the default fails."""
    if not result.candidate_runs:
        return "the candidate does not run it either"
    if result.numerics_ok is None:
        return "the candidate runs it (its numerics unchecked: the reference config fails too)"
    verdict = "ok" if result.numerics_ok else "FAILED"
    return (f"the candidate runs it; numerics {verdict} against the reference config (every "
            "fusion type on XLA's own emitters)")


def cmd_workloads(args: argparse.Namespace) -> int:
    from workloads import zoo

    if args.action == "list":
        rows = [{"name": w.name, "family": w.family, "size": w.size,
                 "description": w.description} for w in zoo.all_workloads()]
        if args.json:
            _print_json(rows)
        else:
            _print_table(("name", "family", "size", "description"),
                         [(r["name"], r["family"], str(r["size"]), r["description"]) for r in rows], "<<<<")
        return EXIT_OK
    return _dump_workloads(args)


@needs("pipeline")
def _dump_workloads(args: argparse.Namespace) -> int:
    from workloads.zoo.dump import dump_workloads

    out = Path(args.out)
    dirs = dump_workloads(out, names=args.names or None, progress=not args.json)
    if args.json:
        _print_json([str(d) for d in dirs])
    else:
        print(f"dumped {len(dirs)} workloads under {out}")
    return EXIT_OK


@needs("pipeline")
def cmd_ingest(args: argparse.Namespace) -> int:
    from ingest.hits import ingest_hits
    from ingest.profiles import ingest_profiles
    from ingest.symbols import ingest_symbols

    paths = [Path(p) for p in args.paths]
    if args.kind != "hits" and not paths:
        print(f"fdo ingest {args.kind}: name the files or directories to ingest", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.kind == "hits":
        report: Any = ingest_hits(default_home())
        summary = (f"{report.files} spool files: {report.rows} hit records "
                   f"({report.waiting} files still being written)")
    elif args.kind == "symbols":
        report: Any = ingest_symbols(paths, default_home(), progress=not args.json)
        summary = (f"{report.modules} modules: {report.graphs_changed} graphs and "
                   f"{report.ops_changed} ops new or updated")
    else:
        report = ingest_profiles(paths, default_home(), progress=not args.json)
        summary = (f"{report.inputs} inputs ({report.skipped} already ingested): "
                   f"{report.graph_runs} graph_runs and {report.op_runs} op_runs rows "
                   f"({report.duplicates} rows already held)")
    if args.json:
        _print_json(report.to_json())
    else:
        print(summary)
        for item in report.quarantined:
            print(f"quarantined {item.source}: {item.reason}", file=sys.stderr)
    return EXIT_QUARANTINED if report.quarantined else EXIT_OK


@needs("pipeline")
def cmd_simulate(args: argparse.Namespace) -> int:
    import datetime

    from workloads.simulator.run import simulate, store_lookup

    start = datetime.date.fromisoformat(args.start) if args.start else None
    workloads = args.workloads.split(",") if args.workloads else None
    home = default_home()
    report = simulate(home, args.days, args.jobs, args.seed, start=start, workloads=workloads,
                      op_sample=args.op_sample, tuned=store_lookup(home), progress=not args.json)
    if args.json:
        _print_json(report.to_json())
    else:
        print_simulation(report)
    return EXIT_QUARANTINED if report.quarantined else EXIT_OK


def print_simulation(report: Any) -> None:
    """The simulated fleet's summary: per day, then its cost distribution, opt-outs and tail."""
    print(f"{'date':<12}{'rows':>10}{'chip-hours':>14}{'opted out':>11}  compiler versions (chip-time)")
    for day in report.days:
        versions = ", ".join(f"{v.rsplit('+', 1)[-1]} {s:.0%}" for v, s in day["compiler_versions"].items())
        print(f"{day['dt']:<12}{day['rows']:>10}{day['chip_hours']:>14.0f}"
              f"{day['opted_out_share']:>11.1%}  {versions}")
    shares = report.top_graph_shares
    print(f"{report.graphs} graphs; chip-time in the top 1 / 5 / 10 graphs: "
          f"{shares['top1']:.0%} / {shares['top5']:.0%} / {shares['top10']:.0%}")
    print("chip-time by job size: " + ", ".join(
        f"{name} {share:.1%}" for name, share in report.size_class_shares.items()))
    print(f"opted out: {report.opted_out_share:.1%} of chip-time; long tail (runs under one "
          f"chip-hour): {report.long_tail['row_share']:.0%} of runs, "
          f"{report.long_tail['chip_time_share']:.2%} of chip-time")
    print(f"ingested {report.graph_runs} graph_runs and {report.op_runs} op_runs rows, "
          f"{report.symbol_modules} symbol modules")
    for item in report.quarantined:
        print(f"quarantined {item.source}: {item.reason}", file=sys.stderr)


@needs("pipeline")
def cmd_rank(args: argparse.Namespace) -> int:
    import datetime

    from ranking.rank import RankSettings, rank

    settings = RankSettings(date=datetime.date.fromisoformat(args.date) if args.date else datetime.date.today(),
                            window_days=args.window_days, top_k=args.top, min_share=args.min_share)
    candidates, coverage = rank(default_home(), settings, args.beam_args)
    if args.json:
        _print_json({"candidates": _json_rows(candidates), "coverage": _json_rows(coverage)})
        return EXIT_OK
    print(f"ranking {settings.first_day} .. {settings.date}: top {settings.top_k} per kind")
    print_ranking(candidates, coverage)
    return EXIT_OK


def print_ranking(candidates: Any, coverage: Any) -> None:
    """Candidates by kind and rank, then where each kind's fleet chip-time went."""
    if candidates.num_rows:
        _print_table(("kind", "rank", "fingerprint", "env", "chip-hours", "share"),
                     [(r["kind"], f"#{r['rank']}", r["fingerprint"], r["env_key"][:8],
                       f"{r['chip_seconds'] / 3600:,.1f}", f"{r['share']:.2%}")
                      for r in candidates.to_pylist()],
                     "<<<<>>", indent="  ")
    else:
        print("  no candidates (where the chip-time went is below)")
    print("coverage of fleet chip-time:")
    if coverage.num_rows:
        _print_table(("kind", "category", "share", "keys"),
                     [(r["kind"], r["category"], f"{r['share']:.2%}", str(r["keys"]))
                      for r in coverage.to_pylist()],
                     "<<>>", indent="  ")
    else:
        print("  no fleet chip-time in the window: ingest profiles first (fdo ingest profiles)")


@needs("pipeline")
def cmd_savings(args: argparse.Namespace) -> int:
    import datetime

    from ranking.savings import savings

    last = datetime.date.fromisoformat(args.to) if args.to else datetime.date.today()
    first = datetime.date.fromisoformat(args.from_) if args.from_ else last - datetime.timedelta(days=29)
    rows = savings(default_home(), first, last, args.beam_args)
    if args.json:
        _print_json(_json_rows(rows))
        return EXIT_OK
    saved = sum(r["chip_seconds_saved"] for r in rows.to_pylist())
    print(f"savings {first} .. {last}: {_chip_time(saved)} saved in {rows.num_rows} rows")
    if rows.num_rows:
        _print_table(("date", "kind", "team", "version", "validator-updated", "saved"),
                     [(str(r["dt"]), r["kind"], r["team"], f"v{r['config_version']}",
                       "yes" if r["validator_updated"] else "no",
                       _chip_time(r["chip_seconds_saved"])) for r in rows.to_pylist()],
                     "<<<<<>", indent="  ")
    else:
        print("  no hits on tuned configs in these days")
    return EXIT_OK


def _chip_time(seconds: float) -> str:
    """Chip-time in hours, or in seconds below a tenth of an hour (one job's savings)."""
    return f"{seconds / 3600:,.1f} chip-hours" if seconds >= 360 else f"{seconds:,.1f} chip-seconds"


@needs("pipeline")
def cmd_tune(args: argparse.Namespace) -> int:
    from hlo.module import load_file
    from tuner.tune import overall_progress, tune_module

    if args.kind == "op":
        return _tune_ops(args)
    settings = _tune_settings(args, evals=40, strategy="evolution")
    if args.files:
        tasks = [(str(path), load_file(path), None) for path in args.files]
    else:
        from tuner.candidates import tunable_candidates

        tasks = tunable_candidates(default_home().local("fdo tune"), args.top)
        if not tasks:
            print("no ranked graph candidates that this machine can measure (run fdo rank)",
                  file=sys.stderr)
            return EXIT_FAILED
    results = [tune_module(module, default_home().local("fdo tune"), settings, env_key=env_key, progress=not args.json)
               for _, module, env_key in overall_progress(tasks, "tune graphs", not args.json)]
    if args.json:
        payload = [r.to_json() for r in results]
        _print_json(payload[0] if len(payload) == 1 else payload)
    else:
        for (label, _, _), r in zip(tasks, results):
            _print_tune_result(label, r)
    return _tune_exit(results)


def _tune_ops(args: argparse.Namespace) -> int:
    """`fdo tune --kind op`: tune the top ranked ops, then fold them into their graphs."""
    from tuner.fold import tune_ops_and_fold

    if args.files:
        print("fdo tune --kind op: ops come from the ranking (fdo rank); give no files",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    # Op spaces are small: searched whole unless a budget says otherwise.
    settings = _tune_settings(args, evals=200, strategy="exhaustive")
    done = tune_ops_and_fold(default_home().local("fdo tune"), args.top, settings, fold=not args.no_fold,
                             progress=not args.json)
    for reason in done.skipped:
        print(f"skipped {reason}", file=sys.stderr)
    if not done.tasks:
        print("no ranked op candidates that this machine can measure (run fdo rank)",
              file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _print_json({"ops": [r.to_json() for r in done.results],
                     "folds": [f.to_json() for _, f in done.folds]})
    else:
        for (label, _, _), r in zip(done.tasks, done.results):
            _print_tune_result(label, r)
        for graph, f in done.folds:
            _print_tune_result(f"graph {graph[:8]} folded from {len(f.sources)} op results", f)
    return _tune_exit(done.results)


def _tune_exit(results: list[Any]) -> int:
    """`fdo tune`'s exit status: EXIT_DEFAULT_FAILS if any task's default failed."""
    from execution.evaluate import DEFAULT_FAILS

    return EXIT_DEFAULT_FAILS if any(r.failure == DEFAULT_FAILS for r in results) else EXIT_OK


def _tune_settings(args: argparse.Namespace, evals: int, strategy: str) -> Any:
    """`fdo tune`'s TuneSettings from its arguments, with these defaults for the budget and
    the strategy; ValueError names a bad --cores or --compile-workers."""
    from execution.cores import parse_cores
    from tuner.tune import TuneSettings

    if args.compile_workers is not None and args.compile_workers < 1:
        raise ValueError(f"--compile-workers {args.compile_workers}: at least one is needed")
    return TuneSettings(budget_evals=args.budget_evals or evals, budget_minutes=args.budget_minutes,
                        strategy=args.strategy or strategy, schedule=not args.plain,
                        seed=args.seed,
                        cores=parse_cores(args.cores) if args.cores else None,
                        compile_workers=args.compile_workers)


def _print_tune_result(label: str, r: Any) -> None:
    interval = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low is not None else ""
    speed = f"{r.speedup:.3f}x {interval}" if r.speedup is not None else ""
    print(f"{label}: {r.status} {speed} after {r.evaluations} evaluations "
          f"({r.measured} timed); config {_config_text(r.to_json()['config'])}")


def cmd_analyze(args: argparse.Namespace) -> int:
    from tuner.analyze import analyze_flags, format_analysis

    analysis = analyze_flags(default_home().local("fdo analyze"), fingerprint=args.graph)
    if args.json:
        payload = analysis.to_json()
        payload["flags"] = payload["flags"][: args.top]
        _print_json(payload)
    if analysis.trials == 0:
        where = f" for graph {args.graph}" if args.graph else ""
        print(f"no tuning trials in the warehouse under {default_home()}{where}: run fdo tune first",
              file=sys.stderr)
        return EXIT_FAILED
    if not args.json:
        print(format_analysis(analysis, args.top))
    return EXIT_OK


@needs("pipeline")
def cmd_deliver(args: argparse.Namespace) -> int:
    from delivery.deliver import deliver

    version = deliver(default_home(), args.beam_args)
    if args.json:
        _print_json({"version": version})
    else:
        print(f"published store version {version}" if version else "nothing new to deliver")
    return EXIT_OK


def cmd_store(args: argparse.Namespace) -> int:
    from delivery.imports import read_import
    from delivery.store import Store, entry_json, merge_entries

    store = Store(default_home())
    needed = _STORE_ARGUMENTS.get(args.action)
    if needed and (args.arg is None or (args.action == "diff" and args.arg2 is None)):
        raise ValueError(f"{args.action}: give {needed}")
    if args.action == "versions":
        _print_versions(store, args.json)
        return EXIT_OK
    if args.action == "show":
        return _print_entries(store, args.arg, args.json)
    if args.action == "diff":
        _print_diff(store, _version(args.arg), _version(args.arg2), args.json)
        return EXIT_OK
    if args.action == "rollback":
        version = store.rollback(_version(args.arg))
        print(json.dumps({"version": version}) if args.json else f"published v{version} = v{args.arg}")
        return EXIT_OK
    if args.action == "export":
        for row in store.entries(_version(args.arg) if args.arg else None).to_pylist():
            print(json.dumps(entry_json(row), sort_keys=True))
        return EXIT_OK
    new = read_import(Path(args.arg))
    version = store.update(lambda live: merge_entries(live, new), f"import {Path(args.arg).name}")
    print(json.dumps({"version": version, "imported": new.num_rows}) if args.json
          else f"imported {new.num_rows} entries: store version {version}")
    return EXIT_OK


# What each `fdo store` action needs after it (the others take nothing, or have a default).
_STORE_ARGUMENTS = {"show": "a KEY or fingerprint", "diff": "two versions: A B",
                    "rollback": "the version N to roll back to", "import": "a JSON-lines FILE"}


def _version(text: str) -> int:
    """A store version number given on the command line; ValueError naming it if it is none."""
    try:
        return int(text.removeprefix("v"))
    except ValueError:
        raise ValueError(f"version {text!r}: not a version number (1, 2, ... or v1, v2, ...)") from None


def _print_versions(store: Store, as_json: bool) -> None:
    """`fdo store versions`: every version (* the live one), then what is damaged (! marks it:
    a stray or half-written directory, a version failing its checksum, a corrupt CURRENT)."""
    from delivery.store import StoreError

    damaged = store.problems()
    try:
        current = store.current()
    except StoreError:
        current = None
    versions = store.versions()
    if as_json:
        _print_json({"current": current, "versions": [m.__dict__ for m in versions], "damaged": damaged})
        return
    if not versions and not damaged:
        print("store is empty: no versions")
    if versions:
        _print_table(("version", "parent", "created", "entries", "reason"),
                     [(f"{_version_mark(m.version, current, damaged)} v{m.version}",
                       f"v{m.parent}" if m.parent is not None else "-", m.created[:19],
                       ", ".join(f"{n} {kind}" for kind, n in m.counts.items()) or "none", m.reason)
                      for m in versions], "<<<<<")
    for name, problem in sorted(damaged.items()):
        print(f"! {name:<5} damaged: {problem}")


def _version_mark(version: int, current: int | None, damaged: dict[str, str]) -> str:
    """`!` for a damaged version, `*` for the live one, else a blank."""
    return "!" if f"v{version}" in damaged else "*" if version == current else " "


def _print_entries(store: Store, key: str, as_json: bool) -> int:
    """`fdo store show`: the live entries whose key or fingerprint is `key`; EXIT_FAILED if none."""
    from delivery.store import entry_json

    entries = [entry_json(r) for r in store.entries().to_pylist() if key in (r["key"], r["fingerprint"])]
    if as_json:
        _print_json(entries)
    elif entries:
        _print_table(("key", "kind", "speedup", "by", "expires", "config"),
                     [(r["key"], r["kind"], f"{r['speedup']:.3f}x", r["provenance"], r["expires_at"][:10],
                       _config_text(r["config"])) for r in entries], "<<><<<")
    else:
        print(f"fdo store show: no live entry has the key or fingerprint {key}", file=sys.stderr)
    return EXIT_OK if entries else EXIT_FAILED


def _print_diff(store: Store, old: int, new: int, as_json: bool) -> None:
    """`fdo store diff A B`: the keys B adds, removes and changes against A."""
    from delivery.store import entry_json

    before, after = ({r["key"]: r for r in map(entry_json, store.entries(v).to_pylist())}
                     for v in (old, new))
    diff = {"added": sorted(after.keys() - before.keys()), "removed": sorted(before.keys() - after.keys()),
            "changed": sorted(k for k in before.keys() & after.keys() if before[k] != after[k])}
    if as_json:
        _print_json(diff)
        return
    print(f"v{old} -> v{new}: " + ", ".join(f"{len(keys)} {change}" for change, keys in diff.items()))
    rows = [(change, key) for change, keys in diff.items() for key in keys]
    if rows:
        _print_table(("change", "key"), rows, "<<", indent="  ")
    else:
        print(f"  v{old} and v{new} hold the same entries")


@needs("service")
def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from delivery.service import create_app
    from pipelines.dashboard.routes import dashboard_router

    token = os.environ.get("FDO_TOKEN")
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--token-file {args.token_file}: {getattr(exc, 'strerror', None) or exc}") from None
    if token or args.validate_every:
        _check_writable(default_home().local("fdo serve"))
    listening = _listen(args.host, args.port)
    if not token:
        print("fdo serve: no FDO_TOKEN or --token-file: the store is read-only through this server",
              file=sys.stderr)
    scheduler = None
    if args.validate_every:
        from apscheduler.schedulers.background import BackgroundScheduler

        from validator.schedule import add_validation_job

        scheduler = BackgroundScheduler()
        add_validation_job(scheduler, default_home().local("fdo serve"), args.validate_every, args.validate_budget_minutes)
        scheduler.start()
    app = create_app(default_home().local("fdo serve"), token or None)
    app.include_router(dashboard_router(default_home().local("fdo serve")))  # the dashboards at / and /api/
    print(f"fdo serve: dashboards at http://{args.host}:{args.port}/", file=sys.stderr)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[listening])
    finally:
        if scheduler is not None:
            scheduler.shutdown(wait=False)
    return EXIT_OK if server.started else EXIT_FAILED


def _check_writable(home: Path) -> None:
    """ValueError naming `home` when this process cannot create files in it."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=home):
            pass
    except OSError as exc:
        raise ValueError(f"--home {home} is not writable: {exc.strerror}") from None


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port for uvicorn; ValueError naming them when it cannot be (a
    port in use, an unknown host), which uvicorn would report as exit 3, our quarantine code."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
    except OSError as exc:
        listening.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return listening


def cmd_toolchain(args: argparse.Namespace) -> int:
    from validator.toolchains import Registry, ToolchainError, build_venv, probe

    registry = Registry(default_home().local("fdo toolchain"))
    try:
        if args.action == "list":
            chains = [probe(sys.executable)] + registry.list()
            if args.json:
                _print_json([c.to_json() for c in chains])
            else:
                _print_table(("name", "compiler", "python"),
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
            python = build_venv(default_home().local("fdo toolchain") / "toolchains" / "venvs" / args.name, args.arg,
                                standalone=args.standalone)
        chain = registry.add(args.name, python)
    except ToolchainError as exc:
        print(f"fdo toolchain: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        _print_json(chain.to_json())
    else:
        print(f"toolchain {chain.name}: {chain.python} runs {chain.compiler_version} "
              f"(env {chain.env().key()[:8]})")
    return EXIT_OK


@needs("pipeline")
def cmd_validate(args: argparse.Namespace) -> int:
    import dataclasses
    import datetime

    from validator.run import ValidatorBusy
    from validator.toolchains import ToolchainError
    from validator.validate import MEASURE_SETTINGS, ValidateSettings, validate

    home = default_home().local("fdo validate")
    if args.report:
        return _validation_report(home, args.json)
    if not args.once:
        return _validate_forever(home, args)
    settings = ValidateSettings(
        budget_minutes=args.budget_minutes, ttl=datetime.timedelta(days=args.ttl_days),
        max_age=datetime.timedelta(days=args.max_age_days),
        revalidate_after=datetime.timedelta(hours=args.revalidate_after_hours),
        measure=dataclasses.replace(MEASURE_SETTINGS, max_seconds=args.max_seconds))
    try:
        report = validate(home, args.toolchain, settings, progress=not args.json)
    except ToolchainError as exc:
        print(f"fdo validate: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValidatorBusy as exc:
        print(f"fdo validate: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _print_json(report.to_json())
        return EXIT_OK
    if report.decisions:
        _print_table(("outcome", "key", "new key", "fleet hits", "reason"),
                     [(d.outcome, d.key[:12], (d.new_key or "")[:12], str(d.fleet_hits), d.reason)
                      for d in report.decisions], "<<<><", indent="  ")
    counts = ", ".join(f"{n} {outcome}" for outcome, n in report.counts().items())
    print(f"validated on {report.compiler_version} ({report.toolchain}): {counts}; "
          f"{report.skipped} skipped, {report.deferred} deferred; store version {report.version}"
          f"{'' if report.published else ' (unchanged)'}")
    return EXIT_OK


@needs("service")
def _validate_forever(home: Path, args: argparse.Namespace) -> int:
    import logging

    from apscheduler.schedulers.blocking import BlockingScheduler

    from validator.schedule import add_validation_job

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    scheduler = BlockingScheduler()
    add_validation_job(scheduler, home, args.every_minutes, args.budget_minutes, args.toolchain)
    scheduler.start()  # until Ctrl-C
    return EXIT_OK


def _validation_report(home: Path, as_json: bool) -> int:
    from validator.report import outcomes_over_time, staleness, validator_hit_share

    tables = {"staleness": staleness(home), "outcomes": outcomes_over_time(home),
              "hit_share": validator_hit_share(home)}
    if as_json:
        _print_json({name: _json_rows(table) for name, table in tables.items()})
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
            _print_table(header, rows, align, indent="  ")
        else:
            print(f"  {empty}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    command = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not command:
        print("fdo run: give the program to run after --, e.g. fdo run -- python train.py",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    env = dict(os.environ, FDO_HOOK="1", FDO_HOME=str(default_home()))
    for name, value in (("FDO_STORE_URL", args.store_url), ("FDO_STORE_VERSION", args.store_version),
                        ("FDO_JOB_ID", args.job_id)):
        if value is not None:
            env[name] = str(value)
    if args.spool_hlo:
        env["FDO_SPOOL_HLO"] = "1"
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"fdo run: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT


def cmd_hits(args: argparse.Namespace) -> int:
    import pyarrow.compute as pc

    from ingest.hits import read_hits

    hits = read_hits(default_home())
    if args.job:
        hits = hits.filter(pc.equal(hits.column("job_id"), args.job))
    rows = sorted(_json_rows(hits.drop_columns(["dt"])), key=lambda r: r["at"])
    outcomes = Counter(row["outcome"] for row in rows)
    if args.json:
        _print_json({"records": rows, "outcomes": dict(outcomes)})
        return EXIT_OK
    if rows:
        _print_table(("at", "job", "module", "key", "outcome", "version", "speedup", "reason"),
                     [(r["at"][:19], r["job_id"], r["module_name"][:32], r["key"], r["outcome"],
                       f"v{r['config_version']}" if r["config_version"] is not None else "",
                       f"{r['expected_speedup']:.3f}x" if r["expected_speedup"] else "", r["reason"] or "")
                      for r in rows], "<<<<<<><")
    print(", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "no hits recorded")
    return EXIT_OK


@needs("pipeline")
def cmd_nightly(args: argparse.Namespace) -> int:
    import datetime

    from pipelines.nightly import NightlySettings, run_nightly

    settings = NightlySettings(
        date=datetime.date.fromisoformat(args.date) if args.date else datetime.date.today(),
        inbox=tuple(Path(p) for p in args.inbox), window_days=args.window_days, top=args.top,
        top_ops=args.top_ops, tune_evals=args.tune_evals, tune_minutes=args.tune_minutes,
        validate_minutes=args.validate_minutes, beam_args=tuple(args.beam_args), force=args.force)
    report = run_nightly(default_home(), settings, progress=not args.json)
    if args.json:
        _print_json(report.to_json())
    else:
        _print_table(("date", "stage", "status", "seconds", "outcome"),
                     [(str(report.date), stage.stage, stage.status, f"{stage.seconds:.1f}",
                       stage.error.splitlines()[0] if stage.error else _counts_text(stage.counts))
                      for stage in report.stages], "<<<><")
        if all(s.status == "skipped" for s in report.stages):
            print(f"{report.date}: finished before; nothing to do (--force runs it again)")
    return EXIT_OK if report.ok else EXIT_FAILED


@needs("service")
def cmd_scheduler(args: argparse.Namespace) -> int:
    import shlex

    from pipelines.scheduler import SchedulerSettings, run_scheduler

    settings = SchedulerSettings(cron=args.cron, misfire_grace_minutes=args.misfire_grace_minutes,
                                 nightly_args=tuple(shlex.split(args.nightly_args)),
                                 validate_every_minutes=args.validate_every_minutes,
                                 validate_budget_minutes=args.validate_budget_minutes)
    return run_scheduler(default_home(), settings)


def _json_rows(table: Any) -> list[dict]:
    return [{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}
            for row in table.to_pylist()]


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that keeps the epilogs' example lines as written and shows every option's default.
    Unlike ArgumentDefaultsHelpFormatter, it says nothing where the default is no value (None, an
    empty string or list: the help says what happens then) or a flag's False."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        nothing = action.default in (None, argparse.SUPPRESS) or action.default in ("", [])
        if action.nargs == 0 or nothing or "default:" in text:
            return text
        return f"{text} (default: %(default)s)"


def _epilog(examples: list[str], *notes: str) -> str:
    """A command's help epilog: its notes as wrapped paragraphs, then its examples, one a line as
    typed (each parses: tests/test_cli.py checks)."""
    heading = "Example:" if len(examples) == 1 else "Examples:"
    return "\n\n".join([textwrap.fill(note, 78) for note in notes]
                       + [heading + "".join(f"\n  {example}" for example in examples)])


def _version_text() -> str:
    """`fdo --version`: the installed distribution's version."""
    try:
        return f"fdo (fleet-fdo) {importlib.metadata.version('fleet-fdo')}"
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "fdo (fleet-fdo) unknown: not installed (pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `fdo`."""
    parser = argparse.ArgumentParser(
        prog="fdo", description=__doc__.splitlines()[0], formatter_class=_HelpFormatter,
        epilog=_epilog(["fdo workloads list", "fdo --home /data/fdo rank --top 10",
                        "fdo evaluate module.txt --set xla_cpu_enable_fast_math=true"],
                       "fdo COMMAND --help tells each command's options, defaults and examples.",
                       " ".join(__doc__.split("\n\n", 1)[1].split())))
    parser.add_argument("--version", action="version", version=_version_text())
    parser.add_argument(HOME_OPTION, default=None, metavar="DIR",  # a string: `rank` and `savings` take URLs
                        help="data root, given before the command (default: $FDO_HOME, else ~/.fdo)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")

    def command(name: str, help: str, examples: list[str], *notes: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, epilog=_epilog(examples, *notes),
                              formatter_class=_HelpFormatter)

    beam_note = ("Other --flags go to Apache Beam (e.g. --runner=FlinkRunner --flink_master=HOST:PORT); "
                 "default: Beam's in-process runner, multi-process.")

    # home_use: whether a command writes its home (the default), only reads it, or never uses it.
    p = command("fingerprint", "graph (and op) fingerprints of an HLO module",
                ["fdo fingerprint module_0001.jit_step.before_optimizations.txt",
                 "fdo fingerprint module_0001.jit_step.cpu_after_optimizations.txt --ops"])
    p.add_argument("file", metavar="FILE", help="HLO text (XLA dump or printed) or serialized HLO proto")
    p.add_argument("--json", action="store_true", help="print fingerprint, env_key, key, n_instructions "
                   "(and the ops with --ops) as JSON")
    p.add_argument("--ops", action="store_true", help="list the op fingerprints with kind and size")
    p.set_defaults(run=cmd_fingerprint, home_use=None)

    p = command("evaluate", "measure a compiler config against the default",
                ["fdo evaluate module.txt",
                 "fdo evaluate module.txt --set xla_cpu_enable_fast_math=true --max-seconds 10",
                 "fdo evaluate module.txt --set placement:REDUCE=xla --json"],
                "Exit status 4: the module fails with the compiler's default config (it does not "
                "compile or run), so there is nothing to measure against; the candidate is still "
                "tried, and if it runs the module, its numerics are checked against a reference "
                "config that routes every fusion type to XLA's own emitters. 1: the candidate "
                "fails, or its numerics are off.")
    p.add_argument("file", metavar="FILE", help="HLO module (unoptimized) to compile and run")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                   help="a compiler flag of the candidate; repeat for more (default: none, an A/A "
                   "check of the default against itself)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.add_argument("--max-seconds", type=float, default=30.0, metavar="SECONDS",
                   help="timing budget of the paired measurements")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="the worker process is stopped after this long")
    p.set_defaults(run=cmd_evaluate, home_use=None)

    p = command("workloads", "the workload zoo: list it, or dump its programs as XLA dump directories",
                ["fdo workloads list", "fdo workloads dump mlp-s cnn-s --out zoo-dump"])
    p.add_argument("action", choices=["list", "dump"],
                   help="list: name, family, size and description of each; dump: compile them and "
                   "write XLA dump directories under --out")
    p.add_argument("--out", default="zoo-dump", metavar="DIR", help="dump: output directory")
    p.add_argument("names", nargs="*", metavar="NAME", help="dump: only these workloads (default: all)")
    p.add_argument("--json", action="store_true", help="print the workloads (list) or the dump "
                   "directories (dump) as JSON")
    p.set_defaults(run=cmd_workloads, home_use=None)

    p = command("ingest", "load symbols (HLO), profiles or the hook's hits into the warehouse",
                ["fdo ingest symbols /tmp/xla-dump", "fdo ingest profiles inbox/ traces/",
                 "fdo ingest hits --json"],
                "Exit status 3: the good inputs landed but some inputs or rows were quarantined "
                "(each is printed with its reason).")
    p.add_argument("kind", choices=["symbols", "profiles", "hits"],
                   help="symbols: HLO modules; profiles: traces and drops; hits: the compiler "
                   "hook's spool")
    p.add_argument("paths", nargs="*", metavar="PATH", help="symbols: XLA dump dirs, HLO files, the "
                   "hook's spool (HOME/spool/symbols); profiles: *.xplane.pb traces and "
                   "*.graph_runs/*.op_runs drops (or dirs of them); hits: none (default: none, "
                   "which only hits accepts)")
    p.add_argument("--json", action="store_true", help="print the ingestion report as JSON")
    p.set_defaults(run=cmd_ingest)

    p = command("simulate", "simulate a fleet for some days and ingest what it hands over",
                ["fdo simulate --days 3 --jobs 500",
                 "fdo simulate --start 2025-01-01 --workloads mlp-s,cnn-s --op-sample 0.2 --json"])
    p.add_argument("--days", type=int, default=7, metavar="N", help="days to simulate")
    p.add_argument("--jobs", type=int, default=2000, metavar="N", help="jobs in the fleet")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the fleet's randomness")
    p.add_argument("--start", metavar="DATE",
                   help="first simulated date, YYYY-MM-DD (default: so the last is today)")
    p.add_argument("--workloads", metavar="NAMES",
                   help="comma-separated zoo workloads the fleet runs (default: all)")
    p.add_argument("--op-sample", type=float, default=1.0, metavar="SHARE",
                   help="share of job-days with op-level profiles (op time is scaled up to match)")
    p.add_argument("--json", action="store_true", help="print the simulation report as JSON")
    p.set_defaults(run=cmd_simulate)

    p = command("rank", "rank graphs and ops by fleet cost (Beam)",
                ["fdo rank --date 2025-01-31 --top 10",
                 "fdo rank --runner=FlinkRunner --flink_master=localhost:8081"], beam_note)
    p.add_argument("--date", metavar="DATE", help="ranking date, YYYY-MM-DD (default: today)")
    p.add_argument("--window-days", type=int, default=7, metavar="DAYS",
                   help="days ranked, ending with --date")
    p.add_argument("--top", type=int, default=20, metavar="K", help="candidates per kind")
    p.add_argument("--min-share", type=float, default=0.001, metavar="SHARE",
                   help="the long tail: keys under this share of fleet chip-time are not ranked")
    p.add_argument("--json", action="store_true", help="print candidates and coverage as JSON")
    p.set_defaults(run=cmd_rank, takes_beam_args=True)

    p = command("tune", "search compiler flags for HLO modules and verify the best",
                ["fdo tune --top 3 --budget-minutes 30", "fdo tune module.txt --budget-evals 20 --cores 0-7",
                 "fdo tune --kind op --top 2"],
                "Exit status 4: a module fails with the compiler's default config (it does not "
                "compile or run), so there is nothing to measure against; its task ends with "
                "status \"default fails: <reason>\".")
    p.add_argument("files", nargs="*", metavar="FILE", help="HLO modules (unoptimized) to tune "
                   "(default: none, the top ranked graph candidates this machine can measure)")
    p.add_argument("--kind", choices=["graph", "op"], default="graph",
                   help="op: tune the top ranked ops (cut out of their graphs), then fold the "
                   "winners into graph-level configs measured on each whole graph")
    p.add_argument("--top", type=int, default=5, metavar="K", help="without files: how many candidates")
    p.add_argument("--budget-evals", type=int, default=None, metavar="N",
                   help="evaluations per task (default: 40 for graphs, the whole space for ops)")
    p.add_argument("--budget-minutes", type=float, default=None, metavar="MINUTES",
                   help="time budget per task (default: none, --budget-evals alone)")
    p.add_argument("--strategy", default=None, choices=sorted(STRATEGIES),
                   help="the search's last phase, after the default's one-move neighbours (by "
                   "prior) and their combinations (default: evolution for graphs, exhaustive "
                   "for ops)")
    p.add_argument("--plain", action="store_true",
                   help="the strategy alone, from the first evaluation (no neighbours, no "
                   "combinations; for comparisons)")
    p.add_argument("--no-fold", action="store_true", help="with --kind op: tune the ops only")
    p.add_argument("--cores", default=None, metavar="CORES",
                   help="cores to compile and measure on, e.g. 0-7; a quarter compile, the rest "
                   "measure (default: all available)")
    p.add_argument("--compile-workers", type=int, default=None, metavar="N",
                   help="compile worker processes (default: one per compile core)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the search")
    p.add_argument("--json", action="store_true", help="print the tuning results as JSON")
    p.set_defaults(run=cmd_tune)

    p = command("analyze", "which compiler flags matter, from every tuning trial",
                ["fdo analyze flags --top 10",
                 "fdo analyze flags --graph 0123456789abcdef0123456789abcdef --json"])
    p.add_argument("what", choices=["flags"], help="flags: each flag's importance and its values' effects")
    p.add_argument("--top", type=int, default=None, metavar="N",
                   help="only the N most important flags (default: all)")
    p.add_argument("--graph", metavar="FINGERPRINT",
                   help="only the trials of this graph fingerprint (default: every graph's)")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON")
    p.set_defaults(run=cmd_analyze, home_use="read")

    p = command("deliver", "publish accepted tuning results as a new store version (Beam)",
                ["fdo deliver", "fdo deliver --json"], beam_note)
    p.add_argument("--json", action="store_true", help="print the published version (null if none) as JSON")
    p.set_defaults(run=cmd_deliver, takes_beam_args=True)

    p = command("store", "the versioned config store",
                ["fdo store versions", "fdo store show 0123456789abcdef0123456789abcdef",
                 "fdo store diff 3 4", "fdo store rollback 3", "fdo store export 4",
                 "fdo store import entries.jsonl"],
                "export prints JSON lines, one entry a line, whatever --json says.")
    p.add_argument("action", choices=["versions", "show", "diff", "rollback", "export", "import"],
                   help="versions: every version, * the live one, ! a damaged one; show: the live "
                   "entries of a key; diff: what B changes against A; rollback: publish an old "
                   "version's entries again; export: a version's entries; import: add entries")
    p.add_argument("arg", nargs="?", metavar="ARG", help="show: KEY or fingerprint; diff: version A; "
                   "rollback: version N; export: version (default: the live one); import: "
                   "JSON-lines FILE")
    p.add_argument("arg2", nargs="?", metavar="B", help="diff: version B (default: none, which only "
                   "the other actions accept)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(run=cmd_store, home_use="read")  # rollback and import write; most read

    p = command("serve", "the config service and the dashboards (FastAPI on uvicorn)",
                ["fdo serve",
                 "fdo serve --host 0.0.0.0 --port 8470 --token-file token.txt --validate-every 60"],
                "Exit status 2: an unreadable --token-file, a home it cannot write (with a token or "
                "--validate-every), a port in use or an unknown host.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8470, help="TCP port to listen on")
    p.add_argument("--token-file", metavar="FILE", help="file holding the bearer token for writes "
                   "(default: $FDO_TOKEN; with neither, the store is read-only through the server)")
    p.add_argument("--validate-every", type=float, metavar="MINUTES",
                   help="also run the validator in the background at this interval (default: never)")
    p.add_argument("--validate-budget-minutes", type=float, default=30.0, metavar="MINUTES",
                   help="time budget of each background validation run")
    p.set_defaults(run=cmd_serve)

    p = command("nightly", "one turn of the loop for a date: ingest, rank, tune, deliver, validate, "
                "savings",
                ["fdo nightly", "fdo nightly --date 2025-01-31 --inbox /data/drops --top 2 --force"],
                beam_note, "Exit status 1: a stage failed (the others still ran where they could).")
    p.add_argument("--date", metavar="DATE", help="YYYY-MM-DD (default: today)")
    p.add_argument("--inbox", action="append", default=[], metavar="DIR",
                   help="where drops, traces and dumps arrive; repeat for more (default: HOME/inbox)")
    p.add_argument("--window-days", type=int, default=7, metavar="DAYS",
                   help="days ranked, ending with --date")
    p.add_argument("--top", type=int, default=3, metavar="N", help="graphs to tune")
    p.add_argument("--top-ops", type=int, default=2, metavar="N",
                   help="ops to tune, then fold into their graphs")
    p.add_argument("--tune-evals", type=int, default=24, metavar="N", help="evaluations per graph")
    p.add_argument("--tune-minutes", type=float, default=20.0, metavar="MINUTES",
                   help="budget of the tune stage")
    p.add_argument("--validate-minutes", type=float, default=10.0, metavar="MINUTES",
                   help="budget of the validator")
    p.add_argument("--force", action="store_true", help="run every stage again for a finished date")
    p.add_argument("--json", action="store_true", help="print each stage's status and counts as JSON")
    p.set_defaults(run=cmd_nightly, takes_beam_args=True)

    p = command("scheduler", "the daemon: fdo nightly on a cron, the validator on an interval",
                ["fdo scheduler", "fdo scheduler --cron '30 1 * * *' --nightly-args='--top 2 --top-ops 1' "
                 "--validate-every-minutes 120"])
    p.add_argument("--cron", default="0 2 * * *",
                   help="when the nightly run starts: a crontab line in UTC, 5 fields (or 6, seconds first)")
    p.add_argument("--misfire-grace-minutes", type=float, default=360.0, metavar="MINUTES",
                   help="a run missed while the daemon was down still runs within this time")
    p.add_argument("--nightly-args", default="", metavar="ARGS", help="arguments for each fdo nightly, "
                   "as one string: --nightly-args=\"--top 2 ...\" (default: none)")
    p.add_argument("--validate-every-minutes", type=float, default=None, metavar="MINUTES",
                   help="also run the validator on this interval (default: never)")
    p.add_argument("--validate-budget-minutes", type=float, default=10.0, metavar="MINUTES",
                   help="time budget of each validation run")
    p.set_defaults(run=cmd_scheduler)

    p = command("run", "run a program with the compiler hook on (FDO_HOOK=1)",
                ["fdo run -- python train.py --steps 100",
                 "fdo run --store-url http://fdo.internal:8470 --job-id train-7 -- python train.py"])
    p.add_argument("--store-url", metavar="URL",
                   help="ask this config service (default: the store under --home)")
    p.add_argument("--store-version", type=int, metavar="N", help="pin this store version "
                   "(default: the live one)")
    p.add_argument("--job-id", metavar="ID", help="the job's id in hit records (default: host-pid)")
    p.add_argument("--spool-hlo", action="store_true",
                   help="spool each module's HLO under HOME/spool/symbols for fdo ingest symbols")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM ...",
                   help="the program and its arguments, after --")
    p.set_defaults(run=cmd_run)

    p = command("hits", "what the compiler hook did at each compile",
                ["fdo hits", "fdo hits --job train-7 --json"])
    p.add_argument("--job", metavar="ID", help="only this job id (default: every job)")
    p.add_argument("--json", action="store_true", help="print the hit records and outcome counts as JSON")
    p.set_defaults(run=cmd_hits, home_use="read")

    p = command("toolchain", "compilers the validator measures with (python + jaxlib)",
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
    p.set_defaults(run=cmd_toolchain)

    p = command("validate", "re-check stored configs on the current compiler: keep, re-key, invalidate, "
                "expire", ["fdo validate --once --budget-minutes 20", "fdo validate --once --toolchain next",
                           "fdo validate --report --json"])
    p.add_argument("--once", action="store_true", help="one pass, then exit (without it: a pass every "
                   "--every-minutes until interrupted)")
    p.add_argument("--budget-minutes", type=float, default=None, metavar="MINUTES",
                   help="stop measuring after this long (default: no limit)")
    p.add_argument("--every-minutes", type=float, default=60.0, metavar="MINUTES",
                   help="without --once: the interval")
    p.add_argument("--toolchain", metavar="NAME",
                   help="the compiler to validate on (fdo toolchain; default: this interpreter)")
    p.add_argument("--max-seconds", type=float, default=10.0, metavar="SECONDS",
                   help="timing budget per entry")
    p.add_argument("--ttl-days", type=float, default=30.0, metavar="DAYS",
                   help="the fresh lease of a kept or re-keyed entry")
    p.add_argument("--max-age-days", type=float, default=180.0, metavar="DAYS",
                   help="absolute lifetime of a config since first measured")
    p.add_argument("--revalidate-after-hours", type=float, default=24.0, metavar="HOURS",
                   help="entries measured more recently on the same compiler are skipped")
    p.add_argument("--report", action="store_true",
                   help="print staleness, outcomes per day and the validator's share of fleet hits")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(run=cmd_validate)

    p = command("savings", "chip-seconds saved by tuned configs (Beam)",
                ["fdo savings", "fdo savings --from 2025-01-01 --to 2025-01-31 --json"], beam_note)
    p.add_argument("--from", dest="from_", metavar="DATE",
                   help="first date, YYYY-MM-DD (default: 29 days before --to, 30 days in all)")
    p.add_argument("--to", metavar="DATE", help="last date, YYYY-MM-DD (default: today)")
    p.add_argument("--json", action="store_true", help="print the savings rows as JSON")
    p.set_defaults(run=cmd_savings, takes_beam_args=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fdo` console script."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # a reader gone before the last buffered lines shows here, not at exit
    except BrokenPipeError:
        # The recipe of Python's signal docs: stdout's buffer goes to /dev/null, so the flush at
        # exit raises nothing more, and the exit status says the output was cut short.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    """Parse `argv`, check the home and run the command; bad input is one line and EXIT_BAD_INPUT."""
    from storage.home import LockHeld
    from execution.compile import CompileError

    parser = build_parser()
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
    if args.home is not None:
        os.environ["FDO_HOME"] = str(args.home)
    home_use = getattr(args, "home_use", "write")
    problem = _home_problem(home_use == "write") if home_use else None
    if problem:
        print(f"fdo {args.command}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    # Bad input of every stage (HloLoadError, FlagError, StoreError, bad dates...) is a ValueError.
    except (CompileError, KeyError, ValueError) as exc:
        print(f"fdo {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # the reader of stdout is gone: main ends quietly
        raise
    # An install without the extra the command needs: a usage problem, told in one line.
    except MissingExtra as exc:
        print(f"fdo {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # A path the stage was given (or the home) that cannot be read or written.
    except OSError as exc:
        print(f"fdo {args.command}: {_os_error_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except LockHeld as exc:
        print(f"fdo {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"fdo {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _home_problem(writes: bool) -> str | None:
    """What is wrong with the home (None if nothing): it must be a directory, created if
    missing, and writable if the command writes. A URL home (Beam stages) is not checked here."""
    if not default_home().is_local:
        return None
    home = default_home().local("the home check")
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


def _os_error_line(exc: OSError) -> str:
    """An OSError in one line: the path it names and what went wrong."""
    if exc.filename is None:
        return exc.strerror or str(exc)
    return f"{exc.filename}: {exc.strerror}"


if __name__ == "__main__":
    sys.exit(main())
