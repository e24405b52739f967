"""The shipped RBAC on a real kube-apiserver v1.26 (issue 26, point 2): each part's own code
runs under its ServiceAccount's token (a TokenRequest, as a pod gets) and every call it
makes is authorised; calls just outside each role get 403. The CI twin,
tests/manifests/test_manifests_rbac.py, proves on the fake API server that these calls are
exactly what the roles grant; this file proves that the real authoriser agrees."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvspread.kube import api_client
from tests.cluster.captures import record
from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import ANNOTATION_OVERLAY, SERVICE_ACCOUNTS, install
from tests.cluster.test_cluster_crd import document, node

WAIT_S = 30.0


@pytest.fixture(scope="module")
def kubeconfigs(cp: ControlPlane) -> Iterator[dict[str, Path]]:
    install(cp)
    cp.create(node("gpu-1"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llm-0", "namespace": "llm", "labels": {"app": "llm"}},
        "spec": {
            "nodeName": "gpu-1",
            "automountServiceAccountToken": False,
            "containers": [{"name": "engine", "image": "engine:1"}],
        },
    }
    cp.service_account("llm", "default")
    cp.create(pod)
    yield {part: cp.sa_kubeconfig(ns, sa) for part, (ns, sa) in SERVICE_ACCOUNTS.items()}


def run_reflectors(reflectors: list[Any]) -> None:
    """Start them, wait until each has listed and opened a watch, stop them; no errors."""
    for r in reflectors:
        r.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not all(r.stats.watches >= 1 for r in reflectors):
            assert time.monotonic() < deadline, [r.stats for r in reflectors]
            time.sleep(0.1)
    finally:
        for r in reflectors:
            r.stop()
    assert [r.stats.errors for r in reflectors] == [0] * len(reflectors), [
        r.stats.last_error for r in reflectors
    ]


def test_the_extender_lists_and_watches_under_its_role(kubeconfigs: dict[str, Path]) -> None:
    from extender.config import ExtenderConfig
    from extender.run import build
    from kvspread.clock import FakeClock

    cfg = {"kubernetes": {"kubeconfig": str(kubeconfigs["extender"]), "watch_timeout_s": 30}}
    running = build(ExtenderConfig.from_mapping(cfg), FakeClock())
    assert len(running.reflectors) == 3  # nodes, pods, nodesignals
    run_reflectors(running.reflectors)


def test_the_router_lists_and_watches_under_its_roles(
    cp: ControlPlane, kubeconfigs: dict[str, Path]
) -> None:
    from router.config import RouterConfig
    from router.endpoints import EndpointSet
    from router.kubewatch import PoolWatch

    cp.create(
        {
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": {"name": "p", "namespace": "llm"},
            "spec": {
                "selector": {"matchLabels": {"app": "llm"}},
                "targetPorts": [{"number": 8000}],
            },
        }
    )
    kube = {"kubeconfig": str(kubeconfigs["router"])}
    for mode in (
        {"pool": {"name": "p", "namespace": "llm"}},  # InferenceObjectives: llm-d.ai
        {
            "pool": {"name": "p", "namespace": "llm"},
            "objectives": {"resources": "inference.networking.x-k8s.io"},
        },
        {"endpoints": {"selector": "app=llm", "target_port": 8000, "namespace": "llm"}},
    ):
        watch = PoolWatch(RouterConfig.from_mapping({**mode, "kubernetes": kube}), EndpointSet())
        run_reflectors(watch.reflectors())


def test_the_collector_watches_pods_and_writes_its_nodesignals_under_its_role(
    cp: ControlPlane, kubeconfigs: dict[str, Path]
) -> None:
    from bpf.agent import Agent
    from bpf.publish_crd import channel_writer
    from tests.bpf.test_bpf_agent import cluster_config

    kc = str(kubeconfigs["collector"])
    cfg = cluster_config("", nvml={"enabled": False})
    agent = Agent(dataclasses.replace(cfg, kube_api_server=None, kubeconfig=kc))
    try:
        watcher = agent._pods_watcher()
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + WAIT_S
        while watcher.stats.watches < 1:
            assert time.monotonic() < deadline, watcher.stats
            time.sleep(0.1)
        watcher.stop()
        thread.join(5)
        assert watcher.stats.errors == 0, watcher.stats.last_error
    finally:
        agent.server.httpd.server_close()
    write = channel_writer("nodesignals", lambda: api_client(kc), "gpu-1")
    write(document("gpu-1"))  # get the Node, create the object
    write(document("gpu-1", ts=1764700060.0))  # merge patch
    obj = cp.ok("GET", "/apis/kvspread.io/v1alpha1/nodesignals/gpu-1")
    assert obj["metadata"]["ownerReferences"][0]["name"] == "gpu-1"
    assert obj["spec"]["measuredAt"] == "2025-12-02T18:27:40Z"


def test_the_annotation_channel_needs_its_overlay(
    cp: ControlPlane, kubeconfigs: dict[str, Path]
) -> None:
    from kubernetes.client.exceptions import ApiException

    from bpf.publish_crd import channel_writer

    kc = str(kubeconfigs["collector"])
    write = channel_writer("annotation", lambda: api_client(kc), "gpu-1")
    with pytest.raises(ApiException) as refused:
        write(document("gpu-1"))
    assert refused.value.status == 403
    cp.apply_files(ANNOTATION_OVERLAY)
    deadline = time.monotonic() + WAIT_S  # the RBAC cache takes a moment
    while True:
        try:
            write(document("gpu-1"))
            break
        except ApiException as exc:
            assert exc.status == 403 and time.monotonic() < deadline
            time.sleep(0.2)
    node_obj = cp.ok("GET", "/api/v1/nodes/gpu-1")
    assert "kvspread.io/signals" in node_obj["metadata"]["annotations"]
    cp.ok(
        "DELETE",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kvspread-collector-annotation",
    )


def test_the_adapter_reads_the_authentication_configmap_and_asks_access_reviews(
    kubeconfigs: dict[str, Path],
) -> None:
    from metrics_adapter.auth import (
        Attributes,
        SubjectAccessReviewAuthorizer,
        UserInfo,
        load_extension_apiserver_authentication,
    )

    api = api_client(str(kubeconfigs["adapter"]))
    rh = load_extension_apiserver_authentication(api)
    assert "front-proxy-client" in rh.allowed_names
    authz = SubjectAccessReviewAuthorizer(api, time.monotonic)
    metric = Attributes(
        verb="get",
        namespace="default",
        group="external.metrics.k8s.io",
        version="v1beta1",
        resource="kv_load",
    )
    hpa = UserInfo(
        "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        ("system:serviceaccounts", "system:authenticated"),
    )
    assert authz.authorize(hpa, metric)[0] is True
    stranger = UserInfo("system:serviceaccount:default:someone", ("system:authenticated",))
    allowed, reason = authz.authorize(stranger, metric)
    assert allowed is False and "failed" not in reason  # asked, and answered no


# (part, method, path, body): calls one step outside each role; the real server says 403
OUTSIDE = [
    ("extender", "POST", "/apis/kvspread.io/v1alpha1/nodesignals", "nodesignals"),
    ("extender", "PATCH", "/api/v1/nodes/gpu-1", "patch"),
    ("extender", "GET", "/api/v1/namespaces/kvspread/secrets", None),
    ("extender", "POST", "/api/v1/namespaces/llm/pods/llm-0/binding", "binding"),
    ("collector", "PATCH", "/api/v1/nodes/gpu-1", "patch"),
    ("collector", "PUT", "/apis/kvspread.io/v1alpha1/nodesignals/gpu-1", "nodesignals"),
    ("collector", "DELETE", "/apis/kvspread.io/v1alpha1/nodesignals/gpu-1", None),
    ("collector", "GET", "/apis/kvspread.io/v1alpha1/nodesignals", None),
    ("collector", "GET", "/api/v1/nodes", None),
    ("router", "GET", "/api/v1/namespaces/default/pods", None),
    ("router", "PATCH", "/api/v1/namespaces/llm/pods/llm-0", "patch"),
    ("router", "GET", "/api/v1/namespaces/llm/secrets", None),
    ("adapter", "GET", "/api/v1/namespaces/kube-system/secrets", None),
    ("adapter", "GET", "/api/v1/nodes", None),
]


def _body(kind: str | None) -> Any:
    if kind == "patch":
        return {"metadata": {"annotations": {"x": "y"}}}
    if kind == "nodesignals":
        return {
            "apiVersion": "kvspread.io/v1alpha1",
            "kind": "NodeSignals",
            "metadata": {"name": "gpu-1"},
            "spec": {"document": document("gpu-1")},
        }
    if kind == "binding":
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "llm-0"},
            "target": {"kind": "Node", "name": "gpu-1"},
        }
    return None


def test_calls_outside_each_role_are_refused(
    cp: ControlPlane, kubeconfigs: dict[str, Path]
) -> None:
    import yaml

    answers = []
    for part, method, path, kind in OUTSIDE:
        token = yaml.safe_load(kubeconfigs[part].read_text())["users"][0]["user"]["token"]
        ctype = "application/merge-patch+json" if method == "PATCH" else "application/json"
        r = cp.request(method, path, _body(kind), token=token, content_type=ctype)
        answers.append(
            {
                "as": part,
                "call": f"{method} {path}",
                "status": r.status_code,
                "reason": r.json().get("reason"),
            }
        )
    assert [a["status"] for a in answers] == [403] * len(OUTSIDE), answers
    record("rbac-outside-roles", answers)
