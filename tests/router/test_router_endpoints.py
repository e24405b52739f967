"""Engine /metrics scraping through the collector's parser, staleness, and the picker's
observability: Prometheus metrics, /debug/explain, the debug log line."""

from __future__ import annotations

import json
import logging
import time

import httpx
import pytest

from router.endpoints import summarise_samples
from tests.router.conftest import router_config, wait_fresh
from tests.router.fake_engine import FakeEngine
from tests.router.test_router_extproc import CHAT, duplex


def test_scraped_numbers_come_from_the_vllm_text(engines, start_router) -> None:  # type: ignore[no-untyped-def]
    (e,) = engines("e")
    e.set(waiting=3, running=7, kv=0.25)
    router = start_router(router_config([e.address]))
    wait_fresh(router, 1)
    (v,) = router.endpoints.views()
    assert (v.waiting, v.running, v.kv_usage) == (3, 7, 0.25)
    assert v.kv_capacity_tokens == 27434 * 16


def test_summary_of_several_models_and_absent_numbers() -> None:
    from kvspread.engine import EngineSample

    s = summarise_samples(
        [
            EngineSample("vllm", "a", kv_usage=0.2, running=1, waiting=None),
            EngineSample("vllm", "b", kv_usage=0.6, running=2, waiting=None),
        ]
    )
    assert (s.kv_usage, s.running, s.waiting, s.kv_capacity_tokens) == (0.6, 3, None, None)


def test_failing_metrics_make_an_endpoint_stale_and_rank_it_last(engines, start_router) -> None:  # type: ignore[no-untyped-def]
    good, broken = engines("good", "broken")
    good.set(waiting=6, running=30, kv=0.8)  # worse numbers than broken's last ones
    broken.set(waiting=0, running=0, kv=0.0)
    router = start_router(router_config([good.address, broken.address]))
    wait_fresh(router, 2)
    broken.metrics_broken = True
    deadline = time.monotonic() + 10
    while all(v.fresh for v in router.endpoints.views()):
        assert time.monotonic() < deadline, "never went stale"
        time.sleep(0.05)
    (stale,) = [v for v in router.endpoints.views() if not v.fresh]
    assert stale.address == broken.address and "HTTPStatusError" in stale.stale_reason
    resps = duplex(router.grpc_port, CHAT, extra={"x-request-id": "stale-1"})
    assert (
        resps[0]
        .request_headers.response.header_mutation.set_headers[0]
        .header.raw_value.decode()
        .startswith(good.address)
    )
    base = f"http://127.0.0.1:{router.http_port}"
    doc = httpx.get(f"{base}/debug/explain/stale-1").json()
    tiers = {c["address"]: c["tier"] for c in doc["candidates"]}
    assert tiers == {good.address: "fresh", broken.address: "stale"}
    metrics = httpx.get(f"{base}/metrics").text
    assert "kvspread_router_stale_endpoints 1.0" in metrics
    assert f'kvspread_router_picks_total{{endpoint="{good.address}",reason="score"}}' in metrics
    assert "kvspread_router_pick_duration_seconds_count" in metrics


def test_an_endpoint_that_never_answered_is_stale(engines, start_router) -> None:  # type: ignore[no-untyped-def]
    (e,) = engines("e")
    router = start_router(router_config([e.address, "127.0.0.1:9"]))
    deadline = time.monotonic() + 10

    def dead():  # type: ignore[no-untyped-def]
        return next(v for v in router.endpoints.views() if v.address == "127.0.0.1:9")

    while "ConnectError" not in dead().stale_reason:
        assert time.monotonic() < deadline, dead()
        time.sleep(0.05)
    assert not dead().fresh and dead().stale_reason.startswith("never scraped")


def test_a_dead_endpoint_warns_once_then_logs_at_debug(engines, start_router, caplog) -> None:  # type: ignore[no-untyped-def]
    """Its scrape fails every interval: one warning for the reason, the repeats at debug."""
    (e,) = engines("e")
    with caplog.at_level(logging.DEBUG, logger="kvspread.router.endpoints"):
        router_cfg = router_config([e.address, "127.0.0.1:9"])
        start_router(router_cfg)
        deadline = time.monotonic() + 30

        def failed() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.getMessage() == "metrics scrape failed"]

        while len(failed()) < 3:  # bounded wait for three scrapes of the dead endpoint
            assert time.monotonic() < deadline, failed()
            time.sleep(0.05)
    levels = [r.levelno for r in failed()]
    assert levels[0] == logging.WARNING
    assert set(levels[1:]) == {logging.DEBUG}, levels


def test_explain_errors_and_debug_log(two_fakes_router, caplog) -> None:  # type: ignore[no-untyped-def]
    router = two_fakes_router
    base = f"http://127.0.0.1:{router.http_port}"
    r = httpx.get(f"{base}/debug/explain")
    assert r.status_code == 400 and "request_id" in r.json()["error"]
    assert httpx.get(f"{base}/debug/explain?request_id=nope").status_code == 404
    assert httpx.get(f"{base}/readyz").status_code == 200
    with caplog.at_level(logging.DEBUG, logger="kvspread.router.picker"):
        duplex(router.grpc_port, CHAT, extra={"x-request-id": "log-1"})
    (rec,) = [r for r in caplog.records if r.getMessage() == "pick"]
    assert rec.kv["request_id"] == "log-1" and rec.kv["status"] == 200  # type: ignore[attr-defined]
    doc = httpx.get(f"{base}/debug/explain/log-1").json()
    assert doc["request"]["modality"] == "text" and len(doc["candidates"]) == 2
    json.dumps(doc)


@pytest.fixture
def two_fakes_router(engines, start_router):  # type: ignore[no-untyped-def]
    a, b = engines("a", "b")
    router = start_router(router_config([a.address, b.address]))
    wait_fresh(router, 2)
    return router


def test_fake_engine_is_parsed_by_the_collector_parser() -> None:
    from kvspread.engine import parse_engine_metrics

    e = FakeEngine("x")
    e.set(waiting=2, running=4, kv=0.5)
    (s,) = parse_engine_metrics(e._metrics_text())
    assert (s.engine, s.waiting, s.running, s.kv_usage, s.block_size) == ("vllm", 2, 4, 0.5, 16)
    e._server.server_close()


def test_prefill_backlog_drains_and_an_idle_scrape_empties_it() -> None:
    """The prompt tokens sent and not expected cached drain at the prefill rate; a scrape
    that shows the engine idle leaves only the picks sent after it was asked; a moved pick
    takes its tokens back."""
    from kvspread.engine import EngineSample
    from router.endpoints import Endpoint, EndpointSet
    from router.request import RequestInfo

    now = [0.0]
    engine = {"running": 1.0, "waiting": 0.0}

    def scraper(ep: Endpoint) -> list[EngineSample]:
        return [EngineSample("vllm", "m", kv_usage=0.1, **engine)]

    eps = EndpointSet(clock=lambda: now[0], wall_clock=lambda: now[0], scraper=scraper,
                      prefill_tokens_per_s=1000.0)  # fmt: skip
    eps.replace([Endpoint(a, f"sim://{a}/metrics") for a in ("a:1", "b:1")])
    req = RequestInfo("m", "text", (), 3000, 0, 100, False)

    def backlog(address: str) -> int:
        return next(v.prefill_tokens for v in eps.views() if v.address == address)

    eps.record_pick("a:1", req)  # 3000 prompt tokens to prefill
    eps.record_pick("a:1", req, kv_tokens=1100)  # 2000 of them expected cached: 1000
    assert backlog("a:1") == 4000 and backlog("b:1") == 0
    now[0] = 1.5
    assert backlog("a:1") == 2500  # 1.5 s at 1000 tokens/s
    eps._scrape_one(eps.endpoints()[0])  # running 1: the engine is still busy
    assert backlog("a:1") == 2500
    eps.move_pick("a:1", "b:1", req, 1100)
    assert (backlog("a:1"), backlog("b:1")) == (1500, 1000)
    engine["running"] = 0.0
    eps._scrape_one(eps.endpoints()[0])  # idle when asked: every pick so far is done
    assert backlog("a:1") == 0 and backlog("b:1") == 1000
    eps.record_pick("a:1", req)  # sent after that scrape was asked: it counts
    assert backlog("a:1") == 3000
    now[0] = 100.0
    assert backlog("a:1") == 0
