"""The kernels kind: a GPU graph's kernel configs, XLA:GPU's own autotune results, tuned offline.

XLA:GPU autotunes each GEMM and convolution fusion at every compile, with a search that trades
thoroughness for compile time. A kernels task (one per ranked GPU graph) runs XLA's own
autotuner once, exhaustively (`xla_gpu_exhaustive_tiling_search`), in a fresh worker with a
per-fusion directory and a dump file of that worker's own (`execution.evaluate.
autotune_offline`: the path options are the tuner's, never a config's or the store's); reads
XLA's dump (`parse_results`) and keeps the results of the costliest fusions, by the run time
XLA measured for each (`AutotuneResults.select`; `TuneSettings.budget_evals` of them: there is
no search of ours to spend a budget on, and a job's compile reads each file); then measures the
graph compiled with them delivered (XLA's default autotuning for the other fusions) against the
default compile, as a graph config's winner is verified: built once in a fresh worker
(`compile_with_results`, which says what XLA took), timed paired against the default with the
numeric check in `verify_workers` fresh workers (`evaluate_built`).

A result is accepted where XLA took every result delivered (or the file system cannot tell: no
access times) and the verification shows a significant gain with numerics ok. Its config is {}
and it carries the results' text (`TuneResult.autotune_results`), which deliver publishes as
the entry's autotune results. Like every task, it lands once by task id and a finished task is
not run again. Tasks of this kind run where XLA autotunes (a GPU); elsewhere `tuner.kinds`
refuses them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from execution.autotune.results import AutotuneResults
from execution.evaluate import EvaluationResult, autotune_offline, compile_with_results, evaluate_built
from execution.session import Offline
from hlo.environment import current_environment
from hlo.module import HloModule
from storage.home import Home
from storage.home_factory import open_home
from tuner.persist import finished_result, land_result, save_result, task_digest
from tuner.result import TuneResult
from tuner.search import PhaseSpend
from tuner.target import TuneTarget
from tuner.tune import TuneSettings, verdict_of
from vocabulary.tuning import Phase, Verdict


@dataclass(frozen=True)
class OfflineResults:
    """What XLA's exhaustive autotuning of a graph gave (`offline_results`): the results of the
    costliest fusions to deliver (`chosen`; None: none, `why` says why), and XLA's own account
    of the compile (`offline`: its seconds, the files it wrote, its dump of every result)."""

    offline: Offline
    chosen: AutotuneResults | None = None
    why: str | None = None


def offline_results(module: HloModule, count: int, timeout: float = 600.0) -> OfflineResults:
    """XLA's own autotuner run exhaustively over `module` in a fresh worker, and the results of
    its `count` costliest fusions (by the run time XLA measured)."""
    offline = autotune_offline(module, timeout=timeout)
    if offline.error is not None:
        return OfflineResults(offline, why=f"XLA's exhaustive autotuning failed: {offline.error}")
    outcome = offline.autotune
    assert outcome is not None, "an offline compile that did not fail reports its autotuning"
    if outcome.dump_error is not None:
        return OfflineResults(offline, why=f"XLA's dump of its autotune results refused: {outcome.dump_error}")
    if outcome.dumped is None:
        return OfflineResults(offline, why="XLA autotuned no fusion of this graph (it dumped no results)")
    return OfflineResults(offline, outcome.dumped.select(count))


def run_kernels_task(target: TuneTarget, home: Home, settings: TuneSettings,
                     env_key: str | None = None) -> TuneResult:
    """Tune `target`'s kernels (see the module docstring) and land the result; a task finished
    before is landed again, not run."""
    home = open_home(home)
    environment = current_environment()
    env_key = env_key or environment.key()
    task_id = task_digest(target.kind, target.fingerprint, env_key, settings.strategy,
                          settings.seed, settings.budget_evals, environment.compiler_version)
    finished = finished_result(home, task_id)
    if finished is not None:
        land_result(home, finished, settings.day)
        return finished
    started = time.monotonic()
    found = (None if target.unmeasurable is not None
             else offline_results(target.module, settings.budget_evals))
    # XLA's exhaustive autotuning is the task's search: one config, no timing of ours.
    phases = [PhaseSpend(Phase.SEARCH, 1, 0, 0, 1, time.monotonic() - started)]
    if found is None:
        verification = Verification(Verdict.DEFAULT_FAILS, target.unmeasurable or "")
    elif found.chosen is None:  # no results to verify: XLA's autotuning failed, or found none
        verification = Verification(Verdict.NO_GAIN if found.offline.error is None
                                    else Verdict.VERIFICATION_FAILED, found.why or "")
    else:
        verification = _verified(target, found.chosen, settings, phases)
    check = verification.check
    result = TuneResult(task_id=task_id, fingerprint=target.fingerprint, env_key=env_key,
                        status=verification.status, reason=verification.reason, config={},
                        speedup=check.speedup if check is not None and verification.measured else None,
                        numerics_ok=check.numerics_ok if check is not None else None,
                        numerics=(check.judged().failures() if check is not None
                                  and verification.status == Verdict.NUMERICS_DIFFER else []),
                        evaluations=sum(p.evaluations for p in phases),
                        measured=sum(p.measured for p in phases),
                        speedups=check.speedups if check is not None else [],
                        autotune_results=verification.results, strategy=settings.strategy,
                        compiler_version=environment.compiler_version, kind=target.kind,
                        phases=phases)
    save_result(home, result)
    land_result(home, result, settings.day)
    return result


@dataclass(frozen=True)
class Verification:
    """How a kernels task's results were verified: the verdict and why; the check that measured
    them against the default (None: none ran) and whether it measured a figure; the results'
    text (None: there were none to deliver)."""

    status: Verdict
    reason: str
    check: EvaluationResult | None = None
    measured: bool = False
    results: str | None = None


def _verified(target: TuneTarget, chosen: AutotuneResults, settings: TuneSettings,
              phases: list[PhaseSpend]) -> Verification:
    """`chosen` delivered to the graph's compile and verified against the default; `phases`
    gains the verification's spend."""
    started = time.monotonic()
    built = compile_with_results(target.module, chosen)
    check: EvaluationResult | None = None
    if built.error is not None:
        status = Verdict.VERIFICATION_FAILED
        reason = f"the compile with the results delivered fails: {built.error}"
    else:
        assert built.autotune is not None, "a compile with results delivered reports their uptake"
        uptake = built.autotune.uptake
        if uptake.taken is not None and uptake.taken < uptake.delivered:
            # Measuring would time XLA's own autotuning: the results did not reach it.
            status = Verdict.VERIFICATION_FAILED
            reason = (f"XLA took {uptake.taken} of the {uptake.delivered} results delivered "
                      f"({uptake.autotuned} fusions autotuned by XLA): not measured")
        else:
            check = evaluate_built(target.module, built, settings.verify_workers,
                                   settings=settings.verify, seed=settings.seed + 1)
            status, reason = verdict_of(check, settings.verify.noise_band)
            if check.identical_program:
                reason = "with the results delivered, XLA compiles the default's program"
    measured = check is not None and check.error is None and not check.identical_program
    compiles = 1 + (0 if check is None else len(check.speedups) or 1)
    phases.append(PhaseSpend(Phase.VERIFY, 1, int(check is not None), int(measured), compiles,
                             time.monotonic() - started))
    return Verification(status, reason, check, measured, chosen.to_text())
