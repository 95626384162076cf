"""The XLA execution core the tuner, the validator and the compiler hook share (docs/tuner.md);
of the project it imports only hlo/ (and vocabulary/, as every package may).

- `flags/`: the allowlist of XLA flags, each flag's facts in one `FlagSpec` (the package's
  docstring names its rooms); `autotune/`: XLA:GPU per-fusion autotune results, checked and
  handed to one compile;
- `compile` (`compile_module`): an HLO module compiled with a config through jaxlib; `sharded`,
  `per_device`, `tuple_parameters` and `hlo_edit`: the programs made to compile;
- `worker` (`Worker`, `WorkerPool`): sandboxed worker processes, on the cores `cores` gives
  them; `session`: the workers' side of a tuning search;
- `inputs` (random inputs), `measure` (`measure_pair`: paired, interleaved timing), `numerics`
  (outputs checked against the default's), and `evaluate` (`evaluate`: default against
  candidate, measured and checked).
"""
