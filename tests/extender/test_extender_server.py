"""HTTP surface: TLS, configurable verbs, /metrics, /debug/explain, /healthz, /readyz,
the debug decision log, and no 5xx even when the decision code fails."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path

import httpx
import pytest
import trustme

from extender.config import ExtenderConfig
from extender.run import build
from extender.scoring import TERMS
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.uvicorn_server import serve_app
from tests.fake_kube import make_node, make_pod

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-wire"


def gpu_body(clock: FakeClock, names: list[str] | None = None) -> dict:
    nodes = []
    for i, used in enumerate([1000, 50000, 81000]):
        sig = encode_signals(
            NodeSignals(
                ts=clock.now(),
                gpus=(GpuSignal(index=0, mem_total_mib=81920, mem_used_mib=used),),
                streams=2,
                p95_s=0.03,
            )
        )
        nodes.append(make_node(f"g{i}", annotations={"kvspread.io/signals": sig}))
    pod = make_pod(
        "llm-0",
        "serving",
        gpus=1,
        labels={"kvspread.io/model": "llama", "kvspread.io/qos": "realtime"},
        annotations={"kvspread.io/gpu-memory": "24Gi"},
    )
    return {"Pod": pod, "Nodes": {"items": nodes}, "NodeNames": None}


def test_tls_and_custom_verbs(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_pem, key_pem, ca_pem = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    cert.cert_chain_pems[0].write_to_path(str(cert_pem))
    cert.private_key_pem.write_to_path(str(key_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    cfg = ExtenderConfig.from_mapping(
        {
            "server": {
                "standalone": True,
                "tls_cert": str(cert_pem),
                "tls_key": str(key_pem),
                "filter_verb": "kvspread/filter",
                "prioritize_verb": "kvspread/prioritize",
            }
        }
    )
    clock = FakeClock()
    running = build(cfg, clock)
    ctx = ssl.create_default_context(cafile=str(ca_pem))
    with serve_app(running.app, ssl_certfile=str(cert_pem), ssl_keyfile=str(key_pem)) as url:
        assert url.startswith("https://")
        with httpx.Client(base_url=url, verify=ctx) as client:
            r = client.post("/kvspread/filter", json=gpu_body(clock))
            assert r.status_code == 200
            assert [n["metadata"]["name"] for n in r.json()["Nodes"]["items"]] == ["g0", "g1"]
            assert r.json()["FailedNodes"]["g2"].startswith(
                "kvspread: needs 1 GPU with 24 GiB free"
            )
            r = client.post("/kvspread/prioritize", json=gpu_body(clock))
            scores = {h["Host"]: h["Score"] for h in r.json()}
            assert scores["g2"] == 0 and max(scores.values()) == 10
            assert client.post("/filter", json=gpu_body(clock)).status_code == 404
        with pytest.raises(httpx.ConnectError), httpx.Client(base_url=url) as plain:
            plain.get("/healthz")  # untrusted certificate


@pytest.fixture
def app_client():  # noqa: ANN201
    clock = FakeClock()
    running = build(ExtenderConfig.from_mapping({"server": {"standalone": True}}), clock)
    with serve_app(running.app) as url, httpx.Client(base_url=url) as client:
        yield running, client, clock


def test_metrics_after_requests(app_client) -> None:  # noqa: ANN001
    running, client, clock = app_client
    client.post("/filter", json=gpu_body(clock))
    client.post("/prioritize", json=gpu_body(clock))
    client.post("/prioritize", content=b"nope")
    text = client.get("/metrics").text
    for line in [
        'kvspread_extender_requests_total{code="200",verb="filter"} 1.0',
        'kvspread_extender_requests_total{code="400",verb="prioritize"} 1.0',
        'kvspread_extender_filter_failures_total{reason="gpu_memory"} 1.0',
        'kvspread_extender_node_signals_total{state="fresh"} 6.0',
        'kvspread_extender_prioritize_decisions_total{outcome="placed"} 1.0',
        'kvspread_extender_filter_decisions_total{outcome="passed"} 1.0',
        'kvspread_extender_score_term_count{term="fragmentation"} 3.0',
    ]:
        assert line in text, line
    assert 'kvspread_extender_request_duration_seconds_bucket{le="0.005",verb="filter"}' in text


def test_explain_gives_each_nodes_terms(app_client) -> None:  # noqa: ANN001
    _, client, clock = app_client
    assert client.get("/debug/explain", params={"pod": "serving/llm-0"}).status_code == 404
    client.post("/prioritize", json=gpu_body(clock))
    doc = client.get("/debug/explain", params={"pod": "serving/llm-0"}).json()
    rows = doc["prioritize"]["scores"]
    assert [r["node"] for r in rows][0] in ("g0", "g1")
    assert {r["node"] for r in rows} == {"g0", "g1", "g2"}
    for r in rows:
        assert set(r["terms"]) == set(TERMS)
        # a realtime one-GPU pod: covered; no GPU reports utilisation or kvspread claims
        assert r["terms"]["contention"] == 1.0
        assert 0 <= r["score"] <= 10
    assert doc["prioritize"]["shape"]["mem_per_gpu_mib"] == 24576.0
    assert doc["prioritize"]["nodes"] == 3 and doc["prioritize"]["unknown_nodes"] == []
    assert doc["prioritize"]["weights"]["contention"] == 0.5  # in this pod's values
    assert doc["prioritize"]["contention_qos"] == ["realtime"]
    # a batch pod: the term does not cover it, so neither it nor its weight is shown
    body = gpu_body(clock)
    body["Pod"]["metadata"]["labels"]["kvspread.io/qos"] = "batch"
    body["Pod"]["metadata"]["name"] = "llm-b"
    body["Pod"]["metadata"]["uid"] = "uid-llm-b"
    client.post("/prioritize", json=body)
    doc_b = client.get("/debug/explain", params={"pod": "serving/llm-b"}).json()["prioritize"]
    assert "contention" not in doc_b["weights"] and doc_b["weights"]["fragmentation"] == 0.35
    assert all(r["terms"]["contention"] is None for r in doc_b["scores"])
    top = client.get("/debug/explain", params={"pod": "serving/llm-0", "top": 1}).json()
    assert len(top["prioritize"]["scores"]) == 1
    for bad in ({"pod": "nonamespace"}, {"pod": "a/b", "top": 0}):
        r = client.get("/debug/explain", params=bad)
        assert r.status_code == 400 and r.json()["error"]
    for top in ("abc", "1.5", "-2", ""):
        r = client.get("/debug/explain", params={"pod": "serving/llm-0", "top": top})
        assert r.status_code == 400, (top, r.text)
        assert r.json() == {"error": f"top must be a whole number >= 1, got {top!r}"}


def test_explain_switched_off_answers_404_and_scoring_still_works() -> None:
    clock = FakeClock()
    cfg = ExtenderConfig.from_mapping(
        {"server": {"standalone": True}, "explain": {"enabled": False}}
    )
    running = build(cfg, clock)
    with serve_app(running.app) as url, httpx.Client(base_url=url) as client:
        assert client.post("/prioritize", json=gpu_body(clock)).status_code == 200
        r = client.get("/debug/explain", params={"pod": "serving/llm-0"})
        assert r.status_code == 404
        assert r.json() == {"error": "/debug/explain is off (explain.enabled)"}
        assert client.get("/debug/explain").status_code == 404  # no hint about its parameters


def test_health_and_readiness() -> None:
    cfg = ExtenderConfig.from_mapping({"kubernetes": {"api_server": "http://127.0.0.1:9"}})
    running = build(cfg, FakeClock())  # never started: caches never sync
    with serve_app(running.app) as url, httpx.Client(base_url=url) as client:
        assert client.get("/healthz").status_code == 200
        r = client.get("/readyz")
        assert r.status_code == 503 and "first list" in r.text
        assert 'kvspread_extender_cache_synced{resource="nodes"} 0.0' in client.get("/metrics").text
        running.state.replace_nodes([])
        running.state.replace_pods([])
        r = client.get("/readyz")
        assert r.status_code == 503 and r.text.endswith(": nodesignals")  # not listed yet
        assert 'cache_synced{resource="nodesignals"} 0.0' in client.get("/metrics").text
        running.state.node_signals.replace_all([])
        assert client.get("/readyz").status_code == 200


def test_unknown_paths_and_methods_answer_the_documented_error_shape(app_client) -> None:  # noqa: ANN001
    """Every answer is `{"error": ...}` (docs/extender.md): FastAPI's own 404 and 405 were
    `{"detail": "Not Found"}` (found black-box)."""
    _, client, _ = app_client
    r = client.get("/nope")
    assert r.status_code == 404 and "no such path /nope" in r.json()["error"]
    assert "POST /filter and /prioritize" in r.json()["error"] and "detail" not in r.json()
    r = client.get("/filter")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json() == {"error": "method GET not allowed on /filter"}
    long = client.get("/" + "x" * 5000)
    assert long.status_code == 404 and len(long.content) < 600


def test_a_failure_inside_the_decision_never_gives_5xx(app_client, monkeypatch, caplog) -> None:  # noqa: ANN001
    running, client, clock = app_client

    def boom(*args: object) -> bytes:
        raise RuntimeError("bug")

    monkeypatch.setattr(running.extender, "filter", boom)
    monkeypatch.setattr(running.extender, "prioritize", boom)
    with caplog.at_level(logging.ERROR, logger="kvspread.extender.server"):
        r = client.post("/filter", json=gpu_body(clock))
        assert r.status_code == 200 and "internal error" in r.json()["Error"]
        r = client.post("/prioritize", json=gpu_body(clock))
        assert r.status_code == 200 and [h["Score"] for h in r.json()] == [5, 5, 5]
    assert any("extender failed" in rec.getMessage() for rec in caplog.records)
    assert 'code="internal",verb="filter"' in client.get("/metrics").text


def test_debug_log_line_per_decision(app_client, caplog) -> None:  # noqa: ANN001
    _, client, clock = app_client
    with caplog.at_level(logging.DEBUG, logger="kvspread.extender"):
        client.post("/prioritize", json=gpu_body(clock))
    recs = [r for r in caplog.records if r.getMessage() == "prioritize decision"]
    assert len(recs) == 1
    kv = recs[0].kv  # type: ignore[attr-defined]
    assert kv["pod"] == "serving/llm-0" and kv["nodes"] == 3
    assert kv["best"]["node"] in ("g0", "g1") and "terms" in kv["best"]
    json.dumps(kv)  # the JSON log formatter can write it


def test_invalid_pod_annotation_fails_every_node(app_client) -> None:  # noqa: ANN001
    _, client, clock = app_client
    body = gpu_body(clock)
    body["Pod"]["metadata"]["annotations"]["kvspread.io/gpu-memory"] = "lots"
    doc = client.post("/filter", json=body).json()
    assert doc["Nodes"]["items"] == []
    # preemption cannot fix the pod's own annotation: unresolvable
    assert doc["FailedNodes"] == {}
    assert set(doc["FailedAndUnresolvableNodes"]) == {"g0", "g1", "g2"}
    reason = doc["FailedAndUnresolvableNodes"]["g0"]
    assert "kvspread.io/gpu-memory='lots'" in reason and "Kubernetes quantity" in reason


def test_an_invalid_value_is_quoted_cut_so_the_answer_stays_small(app_client) -> None:  # noqa: ANN001
    """The reason is repeated for every node: a 200 KB annotation (Kubernetes allows
    256 KiB) quoted whole over 5,000 names made a 955 MiB answer (found black-box)."""
    _, client, clock = app_client
    body = gpu_body(clock)
    body["Pod"]["metadata"]["annotations"]["kvspread.io/gpu-memory"] = "x" * 200_000
    body["Pod"]["metadata"]["labels"]["kvspread.io/qos"] = "q" * 50_000
    body["Nodes"] = None
    body["NodeNames"] = [f"n{i}" for i in range(5000)]
    r = client.post("/filter", json=body)
    doc = r.json()
    assert r.status_code == 200 and len(doc["FailedAndUnresolvableNodes"]) == 5000
    reason = doc["FailedAndUnresolvableNodes"]["n0"]
    assert (
        len(reason) < 800 and "(200,000 characters)" in reason and "(50,000 characters)" in reason
    )
    assert len(r.content) < 5000 * 900
    explained = client.get("/debug/explain", params={"pod": "serving/llm-0"})
    assert explained.status_code == 200 and len(explained.content) < 5_000_000


def test_an_exa_quantity_is_a_quantity_not_an_internal_error(app_client) -> None:  # noqa: ANN001
    _, client, clock = app_client
    body = gpu_body(clock)
    body["Pod"]["metadata"]["annotations"]["kvspread.io/gpu-memory"] = "1E"
    doc = client.post("/filter", json=body).json()
    assert "internal" not in json.dumps(doc)
    assert doc["Nodes"]["items"] == [] and set(doc["FailedNodes"]) == {"g0", "g1", "g2"}
    assert 'code="internal"' not in client.get("/metrics").text


def test_an_oversized_body_gets_413_with_a_message() -> None:
    clock = FakeClock()
    doc = gpu_body(clock)
    small_body = json.dumps(doc).encode()
    doc["Nodes"]["items"] = doc["Nodes"]["items"] * 3
    big = json.dumps(doc).encode()
    limit = len(small_body) + 10
    assert len(big) > limit
    cfg = ExtenderConfig.from_mapping({"server": {"standalone": True, "max_body_bytes": limit}})
    running = build(cfg, clock)
    with serve_app(running.app) as url, httpx.Client(base_url=url) as client:
        small = client.post("/filter", content=small_body)
        assert small.status_code == 200
        r = client.post("/filter", content=big)
        assert r.status_code == 413
        assert f"server.max_body_bytes ({limit} bytes)" in r.json()["error"]

        def chunks():  # no Content-Length: refused while streaming
            for i in range(0, len(big), 200):
                yield big[i : i + 200]

        r = client.post("/prioritize", content=chunks())
        assert r.status_code == 413
        text = client.get("/metrics").text
        assert 'kvspread_extender_requests_total{code="413",verb="filter"} 1.0' in text
    assert ExtenderConfig().server.max_body_bytes == 256 * 1024 * 1024


def test_a_compressed_body_gets_415_naming_the_encoding() -> None:
    """kube-scheduler sends plain JSON; a gzip body used to be a 400 'not valid UTF-8'."""
    import gzip

    body = (WIRE / "filter-request.nodeCacheCapable-true.json").read_bytes()
    cfg = ExtenderConfig.from_mapping({"server": {"standalone": True}})
    with serve_app(build(cfg, FakeClock()).app) as url, httpx.Client(base_url=url) as client:
        for verb in ("/filter", "/prioritize"):
            headers = {"content-type": "application/json", "content-encoding": "gzip"}
            r = client.post(verb, content=gzip.compress(body), headers=headers)
            assert r.status_code == 415, r.text
            assert "Content-Encoding gzip" in r.json()["error"]
        headers = {"content-type": "application/json", "content-encoding": "identity"}
        assert client.post("/filter", content=body, headers=headers).status_code == 200


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_speculative_bookkeeping_lets_a_request_that_came_in_go_first(loop: str) -> None:
    """The server's yield between bookkeeping jobs: a request whose bytes arrive while the
    first job runs has its task run before the warm-up that follows."""
    import asyncio
    import time

    from extender.server import yield_to_arrivals

    order: list[str] = []

    async def main() -> None:
        ev = asyncio.get_running_loop()

        async def arrived() -> None:
            order.append("request")

        class Protocol(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                ev.create_task(arrived())

        server = await ev.create_server(Protocol, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.05)
        writer.write(b"x")  # the next request, sent while the first job runs
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.005:
            pass
        await yield_to_arrivals()
        order.append("warm-up")
        writer.close()
        server.close()

    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(main())
    else:
        asyncio.run(main())
    assert order == ["request", "warm-up"]
