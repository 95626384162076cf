"""The config service: a real uvicorn server on loopback, read and write paths, errors as JSON;
its Prometheus metrics, its OpenAPI models and its API docs in headless Chromium, offline;
look-ups while writes wait on the store's lock or run Beam, a chunked body far over the limit,
a store that breaks under a running service."""

from __future__ import annotations

import datetime
import fcntl
import http.client
import json
import math
import shutil
import socket
import threading
import time
import urllib.parse
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from delivery.service.limits import MAX_BODY_BYTES, MAX_JSON_BYTES
from delivery.store_writer import Store
from hlo.environment import store_key
from storage.warehouse import Warehouse
from tests.support.serving import call, running_server, serving_process
from tests.support.url_home import url_of
from tuner.tables import TUNING_RESULTS

TOKEN = "s3cret-token"


@pytest.fixture
def server(tmp_path):
    with running_server(tmp_path / "home", {"FDO_TOKEN": TOKEN}) as base:
        yield base


def _entry(i: int, config: dict) -> dict:
    return {"fingerprint": f"{i:032x}", "env_key": "e" * 32, "kind": "graph", "config": config, "speedup": 1.25}


def _imports(*entries: dict) -> bytes:
    """The body of POST /v1/import."""
    return json.dumps({"entries": list(entries)}).encode()


@pytest.mark.subprocess
def test_reads_and_writes_through_a_real_server(server):
    assert call(f"{server}/v1/health")[1] == {"status": "ok", "version": None, "entries": 0, "store": "ok"}
    status, body, _ = call(f"{server}/v1/import", _imports(_entry(1, {"xla_cpu_use_xnnpack": False})))
    assert status == 401 and body["error"]["code"] == "unauthorized"
    status, body, _ = call(f"{server}/v1/import", _imports(_entry(1, {"xla_dump_to": "/tmp/x"})), TOKEN)
    assert status == 422 and body["error"]["message"].startswith("body.entries.0.config: refused: xla_dump_to")
    status, body, _ = call(f"{server}/v1/import", _imports({**_entry(1, {}), "speedup": "1.5"}), TOKEN)
    assert status == 422 and "body.entries.0.speedup" in body["error"]["message"]  # strict: never converted
    entries = _imports(_entry(1, {"xla_cpu_use_xnnpack": False}),
                       _entry(2, {"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"}))
    status, body, _ = call(f"{server}/v1/import", entries, TOKEN)
    assert (status, body) == (200, {"version": 1, "imported": 2})
    key = store_key(f"{1:032x}", "e" * 32)
    status, body, _ = call(f"{server}/v1/configs/{key}")
    assert status == 200 and body["version"] == 1 and body["entry"]["config"] == {"xla_cpu_use_xnnpack": False}
    assert body["entry"]["source"] == "import via service" and body["entry"]["provenance"] == "import"
    missing = "0" * 32
    assert call(f"{server}/v1/configs/{missing}")[0] == 404
    assert call(f"{server}/v1/configs/not-a-key")[1]["error"]["code"] == "bad_key"
    status, body, _ = call(f"{server}/v1/configs:batch", json.dumps({"keys": [key, missing]}).encode())
    assert status == 200 and body["entries"][missing] is None and body["entries"][key]["speedup"] == 1.25
    assert body["entries"][key]["config"] == {"xla_cpu_use_xnnpack": False}
    too_many = json.dumps({"keys": [missing] * 1001}).encode()
    status, body, _ = call(f"{server}/v1/configs:batch", too_many)
    assert status == 422 and body["error"]["message"].startswith("body.keys: List should have at most 1000 items")
    status, body, _ = call(f"{server}/v1/configs:batch", json.dumps({"keys": [key, "ABC"]}).encode())
    assert status == 422 and body["error"]["message"].startswith("body.keys.1: String should match pattern")
    status, data, head = call(f"{server}/v1/snapshots/1")
    assert status == 200 and data[:4] == b"PAR1"
    assert call(f"{server}/v1/snapshots/1", headers={"If-None-Match": head["etag"]})[0] == 304
    assert call(f"{server}/v1/invalidate", json.dumps({"keys": [key]}).encode(), TOKEN)[1] == {"version": 2}
    assert call(f"{server}/v1/configs/{key}")[0] == 404
    assert call(f"{server}/v1/rollback", json.dumps({"version": True}).encode(), TOKEN)[0] == 422
    assert call(f"{server}/v1/rollback", json.dumps({"version": 1}).encode(), TOKEN)[1] == {"version": 3}
    assert call(f"{server}/v1/configs/{key}")[0] == 200
    # A body over the limit is refused from its declared length, before it is read.
    status, body = _declare_body(server, "/v1/import", MAX_BODY_BYTES + 1, TOKEN)
    assert status == 413 and body["error"]["code"] == "too_large"


def _declare_body(base: str, path: str, length: int, token: str | None = None) -> tuple[int, dict]:
    """POST with a Content-Length of `length` and no body sent: the status and JSON."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("POST", path)
        if token:
            connection.putheader("Authorization", f"Bearer {token}")
        connection.putheader("Content-Length", str(length))
        connection.endheaders()
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


Sample = tuple[str, tuple[tuple[str, str], ...]]


def _samples(base: str, accept: str | None = None) -> dict[Sample, float]:
    """GET /metrics, parsed by prometheus_client's own parser (OpenMetrics' for an `accept` of
    it): each sample's value by its name and labels."""
    status, text, head = call(f"{base}/metrics", headers={"Accept": accept} if accept else None)
    assert status == 200, text
    if accept:
        assert head["content-type"].startswith("application/openmetrics-text")
        families = openmetrics_families(text.decode())
    else:
        assert head["content-type"].startswith("text/plain; version=0.0.4")
        families = text_string_to_metric_families(text.decode())
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in families for sample in family.samples}


@pytest.mark.subprocess
def test_metrics_count_the_requests_made(server):
    """/metrics in Prometheus' text format: look-ups, hits, misses, refusals and look-up latency
    move by exactly the requests made; the gauges give the version served and its age."""
    before = _samples(server)
    assert math.isnan(before[("fdo_service_store_version", ())])
    assert before[("fdo_service_store_degraded", ())] == 0
    assert ("process_start_time_seconds", ()) in before  # when the counters started from zero
    assert call(f"{server}/v1/import", _imports(_entry(1, {"xla_cpu_use_xnnpack": False})), TOKEN)[0] == 200
    key, missing = store_key(f"{1:032x}", "e" * 32), "0" * 32
    for wanted, times in ((key, 3), (missing, 2)):
        for _ in range(times):
            call(f"{server}/v1/configs/{wanted}")
    assert call(f"{server}/v1/configs:batch", json.dumps({"keys": [key, missing, missing]}).encode())[0] == 200
    refused = [call(f"{server}/v1/configs/NOT-A-KEY")[0],
               call(f"{server}/v1/import", _imports(_entry(2, {})), "wrong")[0],
               call(f"{server}/v1/rollback", b'{"version": "1"}', TOKEN)[0],
               _declare_body(server, "/v1/configs:batch", MAX_JSON_BYTES + 1)[0],
               _post_chunked(server, "/v1/configs:batch", MAX_JSON_BYTES + (1 << 20))[0]]
    assert refused == [400, 401, 422, 413, 413]
    after = _samples(server)

    def moved(name: str, **labels: str) -> float:
        sample = (name, tuple(sorted(labels.items())))
        return after.get(sample, 0.0) - before.get(sample, 0.0)

    assert [moved("fdo_service_lookups_total", route=route, outcome=outcome)
            for route in ("key", "batch") for outcome in ("hit", "miss")] == [3, 2, 1, 2]
    assert moved("fdo_service_lookup_seconds_count", route="key") == 6  # the refused key too
    assert moved("fdo_service_lookup_seconds_bucket", route="key", le="+Inf") == 6
    assert moved("fdo_service_lookup_seconds_count", route="batch") == 1
    assert after[("fdo_service_lookup_seconds_sum", (("route", "key"),))] > 0
    assert {code: moved("fdo_service_refusals_total", code=code)
            for code in ("bad_key", "unauthorized", "invalid", "too_large")} == {
        "bad_key": 1, "unauthorized": 1, "invalid": 1, "too_large": 2}
    assert not any(name == "fdo_service_errors_total" for name, _ in after)  # no 5xx
    assert after[("fdo_service_store_version", ())] == 1
    assert 0 <= after[("fdo_service_snapshot_age_seconds", ())] < 3600  # published in this test
    openmetrics = _samples(server, "application/openmetrics-text; version=1.0.0")
    assert openmetrics[("fdo_service_lookups_total", (("outcome", "hit"), ("route", "key")))] == 3


@pytest.mark.subprocess
def test_openapi_shows_a_model_for_every_request_body(server):
    """/openapi.json: every POST that takes a body declares its model, a config is an object in
    requests and answers, and every write needs the bearer token."""
    status, schema, _ = call(f"{server}/openapi.json")
    assert status == 200
    components = schema["components"]["schemas"]

    def resolved(node: dict) -> dict:
        return components[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node

    posts = {path: item["post"] for path, item in schema["paths"].items() if "post" in item}
    assert set(posts) == {"/v1/configs:batch", "/v1/import", "/v1/invalidate", "/v1/rollback", "/v1/deliver"}
    bodies = {path: resolved(post["requestBody"]["content"]["application/json"]["schema"])
              for path, post in posts.items() if "requestBody" in post}
    assert set(bodies) == set(posts) - {"/v1/deliver"}  # deliver takes no body
    assert bodies["/v1/configs:batch"]["properties"]["keys"]["maxItems"] == 1000
    assert bodies["/v1/invalidate"]["properties"]["keys"]["minItems"] == 1
    assert bodies["/v1/rollback"]["properties"]["version"]["type"] == "integer"
    entry = bodies["/v1/import"]["properties"]["entries"]["items"]
    assert entry["properties"]["config"]["type"] == "object"
    assert set(entry["required"]) == {"fingerprint", "env_key", "kind", "config", "speedup"}
    answer = resolved(schema["paths"]["/v1/configs/{key}"]["get"]["responses"]["200"]["content"]
                      ["application/json"]["schema"])
    served = resolved(answer["properties"]["entry"])["properties"]["config"]
    assert {"type": "object", "additionalProperties": True} in served["anyOf"]
    for path in set(posts) - {"/v1/configs:batch"}:
        assert posts[path]["security"] == [{"HTTPBearer": []}], path
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


@pytest.mark.subprocess
@pytest.mark.browser
def test_api_docs_render_with_every_other_host_blocked(server, browser):
    """/docs (Swagger UI) and /redoc load their scripts and styles from the service itself: in
    Chromium, with every request to another host aborted, both list the endpoints. Swagger UI
    asks nothing of another host; ReDoc only its maker's logo, an image."""
    host = urllib.parse.urlsplit(server).netloc
    elsewhere: dict[str, list[tuple[str, str]]] = {"/docs": [], "/redoc": []}
    errors: list[str] = []
    page = browser.new_page()

    def only_the_server(route) -> None:
        if urllib.parse.urlsplit(route.request.url).netloc == host:
            route.continue_()
        else:
            elsewhere[urllib.parse.urlsplit(page.url).path].append((route.request.resource_type, route.request.url))
            route.abort()

    try:
        page.route("**/*", only_the_server)
        page.on("pageerror", lambda e: errors.append(str(e)))
        assert page.goto(f"{server}/docs").status == 200
        page.wait_for_selector('.opblock-summary-path[data-path="/v1/configs/{key}"]', timeout=60_000)
        swagger = set(page.eval_on_selector_all(".opblock-summary-path", "els => els.map(e => e.dataset.path)"))
        assert page.goto(f"{server}/redoc").status == 200
        page.wait_for_selector('text="/v1/configs/{key}"', state="attached", timeout=60_000)
        redoc = page.eval_on_selector_all("[role=menuitem]", "els => els.map(e => e.innerText.split(/\\s+/))")
    finally:
        page.close()
    assert {"/v1/configs/{key}", "/v1/configs:batch", "/v1/import", "/v1/rollback", "/metrics"} <= swagger
    assert [["GET", "Lookup"], ["POST", "Import", "Entries"]] == [item for item in redoc
                                                                 if item[-1] in ("Lookup", "Entries")]
    assert elsewhere["/docs"] == [] and {kind for kind, _ in elsewhere["/redoc"]} <= {"image"}, elsewhere
    assert errors == []


def _lookup(base: str, key: str, timeout: float = 30) -> tuple[int, dict]:
    """One look-up on a connection of its own: its status and JSON."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.request("GET", f"/v1/configs/{key}")
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _post_in_thread(url: str, body: bytes, token: str) -> tuple[threading.Thread, dict]:
    """POST `body` to `url` from a thread; the dict gets the answer as "status" and "body"."""
    answer: dict = {}

    def post() -> None:
        answer["status"], answer["body"], _ = call(url, body, token, timeout=300)

    thread = threading.Thread(target=post)
    thread.start()
    return thread, answer


def _waiting_on(lock: Path) -> bool:
    """Whether a lock request blocks on the flock of `lock` now, as /proc/locks says."""
    inode = f":{lock.stat().st_ino} "
    return any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


def _accepted_result(task_id: str, fingerprint: str) -> dict:
    return {"dt": datetime.date.today(), "task_id": task_id, "kind": "graph", "fingerprint": fingerprint,
            "env_key": "e" * 32, "config": '{"xla_cpu_use_xnnpack": false}', "speedup": 1.3,
            "ci_low": 1.2, "ci_high": 1.4, "numerics_ok": True, "compiler_version": "jaxlib-test",
            "accepted": True, "status": "accepted", "strategy": "evolution", "evaluations": 40,
            "measured": 12}


@pytest.mark.slow
@pytest.mark.subprocess
def test_lookups_answer_while_writes_wait_on_the_store_lock_or_run_beam(tmp_path):
    """A write holds no look-up: an import waits on the store's flock, held by this test
    process, with a deliver queued behind it; once the lock is let go, the deliver runs Beam and
    publishes. Look-ups are answered all along."""
    home = tmp_path / "home"
    Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist([_accepted_result("t1", "d" * 32)],
                                                                TUNING_RESULTS.schema), "test")
    with running_server(home, {"FDO_TOKEN": TOKEN}) as server:
        imported = call(f"{server}/v1/import", _imports(_entry(1, {"xla_cpu_use_xnnpack": False})), TOKEN)
        assert imported[1]["version"] == 1
        key = store_key(f"{1:032x}", "e" * 32)
        lock = home / "store" / ".lock"
        answered_during_deliver = 0
        with open(lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            try:
                importing, imported = _post_in_thread(f"{server}/v1/import", _imports(_entry(2, {})), TOKEN)
                deadline = time.monotonic() + 120
                while not _waiting_on(lock):
                    assert time.monotonic() < deadline, "the import never reached the store lock"
                    assert _lookup(server, key)[1]["version"] == 1
                delivering, delivered = _post_in_thread(f"{server}/v1/deliver", b"", TOKEN)
                for _ in range(20):
                    status, body = _lookup(server, key, timeout=5)
                    assert (status, body["version"]) == (200, 1)
                assert importing.is_alive() and delivering.is_alive()  # answered before the lock was released
            finally:
                fcntl.flock(held, fcntl.LOCK_UN)
        importing.join(300)
        while delivering.is_alive():
            assert _lookup(server, key, timeout=5)[0] == 200
            answered_during_deliver += 1
        assert imported["status"] == delivered["status"] == 200, (imported, delivered)
        assert (imported["body"]["version"], delivered["body"]["version"]) == (2, 3)
        assert answered_during_deliver >= 1
        assert _lookup(server, store_key("d" * 32, "e" * 32))[0] == 200
        assert call(f"{server}/v1/health")[1]["version"] == 3


def _rss_peak(pid: int) -> int:
    """The peak resident memory of process `pid` so far, in bytes (VmHWM in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def _post_chunked(base: str, path: str, total: int, token: str | None = None) -> tuple[int, dict, int]:
    """POST `total` bytes to `path` as a chunked body, stopping once the server answers or stops
    reading: its status, JSON and how many bytes were sent."""
    host, port = base.removeprefix("http://").split(":")
    chunk = b" " * (1 << 16)
    framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n"
                     f"{f'Authorization: Bearer {token}' + chr(13) + chr(10) if token else ''}\r\n".encode())
        sock.settimeout(0.5)  # a server that stopped reading leaves a send blocked on a full buffer
        try:
            while sent < total:
                sock.sendall(framed)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        sock.settimeout(30)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, json.loads(response.read()), sent


@pytest.mark.subprocess
def test_a_chunked_body_far_over_the_limit_is_refused_unread(tmp_path):
    """A chunked body declares no length: the server counts it as it streams in, answers 413
    once past the limit and reads no further, so its memory never holds the body."""
    with serving_process(tmp_path / "home", {"FDO_TOKEN": TOKEN}) as (server, process):
        call(f"{server}/v1/configs:batch", json.dumps({"keys": ["0" * 32]}).encode())
        before = _rss_peak(process.pid)
        for path, token, limit in (("/v1/configs:batch", None, MAX_JSON_BYTES),
                                   ("/v1/import", TOKEN, MAX_BODY_BYTES)):
            status, body, sent = _post_chunked(server, path, 512 << 20, token)
            assert status == 413 and body["error"]["code"] == "too_large", (path, body)
            assert sent < limit + (32 << 20), f"{path}: the server read on after the limit"
        grown = _rss_peak(process.pid) - before  # the import's 16 MiB at most, not 512 MiB
        assert grown < MAX_BODY_BYTES + (24 << 20), f"the server's peak memory grew by {grown >> 20} MiB"
        assert call(f"{server}/v1/health")[0] == 200


def _is_error(status: int, body: object, code: str | None = None) -> bool:
    return (isinstance(body, dict) and set(body) == {"error"} and set(body["error"]) == {"code", "message"}
            and isinstance(body["error"]["message"], str) and (code is None or body["error"]["code"] == code))


@pytest.mark.slow
@pytest.mark.subprocess
def test_every_error_is_json_in_one_shape(tmp_path):
    """The framework's own errors (404, 405, 422, 500) as well as the service's (400, 401, 403,
    413, 503): {"error": {"code", "message"}}, each caused for real."""
    home = tmp_path / "home"
    Warehouse(home).append(TUNING_RESULTS, pa.Table.from_pylist([_accepted_result("t1", "d" * 32)],
                                                                TUNING_RESULTS.schema), "test")
    (home / "delivery").write_text("a file where deliver keeps its runs: an internal error\n")
    with running_server(home, {"FDO_TOKEN": TOKEN}) as server:
        cases = {
            "not_found": (404, call(f"{server}/v1/no-such-thing")),
            "method_not_allowed": (405, call(f"{server}/v1/import")),
            "invalid": (422, call(f"{server}/v1/snapshots/latest")),
            "bad_key": (400, call(f"{server}/v1/configs/not-a-key")),
            "unauthorized": (401, call(f"{server}/v1/rollback", b"{}", "wrong")),
            # Sent as a stream that tolerates the server's early close (a plain POST can die in
            # a broken pipe before it reads the 413: seen once on a fresh clone).
            "too_large": (413, _post_chunked(server, "/v1/configs:batch", MAX_JSON_BYTES + (1 << 20))),
            "internal": (500, call(f"{server}/v1/deliver", b"", TOKEN)),
        }
        for code, (status, (got, body, _)) in cases.items():
            assert got == status and _is_error(got, body, code), (code, got, body)
        assert call(f"{server}/v1/import")[2]["allow"] == "POST"
        status, body, _ = call(f"{server}/v1/configs:batch", b"not json")
        assert status == 422 and _is_error(status, body, "invalid") and "JSON decode error" in body["error"]["message"]
        assert _samples(server)[("fdo_service_errors_total", (("code", "internal"),))] == 1
    (home / "store").mkdir()
    (home / "store" / "CURRENT").write_text("garbage\n")
    with running_server(home) as server:  # no token, and a store with nothing good to serve
        status, body, _ = call(f"{server}/v1/import", _imports(_entry(1, {})))
        assert status == 403 and _is_error(status, body, "writes_disabled")
        status, body, _ = call(f"{server}/v1/configs/{'0' * 32}")
        assert status == 503 and _is_error(status, body, "store_unavailable")
        assert "CURRENT" in body["error"]["message"]
        status, body, _ = call(f"{server}/v1/health")
        assert status == 503 and body["status"] == "unavailable" and body["store"].startswith("degraded: ")


def _health_once(server: str, wanted: str, timeout: float = 30) -> dict:
    """Health as soon as its "store" starts with `wanted` (the watcher polls the disk)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body, _ = call(f"{server}/v1/health")
        if body["store"].startswith(wanted):
            assert status == 200
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


@pytest.mark.subprocess
def test_the_last_good_snapshot_is_served_while_the_store_is_broken(tmp_path):
    """A corrupt CURRENT, a deleted live version, a live version failing its checksum: look-ups
    go on from the last good snapshot, health says why, and a rollback repairs each."""
    home = tmp_path / "home"
    store = home / "store"
    key = store_key(f"{1:032x}", "e" * 32)
    with running_server(home, {"FDO_TOKEN": TOKEN}) as server:
        imported = call(f"{server}/v1/import", _imports(_entry(1, {"xla_cpu_use_xnnpack": False})), TOKEN)
        assert imported[1]["version"] == 1

        def breaks(damage, because: str, rollback_gives: int) -> None:
            version = call(f"{server}/v1/health")[1]["version"]
            damage()
            assert because in _health_once(server, "degraded: ")["store"]
            status, body = _lookup(server, key)
            assert (status, body["version"]) == (200, version)  # the last good snapshot
            status, body, _ = call(f"{server}/v1/import", _imports(_entry(2, {})), TOKEN)
            assert status == 400 and "roll back" in body["error"]["message"]
            assert call(f"{server}/v1/rollback", b'{"version": 1}', TOKEN)[1] == {"version": rollback_gives}
            assert _health_once(server, "ok")["version"] == rollback_gives

        breaks(lambda: (store / "CURRENT").write_text("garbage\n"), "CURRENT", 2)
        breaks(lambda: shutil.rmtree(store / "v2"), "does not exist", 3)  # v2 is never used again
        breaks(lambda: (store / "v3" / "entries.parquet").write_bytes(b"PAR1 not a table PAR1"),
               "checksum", 4)
        assert _lookup(server, key)[1]["version"] == 4


@pytest.mark.subprocess
def test_the_service_and_its_dashboards_work_on_a_url_home(tmp_path):
    """`fdo serve --home fdotest://...`: its writer process reaches the URL home too (a Home
    brings its file system's module along), and look-ups see each write."""
    key = store_key(f"{1:032x}", "e" * 32)
    with serving_process(url_of(tmp_path / "home"), {"FDO_TOKEN": TOKEN},
                         preload="tests.support.url_home") as (server, _):
        assert call(f"{server}/v1/health")[1]["version"] is None
        status, body, _ = call(f"{server}/v1/import", _imports(_entry(1, {"xla_cpu_use_xnnpack": False})), TOKEN)
        assert (status, body) == (200, {"version": 1, "imported": 1})
        assert _lookup(server, key)[1]["entry"]["config"] == {"xla_cpu_use_xnnpack": False}
        assert call(f"{server}/v1/invalidate", json.dumps({"keys": [key]}).encode(), TOKEN)[1] == {"version": 2}
        assert call(f"{server}/v1/configs/{key}")[0] == 404
        status, rows, _ = call(f"{server}/api/store")
        assert status == 200 and [row["version"] for row in rows] == [1, 2]
        status, page, _ = call(f"{server}/")
        assert status == 200 and f"fdotest://{tmp_path}/home".encode() in page
    assert Store(tmp_path / "home").current() == 2  # the URL's files, in the same layout
