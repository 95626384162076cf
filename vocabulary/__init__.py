"""The loop's shared vocabulary, below every stage: the enums of its closed sets and the value
types every stage shares. It imports the standard library alone, nothing of the project and no
third-party package (the SQL and Arrow forms of its rules live beside the tables they read):
any package may import it.

A module per idea: `closed_set` (`ClosedSet`, what every enum here is: its values lower-case
words with spaces between them, the spellings earlier versions wrote read as its members),
`tuning` (what a task tunes, how its search went and how it ended: `Kind`, `TrialOutcome`,
`Phase`, `StopReason`, `Verdict`, `Origin`, `KeyDecision`), `hits` (what the hook did at a
compile, `HitOutcome`, and the one "ran tuned" rule, `run_ran_tuned`), `decisions` (what the
validator decides and how it changes the store: `DecisionOutcome`, `StoreChange`, `Applied`),
`failures` (`Fault`, `Failure`), `flags` (a flag's `FlagType` and `Channel`), `store` (who
wrote an entry: `Provenance`), `measure` (how a graph is measured: `MeasureMode`), `tasks` (how
a runner's task ended: `TaskStatus`), `interval` (`Interval`: a figure with its confidence
interval, and its flat keys), `confidence` (the levels intervals are measured at) and `errors`
(`first_line`: an error told in one line).

Production code writes a value as its member, never as a string (tests/project/test_architecture.py).
"""
