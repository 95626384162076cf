"""`fdo fingerprint`: a module's graph (and op) fingerprints, its family and its store key, as the
hook and the warehouse compute them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipelines.cli.common import EXIT_OK, Subcommands, add_command, print_json, print_table


def add_fingerprint(sub: Subcommands) -> None:
    """`fdo fingerprint`."""
    p = add_command(sub, "fingerprint", "graph (and op) fingerprints of an HLO module",
                    ["fdo fingerprint module_0001.jit_step.before_optimizations.txt",
                     "fdo fingerprint module_0001.jit_step.cpu_after_optimizations.txt --ops",
                     "fdo fingerprint module_0001.jit_step.before_optimizations.txt --family"])
    p.add_argument("file", metavar="FILE", help="HLO text (XLA dump or printed) or serialized HLO proto")
    p.add_argument("--json", action="store_true", help="print fingerprint, family, env_key, key, "
                   "n_instructions (and the ops with --ops) as JSON")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--ops", action="store_true", help="list the op fingerprints with kind and size")
    shown.add_argument("--family", action="store_true", help="print the family fingerprint (the same "
                       "program at other shapes) instead of the graph fingerprint")
    p.set_defaults(run=cmd_fingerprint, home_use=None)


def cmd_fingerprint(args: argparse.Namespace, home: Path) -> int:
    """Print a module's graph fingerprint (its ops' with --ops, its family with --family)."""
    from hlo.environment import current_environment, store_key
    from hlo.family import family_fingerprint
    from hlo.fingerprint import fingerprint_module
    from hlo.module import load_file

    module = load_file(args.file)
    result = fingerprint_module(module, with_ops=args.ops)
    if args.json:
        env_key = current_environment().key()
        payload: dict[str, Any] = {
            "fingerprint": result.fingerprint,
            "family": family_fingerprint(module),
            "env_key": env_key,
            "key": store_key(result.fingerprint, env_key),
            "n_instructions": result.n_instructions,
        }
        if args.ops:
            payload["ops"] = [op.__dict__ for op in result.ops]
        print_json(payload)
    elif args.ops:
        print_table(("op fingerprint", "kind", "instructions", "name"),
                    [(op.fingerprint, op.kind, str(op.n_instructions), op.name) for op in result.ops],
                    "<<><")
    elif args.family:
        print(family_fingerprint(module))
    else:
        print(result.fingerprint)
    return EXIT_OK
