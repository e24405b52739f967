"""Issue 26, point 1, black-box on a real kube-apiserver v1.26: a ServiceAccount whose role
grants list but not watch (so every watch gets 403 after a good list), and the extender's
and collector's own reflectors under it for 30 s. The server's audit log counts what they
sent; each part stays within the backoff's bound (kvspread.kube.Backoff.max_requests: 12 per
reflector in 30 s), under the issue's 40, where the old loop made 840; and the collector's
readiness reports its Kubernetes source down with the refusal (point 6)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvspread.kube import Backoff
from tests.cluster.captures import record
from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import install
from tests.cluster.test_cluster_crd import node

WINDOW_S = 30.0
LIST_ONLY = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "test-list-no-watch"},
    "rules": [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]},
        {"apiGroups": ["kvspread.io"], "resources": ["nodesignals"], "verbs": ["list"]},
    ],
}


def _bind(cp: ControlPlane, sa: str) -> Path:
    kc = cp.sa_kubeconfig("kvspread", sa)
    cp.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"test-list-no-watch-{sa}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "test-list-no-watch",
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "kvspread"}],
        }
    )
    return kc


@pytest.fixture(scope="module")
def refused_watch(cp: ControlPlane) -> Iterator[tuple[Path, Path]]:
    install(cp)
    cp.create(node("gpu-1"))
    cp.create(LIST_ONLY)
    yield _bind(cp, "nowatch-extender"), _bind(cp, "nowatch-collector")


def test_a_refused_watch_costs_a_bounded_number_of_requests(
    cp: ControlPlane, refused_watch: tuple[Path, Path]
) -> None:
    from bpf.agent import Agent
    from extender.config import ExtenderConfig
    from extender.run import build
    from kvspread.clock import FakeClock
    from tests.bpf.test_bpf_agent import cluster_config

    ext_kc, col_kc = refused_watch
    ext_cfg = ExtenderConfig.from_mapping({"kubernetes": {"kubeconfig": str(ext_kc)}})
    extender = build(ext_cfg, FakeClock())
    cfg = cluster_config("", nvml={"enabled": False})
    agent = Agent(dataclasses.replace(cfg, kube_api_server=None, kubeconfig=str(col_kc)))
    pods = agent._pods_watcher()
    thread = threading.Thread(target=pods.run, daemon=True)
    try:
        for r in extender.reflectors:
            r.start()
        thread.start()
        time.sleep(WINDOW_S)  # the window whose requests are counted, not a timing assertion
        # the collector's readiness names the failing Kubernetes source (issue 26, point 6);
        # between a good list and the refused watch it is up for a moment: wait that out
        deadline = time.monotonic() + 10
        while agent.state.sources["kubernetes"].up:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        kube_source = agent.state.sources["kubernetes"]
    finally:
        for r in extender.reflectors:
            r.stop()
        pods.stop()
        thread.join(10)
        agent.server.httpd.server_close()
    kube = ext_cfg.kubernetes
    per_reflector = Backoff(kube.backoff_base_s, kube.backoff_max_s).max_requests(WINDOW_S)
    counts = {}
    for part, sa, n in (("extender", "nowatch-extender", 3), ("collector", "nowatch-collector", 1)):
        events = cp.audit(f"system:serviceaccount:kvspread:{sa}")
        t0 = events[0]["requestReceivedTimestamp"]
        codes: dict[str, int] = {}
        for ev in events:
            key = f"{ev['verb']} {ev['responseStatus']['code']}"
            codes[key] = codes.get(key, 0) + 1
        counts[part] = {"requests": len(events), "by verb and status": codes, "first": t0}
        assert codes.get("watch 403", 0) >= n, codes  # the watch was tried and refused
        assert codes.get("list 200", 0) >= n, codes
        assert len(events) <= per_reflector * n <= 40, codes
    assert all(r.stats.state != "watching" for r in extender.reflectors)
    assert "pod watch failed" in kube_source.reason and "403" in kube_source.reason, kube_source
    record(
        "refused-watch-requests",
        {
            "window_s": WINDOW_S,
            "bound per reflector (Backoff.max_requests)": per_reflector,
            "parts": {
                k: {kk: vv for kk, vv in v.items() if kk != "first"} for k, v in counts.items()
            },
            "collector readiness, source kubernetes": {
                "up": kube_source.up,
                "reason": kube_source.reason[:200],
            },
        },
    )
