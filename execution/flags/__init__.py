"""Compiler flags: the single allowlist of XLA flags the tuner may search, the store may hold and
the hook may apply, each flag's facts in one `FlagSpec`. Import what follows from here.

A room per idea, each importing only those above it:
- `flag_table`: the config types (`CompilerConfig`, `FlagValue`, `FlagError`), the table
  (`FlagSpec`, `FLAGS`, `PLACEMENT`, `spec_of`) and what it says of a config
  (`relaxes_numerics`, `codegen_values`, `unseen_values`);
- `allowlist`: which keys may ever be applied (`check_name`);
- `flag_values`: a value read by its flag's type, from text (`parse_assignment`) or JSON;
- `placement`: library routing as `placement:<TYPE>` moves (`as_flags`, `as_placement`,
  `routing`);
- `channels`: a config as XLA takes it, per channel (`to_xla`);
- `defaults_diff`: a config against the compiler's defaults (`is_default`, `without_defaults`,
  `on_top_of`);
- `config_json`: a config's JSON form (`to_json`) and the two ways back: `checked_config`
  (allowlist and domains checked: the store, imports, the service, the hook, the CLI) and
  `trusted_config` (this project's own journals and results, nothing checked).
"""

from execution.flags.allowlist import check_name
from execution.flags.channels import XlaSettings, enum_of_number, to_xla
from execution.flags.config_json import checked_config, to_json, trusted_config
from execution.flags.defaults_diff import is_default, on_top_of, without_defaults
from execution.flags.flag_table import (
    BACKEND_RANK_OFFSETS,
    BUILD_OPTIONS,
    FLAGS,
    FUSION_TYPE_PREFIX,
    LIBRARY_FLAGS,
    PLACEMENT,
    PLACEMENT_PREFIX,
    XLA_BACKEND,
    CompilerConfig,
    FlagError,
    FlagSpec,
    FlagValue,
    codegen_values,
    fusion_type_of,
    placement_key,
    relaxes_numerics,
    spec_of,
    unseen_values,
)
from execution.flags.flag_values import expected_json, parse_assignment, parse_value
from execution.flags.placement import as_flags, as_placement, routing

__all__ = [
    # flag_table
    "BACKEND_RANK_OFFSETS", "BUILD_OPTIONS", "FLAGS", "FUSION_TYPE_PREFIX", "LIBRARY_FLAGS", "PLACEMENT",
    "PLACEMENT_PREFIX", "XLA_BACKEND", "CompilerConfig", "FlagError", "FlagSpec", "FlagValue", "codegen_values",
    "fusion_type_of", "placement_key", "relaxes_numerics", "spec_of", "unseen_values",
    # allowlist
    "check_name",
    # flag_values
    "expected_json", "parse_assignment", "parse_value",
    # placement
    "as_flags", "as_placement", "routing",
    # channels
    "XlaSettings", "enum_of_number", "to_xla",
    # defaults_diff
    "is_default", "on_top_of", "without_defaults",
    # config_json
    "checked_config", "to_json", "trusted_config",
]
