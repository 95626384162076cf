"""The XLA execution core the tuner, the validator and the compiler hook share: flags, compiling
with a config, sandboxed workers, inputs, numerics, paired measurement, evaluation."""
