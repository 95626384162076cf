"""The autotune hand-off: an entry's XLA:GPU per-fusion autotune results, given to XLA for the
one compile that applies the entry (step 4 of delivery.hook; docs/hook.md, autotune results).

The results (checked as XLA's own protos when the entry was decided) are written into a
directory the hook creates for this compile alone under `$FDO_HOME/cache/autotune/`, never a
path from the store (execution.autotune.per_fusion_directory), XLA is pointed at it for this
executable only, and the directory is removed afterwards; the hit's reason says how many were delivered,
how many XLA took and how many fusions it autotuned itself. With JAX's persistent compilation
cache on (which also names a per-fusion directory of the job's own in the debug options), the
directory is instead one per set of results (`results-<digest>` there, the same path in every
compile, kept), it takes the job's directory's place for this compile alone, and the results'
digest joins JAX's cache key for it (`CacheKeyed`): the next compile of the module with the same
results is a cache hit (recorded "executable from JAX's persistent cache"), and the default's
executable and other results' are keyed apart. Not on a platform that does not autotune (the
CPU), nor to a compile whose own compile options name a per-fusion cache directory (the job
chose it), nor where the home cannot be written: the reason says so.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable

from delivery.compile_plan import Plan
from delivery.hook_log import HookLog
from execution.autotune.jax_cache import CacheKeyed, persistent_cache_on
from execution.autotune.per_fusion_directory import Delivery, job_cache_dir, job_sets_cache_dir
from execution.autotune.results import autotunes

AUTOTUNE_DIR = Path("cache") / "autotune"  # each compile's delivered autotune results, while it runs


class AutotuneHandoff:
    """Hands entries' autotune results to the compiles of one hook's home."""

    def __init__(self, home: Path, log: HookLog) -> None:
        self.parent = home / AUTOTUNE_DIR
        self._log = log

    def compile(self, plan: Plan, compile: Callable[[Any], Any], tuned: Any) -> Any:
        """`compile(tuned)`, with `plan`'s autotune results delivered to it where XLA
        autotunes; `plan.reason` says what became of them."""
        if plan.results is None:
            return compile(tuned)
        if not autotunes(plan.platform):
            plan.reason = f"autotune results not delivered: {plan.platform} compiles do not autotune"
            return compile(tuned)
        if job_sets_cache_dir(tuned):
            plan.reason = "autotune results not delivered: the job names its own per-fusion cache directory"
            return compile(tuned)
        with contextlib.ExitStack() as stack:
            try:
                # JAX's persistent cache keys the executable on the options: a directory of
                # these results' own, the same for each compile of them.
                delivery = stack.enter_context(Delivery(plan.results, self.parent, kept=persistent_cache_on()))
            except OSError as exc:
                plan.reason = f"autotune results not delivered: cannot write under {self.parent}: {exc}"
                self._log.warn(plan.reason, "autotune dir")
                return compile(tuned)
            with CacheKeyed(plan.results) as keyed:
                executable = compile(delivery.options(tuned))
            if keyed.from_cache:  # XLA compiled nothing: there is no uptake to tell
                plan.reason = (f"autotune results: {len(plan.results.fusions)} delivered, executable from "
                               "JAX's persistent cache")
            else:
                plan.reason = delivery.uptake().describe() + (
                    " (in place of the job's own per-fusion cache directory, for this compile)"
                    if job_cache_dir(tuned) else "")
            return executable
