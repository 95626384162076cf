"""Validator: keeps every stored config valid as the compiler changes (docs/validator.md).

- `validate` (`validate`, `fdo validate`): a run that re-measures entries under a toolchain and
  publishes one store version with its decisions; `plan` (`Planner`): which entries to decide
  without measuring, which to measure, in which order; `rules`: the rules that decide
  (`Decision`, the fleet guard too) and how decisions change the store (`apply`); `signals`: what
  the fleet and the audit trail say of each entry; `run` (`Run`): a run's durable state;
- `toolchains` (`Toolchain`, `Registry`): the compilers it can measure with;
- `report`: what it did, as tables the dashboards read; `tables`: its `validations` table;
  `validation_job`: the validator in the background (an APScheduler job).
"""
