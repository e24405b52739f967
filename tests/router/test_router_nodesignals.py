"""Node signals from NodeSignals resources (kvspread.io/v1alpha1, the collector's default
channel) reach the picker's endpoint view, watched on FakeKubeApi: a node's NodeSignals
wins over its kvspread.io/signals annotation, a deleted one falls back to the annotation,
`kubernetes.node_signals: false` reads annotations only, and the router's staleness bound
(`metrics.signals_stale_after_s`) applies to either channel."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kvspread import names
from kvspread import nodesignals as ns
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.fake_kube import FakeKubeApi, make_node
from tests.ports import port_free_on
from tests.router.conftest import ready_pod, router_config, wait
from tests.router.fake_engine import FakeEngine

TOTAL_MIB = 80000


@pytest.fixture
def cluster() -> Iterator[tuple[FakeKubeApi, int]]:
    port = port_free_on(["127.0.0.2"])
    fake = FakeEngine("pod-a", host="127.0.0.2", port=port).start()
    with FakeKubeApi() as api:
        yield api, port
    fake.stop()


def doc(used_mib: int, image_share: float, ts: float | None = None) -> str:
    return encode_signals(
        NodeSignals(
            ts=time.time() if ts is None else ts,
            node="gpu-1",
            gpus=(GpuSignal(0, mem_total_mib=TOTAL_MIB, mem_used_mib=used_mib),),
            image_token_share=image_share,
        )
    )


def put_node_signals(api: FakeKubeApi, document: str) -> None:
    api.put(ns.build_resource("gpu-1", "uid-gpu-1", document))


def view(router: Any) -> Any:
    views = router.endpoints.views()
    return views[0] if len(views) == 1 else None


def memory_share(router: Any) -> float | None:
    v = view(router)
    return None if v is None else v.gpu_memory_share


def start(api: FakeKubeApi, port: int, start_router: Any, **kube: Any) -> Any:
    api.put(ready_pod("a", "127.0.0.2", "gpu-1", {"app": "vllm"}))
    cfg = router_config(
        None,
        endpoints={"selector": "app=vllm", "target_port": port, "namespace": "llm"},
        kubernetes={"api_server": api.url, **kube},
    )
    router = start_router(cfg)
    wait(lambda: view(router) is not None and view(router).fresh)
    return router


def test_signals_from_the_resource_reach_the_endpoint_view(cluster, start_router) -> None:  # type: ignore[no-untyped-def]
    api, port = cluster
    api.put(make_node("gpu-1"))  # no annotation: the collector publishes to NodeSignals
    put_node_signals(api, doc(60000, 0.5))
    router = start(api, port, start_router)
    wait(lambda: memory_share(router) is not None)
    v = view(router)
    assert v.gpu_memory_share == pytest.approx(0.75)
    assert v.image_token_share == pytest.approx(0.5)
    # a new document is followed by the watch
    put_node_signals(api, doc(20000, 0.1))
    wait(lambda: memory_share(router) == pytest.approx(0.25))
    assert view(router).image_token_share == pytest.approx(0.1)


def test_resource_wins_and_deletion_falls_back_to_the_annotation(cluster, start_router) -> None:  # type: ignore[no-untyped-def]
    api, port = cluster
    api.put(make_node("gpu-1", annotations={names.ANNOTATION_SIGNALS: doc(20000, 0.2)}))
    put_node_signals(api, doc(60000, 0.6))
    router = start(api, port, start_router)
    wait(lambda: memory_share(router) == pytest.approx(0.75))  # NodeSignals, not 0.25
    assert view(router).image_token_share == pytest.approx(0.6)
    assert api.delete("NodeSignals", "gpu-1", api_version=ns.API_VERSION)
    wait(lambda: memory_share(router) == pytest.approx(0.25))  # back to the annotation
    assert view(router).image_token_share == pytest.approx(0.2)


def test_stale_resource_signals_are_absent(cluster, start_router) -> None:  # type: ignore[no-untyped-def]
    api, port = cluster
    api.put(make_node("gpu-1"))
    put_node_signals(api, doc(60000, 0.5, ts=time.time() - 1000))  # older than 300 s
    router = start(api, port, start_router)
    # the document is read (the picker holds it) but too old to count
    wait(lambda: "gpu-1" in router.endpoints._nodes)
    assert memory_share(router) is None
    put_node_signals(api, doc(60000, 0.5))  # a fresh one counts again
    wait(lambda: memory_share(router) == pytest.approx(0.75))


def test_switch_off_reads_annotations_only(cluster, start_router) -> None:  # type: ignore[no-untyped-def]
    api, port = cluster
    api.put(make_node("gpu-1", annotations={names.ANNOTATION_SIGNALS: doc(20000, 0.2)}))
    put_node_signals(api, doc(60000, 0.6))
    router = start(api, port, start_router, node_signals=False)
    wait(lambda: memory_share(router) is not None)
    assert memory_share(router) == pytest.approx(0.25)  # the annotation; NodeSignals unread
    assert router.watch.node_signals is None
    assert not any(r[1].startswith(f"/apis/{ns.GROUP}/") for r in api.requests)
