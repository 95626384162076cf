"""The loop's shared vocabulary, below every stage: the enums of its closed sets and the value
types every stage shares. It imports nothing of the project: any package may import it.

A module per idea: `tuning` (what a task tunes and how it ended: `Kind`, `Verdict`, `Origin`,
`KeyDecision`), `hits` (what the hook did at a compile, `HitOutcome`, and the one "ran tuned"
predicate, `ran_tuned`), `decisions` (what the validator decides and how it changes the store:
`DecisionOutcome`, `StoreChange`, `Applied`), `failures` (`Fault`, `Failure`), `flags` (a flag's
`FlagType` and `Channel`), `interval` (`Interval`: a figure with its confidence interval, and its
flat keys), `confidence` (the levels intervals are measured at) and `errors` (`first_line`: an
error told in one line).
"""
