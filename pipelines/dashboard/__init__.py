"""The dashboards of `fdo serve` at `/`: savings, hits, coverage, validator, staleness, top keys,
tuner progress and store versions, each chart with its JSON rows under `/api/`.

queries: one query per endpoint (the single source of the numbers); charts: the Plotly figure of
each chart; page: the HTML; routes: the FastAPI router that `fdo serve` mounts.
"""
