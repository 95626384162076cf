"""The symbol spool (`FDO_SPOOL_HLO=1`): each new module a job compiles, left under
`$FDO_HOME/spool/symbols/` as an XLA dump would leave it (its unoptimized module, the optimized
one of a default compile, and the environment it compiled in), for `fdo ingest symbols`."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from delivery.compile_plan import Plan
from delivery.hook_log import HookLog
from hlo.environment import ENVIRONMENT_FILE, current_environment
from storage.home_factory import open_home

SPOOL_SYMBOLS = Path("spool") / "symbols"


class SymbolSpool:
    """The modules a hook leaves for symbol ingestion, once per fingerprint and environment (a
    module compiled in two environments, say partitioned two ways, is a graph in each)."""

    def __init__(self, home: Path, log: HookLog) -> None:
        self.directory = home / SPOOL_SYMBOLS
        self._log = log

    def spooled(self, plan: Plan) -> bool:
        """Whether `plan`'s module is in the spool for its environment already."""
        return self._target(plan).exists()

    def spool(self, plan: Plan, optimized: str | None) -> None:
        """Leave `plan`'s module (its unoptimized text, and `optimized` where given) as an XLA
        dump; a spool that cannot be written is a warning."""
        target = self._target(plan)
        if target.exists() or plan.unoptimized_text is None:
            return
        try:
            stem = f"module_{plan.fingerprint[:8]}.{plan.module_name}"
            environment = plan.environment or current_environment()
            with open_home(target.parent).staged_directory(target, durable=False) as staging:
                (staging / f"{stem}.before_optimizations.txt").write_text(plan.unoptimized_text)
                if optimized is not None:
                    (staging / f"{stem}.after_optimizations.txt").write_text(optimized)
                (staging / ENVIRONMENT_FILE).write_text(json.dumps(
                    {**environment.to_json(),
                     "captured_at": datetime.datetime.now(datetime.UTC).isoformat()}) + "\n")
        except OSError as exc:
            self._log.warn(f"cannot spool HLO under {target.parent}: {exc}", "spool symbols")

    def _target(self, plan: Plan) -> Path:
        name = f"{plan.fingerprint}-{plan.env_key[:16]}"
        return self.directory / plan.fingerprint[:2] / name
