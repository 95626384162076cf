"""`fdo cluster node|stop`, and the `--cluster` option of `fdo tune`, `validate --once` and
`nightly`: tuning and validation as tasks on a Ray cluster (docs/cluster.md)."""

from __future__ import annotations

import argparse
import sys

from pipelines.cli.common import EXIT_FAILED, EXIT_OK, Subcommands, add_command, print_json
from pipelines.extras import needs
from storage.home import Home

CLUSTER_HELP = ("run the tasks (tuning, validation measurements) on the Ray cluster at ADDRESS "
                "(host:port, or auto), each on a node offering its environment (fdo cluster "
                "node); the home must be one every node reaches: a URL or a shared file system "
                "(default: $FDO_CLUSTER, else here, one task after another)")


def add_cluster_option(p: argparse.ArgumentParser) -> None:
    """`--cluster ADDRESS` of a command whose tasks may run on a cluster."""
    p.add_argument("--cluster", default=None, metavar="ADDRESS", help=CLUSTER_HELP)


def add_cluster(sub: Subcommands) -> None:
    """`fdo cluster`."""
    p = add_command(sub, "cluster", "start or stop a Ray node that measures this machine's "
                    "environment",
                    ["fdo cluster node --head --port 6379",
                     "fdo cluster node --address 10.0.0.5:6379",
                     "XLA_FLAGS=--xla_cpu_enable_fast_math=false fdo cluster node "
                     "--address 10.0.0.5:6379",
                     "fdo cluster stop"],
                    "A node offers one measuring slot of this machine's environment (platform, "
                    "device kind and count, jaxlib, and the job options of $XLA_FLAGS): a task "
                    "runs only on nodes of its own environment, one at a time per node.")
    p.add_argument("action", choices=["node", "stop"],
                   help="node: start a Ray node here (ray start) offering this machine's "
                   "environment; stop: stop the Ray processes of this machine (ray stop)")
    p.add_argument("--head", action="store_true", help="node: start the cluster's head here")
    p.add_argument("--port", type=int, default=6379, metavar="P", help="node --head: its port")
    p.add_argument("--address", default=None, metavar="ADDRESS",
                   help="node without --head: the head's address, host:port (default: "
                   "$FDO_CLUSTER)")
    p.add_argument("--json", action="store_true", help="print the node's resources as JSON")
    p.set_defaults(run=cmd_cluster, home_use=None, home_url=True)


@needs("cluster")
def cmd_cluster(args: argparse.Namespace, home: Home) -> int:
    """Start a node offering this machine's environment, or stop this machine's Ray processes."""
    from pipelines.stages import cluster_address
    from tasks.node import start_node, stop_node

    if args.action == "stop":
        stopped = stop_node()
        if args.json:
            print_json({"stopped": stopped})
        else:
            print("stopped the Ray node" if stopped else "no Ray node was running")
        return EXIT_OK
    address = None if args.head else cluster_address(args.address)
    if not args.head and address is None:
        raise ValueError("fdo cluster node: give --head, or --address of the head (or $FDO_CLUSTER)")
    if not 0 < args.port < 65536:
        raise ValueError(f"--port {args.port}: not a port")
    started = start_node(head=args.head, port=args.port, address=address)
    if started.returncode != 0:
        print(f"fdo cluster node: ray start failed: {started.error}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json({"resources": started.resources, "address": started.address})
    else:
        print(f"node offers {', '.join(started.resources)}; cluster at {started.address}")
    return EXIT_OK
