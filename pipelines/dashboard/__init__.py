"""The dashboards of `fdo serve`: the overview at `/` (savings booked and realized, return on
cost, hits, coverage, validator, staleness, top keys, store versions), the tuner at `/tuner`
(trials, results, which flags matter), the graphs by cost at `/graphs`, a page per graph at
`/graphs/{fingerprint}` and per store entry at `/entries/{key}` (expected against realized
speedup), each card with its JSON rows under `/api/`, all of them filtered by team, device kind,
compiler version and dates.

filters: the query parameters; scope: the filters resolved against the warehouse (and the
environments' labels); queries: one query per endpoint (the single source of the numbers);
charts and grids: each card's figure or table; layout: which cards each page shows; page: the
HTML; routes: the FastAPI router that `fdo serve` mounts.
"""
