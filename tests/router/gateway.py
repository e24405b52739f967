"""A real Envoy in front of the picker, whose endpoints are fake engines that are the Ready
pods of an InferencePool on FakeKubeApi (each on its own 127.0.0.N, one target port), for
the Envoy tests (tests/router/test_router_envoy*.py). `open_gateway` starts and stops it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from router.run import Router
from tests.fake_kube import FakeKubeApi, make_node
from tests.ports import port_free_on
from tests.router.conftest import GROUP_VERSION, pool, ready_pod, router_config
from tests.router.envoy_harness import Envoy, bootstrap
from tests.router.fake_engine import FakeEngine

__all__ = ["Gateway", "open_gateway", "post", "served_by", "chat", "HOSTS", "LABELS"]

HOSTS = {"text-0": "127.0.0.2", "text-1": "127.0.0.3", "image-0": "127.0.0.4"}
"""The Envoy tests' pool: pod name -> its IP."""
LABELS = {"text-0": "text", "text-1": "text", "image-0": "image"}
"""Their `kvspread.io/modality` labels."""


@dataclass
class Gateway:
    api: FakeKubeApi
    fakes: dict[str, FakeEngine]
    port: int
    router: Router
    envoy: Envoy
    hosts: dict[str, str]  # pod name -> its IP

    def addr(self, name: str) -> str:
        return f"{self.hosts[name]}:{self.port}"

    def name_of(self, address: str) -> str:
        return next(n for n in self.hosts if self.addr(n) == address)

    def reset(self, **waiting: float) -> None:
        """Set every fake's queue (default 0) and wait for a scrape that shows it."""
        for name, fake in self.fakes.items():
            fake.set(waiting=waiting.get(name.replace("-", "_"), 0.0), running=1, kv=0.1)
        before = self.router.endpoints.scrapes
        deadline = time.monotonic() + 10
        while self.router.endpoints.scrapes < before + 2 * len(self.fakes):
            assert time.monotonic() < deadline, "no scrape"
            time.sleep(0.02)

    def explain(self, rid: str) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.router.http_port}/debug/explain"
        return httpx.get(url, params={"request_id": rid}, timeout=5).json()


def chat(content: Any = "hello there", **extra: Any) -> dict[str, Any]:
    return {"model": "qwen", "messages": [{"role": "user", "content": content}], **extra}


def post(gw: Gateway, body: dict[str, Any] | bytes, **headers: str) -> httpx.Response:
    rid = headers.pop("rid", None) or str(uuid.uuid4())
    h = {"x-request-id": rid, "content-type": "application/json"}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(gw.envoy.url + "/v1/chat/completions", content=raw, headers=h, timeout=60)


def served_by(resp: httpx.Response) -> str:
    assert resp.status_code == 200, resp.text
    return str(resp.json()["served_by"])


@contextmanager
def open_gateway(
    hosts: dict[str, str],
    modalities: dict[str, str],
    grpc_server: str,
    *,
    envoy: dict[str, Any] | None = None,
    dead: tuple[str, ...] = (),
    **sections: Any,
) -> Iterator[Gateway]:
    """Fake engines on `hosts` (name -> IP) labelled with `modalities`, the picker watching
    their pool (with `sections` of its configuration), and Envoy in front (`envoy`: more
    arguments of `bootstrap`). The pods named in `dead` are Ready but run no engine
    (connections to them are refused)."""
    port = port_free_on(list(hosts.values()))
    fakes = {n: FakeEngine(n, host=h, port=port).start() for n, h in hosts.items() if n not in dead}
    with FakeKubeApi() as api:
        api.register_kind(GROUP_VERSION, "InferencePool", "inferencepools", True)
        api.put(make_node("gpu-1"))
        api.put(pool(port, {"app": "qwen-vl"}))
        for name, host in hosts.items():
            labels = {"app": "qwen-vl", "kvspread.io/modality": modalities[name]}
            api.put(ready_pod(name, host, "gpu-1", labels))
        scoring = {"fallbacks": 0, **sections.pop("scoring", {})}  # ORIGINAL_DST: one address
        cfg = router_config(
            None,
            pool={"name": "qwen-vl", "namespace": "llm"},
            kubernetes={"api_server": api.url},
            scoring=scoring,
            server={"grpc_server": grpc_server, **sections.pop("server", {})},
            **sections,
        )
        router = Router(cfg).start()
        services = [f"{h}:{port}" for h in hosts.values()]
        proxy = Envoy(bootstrap(router.grpc_port, services, **(envoy or {})))
        gw = Gateway(api, fakes, port, router, proxy, dict(hosts))
        try:
            deadline = time.monotonic() + 15
            while len(router.endpoints.endpoints()) < len(hosts):
                assert time.monotonic() < deadline, "pool endpoints never appeared"
                time.sleep(0.05)
            yield gw
        finally:
            proxy.stop()
            router.stop()
            for f in fakes.values():
                f.stop()
