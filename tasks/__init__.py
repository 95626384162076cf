"""Tuning and validation as tasks (docs/cluster.md): typed records that a local runner and a Ray
runner both run; the tuner and the validator know nothing of them.

- `records`: a tuning task (`TuneTask`), a validator measurement (`MeasureTask`), how one ended
  (`TaskOutcome`, `TaskStatus`), and `perform`, which runs one;
- `runner`: the `Runner` interface and the `LocalRunner` (here, in order); `ray_runner`
  (`RayRunner`, the one module that imports ray): each task on a node that offers its
  environment, routed by `resources`; `node`: `fdo cluster`'s `ray start` and `ray stop`.
"""
