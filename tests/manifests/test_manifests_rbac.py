"""RBAC that matches the code (issue 26, point 2), derived from it: each part's real
Kubernetes code runs against FakeKubeApi, every request it makes is turned into the
(apiGroup, resource, verb) the API server authorises, and the set must equal what the
shipped ClusterRole/Role grants: nothing missing (a call that would get 403 on a real
cluster, as the collector's pod watch did) and nothing spare (least privilege: no Node
patch in the default collector role)."""

from __future__ import annotations

import threading
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from extender.config import ExtenderConfig
from extender.run import build
from kvspread.clock import FakeClock
from kvspread.kube import api_client
from tests.fake_kube import FakeKubeApi, make_node, make_pod

ROOT = Path(__file__).resolve().parents[2]
Grant = tuple[str, str, str]  # (apiGroup, resource, verb)


def grants(path: str, kinds: tuple[str, ...] = ("ClusterRole", "Role")) -> set[Grant]:
    """Every (group, resource, verb) the roles in a manifest file grant."""
    out: set[Grant] = set()
    for doc in yaml.safe_load_all((ROOT / path).read_text()):
        if not doc or doc.get("kind") not in kinds:
            continue
        for rule in doc.get("rules", []):
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    out |= {(g, r, v) for v in rule["verbs"]}
    return out


def calls(api: FakeKubeApi) -> set[Grant]:
    """What each recorded request needs: the API server's request-info rules (a GET of a
    collection is list, with watch=true watch; of one object get; POST create, PATCH
    patch, PUT update, DELETE delete)."""
    out: set[Grant] = set()
    for method, path, query in api.requests:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[0] == "api":
            group, rest = "", parts[2:]
        else:
            group, rest = parts[1], parts[3:]
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            rest = rest[2:]
        resource, named = rest[0], len(rest) > 1
        if method == "GET":
            verb = "watch" if query.get("watch") in ("1", "true") else ("get" if named else "list")
        else:
            verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
        out.add((group, resource, verb))
    return out


def seeded() -> FakeKubeApi:
    api = FakeKubeApi().start()
    api.put(make_node("gpu-1"))
    api.put(make_pod("llm-0", "llm", node_name="gpu-1", labels={"app": "llm"}))
    return api


def run_reflectors(reflectors: list[Any], api: FakeKubeApi) -> None:
    for r in reflectors:
        r.start()
    try:
        assert api.wait_for(lambda: all(r.stats.watches >= 1 for r in reflectors))
    finally:
        for r in reflectors:
            r.stop()


def test_the_extender_role_is_what_the_extender_calls() -> None:
    api = seeded()
    try:
        kube = {"api_server": api.url, "watch_timeout_s": 30}
        running = build(ExtenderConfig.from_mapping({"kubernetes": kube}), FakeClock())
        run_reflectors(running.reflectors, api)
        used = calls(api)
    finally:
        api.stop()
    assert used == grants("manifests/extender/rbac.yaml", ("ClusterRole",)) - {
        ("coordination.k8s.io", "leases", v)
        for v in ("create", "get", "list", "watch", "update", "patch")
    }


def test_the_router_roles_are_what_the_router_calls() -> None:
    from router.config import RouterConfig
    from router.endpoints import EndpointSet
    from router.kubewatch import PoolWatch

    api = seeded()
    api.register_kind("inference.networking.k8s.io/v1", "InferencePool", "inferencepools", True)
    for group in ("llm-d.ai", "inference.networking.x-k8s.io"):
        api.register_kind(f"{group}/v1alpha2", "InferenceObjective", "inferenceobjectives", True)
    try:
        used: set[Grant] = set()
        for mode in (
            {"pool": {"name": "p", "namespace": "llm"}},  # objectives: auto finds llm-d.ai
            {
                "pool": {"name": "p", "namespace": "llm"},
                "objectives": {"resources": "inference.networking.x-k8s.io"},
            },
            {"endpoints": {"selector": "app=llm", "target_port": 8000, "namespace": "llm"}},
        ):
            cfg = RouterConfig.from_mapping({**mode, "kubernetes": {"api_server": api.url}})
            watch = PoolWatch(cfg, EndpointSet())
            run_reflectors(watch.reflectors(), api)
            used |= calls(api)
    finally:
        api.stop()
    assert used == grants("manifests/router/rbac.yaml")


def test_the_collector_role_is_what_the_collector_calls() -> None:
    """Default channel (NodeSignals) plus the pod watch: the base role exactly; the
    annotation channel adds nodes patch, granted by its overlay only."""
    from bpf.agent import Agent
    from bpf.publish_crd import channel_writer
    from tests.bpf.test_bpf_agent import cluster_config

    api = seeded()
    try:
        cfg = cluster_config(api.url, nvml={"enabled": False})
        agent = Agent(cfg)
        try:
            watcher = agent._pods_watcher()
            thread = threading.Thread(target=watcher.run, daemon=True)
            thread.start()
            assert api.wait_for(lambda: watcher.stats.watches >= 1)
            watcher.stop()
            thread.join(5)
        finally:
            agent.server.httpd.server_close()
        write = channel_writer("nodesignals", lambda: api_client(server=api.url), "gpu-1")
        write('{"v": 1}')  # the first write creates ...
        write('{"v": 1}')  # ... the next ones patch
        default = calls(api)
        api.requests.clear()
        channel_writer("annotation", lambda: api_client(server=api.url), "gpu-1")('{"v": 1}')
        annotation = calls(api)
    finally:
        api.stop()
    base = grants("manifests/collector/base/rbac.yaml")
    assert default == base
    assert ("", "nodes", "patch") not in base
    overlay = grants("manifests/collector/annotation-channel/rbac-annotation.yaml")
    assert annotation == overlay == {("", "nodes", "patch")}


# The built-in ClusterRole/Role rules the adapter's bindings name (kube-apiserver's RBAC
# bootstrap policy): only these two of their grants are used.
BUILT_IN = {
    "system:auth-delegator": {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    },
    "extension-apiserver-authentication-reader": {("", "configmaps", "get")},
}


def test_the_adapter_roles_are_what_the_adapter_calls() -> None:
    """The adapter reads the request-header ConfigMap and asks SubjectAccessReviews; both
    come from the built-in roles its shipped bindings name (checked on a real 1.26 API
    server by tests/cluster/test_cluster_rbac.py)."""
    import time

    from metrics_adapter.auth import (
        Attributes,
        SubjectAccessReviewAuthorizer,
        UserInfo,
        load_extension_apiserver_authentication,
    )

    api = seeded()
    api.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
            "data": {"requestheader-allowed-names": '["front-proxy-client"]'},
        }
    )
    try:
        client = api_client(server=api.url)
        load_extension_apiserver_authentication(client)
        authz = SubjectAccessReviewAuthorizer(client, time.monotonic)
        assert authz.authorize(UserInfo("u"), Attributes(resource="m", namespace="llm"))[0]
        used = calls(api)
    finally:
        api.stop()
    refs = {
        doc["roleRef"]["name"]
        for doc in yaml.safe_load_all((ROOT / "manifests/metrics-adapter/rbac.yaml").read_text())
        if doc
        and doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s.get("name") == "kvspread-adapter" for s in doc["subjects"])
    }
    assert refs == set(BUILT_IN)
    assert used <= set().union(*BUILT_IN.values())
    assert used == {
        ("", "configmaps", "get"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
