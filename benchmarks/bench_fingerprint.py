"""Fingerprint throughput: instructions per second from HLO proto and from HLO text.

Prints, side by side in one run, XLA's own text parse time, our graph fingerprint time, the
time of the full fingerprint with op fingerprints and the family fingerprint's time (and its
ratio to the graph fingerprint's), for generated modules of growing size (a random DAG of
elementwise ops), and the zoo's modules. Times are medians of several runs: the machine may
be shared.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

from provenance import describe

from hlo.family import family_fingerprint
from hlo.fingerprint import fingerprint_module, graph_fingerprint
from hlo.module import from_lowered, from_text
from workloads import zoo


def generated_module_text(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    lines = ["HloModule big", "ENTRY main {", "  p0 = f32[16]{0} parameter(0)",
             "  p1 = f32[16]{0} parameter(1)"]
    names = ["p0", "p1"]
    for i in range(n - 3):
        a, b = rng.choice(names[-50:]), rng.choice(names[-50:])
        op = rng.choice(("add", "multiply", "subtract", "maximum"))
        lines.append(f"  v{i} = f32[16]{{0}} {op}({a}, {b})")
        names.append(f"v{i}")
    lines += [f"  ROOT r = f32[16]{{0}} add({names[-1]}, {names[-2]})", "}"]
    return "\n".join(lines) + "\n"


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(sizes: list[int]) -> None:
    print(f"{'instructions':>12} {'XLA text parse s':>17} {'fingerprint s':>14} {'instr/s':>10}"
          f" {'with ops s':>11} {'family s':>9} {'family/fp':>10}")
    for n in sizes:
        text = generated_module_text(n)
        repeats = 5 if n <= 100_000 else 3
        parse = timed(lambda: from_text(text), repeats)
        module = from_text(text)
        hashing = timed(lambda: graph_fingerprint(module), repeats)
        with_ops = timed(lambda: fingerprint_module(module, with_ops=True), repeats)
        family = timed(lambda: family_fingerprint(module), repeats)
        print(f"{n:>12} {parse:>17.2f} {hashing:>14.2f} {n / hashing:>10.0f} {with_ops:>11.2f}"
              f" {family:>9.2f} {family / hashing:>10.2f}")
    total, seconds, family_seconds = 0, 0.0, 0.0
    for workload in zoo.all_workloads():
        module = from_lowered(workload.lower())
        total += module.n_instructions()
        seconds += timed(lambda: graph_fingerprint(module), 5)
        family_seconds += timed(lambda: family_fingerprint(module), 5)
    print(f"zoo: {total} instructions in {len(zoo.all_workloads())} modules, {total / seconds:.0f} instr/s "
          f"(median of 5); family fingerprints {family_seconds / seconds:.2f}x the time")


if __name__ == "__main__":
    print(describe(), file=sys.stderr, flush=True)
    main([int(a) for a in sys.argv[1:]] or [10_000, 100_000, 500_000])
