"""Delivery: the versioned config store, and the JAX compiler hook that applies its configs inside
users' jobs (docs/store.md, docs/hook.md).

- the store: `store_writer` (`Store`, its one writer), `deliver` (`fdo deliver`, a Beam job:
  accepted tuning results into the next version), `imports` (owner-validated configs),
  `service/` (`fdo serve`: the HTTP config service, `create_app`) and its `metrics`, `lookup`
  (`ConfigSource`: the embedded snapshot or the remote service);
- the hook: `hook` (`install`, `uninstall`, `installed`, `Hook`) walks each compile step by step
  through rooms of one job each: `hook_settings` (`HookSettings`), `jax_patch`, `jax_objects`,
  `fingerprint_memo`, `compile_plan`, `compile_decision`, `multiprocess`, `sandbox`,
  `autotune_handoff`, `hit_spool`, `symbol_spool`, `hook_log`; `jax_plugin` turns it on with
  `FDO_HOOK=1`.
"""
