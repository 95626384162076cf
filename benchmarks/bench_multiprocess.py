"""What one decision per multi-process job costs: how long a process waits for its leader's decision.

A two-process JAX job on loopback (jax.distributed, gloo collectives, two host devices a
process) jits a data-parallel train step over both processes' four devices, with the hook on
(FDO_HOOK=1) and a stored config for the step. Process 0 decides each compile (look-up, arm,
sandbox verdict) and shares it through JAX's key-value store; process 1 waits for it
(delivery.multiprocess). The first launch finds no sandbox verdict on the machine (process 0 checks the
program in a worker with four host devices); the others find it remembered. Per launch it
reports process 1's wait for the step's decision, both processes' hook time for the step
(`hook_seconds` of their hits: look-up or wait, fingerprint, sandbox check) and their compile
time, and the medians over the warm launches.

Usage: python benchmarks/bench_multiprocess.py [--launches 10] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from provenance import describe

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def job(process: int, port: str, steps: int) -> None:
    """One process of the job: the step and `steps` small programs across both processes; prints
    its pid and its channel's waits for decisions, in compile order."""
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from delivery.multiprocess import channel

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows, replicated = NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())
    x_host = np.linspace(-1.0, 1.0, 256 * 512, dtype=np.float32).reshape(256, 512)
    w_host = np.linspace(-0.5, 0.5, 512 * 256, dtype=np.float32).reshape(512, 256)
    x = jax.make_array_from_callback(x_host.shape, rows, lambda index: x_host[index])
    w = jax.make_array_from_callback(w_host.shape, replicated, lambda index: w_host[index])

    @jax.jit
    def step(w, x):
        return w - 0.01 * jax.grad(lambda w: jnp.tanh(x @ w).sum())(w)

    step(w, x).block_until_ready()
    for k in range(steps):
        jax.jit(lambda x, k=k: jnp.tanh(x * (k + 2.0)).sum(axis=0), out_shardings=replicated)(x).block_until_ready()
    shared = channel()
    print(json.dumps({"pid": os.getpid(), "waits": shared.waits if shared else []}), flush=True)


def launch(home: Path, steps: int) -> list[dict]:
    """Both processes' printed lines, with their hits."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {**os.environ, "FDO_HOOK": "1", "FDO_HOME": str(home), "FDO_HOLDOUT": "0", "FDO_JOB_ID": "bench"}
    processes = [subprocess.Popen([sys.executable, __file__, "--job", str(i), port, "--steps", str(steps)],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
                 for i in (0, 1)]
    outputs = []
    for process in processes:
        stdout, _ = process.communicate(timeout=600)
        if process.returncode != 0:
            raise RuntimeError(f"a process of the job exited with {process.returncode}")
        printed = json.loads(stdout.strip().splitlines()[-1])
        spool = sorted((home / "spool" / "hits").glob(f"*-{printed['pid']}-*.jsonl"))
        printed["hits"] = [json.loads(line) for path in spool for line in path.read_text().splitlines()]
        outputs.append(printed)
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--steps", type=int, default=2, help="small programs across both processes, after the step")
    parser.add_argument("--job", nargs=2, metavar=("PROCESS", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        job(int(args.job[0]), args.job[1], args.steps)
        return

    from delivery.imports import read_import
    from delivery.store_writer import Store, merge_entries

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        first, _ = launch(home, args.steps)  # no store yet: the step's key in this environment
        stored = [h for h in first["hits"] if h["module_name"] in ("jit_step", "jit__lambda")]
        (home / "entries.jsonl").write_text("".join(json.dumps({
            "fingerprint": h["fingerprint"], "env_key": h["env_key"], "kind": "graph",
            "config": {"xla_cpu_experimental_ynn_fusion_type": []}, "speedup": 1.2}) + "\n" for h in stored))
        Store(home).update(lambda live: merge_entries(live, read_import(home / "entries.jsonl")), "bench")

        print(f"{'launch':>6} {'wait, step':>11} {'other waits':>20} {'hook s, p0':>11} {'hook s, p1':>11} "
              f"{'compile s, p0':>14} {'outcome':>8}")
        rows = []
        for n in range(args.launches):
            leader, follower = launch(home, args.steps)
            step0 = next(h for h in leader["hits"] if h["module_name"] == "jit_step")
            step1 = next(h for h in follower["hits"] if h["module_name"] == "jit_step")
            # The follower's waits in compile order; the step is its first compile across processes.
            waits = follower["waits"]
            rows.append((waits[0], waits[1:], step0["hook_seconds"], step1["hook_seconds"],
                         step0["compile_seconds"]))
            print(f"{str(n) + (' cold' if n == 0 else ''):>6} {waits[0] * 1e3:>9.1f}ms "
                  f"{' '.join(f'{w * 1e3:.1f}' for w in waits[1:]) + ' ms':>20} {step0['hook_seconds']:>11.3f} "
                  f"{step1['hook_seconds']:>11.3f} {step0['compile_seconds']:>14.3f} {step1['outcome']:>8}")
        warm = rows[1:]
        if warm:
            median = statistics.median
            print(f"\nwarm launches ({len(warm)}), medians: process 1's wait for the step's decision "
                  f"{median(r[0] for r in warm) * 1e3:.1f} ms; its waits for the small programs "
                  f"{median(w for r in warm for w in r[1]) * 1e3:.1f} ms; hook time for the step, process 0 "
                  f"{median(r[2] for r in warm) * 1e3:.1f} ms, process 1 {median(r[3] for r in warm) * 1e3:.1f} ms; "
                  f"the step's compile {median(r[4] for r in warm) * 1e3:.0f} ms")
            print(f"cold launch: process 1 waited {rows[0][0]:.2f} s for the step (process 0's sandbox check)")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
