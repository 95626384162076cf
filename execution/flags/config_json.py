"""A config's JSON form (`to_json`: tuples become lists) and the two ways back, named for whom
they trust:

- `checked_config`: a config from outside this process's own records (the store, `store
  import`, the service, the hook, the validator, the CLI) is checked as it is read: the
  allowlist, the table's declared keys, each value's JSON type and domain.
- `trusted_config`: a config this project wrote itself (journals, results, benchmark caches),
  which was checked on its way in: lists back to tuples, nothing checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from execution.flags.allowlist import check_name
from execution.flags.flag_table import CompilerConfig, FlagError, spec_of
from execution.flags.flag_values import value_from_json


def to_json(config: CompilerConfig) -> dict[str, object]:
    """A JSON-ready form of a config (tuples become lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(config.items())}


def checked_config(data: object) -> CompilerConfig:
    """A config from its JSON form (as `to_json` writes it and the store holds it): only flags
    on the allowlist and placements, each value of its kind's JSON type and in its declared
    domain (`execution.flags.flag_values.expected_json`); no value is coerced from another type
    ("false" is no bool). FlagError names the flag, the value given and what the flag takes."""
    if not isinstance(data, dict):
        raise FlagError("a config must be a JSON object of flag: value")
    config: CompilerConfig = {}
    for name, value in data.items():
        if not isinstance(name, str):
            raise FlagError(f"{name!r}: flag names are strings")
        check_name(name)
        spec = spec_of(name)
        if spec is None:
            raise FlagError(f"{name}: not on the allowlist of tunable flags")
        config[name] = value_from_json(name, spec, value)
    return config


def trusted_config(data: Mapping[str, Any]) -> CompilerConfig:
    """A config as this project's own files hold it (journals, results): JSON lists back to
    tuples, nothing checked (these were checked on the way in). A config from the store, a
    service or a user is read by `checked_config` instead."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
