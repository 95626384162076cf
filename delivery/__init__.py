"""Delivery: the versioned config store (its writer, deliver, the config service and the store's
look-up) and the JAX compiler hook, which applies the store's configs inside users' jobs:
`delivery.hook` (`install`, `uninstall`, `installed`, `Hook`, `HookSettings`) walks each compile
step by step through rooms of one job each, named in its docstring."""
