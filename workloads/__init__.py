"""The workloads: the zoo of real JAX programs and the fleet simulator that runs them."""
