"""Pipelines: the loop run whole (docs/nightly.md), above every stage.

- `cli/`: the `fdo` command line, a module per command or per group of commands;
- `stages`: the stage calls that `fdo <stage>` and the nightly run share; `nightly`
  (`run_nightly`, `fdo nightly`): one turn of the loop for a date; `scheduler`
  (`run_scheduler`): the daemon that runs it on a cron and the validator on an interval;
  `tables`: its `runs` ledger;
- `dashboard/`: the dashboards that `fdo serve` mounts; `demo` (`make demo`): the whole loop on a
  simulated fleet; `extras`: the optional parts of the install, checked where a command needs one.
"""
