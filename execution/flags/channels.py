"""The channels a config reaches XLA through (`FlagSpec.channel`), and a config as each takes it
(`to_xla`).

- `option`: a DebugOptions field, set per executable through the compile options' overrides
  (XLA checks the name and the value and rejects unknown ones);
- `backend_extra`: an entry of DebugOptions' `xla_backend_extra_options` map, which the compile
  options' overrides cannot reach. It is set per executable too, by merging map entries into the
  serialized compile options (`execution.compile.apply_config`). XLA checks nothing here: it
  ignores keys it does not know and values it cannot parse, and the CPU backend tests its boolean
  keys for presence only (an entry `xla_cpu_optimize_for_size=false` still optimizes for size;
  checked on jaxlib 0.10.2). So `to_xla` writes a true bool as an entry ("true"), leaves a false
  one out (the default), writes ints as text, and only flags the table declares `backend_extra`
  ever reach the map: the table is its allowlist.
- `build_option`: a field of the compile options' ExecutableBuildOptions rather than of
  DebugOptions: XLA's effort level (`optimization_level`, JAX's `jax.CompilerEffortLevel`: O0 to
  O3; the one effort knob jaxlib 0.11.2 still has, `exec_time_optimization_effort` being gone
  there). JAX leaves it UNKNOWN (the compiler decides), so a value there is the job's own.

Placement moves reach XLA as the library lists they imply (execution.flags.placement), through
the `option` channel.
"""

from __future__ import annotations

from dataclasses import dataclass

from execution.flags.allowlist import check_name
from execution.flags.flag_table import FLAGS, CompilerConfig, FlagSpec, FlagValue
from execution.flags.placement import as_flags
from vocabulary.flags import Channel, FlagType


@dataclass(frozen=True)
class XlaSettings:
    """A config as XLA takes it, per channel."""

    overrides: dict[str, bool | int | float | str]  # compile-option overrides (DebugOptions)
    backend_extra: dict[str, str]  # entries of the `xla_backend_extra_options` map
    build: dict[str, int]  # ExecutableBuildOptions fields, an enum as its number


def to_xla(config: CompilerConfig, defaults: CompilerConfig | None = None) -> XlaSettings:
    """XLA's per-executable settings for a config, per channel.

    Placement moves become the library lists (`as_flags`, from the compiler's `defaults`).
    Overrides: bools and numbers stay typed (XLA's override parser rejects the string 'false'
    for a bool); enums and repeated enums become XLA's full names as text. Backend extra
    entries: text as XLA's backend parses it; a false bool is no entry (see the module
    docstring). Build options: an enum's number. A name the table does not declare goes to the
    overrides, where XLA checks it.
    """
    overrides: dict[str, bool | int | float | str] = {}
    backend_extra: dict[str, str] = {}
    build: dict[str, int] = {}
    for name, value in sorted(as_flags(config, defaults or {}).items()):
        check_name(name)
        spec = FLAGS.get(name)
        if spec is not None and spec.channel == Channel.BACKEND_EXTRA:
            if value is not False:
                backend_extra[name] = _to_text(spec, value)
        elif spec is not None and spec.channel == Channel.BUILD_OPTION:
            build[name] = dict(zip(spec.choices, spec.numbers))[str(value)]
        elif isinstance(value, (bool, int, float)):
            overrides[name] = value
        else:
            overrides[name] = _to_text(spec, value)
    return XlaSettings(overrides, backend_extra, build)


def enum_of_number(spec: FlagSpec, number: int) -> str:
    """The name of the value of enum flag `spec` that compile options hold as `number`; the
    number as text for one the table does not name."""
    return dict(zip(spec.numbers, spec.choices)).get(number, str(number))


def _to_text(spec: FlagSpec | None, value: FlagValue) -> str:
    prefix = spec.enum_prefix if spec is not None else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(prefix + item for item in value)
    if isinstance(value, str) and spec is not None and spec.type == FlagType.ENUM:
        return prefix + value
    return str(value)
