"""Pipelines: the `fdo` command line, the nightly loop, the scheduler and the dashboards."""
