"""The dashboards' pages: which cards (charts and grids) each shows, in sections.

- the overview (`/`): headline figures, savings booked and realized (per team and version), the
  return on the loop's cost, the entries' realized speedups (each linking to its page), hits and
  coverage, validator and staleness, the costliest graphs (each linking to its page) and ops;
- the tuner (`/tuner`): trials and progress, verified results, which flags matter, every trial;
- the graphs (`/graphs`): every graph that ran in the window by its cost, each linking to its page;
- a graph (`/graphs/{fingerprint}`): its cost over time, runs by team, tuning trials and verified
  results, its costliest ops, store entries (each linking to its page), their realized speedups
  and the validator's decisions about them;
- a store entry (`/entries/{key}`): the speedup expected of it against the one realized in the
  fleet, per day, its holdout's arms, the live entry and the validator's decisions about it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.dashboard import charts, grids, tuning_charts
from pipelines.dashboard.charts import Chart
from pipelines.dashboard.figures import level_text
from pipelines.dashboard.grids import Grid
from pipelines.dashboard.levels import REALIZED_LEVEL
from pipelines.dashboard.queries import SUMMARY_INPUTS
from vocabulary.confidence import FLAG_LEVEL, VERIFIED_LEVEL

Card = Chart | Grid
VERIFIED = level_text(VERIFIED_LEVEL)
REALIZED = level_text(REALIZED_LEVEL)


@dataclass(frozen=True)
class Page:
    """One page: its sections of cards, and whether it opens with the headline figures."""

    id: str
    title: str
    sections: tuple[tuple[str, tuple[Card, ...]], ...]
    tiles: bool = False

    def cards(self) -> tuple[Card, ...]:
        """Every card of the page, in order."""
        return tuple(card for _, cards in self.sections for card in cards)

    def endpoints(self) -> list[str]:
        """The queries whose rows the page needs (its cards', and the headline figures')."""
        needed = [card.endpoint for card in self.cards()] + (list(SUMMARY_INPUTS) if self.tiles else [])
        return list(dict.fromkeys(needed))


TUNING_RESULTS = Chart(
    "tuning-results", "Tuning results", f"Verified speedup (×) of each task with its {VERIFIED} interval "
    "(the tuner verifies a winner afresh at that level)", "tuning-results", tuning_charts.tuning_results, "fdo tune",
    wide=True)

OVERVIEW = Page("overview", "Overview", (
    ("Savings", (
        Chart("savings-by-kind", "Savings over time", "Chip-hours saved per day by tuned configs: at run time, "
              "graph vs. op configs, and at compile time against the holdout arm's compiles (below zero: slower)",
              "savings", charts.savings_by_kind, "fdo savings", wide=True),
        Chart("savings-by-team", "Savings per team", "Chip-hours saved in the window, run and compile time, per "
              "team (a compile's team is its job's)", "savings", charts.savings_by_team, "fdo savings"),
        Chart("savings-by-version", "Savings per config version", "Chip-hours saved in the window, by the "
              "config store version that served the hits: run time by config kind, and compile time", "savings",
              charts.savings_by_version, "fdo savings"),
        Chart("realized-by-team", "Booked and realized, per team", "Chip-hours saved in the window by the "
              "entries whose holdout realized a speedup: booked at the expected speedup, realized at the fleet's, "
              f"with its {REALIZED} interval; undecided entries are in the hover", "realized-savings",
              charts.realized_by_team, "fdo ingest profiles (holdout runs)"),
        Chart("realized-by-version", "Booked and realized, per config version", "The same, by the config "
              "store version that served the runs", "realized-savings", charts.realized_by_version,
              "fdo ingest profiles (holdout runs)"),
        Chart("loop-cost", "Return on cost", "The loop's own cost in the window (the tuner's and the validator's "
              "measuring time, a machine counted as one chip, and the savings its holdout arms forwent) against "
              "the savings realized", "loop-cost", charts.loop_return, "fdo tune, fdo validate and holdout runs"),
        grids.REALIZED,
    )),
    ("Hits and coverage", (
        Chart("hits", "Config hits and hit rate", "Chip-hours that ran with a tuned config (bars) "
              "and hit rate in % (lines): of fleet chip-time, and of the compiler hook's compiles",
              "hits", charts.hit_rate, "fdo ingest profiles"),
        Chart("coverage", "Fleet coverage", "Share of fleet chip-time by category at the last ranking",
              "coverage", charts.coverage, "fdo rank"),
        Chart("verified-coverage", "Verified coverage", "Shares of the tunable chip-time (graphs the loop's "
              "machines can measure, jobs that accept tuning) whose graph runs a config the loop verified "
              "faster, and that the loop has decided (that, or the defaults verified best), after each "
              "nightly run", "verified-coverage", charts.verified_coverage, "fdo nightly"),
    )),
    ("Validator and staleness", (
        Chart("validations", "Validator outcomes", "Store entries re-validated per day, by decision",
              "validations", charts.validator_outcomes, "fdo validate"),
        Chart("validator-hits", "Hits on validator-updated entries", "Tuned chip-hours per day by "
              "who last measured the entry; line: validator-updated share in %", "validator-hits",
              charts.validator_hit_share, "fdo validate, then fdo savings"),
        Chart("staleness", "Staleness of live entries", "Live store entries by days since they were "
              "last measured", "staleness", charts.staleness, "fdo deliver"),
        Chart("store", "Store versions", "Entries per published version of the config store",
              "store", charts.store_versions, "fdo deliver"),
    )),
    ("Top graphs and ops", (
        Chart("top-graphs", "Top graphs", "Costliest graph keys of the window (chip-hours of jobs "
              "that accept tuning) and their tuned speedup (×) with its interval; each graph has a page",
              "top", charts.top_graphs, "fdo ingest profiles", wide=True, graph_links=charts.top_graph_links),
        Chart("top-ops", "Top ops", "Costliest op keys (kernels) of the window and their tuned "
              "speedup (×) with its interval", "top", charts.top_ops, "fdo ingest profiles", wide=True),
    )),
), tiles=True)

TUNER = Page("tuner", "Tuner", (
    ("Search", (
        Chart("tuner-trials", "Tuner trials", "Trials per day, by outcome", "tuner", tuning_charts.tuner_trials,
              "fdo tune"),
        Chart("tuner-progress", "Tuner progress", "Best speedup (×) with correct numerics found so far, "
              "per task", "tuner", tuning_charts.tuner_progress, "fdo tune"),
        TUNING_RESULTS,
    )),
    ("Which flags matter", (
        Chart("flag-importance", "Flag importance", "How much each flag moves the speed of the trials "
              f"that set it (as `fdo analyze flags`), with its {level_text(FLAG_LEVEL)} bootstrap "
              "interval", "flags", tuning_charts.flag_importance, "fdo tune", wide=True),
        grids.FLAG_VALUES,
    )),
    ("Every trial", (grids.TRIALS,)),
))

GRAPHS = Page("graphs", "Graphs", (("By cost", (grids.GRAPHS,)),))

GRAPH = Page("graph", "Graph", (
    ("Cost", (
        Chart("graph-cost", "Cost over time", "Chip-hours per day of this graph, run with a tuned "
              "config or not", "hits", charts.graph_cost, "fdo ingest profiles"),
        Chart("graph-teams", "Runs by team", "Chip-hours of this graph's runs in the window, per team",
              "teams", charts.runs_by_team, "fdo ingest profiles"),
        Chart("graph-ops", "Its costliest ops", "The kernels of this graph that cost the most, and their "
              "tuned speedup (×)", "top", charts.top_ops, "fdo ingest profiles", wide=True),
        grids.SYMBOLS,
    )),
    ("Tuning", (
        TUNING_RESULTS,
        grids.TRIALS,
    )),
    ("Store and validator", (
        grids.ENTRIES,
        grids.REALIZED,
        grids.DECISIONS,
    )),
))

ENTRY = Page("entry", "Store entry", (
    ("Expected and realized", (
        Chart("realized-days", "Expected and realized speedup", "Per day, the speedup realized in the fleet "
              f"(holdout arm against tuned arm) with its {REALIZED} interval over that day's jobs, and the "
              "speedup expected of the entry (dotted), per store version", "realized-days",
              charts.realized_over_time, "fdo ingest profiles (holdout runs)", wide=True),
        grids.REALIZED,
    )),
    ("Store and validator", (
        grids.ENTRIES,
        grids.DECISIONS,
    )),
))

PAGES = {page.id: page for page in (OVERVIEW, TUNER, GRAPHS, GRAPH, ENTRY)}
