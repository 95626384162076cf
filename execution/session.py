"""The worker side of a tuning search: candidates compiled in compile workers, measured in
the execute worker against the module compiled once with the defaults.

These functions are the jobs of sandboxed `execution.worker` processes (`worker.call(prepare,
...)` and so on). Each answers a typed reply (`Prepared`, `Built`, `Timed`) whose `error` is its
one channel for a failure of the compiler or of a run; an exception from a job is a bug of ours,
which the worker hands back as a `WorkerFailure`. Every compile is of the module as measured
(`measurable_module`). The execute worker keeps the module's state between calls (`prepare`),
so the default is compiled, run and checked once per search instead of once per candidate. A
candidate is compiled in a compile worker (`compile_serialized`), which names its
program (the optimized module's fingerprint plus its machine code, see `program_key`) and hands
the executable back serialized. The caller measures a program once (`measure_serialized`, in the
execute worker) and reuses the result for every other config that yields it. A comparison of two
candidates (in a fresh worker: `keep_serialized` the baseline, then `measure_serialized`) loads
both as compiled, compiling neither again.

Autotune results (XLA:GPU's, `execution.autotune`) are a candidate too: compiled with
them delivered (`compile_serialized`'s `results`), the `Built` says what XLA did with them. XLA
keeps a process's autotune results in memory and looks there before the directory, so such a
compile runs in a fresh worker, which neither compiled the module before nor compiles its
default after; so does XLA's own exhaustive autotuning (`autotune_exhaustively`).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from typing import Any, Literal

from execution.autotune.per_fusion_directory import EXHAUSTIVE_FLAG, AutotuneOutcome
from execution.autotune.results import NO_RESULTS, AutotuneResults
from execution.compile import CompileError, compile_module, compile_options, compiler_defaults, elf_objects, object_code
from execution.flags import CompilerConfig, codegen_values, unseen_values, without_defaults
from execution.measure import Measurement, MeasureSettings, Runner, measure_pair
from execution.numerics import PROBES, RECHECKS, Numerics, OutputCheck, compare_outputs, judge, movement, recheck
from execution.sharded import Placed, devices_for, global_output_shapes
from execution.tuple_parameters import flatten_tuple_parameters
from hlo.environment import Partitioning
from hlo.fingerprint import graph_fingerprint
from hlo.module import HloModule
from hlo.proto import ModuleProto
from vocabulary.errors import first_line

_STATE: dict[str, Any] = {}


@dataclass(frozen=True)
class Span:
    """When and where a job ran: what (compile | measure), which process on which cores, and
    when (`time.monotonic()`, the same clock in every process of the machine)."""

    kind: Literal["compile", "measure"]
    pid: int
    cores: tuple[int, ...]
    started: float
    ended: float


@dataclass(frozen=True)
class Prepared:
    """What a worker keeps to measure candidates against (`prepare`, `keep_serialized`): its
    program key and compile time (None for one compiled elsewhere); or why it does not
    compile or run (`error`, and nothing else set)."""

    program: str | None = None
    compile_seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Built:
    """A candidate compiled in a compile worker (`compile_serialized`): its program key,
    compile time and executable, serialized for the worker that measures it, and what XLA did
    with the autotune results delivered to it (`autotune`, where it had some); or why it does
    not compile (`error`, and nothing else set)."""

    program: str | None = None
    compile_seconds: float | None = None
    executable: bytes | None = None
    span: Span | None = None
    error: str | None = None
    autotune: AutotuneOutcome | None = None


@dataclass(frozen=True)
class Offline:
    """XLA's own autotuner run exhaustively over a module's fusions (`autotune_exhaustively`):
    what it did in its directory (`autotune`: the files it wrote, its dump of every result) and
    the compile's seconds; or why the module does not compile (`error`, and nothing else set)."""

    autotune: AutotuneOutcome | None = None
    compile_seconds: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Timed:
    """A candidate measured against what its worker keeps (`measure_serialized`): the
    measurement and its numerics as judged (`execution.numerics.Numerics`; `numerics_ok` is
    their verdict); or why it fails to run (`error`, and nothing else set)."""

    measurement: Measurement | None = None
    numerics_ok: bool | None = None
    numerics: Numerics | None = None
    span: Span | None = None
    error: str | None = None


def program_key(optimized_proto: bytes, code: tuple[bytes, ...], config: CompilerConfig) -> str:
    """What a candidate runs: the optimized module, and its machine `code` where the backend
    shows it (CPU: the ELF objects; a GPU's kernels, where its executable holds them as ELF), so
    a flag that changes nothing is seen to; elsewhere the codegen-level flags that differ from
    the compiler's defaults stand in for the code. The flags that change what neither shows
    (GPU command buffers, the schedule: `FlagSpec.unseen`) join it by value."""
    fingerprint = graph_fingerprint(HloModule(optimized_proto, "", "optimized"))
    changed = without_defaults(config, compiler_defaults())
    unseen = unseen_values(changed)
    suffix = f":{unseen!r}" if unseen else ""
    if code:
        digest = hashlib.blake2b(digest_size=16)
        for obj in code:
            digest.update(b"%d:" % len(obj) + obj)
        return f"{fingerprint}:code-{digest.hexdigest()}{suffix}"
    return f"{fingerprint}:{codegen_values(changed)!r}{suffix}"


class RunError(RuntimeError):
    """XLA failed to run a compiled module (it compiled)."""


def prepare(module_proto: bytes, seed: int = 0, default: CompilerConfig | None = None,
            partitioning: Partitioning | None = None) -> Prepared:
    """Compile and run the module with `default` (the compiler's defaults unless given), for
    one device or whole as `partitioning` partitions it (`execution.sharded`: this worker has
    its devices); keep it for the candidates that follow, which are compiled the same way. Its
    program key and compile time, or why it does not compile or run."""
    _STATE.clear()  # a default that fails leaves no earlier module's default to measure against
    module_proto = measurable_module(module_proto)
    try:
        base = compile_module(module_proto, default or {}, partitioning=partitioning)
    except CompileError as exc:
        return Prepared(error=f"does not compile: {exc}")
    try:
        _keep(module_proto, seed, base.executable, partitioning)
    except RunError as exc:
        return Prepared(error=f"fails to run: {exc}")
    key = program_key(base.optimized_proto, object_code(base.executable), default or {})
    return Prepared(key, base.compile_seconds)


def keep_serialized(module_proto: bytes, seed: int, executable: bytes,
                    config: CompilerConfig, partitioning: Partitioning | None = None) -> Prepared:
    """Keep a candidate compiled elsewhere (`compile_serialized`, with the same `partitioning`)
    as what the next candidates are timed against (the baseline of a comparison of the tuner's
    winner, in a fresh worker), as `prepare` keeps the default; why when it fails to run. No
    program key: its caller has it."""
    _STATE.clear()
    try:
        _keep(measurable_module(module_proto), seed, _loaded(executable, config, partitioning),
              partitioning)
    except RunError as exc:
        return Prepared(error=f"fails to run: {exc}")
    return Prepared()


def _keep(module_proto: bytes, seed: int, executable: Any,
          partitioning: Partitioning | None) -> None:
    """Keep `executable` (compiled for one device, or whole as `partitioning` partitions it) as
    what the next candidates are measured against: its `Reference` on the module's inputs for
    `seed`, and a runner on them; raises RunError when it fails to run."""
    reference = Reference(module_proto, seed, executable, partitioning)
    _STATE.update(reference=reference, runner=timed_runner(reference.run(0).placed))


@dataclass(frozen=True)
class ReferenceRun:
    """A kept executable run on one set of inputs (`Reference.run`): the inputs, whole in numpy,
    the executable with them placed on its devices, its outputs (whole), and per output their
    spread and sensitivity (`execution.numerics`)."""

    inputs: list[Any]
    placed: Placed
    outputs: list[Any]
    spread: list[float]
    sensitivity: list[float]


class Reference:
    """What a candidate's numerics are judged against (`execution.numerics`): an executable's
    outputs on the module's inputs for `seed`, each set of them (`draw`) run when first needed,
    with the outputs' spread (two runs on the same inputs) and sensitivity (the most the outputs
    move over `PROBES` runs on the inputs moved by a last bit: `execution.inputs.perturbed`).
    The executable and every candidate run on the devices `partitioning` spans (one for None),
    their inputs placed as each executable's parameters are sharded, their outputs gathered
    whole. Its methods raise RunError when an executable fails to run."""

    def __init__(self, module_proto: bytes, seed: int, executable: Any,
                 partitioning: Partitioning | None = None) -> None:
        self.module_proto, self.seed, self.executable = module_proto, seed, executable
        self.partitioning = partitioning
        self.output_shapes = global_output_shapes(HloModule(module_proto, "", "tuning"))
        self._runs: dict[int, ReferenceRun] = {}
        self.run(0)  # the seed's own inputs run now: an executable that fails, fails here

    def place(self, executable: Any, inputs: list[Any]) -> Placed:
        """`executable` with `inputs` placed on its devices (`placed`)."""
        return placed(executable, inputs, self.partitioning, self.output_shapes)

    def run(self, draw: int) -> ReferenceRun:
        """The executable run on inputs `draw` of the seed (`execution.inputs.make_inputs`)."""
        from execution.inputs import perturbed

        if draw not in self._runs:
            host = _host_inputs(self.module_proto, self.seed, draw)
            kept = self.place(self.executable, host)
            outputs = run_once(kept)
            spread = movement(outputs, run_once(kept))
            sensitivity = [0.0] * len(outputs)
            for probe in range(PROBES):
                moved = self.place(self.executable, perturbed(host, self.seed, draw * PROBES + probe))
                sensitivity = [max(a, b) for a, b in zip(sensitivity, movement(outputs, run_once(moved)))]
            self._runs[draw] = ReferenceRun(host, kept, outputs, spread, sensitivity)
        return self._runs[draw]

    def check(self, candidate: Any, draw: int = 0) -> list[OutputCheck]:
        """`candidate`'s outputs on inputs `draw` against this executable's."""
        run = self.run(draw)
        return compare_outputs(run.outputs, run_once(self.place(candidate, run.inputs)),
                               run.spread, run.sensitivity)

    def judge(self, candidate: Any) -> Numerics:
        """`candidate`'s numerics: checked on the seed's inputs and, where that fails (not
        decisively), on `RECHECKS` more sets of them; judged over all (`numerics.judge`)."""
        checks = [self.check(candidate)]
        if recheck(checks[0]):
            checks += [self.check(candidate, draw) for draw in range(1, RECHECKS + 1)]
        return judge(checks)


def compiled_and_run(module_proto: bytes, config: CompilerConfig, seed: int,
                     partitioning: Partitioning | None = None) -> tuple[Any, float]:
    """The module compiled with `config` (for one device, or whole as `partitioning` partitions
    it), run once on the inputs of `seed`, and its compile time; raises CompileError or
    RunError."""
    compiled = compile_module(module_proto, config, partitioning=partitioning)
    shapes = global_output_shapes(HloModule(module_proto, "", "tuning"))
    run_once(placed(compiled.executable, _host_inputs(module_proto, seed), partitioning, shapes))
    return compiled.executable, compiled.compile_seconds


def placed(executable: Any, inputs: list[Any], partitioning: Partitioning | None,
           output_shapes: list[Any]) -> Placed:
    """`executable` with `inputs` (whole, in numpy) placed on the devices `partitioning` spans
    (`execution.sharded.Placed`); RunError when they do not fit its parameters."""
    try:
        return Placed(executable, inputs, partitioning, output_shapes)
    except ValueError as exc:
        raise RunError(str(exc)) from exc


def run_once(placed: Placed) -> list[Any]:
    """The outputs of one run of a placed executable, as numpy arrays, whole; raises RunError
    when XLA fails the run."""
    from jax.errors import JaxRuntimeError

    try:  # the run is asynchronous: its failure surfaces when the outputs are read
        return placed.run()
    except JaxRuntimeError as exc:
        raise RunError(first_line(exc)) from exc


def _host_inputs(module_proto: bytes, seed: int, draw: int = 0) -> list[Any]:
    """The module's inputs for `seed` and `draw` (`execution.inputs.make_inputs`), in numpy."""
    from execution.inputs import make_inputs, parameter_specs

    return make_inputs(parameter_specs(HloModule(module_proto, "", "tuning")), seed, draw)


def _span(kind: Literal["compile", "measure"], started: float) -> Span:
    """A job of `kind` in this process, on the cores it runs on, from `started` until now."""
    return Span(kind, os.getpid(), tuple(sorted(os.sched_getaffinity(0))), started,
                time.monotonic())


def compile_serialized(module_proto: bytes, config: CompilerConfig,
                       results: AutotuneResults | None = None,
                       partitioning: Partitioning | None = None) -> Built:
    """Compile `config` (in a compile worker), for one device or whole as `partitioning`
    partitions it, with autotune `results` delivered where given (in a fresh worker: see the
    module docstring): its program key and the executable, serialized for the execute worker,
    or the compile error."""
    started = time.monotonic()
    try:
        compiled = compile_module(module_proto, config, results, partitioning)
    except CompileError as exc:
        return Built(error=f"does not compile: {exc}")
    serialized = compiled.executable.serialize()  # once: the key's machine code, and the handover
    return Built(program_key(compiled.optimized_proto, elf_objects(serialized), config),
                 compiled.compile_seconds, serialized, _span("compile", started),
                 autotune=compiled.autotune)


def autotune_exhaustively(module_proto: bytes, config: CompilerConfig) -> Offline:
    """Compile the module (as measured: `measurable_module`) with `config` and XLA's exhaustive
    tiling search (EXHAUSTIVE_FLAG), in a directory of this worker's own that starts empty, XLA's results
    dumped there (in a fresh worker: see the module docstring). XLA:CPU autotunes nothing and
    dumps nothing: the outcome then holds no results."""
    try:
        compiled = compile_module(module_proto, {**config, EXHAUSTIVE_FLAG: True}, NO_RESULTS)
    except CompileError as exc:
        return Offline(error=f"does not compile: {exc}")
    return Offline(compiled.autotune, compiled.compile_seconds)


def measure_serialized(executable: bytes, config: CompilerConfig,
                       settings: MeasureSettings) -> Timed:
    """Load a candidate compiled elsewhere (`compile_serialized`, as what this worker keeps
    was), judge its numerics (`Reference.judge`) and time it against what this worker keeps
    (the prepared default, or a comparison's baseline); why when XLA fails to run it."""
    started = time.monotonic()
    reference: Reference = _STATE["reference"]
    try:
        loaded = _loaded(executable, config, reference.partitioning)
        numerics = reference.judge(loaded)
        candidate = reference.place(loaded, reference.run(0).inputs)
    except RunError as exc:
        return Timed(error=f"fails to run: {exc}")
    measurement = measure_pair(_STATE["runner"], timed_runner(candidate), settings)
    return Timed(measurement, numerics.ok, numerics, _span("measure", started))


def _loaded(executable: bytes, config: CompilerConfig,
            partitioning: Partitioning | None = None) -> Any:
    """An executable serialized by `compile_serialized`, loaded on the devices it was compiled
    for."""
    from jax._src.lib import _jax

    devices = devices_for(partitioning)
    return devices[0].client.deserialize_executable(executable, _jax.DeviceList(tuple(devices)),
                                                    compile_options(config, partitioning))


def measurable_module(module_proto: bytes) -> bytes:
    """The module as the default and every candidate compile it for measurement: without
    buffer aliasing, tuple-shaped parameters flattened (`execution.tuple_parameters`). The very
    same bytes when there is nothing to change, so preparing a prepared module costs a parse."""
    return flatten_tuple_parameters(without_buffer_aliasing(module_proto))


def without_buffer_aliasing(module_proto: bytes) -> bytes:
    """The module without input/output aliasing and buffer donation."""
    # Donated parameters would be consumed by the first run; aliasing only changes memory reuse,
    # and both configs are compiled without it, so the comparison stays fair.
    view = ModuleProto.FromString(module_proto)
    if not view.input_output_alias and not view.buffer_donor:
        return module_proto
    view.ClearField("input_output_alias")
    view.ClearField("buffer_donor")
    return view.SerializeToString()


def timed_runner(placed: Placed) -> Runner:
    """A Runner (see execution.measure) that runs a placed executable and waits for every
    device."""

    def run(repeats: int) -> float:
        started = time.perf_counter()
        placed.wait(repeats)
        return time.perf_counter() - started

    return run
