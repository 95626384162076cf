"""Look-ups of the config service while it writes: p50/p99 idle, during a deliver, during an
import, and while an import waits on a store lock held by another process, side by side.

One `fdo serve` (uvicorn on loopback) over a store of --entries entries; one client on a
kept-alive connection looks keys up one after another (half of them present), as the compiler
hook does with its cache off. Each round runs the phases in turn, so a busy machine weighs on
every phase alike:
  idle     nothing else;
  deliver  POST /v1/deliver (Beam over new accepted tuning results, then a publish and reload);
  import   POST /v1/import of --import-lines entries (parse, allowlist, publish, reload);
  lock     this process holds the store's flock while a POST /v1/import waits on it (seen
           waiting in /proc/locks), then lets it go.
Printed per phase: look-ups, p50, p99, max, those over the hook's 0.25 s timeout, and p50/p99
as ratios to idle (the target: p99 within 2x of idle). Bounded: each phase stops after
--seconds (deliver and import: when they answer) or --max-lookups look-ups.

Usage: python benchmarks/bench_service_lookups.py [--entries N] [--rounds R] [--seconds S]
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import http.client
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_hook import make_store, probe_keys  # noqa: E402
from provenance import describe

HOOK_TIMEOUT = 0.25
TOKEN = "bench-token"


class Client:
    """Look-ups one after another on one kept-alive connection, each timed."""

    def __init__(self, base: str, keys: list[str]) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=60)
        self.keys, self.next = keys, 0

    def lookup(self) -> float:
        """One look-up; its latency in seconds."""
        key = self.keys[self.next % len(self.keys)]
        self.next += 1
        started = time.perf_counter()
        self.connection.request("GET", f"/v1/configs/{key}")
        response = self.connection.getresponse()
        response.read()
        elapsed = time.perf_counter() - started
        assert response.status in (200, 404), response.status
        return elapsed

    def until(self, done: Callable[[], bool], seconds: float, most: int) -> list[float]:
        """Look up until `done()`, `seconds` pass or `most` look-ups; their latencies."""
        out: list[float] = []
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline and len(out) < most:
            out.append(self.lookup())
        return out


def post(base: str, path: str, body: bytes) -> tuple[int, dict]:
    """POST with the write token: status and JSON."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=600)
    try:
        connection.request("POST", path, body, {"Authorization": f"Bearer {TOKEN}",
                                                "Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def in_thread(work: Callable[[], tuple[int, dict]]) -> tuple[threading.Thread, list]:
    """Run `work` in a thread; the list gets its answer."""
    answer: list = []
    thread = threading.Thread(target=lambda: answer.append(work()))
    thread.start()
    return thread, answer


def waiting_on(lock: Path) -> bool:
    """Whether a lock request blocks on the flock of `lock` (/proc/locks)."""
    inode = f":{lock.stat().st_ino} "
    return any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


def add_results(home: Path, round_: int, count: int) -> None:
    """`count` new accepted tuning results for deliver to publish."""
    import pyarrow as pa

    from storage.warehouse import Warehouse
    from tuner.tables import TUNING_RESULTS, ResultRow
    from vocabulary.tuning import Kind, Verdict

    results = [ResultRow(dt=datetime.date.today(), task_id=f"bench-{round_}-{i}", kind=Kind.GRAPH,
                         fingerprint=f"{round_:08x}{i:024x}", env_key="e" * 32,
                         config='{"xla_cpu_use_xnnpack": false}', speedup=1.3, ci_low=1.2, ci_high=1.4,
                         numerics_ok=True, compiler_version="jaxlib-bench", accepted=True,
                         status=Verdict.ACCEPTED, strategy="evolution", evaluations=40, measured=12)
               for i in range(count)]
    Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist([r.to_row() for r in results], TUNING_RESULTS.schema),
                           f"bench-{round_}")


def import_body(round_: int, lines: int) -> bytes:
    """The body of POST /v1/import: `lines` new entries."""
    return json.dumps({"entries": [{"fingerprint": f"{round_ + 1:08x}{i:024x}", "env_key": "f" * 32,
                                    "kind": "graph", "config": {"xla_cpu_use_xnnpack": False},
                                    "speedup": 1.2} for i in range(lines)]}).encode()


def bench(entries: int, rounds: int, seconds: float, most: int, results: int, lines: int) -> None:
    from tests.support.serving import running_server

    phases: dict[str, list[float]] = {"idle": [], "deliver": [], "import": [], "lock": []}
    took: dict[str, list[float]] = {"deliver": [], "import": [], "lock": []}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        probes = probe_keys(make_store(home, entries), 5000)
        with running_server(home, {"FDO_TOKEN": TOKEN}) as base:
            client = Client(base, probes)
            client.until(lambda: False, 1.0, 500)  # warm: connection, code paths
            lock = home / "store" / ".lock"
            for round_ in range(rounds):
                phases["idle"] += client.until(lambda: False, seconds, most)

                add_results(home, round_, results)
                started = time.monotonic()
                thread, answer = in_thread(lambda: post(base, "/v1/deliver", b""))
                phases["deliver"] += client.until(lambda: not thread.is_alive(), 600, 10**9)
                thread.join()
                took["deliver"].append(time.monotonic() - started)
                assert answer[0][0] == 200 and answer[0][1]["version"], answer

                body = import_body(round_, lines)
                started = time.monotonic()
                thread, answer = in_thread(lambda: post(base, "/v1/import", body))
                phases["import"] += client.until(lambda: not thread.is_alive(), 600, 10**9)
                thread.join()
                took["import"].append(time.monotonic() - started)
                assert answer[0][0] == 200, answer

                with open(lock, "a") as held:
                    fcntl.flock(held, fcntl.LOCK_EX)
                    try:
                        small = import_body(1000 + round_, 10)
                        thread, answer = in_thread(lambda: post(base, "/v1/import", small))
                        deadline = time.monotonic() + 60
                        while not waiting_on(lock) and time.monotonic() < deadline:
                            phases["lock"].append(client.lookup())
                        assert waiting_on(lock), "the import never reached the store lock"
                        started = time.monotonic()
                        phases["lock"] += client.until(lambda: False, seconds, most)
                        took["lock"].append(time.monotonic() - started)
                        assert thread.is_alive(), "the import finished while the lock was held"
                    finally:
                        fcntl.flock(held, fcntl.LOCK_UN)
                thread.join()
                assert answer[0][0] == 200, answer
    report(phases, took, entries, results, lines)


def report(phases: dict[str, list[float]], took: dict[str, list[float]], entries: int,
           results: int, lines: int) -> None:
    def pct(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1]

    import fastapi
    import uvicorn

    print(f"# fdo serve look-ups, {entries} entries; deliver of {results} results, import of {lines} "
          f"lines; python {platform.python_version()}, uvicorn {uvicorn.__version__}, "
          f"fastapi {fastapi.__version__}, {os.cpu_count()} cores, {datetime.date.today()}")
    idle50, idle99 = pct(phases["idle"], 50), pct(phases["idle"], 99)
    print(f"{'phase':<8} {'look-ups':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'>0.25s':>6} "
          f"{'p50/idle':>8} {'p99/idle':>8}  write took (s)")
    for name, values in phases.items():
        p50, p99 = pct(values, 50), pct(values, 99)
        slow = sum(v > HOOK_TIMEOUT for v in values)
        spans = " ".join(f"{t:.2f}" for t in took.get(name, []))
        print(f"{name:<8} {len(values):>8} {p50 * 1e3:>8.3f} {p99 * 1e3:>8.3f} {max(values) * 1e3:>8.2f} "
              f"{slow:>6} {p50 / idle50:>8.2f} {p99 / idle99:>8.2f}  {spans}")
    worst = max(pct(v, 99) / idle99 for v in phases.values())
    print(f"worst p99 / idle p99: {worst:.2f} (target <= 2: {'met' if worst <= 2 else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="idle and lock phases, each round")
    parser.add_argument("--max-lookups", type=int, default=20_000, help="idle and lock phases, each round")
    parser.add_argument("--results", type=int, default=200, help="new tuning results per deliver")
    parser.add_argument("--import-lines", type=int, default=2000)
    args = parser.parse_args()
    bench(args.entries, args.rounds, args.seconds, args.max_lookups, args.results, args.import_lines)


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main()
