"""The compiler hook's costs: look-up latency (embedded and remote) and overhead per compile.

1. Look-ups against a store of 10,000 entries, half of the keys present: the embedded
   snapshot, and the config service (`fdo serve`, uvicorn on loopback) with the hook's local
   cache off so every look-up is a request; p50/p99 and sustained look-ups/s from 4 threads.
2. The hook's share of compile time on zoo programs: each program compiled with the hook off
   and on, interleaved, caches cleared before each compile. The hook times itself (hook_seconds
   in its hit records); the first compile of a program pays the StableHLO -> HLO conversion
   (cold), later ones find the fingerprint in the on-disk memo (warm).

Usage: python benchmarks/bench_hook.py [--entries N] [--repeats R] [--workloads a,b]
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from provenance import describe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_store(home: Path, entries: int) -> list[str]:
    import pyarrow as pa

    from delivery.store_writer import Store
    from hlo.environment import store_key
    from storage.store_schema import ENTRIES

    rng = random.Random(0)
    now = datetime.datetime.now(datetime.UTC)
    rows = []
    for _ in range(entries):
        fingerprint, env_key = f"{rng.getrandbits(128):032x}", f"{rng.getrandbits(128):032x}"
        rows.append({"key": store_key(fingerprint, env_key), "fingerprint": fingerprint,
                     "env_key": env_key, "kind": "graph", "speedup": 1.1,
                     "expires_at": now + datetime.timedelta(days=30), "provenance": "tuner",
                     "config": json.dumps({"xla_cpu_experimental_ynn_fusion_type": []}),
                     "ci_low": 1.05, "ci_high": 1.15, "compiler_version": "jaxlib-x",
                     "measured_at": now, "source": "bench"})
    Store(home).publish(pa.Table.from_pylist(rows, ENTRIES), None, "bench")
    return [row["key"] for row in rows]


def probe_keys(keys: list[str], n: int) -> list[str]:
    rng = random.Random(1)
    return [rng.choice(keys) if i % 2 else f"{rng.getrandbits(128):032x}" for i in range(n)]


def latencies(lookup, keys: list[str]) -> list[float]:
    out = []
    for key in keys:
        started = time.perf_counter()
        lookup(key)
        out.append(time.perf_counter() - started)
    return out


def throughput(make_lookup, keys: list[str], threads: int, seconds: float) -> float:
    done = [0] * threads
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        lookup = make_lookup()
        j = i
        while time.monotonic() < stop:
            lookup(keys[j % len(keys)])
            j += threads
            done[i] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(done) / seconds


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1e6


def bench_lookups(entries: int) -> None:
    from delivery.lookup import EmbeddedStore, RemoteStore
    from tests.support.serving import running_server

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        keys = make_store(home, entries)
        probes = probe_keys(keys, 20000)
        embedded = EmbeddedStore(home)
        embedded.lookup(probes[0])  # the one read of the snapshot
        lat = latencies(embedded.lookup, probes)
        print(f"embedded look-up ({entries} entries): p50 {pct(lat, 50):.1f} us, "
              f"p99 {pct(lat, 99):.1f} us, {len(lat) / sum(lat):,.0f}/s single thread")
        with running_server(home) as url:
            def remote():
                return RemoteStore(url, timeout=2.0, cache_seconds=0).lookup
            lat = latencies(remote(), probes[:2000])
            rate = throughput(remote, probes, threads=4, seconds=5.0)
            print(f"remote look-up (loopback, no local cache): p50 {pct(lat, 50):.0f} us, "
                  f"p99 {pct(lat, 99):.0f} us; sustained {rate:,.0f} look-ups/s from 4 threads "
                  f"(target >= 1000/s: {'met' if rate >= 1000 else 'NOT met'})")


def bench_overhead(workloads: list[str], repeats: int) -> None:
    import jax
    from jax._src import compiler

    from delivery.hook import install, uninstall
    from ingest.hits import read_hits
    from workloads.zoo import get

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        make_store(home, 100)
        print(f"{'program':<16} {'compile off':>12} {'compile on':>11} {'on/off':>7} "
              f"{'hook cold':>10} {'hook warm':>10} {'warm share':>10}")
        install(home=home, job_id="bench")  # one hook for the process, as in a job
        hooked = compiler.compile_or_get_cached
        for name in workloads:
            fn, args = get(name).build()
            off, on = [], []
            for _ in range(repeats):
                for enabled in (False, True):
                    compiler.compile_or_get_cached = hooked if enabled else hooked.__wrapped__
                    jax.clear_caches()
                    started = time.perf_counter()
                    jax.jit(fn).lower(*args).compile()
                    (on if enabled else off).append(time.perf_counter() - started)
            records = sorted((r for r in read_hits(home).to_pylist()
                              if r["module_name"] == f"jit_{fn.__name__}"), key=lambda r: r["at"])
            cold, warm = records[0], records[1:]
            hook_warm = statistics.median(r["hook_seconds"] for r in warm)
            compile_warm = statistics.median(r["compile_seconds"] for r in warm)
            print(f"{name:<16} {statistics.median(off) * 1e3:>10.0f}ms {statistics.median(on) * 1e3:>9.0f}ms "
                  f"{statistics.median(on) / statistics.median(off):>7.3f} "
                  f"{cold['hook_seconds'] * 1e3:>8.1f}ms {hook_warm * 1e3:>8.2f}ms "
                  f"{100 * hook_warm / compile_warm:>9.2f}%")
        uninstall()
        print("on/off: median compile time with the hook over without (noisy: the machine is shared);"
              " share: the hook's own time over the compile's, warm memo (target < 1%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", default="mlp-s,cnn-s,transformer-s,unet-s")
    args = parser.parse_args()
    bench_lookups(args.entries)
    bench_overhead(args.workloads.split(","), args.repeats)


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
