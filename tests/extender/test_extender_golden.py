"""Golden tests: the captured kube-scheduler bodies posted to the real server under
uvicorn on loopback. The captured answers came from a lab extender with different
scoring, so the structure is compared field by field (keys, exact case, types, node
set, FailedNodes shape), not the lab's numbers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from extender.config import ExtenderConfig
from extender.run import build
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.uvicorn_server import serve_app
from tests.fake_kube import FakeKubeApi, make_node

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-wire"


def load(name: str) -> dict:
    return json.loads((WIRE / name).read_text())


@pytest.fixture(scope="module")
def standalone() -> Iterator[httpx.Client]:
    running = build(ExtenderConfig.from_mapping({"server": {"standalone": True}}), FakeClock())
    with serve_app(running.app) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield client


def test_filter_full_nodelist_matches_the_captured_shape(standalone: httpx.Client) -> None:
    body = (WIRE / "filter-request.nodeCacheCapable-false.json").read_bytes()
    r = standalone.post("/filter", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    got, want = r.json(), load("filter-response.nodeCacheCapable-false.json")
    assert set(got) == set(want) | {"FailedAndUnresolvableNodes"}
    assert set(want) <= set(got)
    assert got["NodeNames"] is None and want["NodeNames"] is None
    assert isinstance(got["Nodes"], dict) and isinstance(got["Nodes"]["items"], list)
    assert isinstance(got["FailedNodes"], dict) and isinstance(got["Error"], str)
    assert got["Error"] == ""
    # no signals anywhere: every node passes, echoed unchanged (the lab failed lab-node-c)
    request_items = json.loads(body)["Nodes"]["items"]
    assert got["Nodes"]["items"] == request_items
    assert got["FailedNodes"] == {}
    # every node the lab kept is kept, with the identical object
    for item in want["Nodes"]["items"]:
        assert item in got["Nodes"]["items"]


def test_filter_names_only_matches_the_captured_shape(standalone: httpx.Client) -> None:
    body = (WIRE / "filter-request.nodeCacheCapable-true.json").read_bytes()
    r = standalone.post("/filter", content=body)
    assert r.status_code == 200
    got, want = r.json(), load("filter-response.nodeCacheCapable-true.json")
    assert list(got)[:2] == ["Nodes", "NodeNames"]
    assert set(want) <= set(got)
    assert got["Nodes"] is None
    # standalone has no node cache: unknown nodes pass, in request order
    assert got["NodeNames"] == json.loads(body)["NodeNames"] == want["NodeNames"]
    assert got["FailedNodes"] == {} == want["FailedNodes"]
    assert got["Error"] == want["Error"] == ""


@pytest.mark.parametrize("mode", ["false", "true"])
def test_prioritize_matches_the_captured_shape(standalone: httpx.Client, mode: str) -> None:
    body = (WIRE / f"prioritize-request.nodeCacheCapable-{mode}.json").read_bytes()
    r = standalone.post("/prioritize", content=body)
    assert r.status_code == 200
    got, want = r.json(), load(f"prioritize-response.nodeCacheCapable-{mode}.json")
    assert isinstance(got, list) and len(got) == len(want)
    # the scheduler matches entries by Host; the lab answered in its own order, we answer
    # in request order
    assert sorted(h["Host"] for h in got) == sorted(h["Host"] for h in want)
    request = json.loads(body)
    names = request["NodeNames"] or [n["metadata"]["name"] for n in request["Nodes"]["items"]]
    assert [h["Host"] for h in got] == names
    for entry in got:
        assert list(entry) == ["Host", "Score"]
        assert isinstance(entry["Host"], str)
        assert type(entry["Score"]) is int and 0 <= entry["Score"] <= 10


def test_gzip_and_go_client_headers_are_accepted(standalone: httpx.Client) -> None:
    lines = (WIRE / "filter-request-headers.nodeCacheCapable-true.txt").read_text().splitlines()
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    headers.pop("Content-Length", None)
    headers.pop("Host", None)
    body = (WIRE / "filter-request.nodeCacheCapable-true.json").read_bytes()
    r = standalone.post("/filter", content=body, headers=headers)
    assert r.status_code == 200 and r.json()["NodeNames"]


def signals_for(clock: FakeClock, free_mib: float) -> str:
    return encode_signals(
        NodeSignals(
            ts=clock.now(),
            gpus=(GpuSignal(index=0, mem_total_mib=81920, mem_used_mib=81920 - free_mib),),
            streams=3,
        )
    )


def test_names_only_against_a_synced_cache_fails_nodes_that_cannot_fit() -> None:
    """The captured names-only bodies, with the lab nodes known to the cache through
    a FakeKubeApi: lab-node-c has too little free GPU memory for the pod."""
    clock = FakeClock()
    with FakeKubeApi() as api:
        api.put(
            make_node("lab-node-a", annotations={"kvspread.io/signals": signals_for(clock, 60000)})
        )
        api.put(
            make_node("lab-node-b", annotations={"kvspread.io/signals": signals_for(clock, 30000)})
        )
        api.put(
            make_node("lab-node-c", annotations={"kvspread.io/signals": signals_for(clock, 4000)})
        )
        cfg = ExtenderConfig.from_mapping({"kubernetes": {"api_server": api.url}})
        running = build(cfg, clock)
        running.start()
        try:
            assert api.wait_for(running.ready, 10)
            body = json.loads((WIRE / "filter-request.nodeCacheCapable-true.json").read_bytes())
            body["Pod"]["metadata"]["annotations"]["kvspread.io/gpu-memory"] = "20Gi"
            body["Pod"]["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
            with serve_app(running.app) as url, httpx.Client(base_url=url) as client:
                assert client.get("/readyz").status_code == 200
                r = client.post("/filter", json=body)
                assert r.status_code == 200
                got = r.json()
                assert got["NodeNames"] == ["lab-node-a", "lab-node-b"]
                assert list(got["FailedNodes"]) == ["lab-node-c"]
                assert got["FailedNodes"]["lab-node-c"].startswith(
                    "kvspread: needs 1 GPU with 20 GiB free, node has 0"
                )
                r = client.post("/prioritize", json=body)
                hosts = {h["Host"]: h["Score"] for h in r.json()}
                assert list(hosts) == ["lab-node-a", "lab-node-c", "lab-node-b"]
                assert hosts["lab-node-c"] == 0  # cannot fit
                ex = client.get("/debug/explain", params={"pod": "default/lab-pod-1"}).json()
                assert {s["node"] for s in ex["prioritize"]["scores"]} == set(hosts)
                assert ex["filter"]["failed"] == got["FailedNodes"]
        finally:
            running.stop()
