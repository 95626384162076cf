"""The programs the simulated fleet runs: zoo workloads at several shapes, compiled and
profiled for real on this machine.

Each catalog graph is an XLA dump of the program (what the fleet hands us as symbols), its
graph fingerprint, the measured seconds per execution, and each op's share of that time from
a real profiler trace (what op-level profiles of the fleet say). Built once per home and
cached; a graph's directory appears atomically with its `graph.json` last. The graphs come in
catalog order, each workload's shapes together (the reach fleet's families).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from console.progress import progress_bar
from hlo.fingerprint import fingerprint_module, graph_fingerprint
from hlo.module import load_file
from storage.home_factory import open_home
from workloads import zoo
from workloads.zoo.dump import dump_workload

SCALES = (1, 4)
REACH_SCALES = (1, 2, 4)  # the reach fleet's shapes of each workload
MAX_OPS = 8  # ops kept per graph: the ones that cover most of its time
_GRAPH_FILE = "graph.json"
_PROFILED_RUNS = 10


@dataclass(frozen=True)
class CatalogGraph:
    """One program of the fleet at one shape."""

    name: str
    workload: str  # the zoo workload it is a shape of: its family
    scale: int  # its batch's factor (zoo.variant)
    dump_dir: Path  # holds the unoptimized and optimized module files, as XLA names them
    fingerprint: str
    step_seconds: float  # measured seconds per execution on this machine
    op_fingerprints: tuple[str, ...]
    op_shares: tuple[float, ...]  # each op's share of the graph's time

    def module_files(self) -> list[Path]:
        """The dump's module files."""
        return sorted(self.dump_dir.glob("module_*"))


def build_catalog(root: Path, names: list[str] | None = None, scales: tuple[int, ...] = SCALES,
                  progress: bool = False) -> list[CatalogGraph]:
    """The catalog of the named zoo workloads (all by default) at `scales`, built where missing."""
    shapes = [(w.name, s, zoo.variant(w.name, s)) for w in (
        zoo.all_workloads() if names is None else [zoo.get(n) for n in names]) for s in scales]
    catalog = []
    for name, scale, workload in progress_bar(shapes, desc="fleet programs", unit="graph", enabled=progress):
        graph_file = root / workload.name / _GRAPH_FILE
        if not graph_file.exists():
            _build_graph(workload, root)
        data = json.loads(graph_file.read_text())
        catalog.append(CatalogGraph(**{**data, "workload": name, "scale": scale,
                                       "dump_dir": graph_file.parent,
                                       "op_fingerprints": tuple(data["op_fingerprints"]),
                                       "op_shares": tuple(data["op_shares"])}))
    return catalog


def _build_graph(workload: zoo.Workload, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{workload.name}.tmp-") as tmp:
        dump = dump_workload(workload, Path(tmp))
        for path in dump.iterdir():  # keep the modules; LLVM IR and reports are not symbols
            if not (path.name.endswith("before_optimizations.txt")
                    or path.name.endswith("after_optimizations.txt")):
                path.unlink()
        module = load_file(next(dump.glob("*before_optimizations.txt")))
        optimized = fingerprint_module(load_file(next(dump.glob("*after_optimizations.txt"))))
        step_seconds, op_seconds = _profile(module.proto)
        # Ops are named as in the dump's optimized module: take their fingerprints from there.
        ops: dict[str, float] = {}
        for op in optimized.ops:
            if op.name in op_seconds:
                ops[op.fingerprint] = ops.get(op.fingerprint, 0.0) + op_seconds[op.name] / step_seconds
        top = sorted(ops.items(), key=lambda item: -item[1])[:MAX_OPS]
        graph = {"name": workload.name, "fingerprint": graph_fingerprint(module),
                 "step_seconds": step_seconds, "op_fingerprints": [fp for fp, _ in top],
                 "op_shares": [round(share, 6) for _, share in top]}
        with open_home(root).staged_directory(root / workload.name, durable=False) as final:
            for path in dump.iterdir():
                path.rename(final / path.name)
            (final / _GRAPH_FILE).write_text(json.dumps(graph, indent=1) + "\n")


def _profile(module_proto: bytes) -> tuple[float, dict[str, float]]:
    """Seconds per execution and each op's seconds per execution (by name), from a real trace."""
    import jax

    from execution.compile import compile_module
    from execution.inputs import make_inputs, parameter_specs
    from hlo.module import HloModule
    from ingest.xplane import read_trace

    executable = compile_module(module_proto, {}).executable
    arguments = [jax.device_put(a) for a in make_inputs(
        parameter_specs(HloModule(module_proto, "", "catalog")), 0)]
    for _ in range(3):
        jax.block_until_ready(executable.execute(arguments))
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            for _ in range(_PROFILED_RUNS):
                jax.block_until_ready(executable.execute(arguments))
        modules = read_trace(next(Path(trace_dir).rglob("*.xplane.pb")))
    module = max(modules, key=lambda m: m.seconds)
    return module.seconds / module.executions, {
        op.name: op.seconds / module.executions for op in module.ops}
