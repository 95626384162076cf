"""Tuner: searches compiler configs for the fleet's costliest graphs and verifies the best
(docs/tuner.md).

- a task: `task` (`tune`, the entry point every task runs through, here or on a cluster node),
  `kinds` (the registry of kinds: each kind's space, candidates and how its task runs),
  `target` (what a task tunes), `tune` (`run_task`: search, then verify afresh), `kernels` (a
  GPU graph's XLA:GPU autotune results, tuned offline), `op_cut` and `fold` (a kernel cut out,
  op results folded into graph configs);
- the search: `space`, `strategies` (behind one `Strategy`), `schedule`, `prior` (a home's
  evidence) and `platform_prior` (the prior shipped per platform, `priors/`), the loop
  behind an `Evaluator` (`search`), the sandboxed workers' evaluator (`worker_evaluator`),
  `trial` and `winner`;
- what a task leaves: `result` (`TuneResult`), `persist`, `tables` (`trials`,
  `tuning_results`); `analyze`: which flags matter;
- reach: `candidates` (`Candidate`: what this machine can tune), `allot` (the budget by worth),
  `transfer` (a graph's siblings' configs), `decided` (what is decided per key), `plan` (the
  night's plan, which covers before it deepens).
"""
