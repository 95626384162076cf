"""What the hook decided for one compile (`Plan`): filled in step by step along the compile
path (delivery.hook) by the rooms that take each step, and read by the next."""

from __future__ import annotations

from dataclasses import dataclass

from delivery.lookup import Found
from execution.autotune.results import AutotuneResults
from execution.flags import CompilerConfig
from hlo.environment import Environment
from vocabulary.hits import HitOutcome


@dataclass
class Plan:
    """What the hook decided for one compile before compiling, and what became of it."""

    digest: str = ""  # of the StableHLO, see delivery.fingerprint_memo
    fingerprint: str = ""
    env_key: str = ""
    environment: Environment | None = None  # of this compile: the job's options, its partitioning
    key: str = ""
    module_name: str = ""
    unoptimized_text: str | None = None
    found: Found | None = None
    config: CompilerConfig | None = None  # to apply: the entry's, checked against the allowlist
    config_text: str | None = None  # the entry's config (strict or relaxed) that `config` is
    expected_speedup: float | None = None  # of `config_text`
    platform: str = ""  # of the compile's environment
    results: AutotuneResults | None = None  # the entry's autotune results, checked
    outcome: HitOutcome = HitOutcome.MISS
    reason: str | None = None
    checked: bool = False  # the sandbox's verdict on `config` is in: this compile's leader's (delivery.multiprocess)

    @property
    def compiled_with(self) -> str | None:
        """What an applied compile of the plan was given beside the module: its config's text,
        and its autotune results' (they change the optimized module's kernel configs)."""
        if self.results is None or self.found is None:
            return self.config_text
        return f"{self.config_text}\n{self.found.entry.autotune_results}"
