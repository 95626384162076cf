"""The dashboards of `fdo serve`: the overview at `/` (savings booked and realized, return on
cost, hits, coverage, validator, staleness, top keys, store versions), the tuner at `/tuner`
(trials, results, which flags matter), the graphs by cost at `/graphs`, a page per graph at
`/graphs/{fingerprint}` and per store entry at `/entries/{key}` (expected against realized
speedup), each card with its JSON rows under `/api/`, all of them filtered by team, device kind,
compiler version and dates.

filters: the query parameters; scope: the filters resolved against the warehouse (and the
environments' labels); sql: reading checked warehouse tables into DuckDB for a scope; lookups:
the names and live entries queries join to; levels: the confidence each interval was taken at;
savings, holdouts, coverage, entries, tuning and graphs: the queries, a module per family;
queries: their registry, one query per endpoint (the single source of the numbers), and the
summary; figures: the look and steps every chart shares; charts, tuning_charts and grids: each
card's figure or table; layout: which cards each page shows; page: the HTML; routes: the
FastAPI router that `fdo serve` mounts.
"""
