"""XLA:GPU per-fusion autotune results: XLA's own protos, checked, and handed to one compile.

A module per idea: `descriptors` finds the proto definitions the installed compiler's shared
libraries embed; `schema` builds XLA's message classes from them (or from fields declared
here); `results` is the record of a set of results (`AutotuneResults`, `parse_results`) and the
gate every results text passes; `per_fusion_directory` is one compile's per-fusion directory
(`Delivery`) and what XLA did with it (`Uptake`, `AutotuneOutcome`); `jax_cache` keys JAX's
persistent cache on the results delivered (`CacheKeyed`). The design: docs/gpu.md.
"""
