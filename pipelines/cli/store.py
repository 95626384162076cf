"""`fdo deliver`, `store`, `serve`: the config store, what publishes to it and what serves it (the
compiler hook that applies it is `fdo run`'s)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.cli.common import (
    BEAM_NOTE,
    EXIT_FAILED,
    EXIT_OK,
    JSON_HELP,
    Subcommands,
    add_command,
    add_validation_options,
    config_text,
    print_json,
    print_table,
)
from pipelines.extras import needs
from storage.home import Home

if TYPE_CHECKING:
    from storage.store_reader import StoreReader


def add_deliver(sub: Subcommands) -> None:
    """`fdo deliver`."""
    p = add_command(sub, "deliver", "publish accepted tuning results as a new store version (Beam)",
                    ["fdo deliver", "fdo deliver --json"], BEAM_NOTE)
    p.add_argument("--json", action="store_true", help="print the published version (null if none) as JSON")
    p.set_defaults(run=cmd_deliver, takes_beam_args=True, home_url=True)


@needs("pipeline")
def cmd_deliver(args: argparse.Namespace, home: Home) -> int:
    """Publish the accepted tuning results not yet live."""
    from delivery.deliver import deliver

    version = deliver(home, args.beam_args)
    if args.json:
        print_json({"version": version})
    else:
        print(f"published store version {version}" if version else "nothing new to deliver")
    return EXIT_OK


def add_store(sub: Subcommands) -> None:
    """`fdo store`."""
    p = add_command(sub, "store", "the versioned config store",
                    ["fdo store versions", "fdo store show 0123456789abcdef0123456789abcdef",
                     "fdo store diff 3 4", "fdo store rollback 3", "fdo store export 4",
                     "fdo store import entries.jsonl", "fdo store holdout-share 0.02",
                     "fdo store relaxed-teams search,ads", 'fdo store relaxed-teams ""'],
                    "export prints JSON lines, one entry a line, whatever --json says.")
    p.add_argument("action", choices=["versions", "show", "diff", "rollback", "export", "import",
                                      "holdout-share", "relaxed-teams"],
                   help="versions: every version, * the live one, ! a damaged one; show: the live "
                   "entries of a key; diff: what B changes against A; rollback: publish an old "
                   "version's entries again; export: a version's entries; import: add entries; "
                   "holdout-share: publish the live entries with the share of jobs held out to "
                   "the defaults for entries that set none; relaxed-teams: publish the live "
                   "entries with the teams whose jobs take their relaxed-numerics configs")
    p.add_argument("arg", nargs="?", metavar="ARG", help="show: KEY or fingerprint; diff: version A; "
                   "rollback: version N; export: version (default: the live one); import: "
                   "JSON-lines FILE; holdout-share: SHARE, 0 to 0.5; relaxed-teams: TEAM[,TEAM...], "
                   '"" for none')
    p.add_argument("arg2", nargs="?", metavar="B", help="diff: version B (default: none, which only "
                   "the other actions accept)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    # rollback, import, holdout-share and relaxed-teams write
    p.set_defaults(run=cmd_store, home_use="read", home_url=True)


def cmd_store(args: argparse.Namespace, home: Home) -> int:
    """Run one action on the store: list, show, diff, roll back, export, import or set a policy
    (the holdout share, the relaxed-numerics teams)."""
    from delivery.imports import import_file
    from delivery.store_writer import Store
    from storage.store_reader import StoreReader

    reader, store = StoreReader(home), Store(home)  # the actions that read, those that write
    needed = _STORE_ARGUMENTS.get(args.action)
    if needed and (args.arg is None or (args.action == "diff" and args.arg2 is None)):
        raise ValueError(f"{args.action}: give {needed}")
    if args.action == "versions":
        _print_versions(reader, args.json)
        return EXIT_OK
    if args.action == "show":
        return _print_entries(reader, args.arg, args.json)
    if args.action == "diff":
        _print_diff(reader, _version(args.arg), _version(args.arg2), args.json)
        return EXIT_OK
    if args.action == "rollback":
        published = store.rollback(_version(args.arg))
        print(json.dumps({"version": published}) if args.json else f"published v{published} = v{args.arg}")
        return EXIT_OK
    if args.action == "export":
        for entry in reader.records(_version(args.arg) if args.arg else None):
            print(json.dumps(entry.to_json(), sort_keys=True))
        return EXIT_OK
    if args.action == "holdout-share":
        try:
            share = float(args.arg)
        except ValueError:
            raise ValueError(f"holdout-share: {args.arg!r} is not a number") from None
        _print_policy(store.set_holdout_share(share), f"holdout share {share}", args.json)
        return EXIT_OK
    if args.action == "relaxed-teams":
        teams = [team.strip() for team in args.arg.split(",")] if args.arg else []
        _print_policy(store.set_relaxed_numerics_teams(teams),
                      f"relaxed-numerics teams {', '.join(teams) or 'none'}", args.json)
        return EXIT_OK
    version, imported = import_file(home, Path(args.arg))
    print(json.dumps({"version": version, "imported": imported}) if args.json
          else f"imported {imported} entries: store version {version}")
    return EXIT_OK


# What each `fdo store` action needs after it (the others take nothing, or have a default).
_STORE_ARGUMENTS = {"show": "a KEY or fingerprint", "diff": "two versions: A B",
                    "rollback": "the version N to roll back to", "import": "a JSON-lines FILE",
                    "holdout-share": "the SHARE, 0 to 0.5",
                    "relaxed-teams": 'TEAM[,TEAM...], or "" for none'}


def _print_policy(version: int | None, policy: str, as_json: bool) -> None:
    """What setting a version's `policy` ("holdout share 0.1") published: `version`, None when
    the live version had it already."""
    print(json.dumps({"version": version}) if as_json
          else f"published v{version}: {policy}" if version is not None
          else f"the live version has {policy} already")


def _version(text: str) -> int:
    """A store version number given on the command line; ValueError naming it if it is none."""
    try:
        return int(text.removeprefix("v"))
    except ValueError:
        raise ValueError(f"version {text!r}: not a version number (1, 2, ... or v1, v2, ...)") from None


def _print_versions(store: StoreReader, as_json: bool) -> None:
    """`fdo store versions`: every version (* the live one), then what is damaged (! marks it:
    a stray or half-written directory, a version failing its checksum, a corrupt CURRENT)."""
    from storage.store_schema import StoreError

    damaged = store.problems()
    try:
        current = store.current()
    except StoreError:
        current = None
    versions = store.versions()
    if as_json:
        print_json({"current": current, "versions": [m.to_json() for m in versions], "damaged": damaged})
        return
    if not versions and not damaged:
        print("store is empty: no versions")
    if versions:
        print_table(("version", "parent", "created", "entries", "reason"),
                    [(f"{_version_mark(m.version, current, damaged)} v{m.version}",
                      f"v{m.parent}" if m.parent is not None else "-", m.created[:19],
                      ", ".join(f"{n} {kind}" for kind, n in m.counts.items()) or "none", m.reason)
                     for m in versions], "<<<<<")
    for name, problem in sorted(damaged.items()):
        print(f"! {name:<5} damaged: {problem}")


def _version_mark(version: int, current: int | None, damaged: dict[str, str]) -> str:
    """`!` for a damaged version, `*` for the live one, else a blank."""
    return "!" if f"v{version}" in damaged else "*" if version == current else " "


def _print_entries(store: StoreReader, key: str, as_json: bool) -> int:
    """`fdo store show`: the live entries whose key or fingerprint is `key`; EXIT_FAILED if none."""
    entries = [e for e in store.records() if key in (e.key, e.fingerprint)]
    if as_json:
        print_json([e.to_json() for e in entries])
    elif entries:
        print_table(("key", "kind", "speedup", "by", "expires", "config"),
                    [(e.key, e.kind, f"{e.speedup:.3f}x", e.provenance or "-",
                      f"{e.expires_at:%Y-%m-%d}" if e.expires_at else "-", config_text(json.loads(e.config)))
                     for e in entries], "<<><<<")
    else:
        print(f"fdo store show: no live entry has the key or fingerprint {key}", file=sys.stderr)
    return EXIT_OK if entries else EXIT_FAILED


def _print_diff(store: StoreReader, old: int, new: int, as_json: bool) -> None:
    """`fdo store diff A B`: the keys B adds, removes and changes against A."""
    before, after = ({e.key: e.to_json() for e in store.records(v)} for v in (old, new))
    diff = {"added": sorted(after.keys() - before.keys()), "removed": sorted(before.keys() - after.keys()),
            "changed": sorted(k for k in before.keys() & after.keys() if before[k] != after[k])}
    if as_json:
        print_json(diff)
        return
    print(f"v{old} -> v{new}: " + ", ".join(f"{len(keys)} {change}" for change, keys in diff.items()))
    rows = [(change, key) for change, keys in diff.items() for key in keys]
    if rows:
        print_table(("change", "key"), rows, "<<", indent="  ")
    else:
        print(f"  v{old} and v{new} hold the same entries")


def add_serve(sub: Subcommands) -> None:
    """`fdo serve`."""
    p = add_command(sub, "serve", "the config service and the dashboards (FastAPI on uvicorn)",
                    ["fdo serve",
                     "fdo serve --host 0.0.0.0 --port 8470 --token-file token.txt --validate-every 60"],
                    "Exit status 2: an unreadable --token-file, a home it cannot write (with a token or "
                    "--validate-every), a port in use or an unknown host.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8470, help="TCP port to listen on")
    p.add_argument("--token-file", metavar="FILE", help="file holding the bearer token for writes "
                   "(default: $FDO_TOKEN; with neither, the store is read-only through the server)")
    add_validation_options(p, budget_minutes=30.0)
    p.set_defaults(run=cmd_serve, home_url=True)


@needs("service")
def cmd_serve(args: argparse.Namespace, home: Home) -> int:
    """Serve the store and the dashboards of `home` until interrupted."""
    import uvicorn

    from delivery.service.app import create_app
    from pipelines.dashboard.routes import dashboard_router

    token = os.environ.get("FDO_TOKEN")
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--token-file {args.token_file}: {getattr(exc, 'strerror', None) or exc}") from None
    listening = _listen(args.host, args.port)
    if not token:
        print("fdo serve: no FDO_TOKEN or --token-file: the store is read-only through this server",
              file=sys.stderr)
    scheduler = None
    if args.validate_every:
        from apscheduler.schedulers.background import BackgroundScheduler

        from validator.validation_job import add_validation_job

        scheduler = BackgroundScheduler()
        add_validation_job(scheduler, home, args.validate_every, args.validate_budget_minutes)
        scheduler.start()
    app = create_app(home, token or None)
    app.include_router(dashboard_router(home))  # the dashboards at / and /api/
    print(f"fdo serve: dashboards at http://{args.host}:{args.port}/", file=sys.stderr)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[listening])
    finally:
        if scheduler is not None:
            scheduler.shutdown(wait=False)
    return EXIT_OK if server.started else EXIT_FAILED


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
