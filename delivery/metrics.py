"""The config service's Prometheus metrics (prometheus-client), served at `GET /metrics`.

Each app has a registry of its own, not the library's global one, so that apps made in one
process (the tests make many) count only their own requests. Every request is answered in one
process (uvicorn with one worker; the service's writer and reader processes answer none), so
no multiprocess mode is needed: a counter lives in that process and starts at zero with it, as
Prometheus expects of counters (`process_start_time_seconds` shows a restart).
"""

from __future__ import annotations

import datetime
import math
from typing import Callable, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import choose_encoder

ROUTES = ("key", "batch")  # GET /v1/configs/{key}, POST /v1/configs:batch
# Look-ups take a fraction of a millisecond; the compiler hook gives up after 0.25 s.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Served(Protocol):
    """What the service answers look-ups from (delivery.service.snapshot.Snapshot)."""

    # Read-only: a snapshot is frozen, and the metrics only read it.
    @property
    def version(self) -> int | None: ...

    @property
    def published(self) -> datetime.datetime | None: ...

    @property
    def problem(self) -> str | None: ...


class ServiceMetrics:
    """Counters of look-ups (hits, misses), refusals and errors, look-up latency, and gauges of
    what is served, read from `served()` at each scrape."""

    def __init__(self, served: Callable[[], Served]) -> None:
        self.registry = CollectorRegistry()
        lookups = Counter("fdo_service_lookups", "Keys looked up in the served snapshot, by route "
                          "(key: GET /v1/configs/{key}, batch: POST /v1/configs:batch) and outcome",
                          ["route", "outcome"], registry=self.registry)
        self.hits = {route: lookups.labels(route, "hit") for route in ROUTES}
        self.misses = {route: lookups.labels(route, "miss") for route in ROUTES}
        latency = Histogram("fdo_service_lookup_seconds", "Time the service takes to answer a look-up "
                            "request (a batch is one), from its handler's start to the answer",
                            ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.latency = {route: latency.labels(route) for route in ROUTES}
        self._refusals = Counter("fdo_service_refusals", "Requests refused (4xx) for what they sent, by "
                                 "error code: unauthorized, writes_disabled, too_large, invalid, bad_key, ...",
                                 ["code"], registry=self.registry)
        self._errors = Counter("fdo_service_errors", "Requests the service failed (5xx), by error code",
                               ["code"], registry=self.registry)
        Gauge("fdo_service_store_version", "The store version look-ups are answered from (NaN: none)",
              registry=self.registry).set_function(lambda: _number(served().version))
        Gauge("fdo_service_snapshot_age_seconds", "Seconds since the served version was published "
              "(NaN: none)", registry=self.registry).set_function(lambda: _age(served().published))
        Gauge("fdo_service_store_degraded", "1 while the store on disk is unusable and the last good "
              "snapshot, if any, is served", registry=self.registry).set_function(
            lambda: float(served().problem is not None))
        ProcessCollector(registry=self.registry)

    def error(self, status: int, code: str) -> None:
        """Count an error answer: a refusal below 500, a failure of the service from 500 on."""
        (self._errors if status >= 500 else self._refusals).labels(code).inc()

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The metrics in the text format `accept` asks for (Prometheus' or OpenMetrics), and
        its content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


def _number(value: int | None) -> float:
    return math.nan if value is None else float(value)


def _age(published: datetime.datetime | None) -> float:
    if published is None:
        return math.nan
    return (datetime.datetime.now(datetime.UTC) - published).total_seconds()
