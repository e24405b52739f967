"""The router against bad input found by a black-box tryout: an endpoint httpx refuses,
engines serving NaN / Inf / negative gauges, methods other than GET and over-long URLs on
the HTTP port."""

from __future__ import annotations

import json
import logging
import math
import socket
import time
from typing import Any

import httpx
import pytest

from kvspread.engine import EngineSample
from kvspread.opsserver import json_reply
from router.config import MetricsConfig
from router.endpoints import Endpoint, EndpointSet, summarise_samples
from tests.router.conftest import router_config, wait, wait_fresh
from tests.router.fake_engine import MODEL
from tests.router.test_router_extproc import CHAT, duplex


def strict_json(text: str | bytes) -> Any:
    """json.loads that refuses NaN and Infinity, as jq and JSON.parse do."""

    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


# --- one bad endpoint must not stop the scraper ----------------------------------------------


def test_an_endpoint_httpx_refuses_is_stale_and_the_others_are_still_scraped(
    engines: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx.InvalidURL is no HTTPError: it killed the scraper thread, so every endpoint
    went stale for good."""
    (good,) = engines("good")
    eps = EndpointSet(MetricsConfig(interval_s=0.1, stale_after_s=1.0, timeout_s=0.5))
    bad = Endpoint("999.1.1.1:8000", "http://999.1.1.1:8000/metrics")
    ok = Endpoint(good.address, f"http://{good.address}/metrics")
    eps.replace([bad, ok])
    with caplog.at_level(logging.INFO, logger="kvspread.router.endpoints"):
        eps.start()
        try:
            wait(lambda: eps.scrapes >= 5)  # rounds go on: the thread lives
            good.set(waiting=7)
            wait(lambda: {v.address: v.waiting for v in eps.views()}[good.address] == 7)
            assert eps._thread is not None and eps._thread.is_alive()
        finally:
            eps.stop()
    views = {v.address: v for v in eps.views()}
    assert views[good.address].fresh
    assert not views[bad.address].fresh
    assert "InvalidURL" in views[bad.address].stale_reason
    unexpected = [r for r in caplog.records if r.getMessage() == "unexpected scrape error"]
    assert len(unexpected) == 1 and unexpected[0].exc_info is not None  # once, not per round


def test_any_scraper_exception_marks_only_that_endpoint_stale() -> None:
    def scraper(ep: Endpoint) -> list[EngineSample]:
        if ep.address.endswith(":1"):
            raise KeyError("surprise")
        return [EngineSample(engine="vllm", model=MODEL, waiting=1.0, running=2.0)]

    eps = EndpointSet(MetricsConfig(), scraper=scraper)
    eps.replace([Endpoint("10.0.0.1:1", "http://x"), Endpoint("10.0.0.2:2", "http://y")])
    eps.scrape_all()
    eps.scrape_all()
    views = {v.address: v for v in eps.views()}
    eps.stop()
    assert views["10.0.0.2:2"].fresh and views["10.0.0.2:2"].waiting == 1.0
    assert not views["10.0.0.1:1"].fresh
    assert views["10.0.0.1:1"].stale_reason == "never scraped (KeyError: 'surprise')"


# --- numbers no engine can mean --------------------------------------------------------------


def _sample(**kw: Any) -> EngineSample:
    return EngineSample(engine="vllm", model=MODEL, **kw)


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"waiting": -5.0}, "waiting"),
        ({"waiting": math.nan}, "waiting"),
        ({"running": math.nan}, "running"),
        ({"running": -math.inf}, "running"),
        ({"kv_usage": math.inf}, "kv_usage"),
        ({"kv_usage": 1.5}, "kv_usage"),
        ({"kv_usage": -0.2}, "kv_usage"),
        ({"kv_usage": math.nan}, "kv_usage"),
        ({"kv_blocks_total": -10, "block_size": 16}, "kv_capacity_tokens"),
    ],
)
def test_an_out_of_range_number_is_absent_for_the_whole_endpoint(
    bad: dict[str, Any], field: str
) -> None:
    """Absent counts as the worst value; summing the other model's number alone would make
    the endpoint look emptier than it is."""
    healthy = _sample(waiting=1.0, running=1.0, kv_usage=0.5, kv_blocks_total=100, block_size=16)
    broken = _sample(**{"waiting": 1.0, "running": 1.0, "kv_usage": 0.5, **bad})
    m = summarise_samples([healthy, broken])
    assert getattr(m, field) is None and m.ignored == (field,)
    for other in {"waiting", "running", "kv_usage"} - {field}:
        assert getattr(m, other) is not None


def test_rounding_just_outside_0_1_is_clipped_not_dropped() -> None:
    m = summarise_samples([_sample(kv_usage=1.004), _sample(kv_usage=-0.001, waiting=0.0)])
    assert m.kv_usage == 1.0 and m.waiting == 0.0 and m.ignored == ()


NAN_METRICS = f"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} NaN
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} -5
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{engine="0",model_name="{MODEL}"}} +Inf
"""
"""The tryout's engine: a negative queue, a NaN batch and an infinite KV usage."""


def _beside_a_sane_engine(
    engines: Any, start_router: Any, metrics_text: str, request_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An engine serving `metrics_text` beside a sane one (3 waiting, 2 running, KV 0.4):
    its /debug/endpoints entry and the explain record of one request, which must go to
    the sane engine."""
    weird, sane = engines("weird", "sane")
    weird.metrics_text = metrics_text
    sane.set(waiting=3, running=2, kv=0.4)
    router = start_router(router_config([weird.address, sane.address]))
    wait_fresh(router, 2)
    base = f"http://127.0.0.1:{router.http_port}"
    doc = {e["address"]: e for e in strict_json(httpx.get(f"{base}/debug/endpoints").text)}
    duplex(router.grpc_port, CHAT, extra={"x-request-id": request_id})
    explain = strict_json(httpx.get(f"{base}/debug/explain/{request_id}").text)
    assert explain["destination"].split(",")[0] == sane.address, explain
    return doc[weird.address], explain


def test_nan_inf_and_negative_gauges_are_absent_and_the_json_stays_strict(
    engines: Any, start_router: Any
) -> None:
    w, explain = _beside_a_sane_engine(engines, start_router, NAN_METRICS, "nan-1")
    assert (w["waiting"], w["running"], w["kv_usage"]) == (None, None, None)  # -5 no longer wins
    for cand in explain["candidates"]:
        assert isinstance(cand["score"], float) and math.isfinite(cand["score"])


TWO_MODELS_ONE_NAN = f"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} NaN
vllm:num_requests_waiting{{engine="0",model_name="{MODEL}-lora"}} 0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 1
vllm:num_requests_running{{engine="0",model_name="{MODEL}-lora"}} 1
"""
"""One engine serving two models; one model's queue gauge is NaN: the parser drops it."""


def test_a_model_whose_gauge_the_parser_dropped_makes_the_endpoint_sum_unknown(
    engines: Any, start_router: Any
) -> None:
    """Summing the other model's 0 waiting made the endpoint look idle and win."""
    w, _ = _beside_a_sane_engine(engines, start_router, TWO_MODELS_ONE_NAN, "dropped-1")
    assert w["waiting"] is None and w["ignored"] == ["waiting"], w
    assert w["running"] == 2.0  # both models report it: their sum


def test_json_replies_write_non_finite_numbers_as_null() -> None:
    reply = json_reply(200, {"a": math.nan, "b": [math.inf, 1.5], "c": (-math.inf,)})
    assert strict_json(reply.body) == {"a": None, "b": [None, 1.5], "c": [None]}


# --- the HTTP port answers JSON to what it does not serve ------------------------------------


@pytest.fixture
def debug_base(engines: Any, start_router: Any) -> str:
    (e,) = engines("e")
    router = start_router(router_config([e.address]))
    return f"http://127.0.0.1:{router.http_port}"


@pytest.mark.parametrize(
    "method,path",
    [("POST", "/debug/explain?request_id=x"), ("DELETE", "/metrics"), ("PUT", "/healthz")],
)
def test_other_methods_get_405_with_allow_as_one_json_line(
    debug_base: str, method: str, path: str
) -> None:
    r = httpx.request(method, debug_base + path, content=b'{"x": 1}')
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, HEAD"
    assert r.headers["content-type"] == "application/json"
    assert r.text.count("\n") == 1 and method in strict_json(r.text)["error"]
    assert httpx.get(debug_base + "/healthz").text == "ok\n"  # the server still serves


def test_a_70kb_url_gets_414_as_one_json_line(debug_base: str) -> None:
    host, port = debug_base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (chunk := s.recv(65536)):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414 ") or head.startswith(b"HTTP/1.0 414 "), head
    assert b"content-type: application/json" in head.lower()
    assert body.count(b"\n") == 1 and "65536" in strict_json(body)["error"]
