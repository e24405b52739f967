"""The router's InferenceObjective watch (router/objectivewatch.py) on a real kube-apiserver
v1.26, under the router's ServiceAccount and shipped Role: the server's defaults for
`spec.poolRef` are what the router compares, its schema refuses a priority that is not an
integer, `auto` takes llm-d.ai when both groups are served, GIE's old group is read when
configured, and a malformed object (possible with an open schema) is skipped with the
others kept. tests/router/test_router_objectivewatch.py is the FakeKubeApi twin."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import SERVICE_ACCOUNTS, install

WAIT_S = 30.0
NEW = "llm-d.ai/v1alpha2"
LEGACY = "inference.networking.x-k8s.io/v1alpha2"


@pytest.fixture(scope="module")
def router_kubeconfig(cp: ControlPlane) -> Iterator[Path]:
    install(cp)
    ns, sa = SERVICE_ACCOUNTS["router"]
    yield cp.sa_kubeconfig(ns, sa)


def objective(name: str, api_version: str = NEW, pool: str = "p", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "InferenceObjective",
        "metadata": {"name": name, "namespace": "llm"},
        "spec": {"poolRef": {"name": pool}, **spec},
    }


def until(pred: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.1)


class Watching:
    def __init__(self, kubeconfig: Path, **objectives: Any) -> None:
        from router.config import RouterConfig
        from router.endpoints import EndpointSet
        from router.kubewatch import PoolWatch

        self.last: Mapping[str, int] | None = None
        cfg = RouterConfig.from_mapping(
            {
                "pool": {"name": "p", "namespace": "llm"},
                "kubernetes": {"kubeconfig": str(kubeconfig)},
                "objectives": objectives,
            }
        )
        self.pool = PoolWatch(cfg, EndpointSet(), self._got)
        assert self.pool.objectives is not None
        self.watch = self.pool.objectives

    def _got(self, priorities: Mapping[str, int]) -> None:
        self.last = priorities

    def __enter__(self) -> Watching:
        self.watch.reflector.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watch.reflector.stop()
        assert self.watch.reflector.stats.errors == 0, self.watch.reflector.stats.last_error


def test_the_router_follows_llm_d_objectives_on_a_real_api_server(
    cp: ControlPlane, router_kubeconfig: Path
) -> None:
    cp.create(objective("premium", priority=100))
    cp.create(objective("plain"))  # no priority: 0
    cp.create(objective("elsewhere", pool="other", priority=9))
    stored = cp.create(objective("gie-ref", priority=3)).json()
    assert stored["spec"]["poolRef"] == {  # the server's defaults, what the router compares
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": "p",
    }
    refused = cp.request("POST", f"/apis/{NEW}/namespaces/llm/inferenceobjectives",
                         objective("bad", priority="high"))  # fmt: skip
    assert refused.status_code == 422 and "spec.priority" in refused.text
    with Watching(router_kubeconfig) as w:
        until(lambda: w.last == {"premium": 100, "plain": 0, "gie-ref": 3})
        assert w.watch.group == "llm-d.ai"  # auto, both groups served: llm-d's
        path = f"/apis/{NEW}/namespaces/llm/inferenceobjectives"
        patch = {"spec": {"priority": -1}}
        cp.ok("PATCH", f"{path}/premium", patch, content_type="application/merge-patch+json")
        until(lambda: w.last == {"premium": -1, "plain": 0, "gie-ref": 3})
        cp.ok("DELETE", f"{path}/plain")
        until(lambda: w.last == {"premium": -1, "gie-ref": 3})
        assert w.watch.reflector.stats.watches >= 1


def test_gies_old_group_and_a_malformed_object(
    cp: ControlPlane, router_kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cp.create(objective("batch", LEGACY, priority=-5))
    cp.create(objective("broken", LEGACY, priority="low"))  # the stand-in's open schema
    with caplog.at_level(logging.WARNING, "kvspread.router.objectivewatch"):
        with Watching(router_kubeconfig, resources="inference.networking.x-k8s.io") as w:
            until(lambda: w.last == {"batch": -5})
            assert w.watch.group == "inference.networking.x-k8s.io"
    (warning,) = [r for r in caplog.records if r.getMessage() == "InferenceObjective skipped"]
    assert warning.kv == {  # type: ignore[attr-defined]
        "object": "llm/broken",
        "why": "spec.priority: expected an integer, got 'low'",
    }
