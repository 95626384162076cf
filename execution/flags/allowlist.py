"""The allowlist: which config keys may ever be applied (`check_name`).

A key may be a placement whose fusion type is a well-formed name, a build option of the table,
or an XLA flag (`xla_...`). Flags not in the table may still be set through the `option`
channel when the installed XLA knows them; XLA parses and checks their values. No flag that
names a file, a directory or a cache is ever in the table or applied. Whether a key must also
be declared in the table is the reader's choice: a config read from outside this project
(execution.flags.config_json.checked_config) takes declared keys only.
"""

from __future__ import annotations

import re

from execution.flags.flag_table import BUILD_OPTIONS, PLACEMENT_PREFIX, FlagError, fusion_type_of
from hlo.environment import SIDE_EFFECT_FLAG_PARTS

# What a fusion type's name may be (a placement key's, an item of a library list): XLA's enum
# names are upper-case, and a name that cannot be one never reaches a compile.
FUSION_TYPE_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
# Names of flags that load something besides those of hlo.environment.SIDE_EFFECT_FLAG_PARTS
# (`xla_gpu_load_autotune_results_from` reads a file): never applied. Left out of that list, which
# also decides which of a job's XLA_FLAGS join its environment's key, so no key changes.
_LOADS_PARTS = ("_from",)


def check_name(name: str) -> None:
    """Reject names that are not XLA flags or placements, or that could touch files or the
    process."""
    fusion_type = fusion_type_of(name)
    if fusion_type is not None:
        if not FUSION_TYPE_NAME.fullmatch(fusion_type):
            raise FlagError(f"{name}: not a fusion type (upper-case letters, digits and '_')")
        return
    if name in BUILD_OPTIONS:
        return
    if not name.startswith("xla_"):
        raise FlagError(f"{name}: not an XLA compiler flag (they start with 'xla_'), a placement "
                        f"('{PLACEMENT_PREFIX}<FUSION_TYPE>') nor a build option "
                        f"({', '.join(BUILD_OPTIONS)})")
    if any(part in name for part in SIDE_EFFECT_FLAG_PARTS + _LOADS_PARTS):
        raise FlagError(f"{name}: flags that write or read files or caches are never applied")
