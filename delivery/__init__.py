"""Delivery: the versioned config store, the config service and the JAX compiler hook."""
