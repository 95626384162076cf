"""The dashboards of `fdo serve`: every /api/ endpoint checked against the tables it reads, and
the page in a real headless Chromium against a real server on loopback, full and empty.

The screenshot of the full page is kept at tests/artifacts/dashboard.png (git-ignored).
"""

from __future__ import annotations

import datetime
import os
import shutil
import urllib.parse
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from playwright.sync_api import sync_playwright

from delivery.store import Store
from ingest.tables import GRAPH_RUNS
from ingest.warehouse import Warehouse
from pipelines.dashboard.charts import CHARTS
from pipelines.dashboard.queries import QUERIES
from ranking.tables import SAVINGS
from tests.dashboard_home import TASKS, build_home
from tests.serving import call, running_server

ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture(scope="session")
def dashboard_home(tmp_path_factory) -> Path:
    return build_home(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="module")
def served(dashboard_home):
    with running_server(dashboard_home) as base:
        yield base


def _api(base: str, name: str, query: str = "") -> list[dict]:
    status, rows, _ = call(f"{base}/api/{name}{query}")
    assert status == 200, rows
    assert isinstance(rows, list)
    return rows


def test_every_endpoint_answers_rows(served):
    status, index, _ = call(f"{served}/api")
    assert status == 200
    assert {row["endpoint"] for row in index} == {f"/api/{name}" for name in [*QUERIES, "summary"]}
    for row in index:
        rows = _api(served, row["endpoint"].removeprefix("/api/"))
        assert rows and all(isinstance(r, dict) for r in rows), row["endpoint"]
    assert {chart.endpoint for chart in CHARTS} == set(QUERIES)  # every endpoint is drawn


def test_savings_and_hits_match_the_warehouse(served, dashboard_home):
    warehouse = Warehouse(dashboard_home)
    table = warehouse.read(SAVINGS)
    rows = _api(served, "savings")
    assert {"dt", "kind", "team", "chip_seconds_saved", "chip_hours_saved"} <= rows[0].keys()
    saved = pc.sum(table.column("chip_seconds_saved")).as_py()
    assert saved > 0
    assert sum(r["chip_seconds_saved"] for r in rows) == pytest.approx(saved, rel=1e-9)
    assert all(r["chip_hours_saved"] == pytest.approx(r["chip_seconds_saved"] / 3600) for r in rows)
    assert {r["team"] for r in rows} == set(table.column("team").to_pylist())
    assert _api(served, "summary")[0]["chip_hours_saved"] == pytest.approx(saved / 3600, rel=1e-9)

    runs = warehouse.read(GRAPH_RUNS, ["dt", "chip_seconds", "config_key"])
    hits = {r["dt"]: r for r in _api(served, "hits") if r["source"] == "profiles" and r["kind"] == "graph"}
    for dt, row in hits.items():
        day = runs.filter(pc.equal(runs.column("dt"), pa.scalar(datetime.date.fromisoformat(dt))))
        tuned = day.filter(pc.is_valid(day.column("config_key")))
        assert row["runs"] == day.num_rows and row["hit_runs"] == tuned.num_rows
        tuned_seconds = pc.sum(tuned.column("chip_seconds")).as_py() or 0.0
        assert row["hit_chip_hours"] == pytest.approx(tuned_seconds / 3600)
        assert row["hit_rate"] == pytest.approx(tuned_seconds / pc.sum(day.column("chip_seconds")).as_py())
    assert hits[min(hits)]["hit_rate"] == 0 < hits[max(hits)]["hit_rate"]  # untuned first days, then hits
    hook = [r for r in _api(served, "hits") if r["source"] == "hook"]
    assert [(r["hit_runs"], r["runs"], r["hit_rate"]) for r in hook] == [(3, 6, 0.5)] * 2

    shares = _api(served, "validator-hits")
    validator = table.filter(table.column("validator_updated"))
    assert sum(r["validator_hit_chip_hours"] for r in shares) == pytest.approx(
        (pc.sum(validator.column("hit_chip_seconds")).as_py() or 0.0) / 3600)
    assert all(0 <= r["validator_share"] <= 1 for r in shares)


def test_store_tuner_and_validator_views_match_their_sources(served, dashboard_home):
    store = Store(dashboard_home)
    entries = {e["key"]: e for e in store.entries().to_pylist()}
    now = datetime.datetime.now(datetime.UTC)
    stale = _api(served, "staleness")
    assert {r["key"] for r in stale} == entries.keys()
    for row in stale:
        expected = (now - entries[row["key"]]["measured_at"]).total_seconds() / 86400
        assert row["age_days"] == pytest.approx(expected, abs=0.01)
    ages = {r["provenance"]: r["age_days"] for r in stale}
    assert ages["validator"] < ages["tuner"]  # the validator re-measured one entry later

    top = [r for r in _api(served, "top") if r["kind"] == "graph"]
    assert [r["rank"] for r in top] == list(range(1, len(top) + 1))
    assert [r["chip_hours"] for r in top] == sorted((r["chip_hours"] for r in top), reverse=True)
    tuned = [r for r in top if r["tuned"]]
    assert tuned
    for row in tuned:
        entry = entries[row["key"]]
        assert (row["speedup"], row["ci_low"], row["ci_high"]) == (entry["speedup"], entry["ci_low"], entry["ci_high"])
        assert row["ci_low"] < row["speedup"] < row["ci_high"]

    trials = _api(served, "tuner")
    by_task = defaultdict(list)
    for row in trials:
        by_task[row["task_id"]].append(row)
    assert len(by_task) == TASKS
    for rows in by_task.values():
        measured = [r["speedup"] for r in rows if r["outcome"] == "measured" and r["numerics_ok"]]
        assert rows[-1]["best_so_far"] == max(measured)
        bests = [r["best_so_far"] for r in rows if r["best_so_far"] is not None]
        assert bests == sorted(bests)
    results = _api(served, "tuning-results")
    assert sum(r["accepted"] for r in results) == TASKS - 1

    outcomes: Counter[str] = Counter()
    for row in _api(served, "validations"):
        outcomes[row["outcome"]] += row["entries"]
    assert outcomes == {"kept": 2, "invalidated": 1}
    versions = _api(served, "store")
    assert [r["version"] for r in versions] == [m.version for m in store.versions()]
    assert [r["version"] for r in versions if r["live"]] == [store.current()]


def test_window_parameters(served):
    today = datetime.date.today()
    two_days = _api(served, "savings", "?days=2")
    assert two_days and {r["dt"] for r in two_days} <= {str(today), str(today - datetime.timedelta(days=1))}
    assert _api(served, "savings", f"?from={today}&to={today}") == [
        r for r in _api(served, "savings") if r["dt"] == str(today)]
    status, body, _ = call(f"{served}/api/savings?from=2026-13-01")
    assert status == 400 and "from: '2026-13-01' is not a date" in body["error"]["message"]
    status, body, _ = call(f"{served}/api/hits?from={today}&to={today - datetime.timedelta(days=3)}")
    assert status == 400 and "is after to" in body["error"]["message"]


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium, driven by Playwright (whose own browser download is unused)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        # Skipped where no browser is installed, unless told it must be there (.ci/run).
        need = "the dashboard page tests need Debian's chromium (apt-get install chromium)"
        if os.environ.get("FDO_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{need}; FDO_REQUIRE_BROWSER=1 says it must be installed")
        pytest.skip(f"{need}; none on PATH")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        yield browser
        browser.close()


def _open_page(browser, base: str, screenshot: Path | None = None) -> dict:
    """Load the page; what it shows, its console errors and the hosts it requested from."""
    errors: list[str] = []
    hosts: set[str] = set()
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: hosts.add(urllib.parse.urlsplit(r.url).netloc))
        response = page.goto(base + "/")
        assert response is not None and response.status == 200
        page.wait_for_selector("body[data-ready=true]", timeout=60_000)
        charts = page.eval_on_selector_all(".chart", """els => els.map(e => ({
            id: e.dataset.chart, state: e.dataset.state, points: Number(e.dataset.points || 0),
            traces: (e.data || []).length, text: e.innerText}))""")
        tiles = page.eval_on_selector_all(".tile .value", "els => els.map(e => e.innerText)")
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
    finally:
        page.close()
    return {"charts": {c["id"]: c for c in charts}, "tiles": tiles, "errors": errors, "hosts": hosts}


def test_page_draws_every_chart_in_headless_chromium(served, browser):
    shot = ARTIFACTS / "dashboard.png"
    shown = _open_page(browser, served, shot)
    assert shown["errors"] == []
    assert shown["hosts"] == {served.removeprefix("http://")}  # offline: no CDN, nothing external
    assert shown["charts"].keys() == {chart.id for chart in CHARTS}
    for chart_id, chart in shown["charts"].items():
        assert chart["state"] == "ready" and chart["traces"] > 0 and chart["points"] > 0, chart_id
    assert "—" not in shown["tiles"] and float(shown["tiles"][0].replace(",", "")) > 0
    assert shot.stat().st_size > 50_000
    print(f"screenshot: {shot}")


def test_an_empty_home_says_no_data_yet_and_names_unreadable_data(tmp_path, browser):
    home = tmp_path / "home"
    broken = home / "warehouse" / "validations" / f"dt={datetime.date.today()}" / "run-1.parquet"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not parquet")
    with running_server(home) as base:
        assert _api(base, "savings") == [] and _api(base, "staleness") == [] and _api(base, "tuner") == []
        status, body, _ = call(f"{base}/api/validations")
        assert status == 500 and body["error"]["code"] == "bad_data" and str(broken) in body["error"]["message"]
        shown = _open_page(browser, base)
    assert shown["errors"] == []
    for chart_id, chart in shown["charts"].items():
        if chart_id == "validations":
            assert chart["state"] == "error" and str(broken) in chart["text"]
        else:
            assert chart["state"] == "empty" and "No data yet" in chart["text"], chart_id
    assert shown["tiles"][0] == "0" and "—" in shown["tiles"]
