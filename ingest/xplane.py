"""Device time per HLO module and per op from a JAX profiler trace (`*.xplane.pb`).

`jax.profiler.trace(dir)` writes an `xla.XSpace` protobuf: planes (a host, a device, the
metadata) of lines (threads, streams) of timed events, each with stats. What XLA writes there:

- CPU (checked on jaxlib 0.10.2): every thunk the runtime executes is an event on a
  `/host:CPU` line (`tf_XLAPjRtCpuClient/...`, `tf_XLAEigen/...`) named by its HLO instruction,
  with stats `hlo_op` (instruction name), `hlo_module` (module name), `program_id` (the module's
  unique id), `run_id` (one per execution) and `device_ordinal`. There is no module-level event:
  an execution is the span from the first to the last event carrying its `run_id` (thunks, and
  the caller's `ThunkExecutor::Execute (wait for completion)`), which matches the wall time of
  the call to within the dispatch overhead. Thunks of control flow (`while`, `call`,
  `conditional`) contain the thunks of their bodies and are not ops of their own.
- GPU (from XLA's source, not run here): CUPTI kernel events on `/device:GPU:N` stream lines
  carry the stats of the innermost XLA annotations, `XlaModule:#hlo_module=..,program_id=..#`
  and `Thunk:#hlo_op=..#`, so again `hlo_op`, `hlo_module`, `program_id` (no `run_id`). A
  module's device time is then the union of its kernels' intervals per device; its executions
  are counted from the host's `<module>:XLA GPU module` events. The host copies of those stats
  (kernel launches on host planes) are ignored when device events exist.
- Planes with `XLA Modules` / `XLA Ops` lines (TPU, or traces post-processed by xprof) give
  module executions directly; ops on `XLA Ops` belong to the module event that contains them.
- `/host:metadata` holds, when the profiler's `enable_hlo_proto` is on (JAX's default), one
  *event metadata* entry per live XLA executable, named `<module>(<program_id>)`, with a
  `program_id` stat and a `Hlo Proto` stat: a serialized `xla.HloProto` of the module *after*
  optimization (scheduled; its fingerprint equals that of
  `jax.jit(f).lower(...).compile().runtime_executable().hlo_modules()[0]`). `ProfileData` does
  not expose event metadata, so this plane is decoded here with a minimal schema.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlo.fingerprint import fingerprint_module, graph_fingerprint
from hlo.module import HloLoadError, HloModule, from_proto_bytes, from_text
from ingest.xplane_metadata import METADATA_PLANE, MODULE_EVENT_NAME, CorruptMetadata, HloEntries, as_int, hlo_protos
from vocabulary.errors import first_line

DEVICE_PLANE_PREFIX = "/device:"
XLA_MODULES_LINE = "XLA Modules"
XLA_OPS_LINE = "XLA Ops"
GPU_MODULE_EVENT_SUFFIX = ":XLA GPU module"
# Instructions whose thunks only run the thunks of the computations they call.
_CONTROL_FLOW_OPCODES = frozenset({"while", "conditional", "call"})

_ModuleKey = tuple[str | None, int | None]  # (module name, program_id) as events name them
_Span = tuple[float, float, _ModuleKey]  # (start ns, end ns, module) of a module-level event


@dataclass(frozen=True)
class OpTime:
    """Time spent in one kernel (fusion, library call, unfused instruction) of a module."""

    name: str  # instruction name of the fusion/kernel in the optimized module
    op_fingerprint: str | None  # `fingerprint_module(optimized).ops` entry of that name, if any
    seconds: float  # total over all executions in the trace


@dataclass(frozen=True)
class ModuleTime:
    """One XLA module (executable) that ran in the trace, and where its time went.

    `seconds` sums over executions, and over devices when the module ran on several (so it is
    device-seconds: a step partitioned over 4 devices counts each device's time);
    `executions` counts executions per device likewise, and `devices` how many devices ran it
    (a partitioned program runs once on each of its devices per step). `ops` are sorted by
    time, largest first, their seconds summed over devices too.
    """

    module_name: str
    program_id: int | None
    executions: int
    seconds: float  # device time (on CPU: execution time) of this module in the trace
    devices: int  # the devices it ran on in the trace (on CPU: device ordinals of its runs)
    optimized_hlo: bytes | None  # serialized HloModuleProto as the trace carries it
    optimized_fingerprint: str | None  # graph fingerprint of `optimized_hlo`
    ops: tuple[OpTime, ...]

    def dumped_fingerprint(self) -> str | None:
        """The graph fingerprint of `optimized_hlo` as XLA's text form presents it, which is
        what a dump and the compiler hook's spool hold. The text leaves out module fields the
        proto carries: the SPMD partitioner's parameter and output shardings, so a partitioned
        module's text and proto fingerprint apart; other modules' agree. None without HLO, or
        where this XLA does not print it as text that it parses again (a module of another XLA):
        then no dump of it was read by this XLA either."""
        if self.optimized_hlo is None:
            return None
        try:
            proto = HloModule(self.optimized_hlo, self.module_name, f"trace:{self.module_name}")
            return graph_fingerprint(from_text(proto.to_text(), proto.source))
        except (HloLoadError, ValueError):
            return None


class TraceError(ValueError):
    """A trace is unreadable, corrupt, or holds no XLA activity; the message names the file."""


def read_trace(path: Path | str, max_bytes: int = 1 << 30) -> list[ModuleTime]:
    """Modules executed in the trace at `path`, with their time, optimized HLO and op times."""
    path = Path(path)
    data = _read(path, max_bytes)
    from jax.profiler import ProfileData

    try:
        profile = ProfileData.from_serialized_xspace(data)
    except Exception as exc:  # jaxlib raises RuntimeError("Failed to parse XSpace ...")
        raise TraceError(f"{path}: not a profiler trace (XSpace): {first_line(exc)}") from exc
    try:
        hlos = hlo_protos(data)
    except CorruptMetadata as exc:
        raise TraceError(f"{path}: corrupt profiler trace: {exc}") from exc
    events = _collect(profile)
    if not events.op_events and not events.module_events:
        raise TraceError(f"{path}: no XLA module executions in the trace")
    return _modules(events, hlos, path)


# --------------------------------------------------------------------------------------------
# Events


@dataclass
class _OpEvent:
    module: _ModuleKey
    op: str
    start: float
    end: float
    track: tuple[str, str]  # (plane, line)
    on_device: bool
    run: tuple[Any, Any] | None  # (run_id, device_ordinal) when the event carries a run_id


@dataclass
class _Events:
    op_events: list[_OpEvent]
    # (module name, program_id) -> [(plane, start, end)] from `XLA Modules` lines
    module_events: dict[_ModuleKey, list[tuple[str, float, float]]]
    # (plane, run_id, device_ordinal) -> [start, end] over events with a run_id but no hlo_op
    run_markers: dict[tuple[str, Any, Any], list[float]]
    # module name -> number of host `<module>:XLA GPU module` events
    gpu_module_markers: dict[str, int]


def _collect(profile: Any) -> _Events:
    events = _Events([], defaultdict(list), {}, defaultdict(int))
    for plane in profile.planes:
        plane_name = plane.name
        if plane_name == METADATA_PLANE:
            continue
        on_device = plane_name.startswith(DEVICE_PLANE_PREFIX)
        lines = list(plane.lines)
        module_spans = _module_line_events(plane_name, lines, events)
        for line in lines:
            if line.name == XLA_MODULES_LINE:
                continue
            if line.name == XLA_OPS_LINE:
                _xla_ops_line(plane_name, line, on_device, module_spans, events)
                continue
            track = (plane_name, line.name)
            for event in line.events:
                _classify(event, track, on_device, events)
    return events


def _module_line_events(plane_name: str, lines: list, events: _Events) -> list[_Span]:
    spans = []
    for line in lines:
        if line.name != XLA_MODULES_LINE:
            continue
        for event in line.events:
            stats = dict(event.stats)
            match = MODULE_EVENT_NAME.match(event.name)
            name = stats.get("hlo_module") or (match.group("name") if match else event.name)
            program_id = as_int(stats.get("program_id", match.group("id") if match else None))
            start, end = event.start_ns, event.start_ns + event.duration_ns
            events.module_events[(name, program_id)].append((plane_name, start, end))
            spans.append((start, end, (name, program_id)))
    spans.sort()
    return spans


def _xla_ops_line(plane_name: str, line: Any, on_device: bool, module_spans: list[_Span],
                  events: _Events) -> None:
    track = (plane_name, line.name)
    for event in line.events:
        stats = dict(event.stats)
        start, end = event.start_ns, event.start_ns + event.duration_ns
        module = _containing(module_spans, start, end)
        if module is None:
            module = (stats.get("hlo_module"), as_int(stats.get("program_id")))
        if module == (None, None):
            continue
        op = stats.get("hlo_op") or event.name
        events.op_events.append(_OpEvent(module, str(op), start, end, track, on_device, None))


def _containing(spans: list[_Span], start: float, end: float) -> _ModuleKey | None:
    for span_start, span_end, module in spans:  # few module events per plane: linear is fine
        if span_start <= start and end <= span_end:
            return module
    return None


def _classify(event: Any, track: tuple[str, str], on_device: bool, events: _Events) -> None:
    stats = dict(event.stats)
    start = event.start_ns
    end = start + event.duration_ns
    run_id = stats.get("run_id")
    hlo_op = stats.get("hlo_op")
    if hlo_op is not None and ("hlo_module" in stats or "program_id" in stats):
        module = (stats.get("hlo_module"), as_int(stats.get("program_id")))
        run = (run_id, stats.get("device_ordinal")) if run_id is not None else None
        events.op_events.append(_OpEvent(module, str(hlo_op), start, end, track, on_device, run))
    elif run_id is not None:
        key = (track[0], run_id, stats.get("device_ordinal"))
        span = events.run_markers.get(key)
        if span is None:
            events.run_markers[key] = [start, end]
        else:
            span[0] = min(span[0], start)
            span[1] = max(span[1], end)
    elif event.name.endswith(GPU_MODULE_EVENT_SUFFIX) and not on_device:
        events.gpu_module_markers[event.name[: -len(GPU_MODULE_EVENT_SUFFIX)]] += 1


# --------------------------------------------------------------------------------------------
# Modules


@dataclass
class _Hlo:
    module: HloModule
    fingerprint: str
    kernels: dict[str, str]  # kernel instruction name -> op fingerprint
    instructions: frozenset[str]  # every instruction name in the module


def _modules(events: _Events, hlos: HloEntries, path: Path) -> list[ModuleTime]:
    names_by_id = {
        pid: entries[0][0] for pid, entries in hlos.items() if pid is not None and len(entries) == 1
    }
    by_module: dict[tuple[str, int | None], list[_OpEvent]] = defaultdict(list)
    for event in events.op_events:
        by_module[_resolve(event.module, names_by_id)].append(event)
    module_events = defaultdict(list)
    for key, spans in events.module_events.items():
        module_events[_resolve(key, names_by_id)].extend(spans)

    results = []
    keys = sorted(set(by_module) | set(module_events),
                  key=lambda k: (k[0], -1 if k[1] is None else k[1]))
    for key in keys:
        name, program_id = key
        op_events = by_module.get(key, [])
        if any(e.on_device for e in op_events):  # host copies (kernel launches) are not device time
            op_events = [e for e in op_events if e.on_device]
        executions, seconds, devices = _execution_time(name, op_events, module_events.get(key, []), events)
        if executions == 0:
            continue
        hlo = _load_hlo(key, hlos, path)
        results.append(ModuleTime(
            module_name=name,
            program_id=program_id,
            executions=executions,
            seconds=seconds,
            devices=devices,
            optimized_hlo=hlo.module.proto if hlo else None,
            optimized_fingerprint=hlo.fingerprint if hlo else None,
            ops=_op_times(op_events, hlo),
        ))
    if not results:
        raise TraceError(f"{path}: no XLA module executions in the trace")
    return sorted(results, key=lambda m: -m.seconds)


def _resolve(module: _ModuleKey, names_by_id: dict[int, str]) -> tuple[str, int | None]:
    name, program_id = module
    if name is None:
        known = names_by_id.get(program_id) if program_id is not None else None
        name = known if known is not None else f"program_{program_id}"
    return name, program_id


def _execution_time(name: str, op_events: list[_OpEvent],
                    module_spans: list[tuple[str, float, float]], events: _Events) -> tuple[int, float, int]:
    """(executions, seconds, devices) of one module, from the best evidence the trace has:
    executions and seconds summed over the devices it ran on."""
    if module_spans:  # module-level events: each is one execution on one device (its plane)
        return (len(module_spans), sum(end - start for _, start, end in module_spans) * 1e-9,
                len({plane for plane, _, _ in module_spans}))
    runs: dict[tuple, list[float]] = {}
    unrun: list[_OpEvent] = []
    for event in op_events:
        if event.run is None:
            unrun.append(event)
            continue
        key = (event.track[0], *event.run)
        span = runs.get(key)
        if span is None:
            runs[key] = [event.start, event.end]
        else:
            span[0] = min(span[0], event.start)
            span[1] = max(span[1], event.end)
    seconds = 0.0
    for key, (start, end) in runs.items():
        marker = events.run_markers.get(key)  # e.g. the caller waiting for completion
        if marker is not None:
            start, end = min(start, marker[0]), max(end, marker[1])
        seconds += end - start
    executions = len(runs)
    # A run is one device's (its ordinal, on its plane); events without run ids, one plane's.
    devices = {(plane, ordinal) for plane, _, ordinal in runs} | {(e.track[0], None) for e in unrun}
    if unrun:  # no run ids (GPU kernels): busy time, and executions from host markers
        seconds += _busy_time(unrun)
        executions += events.gpu_module_markers.get(name, 0) or _min_op_count(unrun)
    return executions, seconds * 1e-9, max(1, len(devices))


def _busy_time(op_events: list[_OpEvent]) -> float:
    """Union of the events' intervals, per plane (device), summed; in ns."""
    by_plane: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for event in op_events:
        by_plane[event.track[0]].append((event.start, event.end))
    total = 0.0
    for intervals in by_plane.values():
        intervals.sort()
        current_start, current_end = intervals[0]
        for start, end in intervals[1:]:
            if start > current_end:
                total += current_end - current_start
                current_start, current_end = start, end
            else:
                current_end = max(current_end, end)
        total += current_end - current_start
    return total


def _min_op_count(op_events: list[_OpEvent]) -> int:
    """Without any execution marker: the fewest times any one op ran, per plane, summed."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for event in op_events:
        counts[(event.track[0], event.op)] += 1
    per_plane: dict[str, int] = {}
    for (plane, _), count in counts.items():
        per_plane[plane] = min(per_plane.get(plane, count), count)
    return sum(per_plane.values())


def _op_times(op_events: list[_OpEvent], hlo: _Hlo | None) -> tuple[OpTime, ...]:
    kept = _leaf_events(op_events) if hlo is None else [
        e for e in op_events if e.op in hlo.kernels or e.op not in hlo.instructions
    ]
    totals: dict[str, float] = defaultdict(float)
    for event in kept:
        totals[event.op] += event.end - event.start
    return tuple(
        OpTime(op, hlo.kernels.get(op) if hlo else None, ns * 1e-9)
        for op, ns in sorted(totals.items(), key=lambda item: (-item[1], item[0]))
    )


def _leaf_events(op_events: list[_OpEvent]) -> list[_OpEvent]:
    """Without the HLO to tell control flow apart: drop events that contain another op event
    on the same line (a `while` around its body's thunks)."""
    by_track: dict[tuple[str, str], list[_OpEvent]] = defaultdict(list)
    for event in op_events:
        by_track[event.track].append(event)
    kept = []
    for track_events in by_track.values():
        track_events.sort(key=lambda e: (e.start, -e.end))
        for i, event in enumerate(track_events):
            following = track_events[i + 1] if i + 1 < len(track_events) else None
            if following is not None and following.start < event.end and following.end <= event.end:
                continue
            kept.append(event)
    return kept


def _load_hlo(key: tuple[str, int | None], hlos: HloEntries, path: Path) -> _Hlo | None:
    name, program_id = key
    candidates = hlos.get(program_id, []) if program_id is not None else []
    if not candidates:  # no program id to match by: a module name the metadata holds once
        candidates = [entry for entries in hlos.values() for entry in entries if entry[0] == name]
    if len(candidates) != 1:
        return None
    entry_name, data = candidates[0]
    try:
        module = from_proto_bytes(data, f"{path}:{entry_name}")
        fingerprints = fingerprint_module(module, with_ops=True)
        instructions = frozenset(i.name for c in module.view().computations for i in c.instructions)
    except (HloLoadError, ValueError) as exc:
        raise TraceError(
            f"{path}: the HLO the trace carries for {entry_name} is corrupt: {exc}"
        ) from exc
    kernels = {op.name: op.fingerprint for op in fingerprints.ops}
    return _Hlo(module, fingerprints.fingerprint, kernels, instructions)


# --------------------------------------------------------------------------------------------
# Helpers


def _read(path: Path, max_bytes: int) -> bytes:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise TraceError(f"{path}: {size} bytes is over the {max_bytes}-byte input limit")
        if size == 0:
            raise TraceError(f"{path}: empty file")
        return path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
