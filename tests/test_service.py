"""The config service: a real uvicorn server on loopback, read and write paths, errors as JSON."""

from __future__ import annotations

import http.client
import json

import pytest

from ingest.environment import store_key
from tests.serving import call, running_server

TOKEN = "s3cret-token"


@pytest.fixture
def server(tmp_path):
    with running_server(tmp_path / "home", {"FDO_TOKEN": TOKEN}) as base:
        yield base


def _line(i: int, config: dict) -> bytes:
    return (json.dumps({"fingerprint": f"{i:032x}", "env_key": "e" * 32, "kind": "graph",
                        "config": config, "speedup": 1.25}) + "\n").encode()


def test_reads_and_writes_through_a_real_server(server):
    assert call(f"{server}/v1/health")[1] == {"status": "ok", "version": None, "entries": 0}
    status, body, _ = call(f"{server}/v1/import", _line(1, {"xla_cpu_use_xnnpack": False}))
    assert status == 401 and body["error"]["code"] == "unauthorized"
    status, body, _ = call(f"{server}/v1/import", _line(1, {"xla_dump_to": "/tmp/x"}), TOKEN)
    assert status == 400 and "xla_dump_to" in body["error"]["message"]
    status, body, _ = call(f"{server}/v1/import", _line(1, {"xla_cpu_use_xnnpack": False}) +
                           _line(2, {"xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"}), TOKEN)
    assert (status, body) == (200, {"version": 1, "imported": 2})
    key = store_key(f"{1:032x}", "e" * 32)
    status, body, _ = call(f"{server}/v1/configs/{key}")
    assert status == 200 and body["version"] == 1 and json.loads(body["entry"]["config"]) == {"xla_cpu_use_xnnpack": False}
    missing = "0" * 32
    assert call(f"{server}/v1/configs/{missing}")[0] == 404
    assert call(f"{server}/v1/configs/not-a-key")[1]["error"]["code"] == "bad_key"
    status, body, _ = call(f"{server}/v1/configs:batch", json.dumps({"keys": [key, missing]}).encode())
    assert status == 200 and body["entries"][missing] is None and body["entries"][key]["speedup"] == 1.25
    too_many = json.dumps({"keys": [missing] * 1001}).encode()
    assert call(f"{server}/v1/configs:batch", too_many)[0] == 400
    status, data, head = call(f"{server}/v1/snapshots/1")
    assert status == 200 and data[:4] == b"PAR1"
    assert call(f"{server}/v1/snapshots/1", headers={"If-None-Match": head["etag"]})[0] == 304
    assert call(f"{server}/v1/invalidate", json.dumps({"keys": [key]}).encode(), TOKEN)[1] == {"version": 2}
    assert call(f"{server}/v1/configs/{key}")[0] == 404
    assert call(f"{server}/v1/rollback", json.dumps({"version": 1}).encode(), TOKEN)[1] == {"version": 3}
    assert call(f"{server}/v1/configs/{key}")[0] == 200
    # A body over the limit is refused from its declared length, before it is read.
    host, port = server.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.putrequest("POST", "/v1/import")
    connection.putheader("Authorization", f"Bearer {TOKEN}")
    connection.putheader("Content-Length", str(17 << 20))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and json.loads(response.read())["error"]["code"] == "too_large"
    assert call(f"{server}/v1/metrics")[1]["lookups"] >= 4
