"""The environment a graph is compiled for, and the store key that joins it to a fingerprint.

A tuned config is only valid for the platform, device kind, device count and compiler it was
measured on (CATWILD 3.4): the store key is hash(fingerprint, environment), and entries keep the
two apart so the validator can re-key an entry when only the compiler changed.

A CPU's device kind names its architecture and the ISA features that change code generation
(`cpu_device_kind`). A GPU's (`gpu_environment`, from what JAX reports of the devices:
`GpuDescription`) names the device as JAX does and its compute capability, and its compiler
version names the whole stack that compiles for it: jaxlib and the CUDA (or ROCm) plugin
distributions, whose PJRT plugin holds XLA:GPU itself. The four fields are the ones every
table and the validator already compare, so a CPU environment's key is what it always was.

A module compiled across devices or processes (SPMD partitioning, `jax.distributed`) carries how
the job compiles it (`Partitioning`): a 4-device compile is not an 8-device one, nor a
one-process job a two-process one. A compile for one device of one process has none, so its
key is what it was before partitionings were recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

# Parts of XLA flag names that touch files, caches or the process rather than the generated
# code: such a flag is no part of an environment, and never accepted in a config
# (execution.flags.allowlist).
SIDE_EFFECT_FLAG_PARTS = ("dump", "_file", "_dir", "_path", "cache", "xla_fuel", "profile")

# CPU features that change what XLA's CPU backend generates or which libraries it can route to.
_RELEVANT_CPU_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
    "asimd", "sve", "sve2",
)


# The most devices or processes a partitioning may name: a bound on input, not on XLA.
MAX_DEVICES = 1 << 16


@dataclass(frozen=True)
class Partitioning:
    """How a job compiles a module across devices and processes: XLA's replicas and partitions
    (the device assignment is `replicas` x `partitions`), whether SPMD partitioning and the
    Shardy partitioner are on, the mesh's axes as (name, size) in order (empty where the module
    names none), and the job's processes and each process's devices."""

    replicas: int = 1
    partitions: int = 1
    spmd: bool = False
    shardy: bool = False
    mesh: tuple[tuple[str, int], ...] = ()
    processes: int = 1
    local_devices: int = 1

    def __post_init__(self) -> None:
        for name in ("replicas", "partitions", "processes", "local_devices"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEVICES:
                raise ValueError(f"partitioning field {name!r} must be an integer from 1 to "
                                 f"{MAX_DEVICES}, not {value!r}")
        for name in ("spmd", "shardy"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"partitioning field {name!r} must be a boolean")
        for axis in self.mesh:
            if not (isinstance(axis, tuple) and len(axis) == 2 and isinstance(axis[0], str)
                    and isinstance(axis[1], int) and not isinstance(axis[1], bool)
                    and 0 < len(axis[0]) <= 128 and 1 <= axis[1] <= MAX_DEVICES):
                raise ValueError(f"partitioning mesh axis {axis!r} must be (name, size)")

    @property
    def devices(self) -> int:
        """The devices one execution spans: replicas x partitions."""
        return self.replicas * self.partitions

    @property
    def device_assignment(self) -> tuple[int, int]:
        """The shape of the compile's device assignment: (replicas, partitions)."""
        return self.replicas, self.partitions

    def spans_devices(self) -> bool:
        """Whether the compile is for more than one device or the job for more than one process."""
        return self.devices > 1 or self.processes > 1

    def to_json(self) -> dict:
        """The JSON form (the mesh as [[name, size], ...])."""
        return {**asdict(self), "mesh": [list(axis) for axis in self.mesh]}


def partitioning_from_json(data: object) -> Partitioning:
    """A Partitioning from its JSON form (`Partitioning.to_json`); ValueError if malformed."""
    if not isinstance(data, dict):
        raise ValueError("a partitioning must be a JSON object")
    unknown = set(data) - {f for f in Partitioning.__dataclass_fields__}
    if unknown:
        raise ValueError(f"partitioning has unknown fields {sorted(unknown)}")
    mesh = data.get("mesh", [])
    if not isinstance(mesh, list) or not all(isinstance(a, list) and len(a) == 2 for a in mesh):
        raise ValueError("partitioning field 'mesh' must be a list of [name, size]")
    return Partitioning(**{**data, "mesh": tuple(tuple(axis) for axis in mesh)})


_MESH_AXIS = re.compile(r'"((?:[^"\\]|\\.)*)"\s*=\s*(\d+)')


def parse_mesh(text: str) -> tuple[tuple[str, int], ...]:
    """The axes of a Shardy mesh as its text spells it (`#sdy.mesh<["data"=2, "model"=2]>`, as
    an `sdy.mesh` op's attribute or the `xla.sdy.meshes` frontend attribute of an HLO module
    hold it): (name, size) in order; empty where it names none (a maximal mesh)."""
    return tuple((name, int(size)) for name, size in _MESH_AXIS.findall(text))


@dataclass(frozen=True)
class Environment:
    """Where a graph runs: everything besides the graph that decides what the compiler emits."""

    platform: str
    device_kind: str
    device_count: int
    compiler_version: str
    job_options: dict[str, str] = field(default_factory=dict)
    partitioning: Partitioning | None = None  # None: one device of one process

    def to_json(self) -> dict:
        """The JSON form, as the environment file beside a dump holds it (no `partitioning`
        where it has none)."""
        data = asdict(self)
        if self.partitioning is None:
            del data["partitioning"]
        else:
            data["partitioning"] = self.partitioning.to_json()
        return data

    def key(self) -> str:
        """A stable 32-hex-character key of this environment."""
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()

    def with_partitioning(self, partitioning: Partitioning | None) -> "Environment":
        """This environment for a compile partitioned as `partitioning`; one that spans a single
        device of a single process is recorded as none, so its key is the unpartitioned one."""
        kept = partitioning if partitioning is not None and partitioning.spans_devices() else None
        return replace(self, partitioning=kept)


# The file beside a dump (written by the hook's spool and the simulator) that says where it ran.
ENVIRONMENT_FILE = "fdo-environment.json"


def environment_from_json(data: object) -> Environment:
    """An Environment from its JSON form (as `to_json` writes it); ValueError if malformed."""
    if not isinstance(data, dict):
        raise ValueError("an environment must be a JSON object")
    expected = {"platform": str, "device_kind": str, "device_count": int, "compiler_version": str}
    for name, type_ in expected.items():
        if not isinstance(data.get(name), type_) or isinstance(data.get(name), bool):
            raise ValueError(f"environment field {name!r} must be a {type_.__name__}")
    options = data.get("job_options", {})
    if not isinstance(options, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise ValueError("environment field 'job_options' must map strings to strings")
    if data["device_count"] < 1:
        raise ValueError("environment field 'device_count' must be at least 1")
    partitioning = data.get("partitioning")
    try:
        partitioning = None if partitioning is None else partitioning_from_json(partitioning)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"environment field 'partitioning': {exc}") from None
    return Environment(data["platform"], data["device_kind"], data["device_count"],
                       data["compiler_version"], dict(sorted(options.items()))).with_partitioning(partitioning)


def machine_kind(platform: str, device_kind: str, compiler_version: str) -> str:
    """The key of a machine kind: what measures a sharded graph of that platform, device kind
    and compiler (whole on N of its devices, or per device on one; its job's own options are
    not in the graphs it lands, so any machine of the kind measures it)."""
    text = f"{platform}/{device_kind}/{compiler_version}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def store_key(fingerprint: str, env_key: str) -> str:
    """The config store's key for a graph (or op) fingerprint in an environment."""
    return hashlib.blake2b(f"{fingerprint}/{env_key}".encode(), digest_size=16).hexdigest()


# XLA:CPU's number of host devices, read when the backend starts (a process-wide flag): how a
# CPU job gets several devices. The environment's device count says it already, so it is no
# job option: a sharded CPU graph keys alike whoever set it, and re-keys without it.
HOST_DEVICES_FLAG = "xla_force_host_platform_device_count"


def xla_flags_options(text: str | None = None) -> dict[str, str]:
    """The compiler flags a process sets through `XLA_FLAGS` (`text`, or the variable), by
    name without dashes: what a JAX user sets this way is part of what the compiler emits,
    like the options of a compile. Flags that touch files or caches are left out, as is the
    host device count (HOST_DEVICES_FLAG); a bare `--flag` is "true", as XLA reads it."""
    text = os.environ.get("XLA_FLAGS", "") if text is None else text
    try:
        words = shlex.split(text)
    except ValueError:  # unbalanced quotes: XLA splits on spaces too
        words = text.split()
    options = {}
    for word in words:
        name, sep, value = word.lstrip("-").partition("=")
        if (name.startswith("xla_") and name != HOST_DEVICES_FLAG
                and not any(part in name for part in SIDE_EFFECT_FLAG_PARTS)):
            options[name] = value if sep else "true"
    return options


def current_environment(job_options: dict[str, str] | None = None) -> Environment:
    """The environment of the running process's default JAX backend; its job options are the
    compiler flags of `XLA_FLAGS` and `job_options` (a compile's own options win)."""
    import jax
    import jaxlib

    devices = jax.devices()
    device = devices[0]
    options = dict(sorted({**xla_flags_options(), **(job_options or {})}.items()))
    if device.platform == GPU_PLATFORM:
        return gpu_environment(describe_gpu(devices), options)
    device_kind = device.device_kind
    if device.platform == "cpu":
        device_kind = cpu_device_kind()
    return Environment(
        platform=device.platform,
        device_kind=device_kind,
        device_count=len(devices),
        compiler_version=f"jaxlib-{jaxlib.__version__}",
        job_options=options,
    )


# The platform JAX reports for a CUDA or ROCm device (`jax.Device.platform`; its client names
# the runtime, "cuda" or "rocm", which the plugin distributions in the compiler version tell).
GPU_PLATFORM = "gpu"
# The distributions that bring XLA:GPU to jaxlib: jax-cuda13-pjrt (the PJRT plugin, XLA:GPU
# itself), jax-cuda13-plugin (jaxlib's GPU kernels), and their ROCm and other CUDA counterparts.
_GPU_STACK = re.compile(r"jax[-_](cuda|rocm)\d*[-_](pjrt|plugin)", re.IGNORECASE)


@dataclass(frozen=True)
class GpuDescription:
    """What JAX reports of a process's GPUs: everything the environment of a GPU graph is built
    from (`gpu_environment`), so a described machine keys as the real one does."""

    device_kind: str  # `jax.Device.device_kind`, e.g. "NVIDIA H100 80GB HBM3"
    compute_capability: str  # `jax.Device.compute_capability`: "9.0" on CUDA, "gfx942" on ROCm
    device_count: int
    jaxlib_version: str
    # The GPU plugin distributions installed, (name, version), e.g. ("jax-cuda13-pjrt", "0.11.2").
    plugins: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if self.device_count < 1:
            raise ValueError("a GPU description needs at least one device")
        if not self.device_kind or not self.compute_capability or not self.jaxlib_version:
            raise ValueError("a GPU description names the device kind, its compute capability "
                             "and the jaxlib version")


def gpu_environment(description: GpuDescription,
                    job_options: dict[str, str] | None = None) -> Environment:
    """The environment of a GPU graph: device kind `<kind> (compute capability <cc>)`, compiler
    version `jaxlib-<version>` then `+<plugin>-<version>` per GPU plugin distribution, sorted
    (code compiled for one capability or by one stack is not another's), and the job's own
    compiler options as on CPU."""
    stack = "".join(f"+{name}-{version}" for name, version in sorted(description.plugins))
    return Environment(
        platform=GPU_PLATFORM,
        device_kind=f"{description.device_kind} (compute capability {description.compute_capability})",
        device_count=description.device_count,
        compiler_version=f"jaxlib-{description.jaxlib_version}{stack}",
        job_options=dict(sorted((job_options or {}).items())),
    )


def describe_gpu(devices: list) -> GpuDescription:
    """What JAX reports of `devices` (one process's GPUs) and of the installed GPU plugins."""
    import importlib.metadata

    import jaxlib

    device = devices[0]
    plugins = {(dist.metadata["Name"].lower().replace("_", "-"), dist.version)
               for dist in importlib.metadata.distributions()
               if _GPU_STACK.fullmatch(dist.metadata["Name"] or "")}
    return GpuDescription(device_kind=device.device_kind,
                          compute_capability=str(getattr(device, "compute_capability", "unknown")),
                          device_count=len(devices), jaxlib_version=jaxlib.__version__,
                          plugins=tuple(sorted(plugins)))


def cpu_device_kind() -> str:
    """`cpu:<arch>:<isa features>`: CPU code generated for AVX-512 is not valid on AVX2."""
    features = sorted(_cpu_flags() & set(_RELEVANT_CPU_FLAGS))
    return f"cpu:{platform.machine()}:{','.join(features)}"


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return set()
    for line in cpuinfo.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_model_name() -> str:
    """The CPU's model as the kernel names it, with its family and model numbers, which tell
    apart the CPUs a virtual machine names alike ("AMD EPYC (family 26, model 2)"): which moves
    win differs by CPU, so every benchmark says which it ran on. The platform's processor name
    where there is no /proc/cpuinfo."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    for line in cpuinfo.read_text().splitlines():
        if not line.strip():
            break  # the first processor's block is enough
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    name = fields.get("model name") or platform.processor() or platform.machine()
    numbers = ", ".join(f"{label} {fields[key]}" for key, label in (("cpu family", "family"), ("model", "model"))
                        if fields.get(key))
    return f"{name} ({numbers})" if numbers else name
