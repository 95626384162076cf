"""`fdo`: the command line of fleet-fdo, one subcommand per stage of the loop.

Exit codes: 0 success; 1 the work ran but its outcome is a failure (a failed evaluation, numerics
off); 2 bad usage or bad input (unreadable module, unknown flag, a home that is no writable
directory, a global option such as --home given after the subcommand), told in one line; 3 the
good inputs landed but some inputs (or rows) were quarantined; 4 (evaluate, tune) a module fails
with the compiler's default config, so there is nothing to measure against; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tuner.strategies import STRATEGIES

if TYPE_CHECKING:
    from delivery.store import Store

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_QUARANTINED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_DEFAULT_FAILS = 4
HOME_OPTION = "--home"
# fdo's own options, before the subcommand. After it, Beam commands would take them for Beam's.
GLOBAL_OPTIONS = (HOME_OPTION,)


def default_home() -> Path:
    """`FDO_HOME`, else ~/.fdo: the data root of every stage."""
    return Path(os.environ.get("FDO_HOME") or Path.home() / ".fdo")


def beam_home() -> str | Path:
    """The home of the Beam stages (rank, savings): `FDO_HOME` kept as given when it is a URL
    (gs://, s3://, ...: read and written through Beam's FileSystems), else default_home()."""
    given = os.environ.get("FDO_HOME", "")
    return given if "://" in given else default_home()


def _print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=None, sort_keys=True))


def cmd_fingerprint(args: argparse.Namespace) -> int:
    from ingest.environment import current_environment, store_key
    from ingest.fingerprint import fingerprint_module
    from ingest.hlo_module import load_file

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
        for op in result.ops:
            print(f"{op.fingerprint}  {op.kind:<28} {op.n_instructions:>6}  {op.name}")
    else:
        print(result.fingerprint)
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ingest.hlo_module import load_file
    from tuner.compile import check_options
    from tuner.evaluate import DEFAULT_FAILS, evaluate
    from tuner.flags import parse_assignment, to_json
    from tuner.measure import MeasureSettings

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
    from tuner.evaluate import DEFAULT_FAILS

    label = ", ".join(f"{k}={v}" for k, v in candidate.items()) or "A/A (default vs default)"
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
    from ingest import zoo

    if args.action == "list":
        rows = [{"name": w.name, "family": w.family, "size": w.size,
                 "description": w.description} for w in zoo.all_workloads()]
        if args.json:
            _print_json(rows)
        else:
            for row in rows:
                print(f"{row['name']:<20} {row['description']}")
        return EXIT_OK
    from ingest.zoo.dump import dump_workloads

    out = Path(args.out)
    dirs = dump_workloads(out, names=args.names or None, progress=not args.json)
    if args.json:
        _print_json([str(d) for d in dirs])
    else:
        print(f"dumped {len(dirs)} workloads under {out}")
    return EXIT_OK


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


def cmd_simulate(args: argparse.Namespace) -> int:
    import datetime

    from pipelines.simulator.run import simulate, store_lookup

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


def cmd_rank(args: argparse.Namespace) -> int:
    import datetime

    from ranking.rank import RankSettings, rank

    settings = RankSettings(date=datetime.date.fromisoformat(args.date) if args.date else datetime.date.today(),
                            window_days=args.window_days, top_k=args.top, min_share=args.min_share)
    candidates, coverage = rank(beam_home(), settings, args.beam_args)
    if args.json:
        _print_json({"candidates": _json_rows(candidates), "coverage": _json_rows(coverage)})
        return EXIT_OK
    print(f"ranking {settings.first_day} .. {settings.date}: top {settings.top_k} per kind")
    print_ranking(candidates, coverage)
    return EXIT_OK


def print_ranking(candidates: Any, coverage: Any) -> None:
    """Candidates by kind and rank, then where each kind's fleet chip-time went."""
    for row in candidates.to_pylist():
        print(f"  {row['kind']:<5} #{row['rank']:<3} {row['fingerprint']}  env {row['env_key'][:8]}  "
              f"{row['chip_seconds'] / 3600:>14,.1f} chip-hours  {row['share']:>6.2%}")
    print("coverage of fleet chip-time:")
    for row in coverage.to_pylist():
        print(f"  {row['kind']:<5} {row['category']:<16} {row['share']:>7.2%}  ({row['keys']} keys)")


def cmd_savings(args: argparse.Namespace) -> int:
    import datetime

    from ranking.savings import savings

    last = datetime.date.fromisoformat(args.to) if args.to else datetime.date.today()
    first = datetime.date.fromisoformat(args.from_) if args.from_ else last - datetime.timedelta(days=29)
    rows = savings(beam_home(), first, last, args.beam_args)
    if args.json:
        _print_json(_json_rows(rows))
        return EXIT_OK
    saved = sum(r["chip_seconds_saved"] for r in rows.to_pylist())
    print(f"savings {first} .. {last}: {_chip_time(saved)} saved in {rows.num_rows} rows")
    for row in rows.to_pylist():
        print(f"  {row['dt']} {row['kind']:<5} {row['team']:<14} v{row['config_version']} "
              f"{'validator ' if row['validator_updated'] else ''}"
              f"{_chip_time(row['chip_seconds_saved']):>22}")
    return EXIT_OK


def _chip_time(seconds: float) -> str:
    """Chip-time in hours, or in seconds below a tenth of an hour (one job's savings)."""
    return f"{seconds / 3600:,.1f} chip-hours" if seconds >= 360 else f"{seconds:,.1f} chip-seconds"


def cmd_tune(args: argparse.Namespace) -> int:
    from ingest.hlo_module import load_file
    from tuner.tune import overall_progress, tune_module

    if args.kind == "op":
        return _tune_ops(args)
    settings = _tune_settings(args, evals=40, strategy="evolution")
    if args.files:
        tasks = [(str(path), load_file(path), None) for path in args.files]
    else:
        from tuner.candidates import tunable_candidates

        tasks = tunable_candidates(default_home(), args.top)
        if not tasks:
            print("no ranked graph candidates that this machine can measure (run fdo rank)",
                  file=sys.stderr)
            return EXIT_FAILED
    results = [tune_module(module, default_home(), settings, env_key=env_key, progress=not args.json)
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
    done = tune_ops_and_fold(default_home(), args.top, settings, fold=not args.no_fold,
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
    from tuner.evaluate import DEFAULT_FAILS

    return EXIT_DEFAULT_FAILS if any(r.failure == DEFAULT_FAILS for r in results) else EXIT_OK


def _tune_settings(args: argparse.Namespace, evals: int, strategy: str) -> Any:
    """`fdo tune`'s TuneSettings from its arguments, with these defaults for the budget and
    the strategy; ValueError names a bad --cores or --compile-workers."""
    from tuner.cores import parse_cores
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
          f"({r.measured} timed); config {json.dumps(r.to_json()['config'])}")


def cmd_analyze(args: argparse.Namespace) -> int:
    from tuner.analyze import analyze_flags, format_analysis

    analysis = analyze_flags(default_home(), fingerprint=args.graph)
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


def cmd_deliver(args: argparse.Namespace) -> int:
    from delivery.deliver import deliver

    version = deliver(default_home(), args.beam_args)
    if args.json:
        _print_json({"version": version})
    else:
        print(f"published store version {version}" if version else "nothing new to deliver")
    return EXIT_OK


def cmd_store(args: argparse.Namespace) -> int:
    from delivery.store import Store, merge_entries, read_import

    store = Store(default_home())
    if args.action == "versions":
        _print_versions(store, args.json)
        return EXIT_OK
    if args.action == "show":
        entries = [r for r in _json_rows(store.entries()) if args.arg in (r["key"], r["fingerprint"])]
        _print_json(entries)
        return EXIT_OK if entries else EXIT_FAILED
    if args.action == "diff":
        old, new = (_json_rows(store.entries(int(v))) for v in (args.arg, args.arg2))
        before, after = {r["key"]: r for r in old}, {r["key"]: r for r in new}
        diff = {"added": sorted(after.keys() - before.keys()), "removed": sorted(before.keys() - after.keys()),
                "changed": sorted(k for k in before.keys() & after.keys() if before[k] != after[k])}
        _print_json(diff)
        return EXIT_OK
    if args.action == "rollback":
        version = store.rollback(int(args.arg))
        print(json.dumps({"version": version}) if args.json else f"published v{version} = v{args.arg}")
        return EXIT_OK
    if args.action == "export":
        for row in _json_rows(store.entries(int(args.arg) if args.arg else None)):
            print(json.dumps(row, sort_keys=True))
        return EXIT_OK
    new = read_import(Path(args.arg))
    version = store.update(lambda live: merge_entries(live, new), f"import {Path(args.arg).name}")
    print(json.dumps({"version": version, "imported": new.num_rows}) if args.json
          else f"imported {new.num_rows} entries: store version {version}")
    return EXIT_OK


def _print_versions(store: Store, as_json: bool) -> None:
    """`fdo store versions`: every version (* the live one), then what is damaged (! marks it:
    a stray or half-written directory, a version failing its checksum, a corrupt CURRENT)."""
    from delivery.store import StoreError

    damaged = store.problems()
    try:
        current = store.current()
    except StoreError:
        current = None
    rows = [m.__dict__ for m in store.versions()]
    if as_json:
        _print_json({"current": current, "versions": rows, "damaged": damaged})
        return
    for row in rows:
        name = f"v{row['version']}"
        mark = "!" if name in damaged else "*" if row["version"] == current else " "
        print(f"{mark} {name:<5} parent {row['parent']}  {row['created'][:19]}  {row['counts']}  {row['reason']}")
    for name, problem in sorted(damaged.items()):
        print(f"! {name:<5} damaged: {problem}")


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
        _check_writable(default_home())
    listening = _listen(args.host, args.port)
    if not token:
        print("fdo serve: no FDO_TOKEN or --token-file: the store is read-only through this server",
              file=sys.stderr)
    scheduler = None
    if args.validate_every:
        from apscheduler.schedulers.background import BackgroundScheduler

        from validator.schedule import add_validation_job

        scheduler = BackgroundScheduler()
        add_validation_job(scheduler, default_home(), args.validate_every, args.validate_budget_minutes)
        scheduler.start()
    app = create_app(default_home(), token or None)
    app.include_router(dashboard_router(default_home()))  # the dashboards at / and /api/
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

    registry = Registry(default_home())
    try:
        if args.action == "list":
            chains = [probe(sys.executable)] + registry.list()
            if args.json:
                _print_json([c.to_json() for c in chains])
            for chain in [] if args.json else chains:
                print(f"{chain.name:<16} {chain.compiler_version:<16} {chain.python}")
            return EXIT_OK
        if not args.name:
            raise ToolchainError(f"fdo toolchain {args.action}: give a toolchain NAME")
        if args.action == "remove":
            registry.remove(args.name)
            return EXIT_OK
        if not args.arg:
            what = "PYTHON (an interpreter)" if args.action == "add" else "JAX_VERSION (e.g. 0.10.0)"
            raise ToolchainError(f"fdo toolchain {args.action} {args.name}: give {what}")
        python = args.arg
        if args.action == "create":
            python = build_venv(default_home() / "toolchains" / "venvs" / args.name, args.arg,
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


def cmd_validate(args: argparse.Namespace) -> int:
    import dataclasses
    import datetime

    from validator.toolchains import ToolchainError
    from validator.run import ValidatorBusy
    from validator.validate import MEASURE_SETTINGS, ValidateSettings, validate

    home = default_home()
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
    for d in report.decisions:
        target = f" -> {d.new_key[:12]}" if d.new_key else ""
        print(f"  {d.outcome:<12} {d.key[:12]}{target}  hits {d.fleet_hits:<6} {d.reason}")
    counts = ", ".join(f"{n} {outcome}" for outcome, n in report.counts().items())
    print(f"validated on {report.compiler_version} ({report.toolchain}): {counts}; "
          f"{report.skipped} skipped, {report.deferred} deferred; store version {report.version}"
          f"{'' if report.published else ' (unchanged)'}")
    return EXIT_OK


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
    print("staleness of live entries (since last measured):")
    for row in tables["staleness"].to_pylist():
        print(f"  {row['bucket']:<14} {row['entries']:>6}  {row['share']:>6.1%}  "
              f"({row['validator_entries']} by the validator)")
    print("decisions per day:")
    for row in tables["outcomes"].to_pylist():
        print(f"  {row['dt']}  {row['outcome']:<12} {row['decisions']:>6}")
    print("fleet hits served by validator-updated entries:")
    for row in tables["hit_share"].to_pylist():
        print(f"  {row['dt']}  {row['source']:<9} {row['validator_hits']:>8} of {row['hits']:<8} "
              f"{row['share']:>6.1%}")
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
    for row in rows:
        speed = f" {row['expected_speedup']:.3f}x" if row["expected_speedup"] else ""
        version = f" v{row['config_version']}" if row["config_version"] is not None else ""
        reason = f"  ({row['reason']})" if row["reason"] else ""
        print(f"{row['at'][:19]} {row['job_id']:<16} {row['module_name'][:32]:<32} {row['key']} "
              f"{row['outcome']}{version}{speed}{reason}")
    print(", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "no hits recorded")
    return EXIT_OK


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
        for stage in report.stages:
            detail = stage.error.splitlines()[0] if stage.error else json.dumps(stage.counts)
            print(f"{report.date} {stage.stage:<9} {stage.status:<8} {stage.seconds:7.1f} s  {detail}")
        if all(s.status == "skipped" for s in report.stages):
            print(f"{report.date}: finished before; nothing to do (--force runs it again)")
    return EXIT_OK if report.ok else EXIT_FAILED


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `fdo`."""
    parser = argparse.ArgumentParser(prog="fdo", description=__doc__.splitlines()[0])
    parser.add_argument(HOME_OPTION, default=None,  # a string: `rank` and `savings` take URLs
                        help="data root (default: $FDO_HOME or ~/.fdo)")
    sub = parser.add_subparsers(dest="command", required=True)

    # home_use: whether a command writes its home (the default), only reads it, or never uses it.
    p = sub.add_parser("fingerprint", help="graph (and op) fingerprints of an HLO module")
    p.add_argument("file", help="HLO text (XLA dump or printed) or serialized HLO proto")
    p.add_argument("--json", action="store_true", help="print fingerprint, env_key, key, n_instructions")
    p.add_argument("--ops", action="store_true", help="list the op fingerprints with kind and size")
    p.set_defaults(run=cmd_fingerprint, home_use=None)

    p = sub.add_parser("evaluate", help="measure a compiler config against the default",
                       epilog="Exit status 4: the module fails with the compiler's default config "
                       "(it does not compile or run), so there is nothing to measure against; the "
                       "candidate is still tried, and if it runs the module, its numerics are "
                       "checked against a reference config that routes every fusion type to "
                       "XLA's own emitters. 1: the candidate fails, or its numerics are off.")
    p.add_argument("file", help="HLO module (unoptimized) to compile and run")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                   help="a compiler flag of the candidate; repeat for more (none: A/A check)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--max-seconds", type=float, default=30.0, help="timing budget")
    p.add_argument("--timeout", type=float, default=600.0, help="worker timeout in seconds")
    p.set_defaults(run=cmd_evaluate, home_use=None)

    p = sub.add_parser("workloads", help="the workload zoo")
    p.add_argument("action", choices=["list", "dump"])
    p.add_argument("--out", default="zoo-dump", help="dump: output directory")
    p.add_argument("names", nargs="*", help="dump: only these workloads")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_workloads, home_use=None)

    p = sub.add_parser("ingest", help="load symbols (HLO), profiles or the hook's hits into the warehouse")
    p.add_argument("kind", choices=["symbols", "profiles", "hits"])
    p.add_argument("paths", nargs="*", help="symbols: XLA dump dirs, HLO files, the hook's spool "
                   "(HOME/spool/symbols); profiles: *.xplane.pb traces and *.graph_runs/*.op_runs "
                   "drops (or dirs of them); hits: none (the hook's spool under HOME)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_ingest)

    p = sub.add_parser("simulate", help="simulate a fleet for some days and ingest what it hands over")
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", help="first simulated date, YYYY-MM-DD (default: so the last is today)")
    p.add_argument("--workloads", help="comma-separated zoo workloads the fleet runs (default: all)")
    p.add_argument("--op-sample", type=float, default=1.0,
                   help="share of job-days with op-level profiles (op time is scaled up to match)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_simulate)

    beam_note = ("other --flags go to Apache Beam (e.g. --runner=FlinkRunner --flink_master=HOST:PORT); "
                 "default: Beam's in-process runner, multi-process")
    p = sub.add_parser("rank", help="rank graphs and ops by fleet cost (Beam)", epilog=beam_note)
    p.add_argument("--date", help="ranking date, YYYY-MM-DD (default: today)")
    p.add_argument("--window-days", type=int, default=7)
    p.add_argument("--top", type=int, default=20, help="candidates per kind")
    p.add_argument("--min-share", type=float, default=0.001,
                   help="the long tail: keys under this share of fleet chip-time are not ranked")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_rank, takes_beam_args=True)

    p = sub.add_parser("tune", help="search compiler flags for HLO modules and verify the best",
                       epilog="Exit status 4: a module fails with the compiler's default config (it "
                       "does not compile or run), so there is nothing to measure against; its task "
                       "ends with status \"default fails: <reason>\".")
    p.add_argument("files", nargs="*", help="HLO modules (unoptimized) to tune; none: the top "
                   "ranked graph candidates this machine can measure")
    p.add_argument("--kind", choices=["graph", "op"], default="graph",
                   help="op: tune the top ranked ops (cut out of their graphs), then fold the "
                   "winners into graph-level configs measured on each whole graph")
    p.add_argument("--top", type=int, default=5, help="without files: how many candidates")
    p.add_argument("--budget-evals", type=int, default=None,
                   help="evaluations per task (default: 40 for graphs, the whole space for ops)")
    p.add_argument("--budget-minutes", type=float, default=None)
    p.add_argument("--strategy", default=None, choices=sorted(STRATEGIES),
                   help="the search's last phase, after the default's one-move neighbours (by "
                   "prior) and their combinations; default: evolution for graphs, exhaustive "
                   "for ops")
    p.add_argument("--plain", action="store_true",
                   help="the strategy alone, from the first evaluation (no neighbours, no "
                   "combinations; for comparisons)")
    p.add_argument("--no-fold", action="store_true", help="with --kind op: tune the ops only")
    p.add_argument("--cores", default=None,
                   help="cores to compile and measure on, e.g. 0-7 (default: all available); a "
                   "quarter compile, the rest measure")
    p.add_argument("--compile-workers", type=int, default=None,
                   help="compile worker processes (default: one per compile core)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_tune)

    p = sub.add_parser("analyze", help="which compiler flags matter, from every tuning trial")
    p.add_argument("what", choices=["flags"])
    p.add_argument("--top", type=int, default=None, help="only the N most important flags")
    p.add_argument("--graph", help="only the trials of this graph fingerprint")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_analyze, home_use="read")

    p = sub.add_parser("deliver", help="publish accepted tuning results as a new store version (Beam)",
                       epilog=beam_note)
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_deliver, takes_beam_args=True)

    p = sub.add_parser("store", help="the versioned config store")
    p.add_argument("action", choices=["versions", "show", "diff", "rollback", "export", "import"])
    p.add_argument("arg", nargs="?", help="show: KEY or fingerprint; diff: A; rollback: N; "
                   "export: version (default live); import: JSON-lines FILE")
    p.add_argument("arg2", nargs="?", help="diff: B")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_store, home_use="read")  # rollback and import write; most read

    p = sub.add_parser("serve", help="the config service and the dashboards (FastAPI on uvicorn)",
                       epilog="Exit status 2: an unreadable --token-file, a home it cannot write "
                       "(with a token or --validate-every), a port in use or an unknown host.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8470)
    p.add_argument("--token-file", help="file holding the bearer token for writes (or FDO_TOKEN)")
    p.add_argument("--validate-every", type=float, metavar="MINUTES",
                   help="also run the validator in the background at this interval")
    p.add_argument("--validate-budget-minutes", type=float, default=30.0,
                   help="time budget of each background validation run")
    p.set_defaults(run=cmd_serve)

    p = sub.add_parser("nightly", help="one turn of the loop for a date: ingest, rank, tune, deliver, "
                       "validate, savings", epilog=beam_note)
    p.add_argument("--date", help="YYYY-MM-DD (default: today)")
    p.add_argument("--inbox", action="append", default=[],
                   help="where drops, traces and dumps arrive (repeat; default HOME/inbox)")
    p.add_argument("--window-days", type=int, default=7)
    p.add_argument("--top", type=int, default=3, help="graphs to tune")
    p.add_argument("--top-ops", type=int, default=2, help="ops to tune, then fold into their graphs")
    p.add_argument("--tune-evals", type=int, default=24, help="evaluations per graph")
    p.add_argument("--tune-minutes", type=float, default=20.0, help="budget of the tune stage")
    p.add_argument("--validate-minutes", type=float, default=10.0, help="budget of the validator")
    p.add_argument("--force", action="store_true", help="run every stage again for a finished date")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_nightly, takes_beam_args=True)

    p = sub.add_parser("scheduler", help="the daemon: fdo nightly on a cron, the validator on an interval")
    p.add_argument("--cron", default="0 2 * * *",
                   help="when the nightly run starts, crontab in UTC (6 fields: seconds first)")
    p.add_argument("--misfire-grace-minutes", type=float, default=360.0,
                   help="a run missed while the daemon was down still runs within this time")
    p.add_argument("--nightly-args", default="", help="arguments for each fdo nightly, as one string: --nightly-args=\"--top 2 ...\"")
    p.add_argument("--validate-every-minutes", type=float, default=None,
                   help="also run the validator on this interval")
    p.add_argument("--validate-budget-minutes", type=float, default=10.0)
    p.set_defaults(run=cmd_scheduler)

    p = sub.add_parser("run", help="run a program with the compiler hook on (FDO_HOOK=1)")
    p.add_argument("--store-url", help="ask this config service (default: the store under --home)")
    p.add_argument("--store-version", type=int, help="pin this store version")
    p.add_argument("--job-id", help="the job's id in hit records (default: host-pid)")
    p.add_argument("--spool-hlo", action="store_true",
                   help="spool each module's HLO under HOME/spool/symbols for fdo ingest symbols")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- then the program and its arguments")
    p.set_defaults(run=cmd_run)

    p = sub.add_parser("hits", help="what the compiler hook did at each compile")
    p.add_argument("--job", help="only this job id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_hits, home_use="read")

    p = sub.add_parser("toolchain", help="compilers the validator measures with (python + jaxlib)")
    p.add_argument("action", choices=["add", "create", "list", "remove"])
    p.add_argument("name", nargs="?", help="the toolchain's name")
    p.add_argument("arg", nargs="?", help="add: PYTHON interpreter; create: JAX_VERSION to install in a venv")
    p.add_argument("--standalone", action="store_true",
                   help="create: install jax's dependencies too instead of sharing this interpreter's")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_toolchain)

    p = sub.add_parser("validate", help="re-check stored configs on the current compiler: keep, "
                       "re-key, invalidate, expire")
    p.add_argument("--once", action="store_true", help="one pass, then exit (default: every --every-minutes)")
    p.add_argument("--budget-minutes", type=float, default=None, help="stop measuring after this long")
    p.add_argument("--every-minutes", type=float, default=60.0, help="without --once: the interval")
    p.add_argument("--toolchain", help="the compiler to validate on (fdo toolchain; default: this interpreter)")
    p.add_argument("--max-seconds", type=float, default=10.0, help="timing budget per entry")
    p.add_argument("--ttl-days", type=float, default=30.0, help="the fresh lease of a kept or re-keyed entry")
    p.add_argument("--max-age-days", type=float, default=180.0,
                   help="absolute lifetime of a config since first measured")
    p.add_argument("--revalidate-after-hours", type=float, default=24.0,
                   help="entries measured more recently on the same compiler are skipped")
    p.add_argument("--report", action="store_true",
                   help="print staleness, outcomes per day and the validator's share of fleet hits")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_validate)

    p = sub.add_parser("savings", help="chip-seconds saved by tuned configs (Beam)", epilog=beam_note)
    p.add_argument("--from", dest="from_", help="first date (default: 30 days before --to)")
    p.add_argument("--to", help="last date (default: today)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_savings, takes_beam_args=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fdo` console script."""
    from ingest.locks import LockHeld
    from tuner.compile import CompileError

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
    if "://" in str(beam_home()):
        return None
    home = default_home()
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
