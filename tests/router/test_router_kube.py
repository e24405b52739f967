"""Endpoints from an InferencePool (inference.networking.k8s.io/v1) and its Ready pods, or
from a label selector, watched on FakeKubeApi; fake engines on 127.0.0.N share one port
as pods of a pool share their target port."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from router.request import parse_request
from router.scoring import choose
from tests.fake_kube import FakeKubeApi, make_node
from tests.ports import port_free_on
from tests.router.conftest import (
    GROUP_VERSION,
    pool,
    ready_pod,
    router_config,
    wait,
)
from tests.router.fake_engine import FakeEngine


@pytest.fixture
def cluster() -> Iterator[tuple[FakeKubeApi, list[FakeEngine], int]]:
    hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    port = port_free_on(hosts)
    fakes = [FakeEngine(f"pod-{i}", host=h, port=port).start() for i, h in enumerate(hosts)]
    with FakeKubeApi() as api:
        api.register_kind(GROUP_VERSION, "InferencePool", "inferencepools", True)
        yield api, fakes, port
    for f in fakes:
        f.stop()


def addresses(router: Any) -> set[str]:
    return {e.address for e in router.endpoints.endpoints()}


def test_pool_ready_pods_become_endpoints_and_follow_changes(cluster, start_router) -> None:  # type: ignore[no-untyped-def]
    api, fakes, port = cluster
    sig = NodeSignals(
        ts=time.time(),
        node="gpu-1",
        gpus=(GpuSignal(0, mem_total_mib=80000, mem_used_mib=60000),),
        image_token_share=0.5,
    )
    api.put(make_node("gpu-1", labels={"kvspread.io/pool": "vision"},
                      annotations={"kvspread.io/signals": encode_signals(sig)}))  # fmt: skip
    api.put(make_node("gpu-2", labels={"kvspread.io/pool": "language"}))
    api.put(pool(port, {"app": "vllm"}))
    api.put(ready_pod("a", "127.0.0.2", "gpu-1", {"app": "vllm"}))
    api.put(ready_pod("b", "127.0.0.3", "gpu-2", {"app": "vllm", "kvspread.io/modality": "image"}))
    api.put(ready_pod("c", "127.0.0.4", "gpu-2", {"app": "vllm"}, ready=False))
    api.put(ready_pod("d", "127.0.0.5", "gpu-2", {"app": "other"}))
    cfg = router_config(
        None, pool={"name": "qwen-vl", "namespace": "llm"}, kubernetes={"api_server": api.url}
    )
    router = start_router(cfg)
    wait(lambda: addresses(router) == {f"127.0.0.2:{port}", f"127.0.0.3:{port}"})
    assert router.ready()
    eps = {e.address: e for e in router.endpoints.endpoints()}
    assert eps[f"127.0.0.2:{port}"].modality == "image"  # from the node's vision pool
    assert eps[f"127.0.0.2:{port}"].name == "llm/a"
    assert eps[f"127.0.0.2:{port}"].metrics_url == f"http://127.0.0.2:{port}/metrics"
    wait(lambda: all(v.fresh for v in router.endpoints.views()))
    views = {v.address: v for v in router.endpoints.views()}
    assert views[f"127.0.0.2:{port}"].gpu_memory_share == pytest.approx(0.75)
    assert views[f"127.0.0.2:{port}"].image_token_share == pytest.approx(0.5)
    assert views[f"127.0.0.3:{port}"].gpu_memory_share is None  # no signals on gpu-2
    # c turns Ready, b stops being Ready
    api.put(ready_pod("c", "127.0.0.4", "gpu-2", {"app": "vllm"}))
    api.put(ready_pod("b", "127.0.0.3", "gpu-2", {"app": "vllm"}, ready=False))
    wait(lambda: addresses(router) == {f"127.0.0.2:{port}", f"127.0.0.4:{port}"})
    # the pool's selector changes
    api.put(pool(port, {"app": "other"}))
    wait(lambda: addresses(router) == {f"127.0.0.5:{port}"})
    # the pool goes: no endpoint, every request is refused with 503
    api.delete("InferencePool", "qwen-vl", "llm", api_version=GROUP_VERSION)
    wait(lambda: addresses(router) == set())
    req = parse_request(b'{"model":"m","prompt":"hi"}')
    d = choose(req, router.endpoints.views(), cfg.scoring)
    assert d.status == 503


def test_watch_survives_410_and_relists(cluster, start_router) -> None:  # type: ignore[no-untyped-def]
    api, fakes, port = cluster
    api.put(make_node("gpu-1"))
    api.put(ready_pod("a", "127.0.0.2", "gpu-1", {"app": "vllm"}))
    cfg = router_config(
        None,
        endpoints={"selector": "app=vllm", "target_port": port, "namespace": "llm"},
        kubernetes={"api_server": api.url},
    )
    router = start_router(cfg)
    wait(lambda: addresses(router) == {f"127.0.0.2:{port}"})
    api.compact()
    api.break_watches(gone=True)
    api.put(ready_pod("b", "127.0.0.3", "gpu-1", {"app": "vllm"}))
    wait(lambda: addresses(router) == {f"127.0.0.2:{port}", f"127.0.0.3:{port}"})


def test_not_ready_until_listed(start_router) -> None:  # type: ignore[no-untyped-def]
    # an API server that does not answer: the picker serves but is not ready
    cfg = router_config(None, pool={"name": "p"}, kubernetes={"api_server": "http://127.0.0.1:9"})
    router = start_router(cfg)
    time.sleep(0.3)
    assert not router.ready()


def test_ipv6_pod_ips_are_bracketed_in_the_destination_and_the_metrics_url() -> None:
    from router.config import address_problem
    from router.kubewatch import pool_endpoints

    pods = [
        ready_pod("v6", "fd00::5", "n1", {"app": "m"}),
        ready_pod("v4", "10.0.0.5", "n1", {"app": "m"}),
    ]
    eps = {e.name: e for e in pool_endpoints({"app": "m"}, [8000], pods, {}, metrics_port=9100)}
    assert eps["llm/v6"].address == "[fd00::5]:8000"
    assert eps["llm/v6"].metrics_url == "http://[fd00::5]:9100/metrics"
    assert eps["llm/v4"].address == "10.0.0.5:8000"
    # the same form --endpoints accepts
    assert address_problem("[fd00::5]:8000") == ""
