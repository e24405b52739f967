"""Several target ports per pod (router/ranks.py): InferencePool v1.1's `targetPorts` (up to
8, one endpoint `podIP:port` per data-parallel rank, named `ns/pod-rank-i`), the older
`targetPortNumber`, llm-d's active-ports annotation, and a pool with too many ports refused
with a clear reason; end to end with a pool on FakeKubeApi and fake engines, one per rank,
the picker's destination carrying the rank's ip:port."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from router.kubewatch import pool_endpoints
from router.ranks import MAX_TARGET_PORTS, PortsError, Rank, pod_ranks, target_ports
from tests.fake_kube import FakeKubeApi
from tests.ports import free_port
from tests.router.conftest import GROUP_VERSION, pool, ready_pod, router_config, wait
from tests.router.fake_engine import FakeEngine
from tests.router.test_router_extproc import CHAT, destination, duplex


def test_target_ports_list_and_older_single_field() -> None:
    assert target_ports({"targetPorts": [{"number": 8000}, {"number": 8001}]}) == [8000, 8001]
    assert target_ports({"targetPortNumber": 8000}) == [8000]
    # the v1 list wins over the old field when both are there
    assert target_ports({"targetPorts": [{"number": 9000}], "targetPortNumber": 8000}) == [9000]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"targetPorts": [{"number": 8000 + i} for i in range(9)]}, "9 ports, at most 8"),
        ({"targetPorts": [{"number": 8000}, {"number": 8000}]}, "listed twice"),
        ({"targetPorts": [{"number": 0}]}, r"targetPorts\[0\].number: expected a port"),
        ({"targetPorts": [{"number": "8000"}]}, "expected a port number"),
        ({"targetPorts": [{"port": 8000}]}, "expected a port number"),
        ({"targetPorts": []}, "a list of 1..8"),
        ({"targetPortNumber": 70000}, "targetPortNumber: expected a port"),
        ({}, "missing"),
    ],
)
def test_unusable_ports_are_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PortsError, match=message):
        target_ports(spec)


def test_eight_ports_are_the_bound() -> None:
    ports = [8000 + i for i in range(MAX_TARGET_PORTS)]
    assert target_ports({"targetPorts": [{"number": p} for p in ports]}) == ports


def test_active_ports_annotation_narrows_the_ranks() -> None:
    ports = [8000, 8001, 8002]
    assert pod_ranks(ports) == [Rank(0, 8000), Rank(1, 8001), Rank(2, 8002)]
    assert pod_ranks(ports, {"llm-d.ai/active-ports": "8002, 8000,9999,x"}) == [
        Rank(0, 8000),
        Rank(2, 8002),
    ]
    legacy = {"inference.networking.k8s.io/active-ports": "8001"}
    assert pod_ranks(ports, legacy) == [Rank(1, 8001)]
    assert pod_ranks(ports, {"llm-d.ai/active-ports": ""}) == []


def test_pod_times_ports_gives_one_endpoint_per_rank() -> None:
    pods = [
        ready_pod("a", "10.0.0.5", "n1", {"app": "m"}),
        ready_pod("b", "fd00::7", "n1", {"app": "m"}),
    ]
    eps = {e.name: e for e in pool_endpoints({"app": "m"}, [8000, 8001], pods, {})}
    assert sorted(eps) == ["llm/a-rank-0", "llm/a-rank-1", "llm/b-rank-0", "llm/b-rank-1"]
    assert eps["llm/a-rank-1"].address == "10.0.0.5:8001"
    assert eps["llm/a-rank-1"].metrics_url == "http://10.0.0.5:8001/metrics"  # its own engine
    assert (eps["llm/a-rank-1"].pod, eps["llm/a-rank-1"].rank) == ("a", 1)
    assert eps["llm/b-rank-0"].address == "[fd00::7]:8000"
    # one port: the endpoint keeps the pod's name
    (one,) = pool_endpoints({"app": "m"}, [8000], pods[:1], {})
    assert (one.name, one.rank) == ("llm/a", 0)


@pytest.fixture
def ranks() -> Iterator[tuple[FakeKubeApi, list[FakeEngine]]]:
    """Two engines on 127.0.0.2, one per rank port, as two DP ranks of one pod."""
    ports = [free_port(), free_port()]
    fakes = [FakeEngine(f"rank-{i}", host="127.0.0.2", port=p).start() for i, p in enumerate(ports)]
    with FakeKubeApi() as api:
        api.register_kind(GROUP_VERSION, "InferencePool", "inferencepools", True)
        yield api, fakes
    for f in fakes:
        f.stop()


def _pool(ports: list[int]) -> dict[str, Any]:
    doc = pool(ports[0], {"app": "vllm"})
    doc["spec"]["targetPorts"] = [{"number": p} for p in ports]
    return doc


def test_pool_with_two_ranks_routes_to_each_rank_port(ranks, start_router, caplog) -> None:  # type: ignore[no-untyped-def]
    api, (r0, r1) = ranks
    busy, idle = r0, r1
    busy.set(waiting=12, running=20, kv=0.7)
    idle.set(waiting=0, running=1, kv=0.1)
    ports = [r0.port, r1.port]
    api.put(_pool(ports))
    api.put(ready_pod("a", "127.0.0.2", "gpu-1", {"app": "vllm"}))
    router = start_router(
        router_config(
            None, pool={"name": "qwen-vl", "namespace": "llm"}, kubernetes={"api_server": api.url}
        )
    )
    want = {f"127.0.0.2:{p}" for p in ports}
    wait(lambda: {e.address for e in router.endpoints.endpoints()} == want)
    assert {e.name for e in router.endpoints.endpoints()} == {"llm/a-rank-0", "llm/a-rank-1"}
    wait(
        lambda: (
            len(router.endpoints.views()) == 2 and all(v.fresh for v in router.endpoints.views())
        )
    )
    header, md, _ = destination(duplex(router.grpc_port, CHAT)[0])
    assert header.split(",")[0] == f"127.0.0.2:{idle.port}" == md.split(",")[0]
    # nine ports: refused with the reason, no endpoints (every request 503), no traceback
    with caplog.at_level(logging.WARNING, logger="kvspread.router.kubewatch"):
        api.put(_pool([p for p in range(9000, 9009)]))
        wait(lambda: router.endpoints.endpoints() == [])
    assert any("at most 8" in str(getattr(r, "kv", {}).get("why")) for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)
    (resp,) = duplex(router.grpc_port, CHAT)
    assert resp.immediate_response.status.code == 503
