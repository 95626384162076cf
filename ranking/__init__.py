"""Ranking: where the fleet's chip-time goes and what tuned configs save (docs/ranking.md).

- `rank` (`Rank`, a Beam PTransform, and `rank`, `fdo rank`): graphs and ops by fleet cost, into
  `candidates` and `coverage`;
- `savings` (`AccountSavings`, and `savings`, `fdo savings`): chip-seconds saved by tuned
  configs, booked at the tuner's speedups, into `savings`; `realized` (`realized_speedups`,
  `realized_savings`): what they did in the fleet, from its holdout arms;
- `verified_coverage`: the share of the tunable chip-time that runs a verified config; `cost`:
  the loop's own cost in chip-seconds, and its return;
- `reference`: the ranking and the savings as DuckDB SQL, the reference the pipelines are
  checked against; `arrow_sums`: the combiners they sum with; `tables`: the tables it writes.
"""
