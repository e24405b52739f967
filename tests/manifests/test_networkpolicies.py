"""The shipped NetworkPolicies give each port exactly the callers docs/install.md names:
the extender only to kvspread-scheduler pods and Prometheus, the adapter's OTLP port only to
collectors and Prometheus, metrics ports only to Prometheus. (Schema validity for Kubernetes
1.29-1.34 is checked with every other object by test_kustomize_validate.py.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")

PROMETHEUS = "prometheus (any namespace)"
ANYONE = "any source"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / "manifests")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert not selector.get("matchExpressions"), "the test reads matchLabels only"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer(peer: dict[str, Any]) -> str:
    pods = peer.get("podSelector", {}).get("matchLabels", {})
    name = pods.get("app.kubernetes.io/name", repr(pods))
    if "namespaceSelector" in peer:
        assert peer["namespaceSelector"] == {}, peer
        return f"{name} (any namespace)"
    assert "ipBlock" not in peer
    return name


def _workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """name label -> {labels, ports: {port name: number}} for each kvspread pod template."""
    out = {}
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet"):
            tpl = d["spec"]["template"]
            ports = {
                p["name"]: p["containerPort"]
                for c in tpl["spec"]["containers"]
                for p in c.get("ports", [])
            }
            labels = tpl["metadata"]["labels"]
            out[labels["app.kubernetes.io/name"]] = {"labels": labels, "ports": ports}
    return out


def _sources(docs: list[dict[str, Any]], labels: dict[str, str], port: str, number: int) -> set:
    """Who may reach the pod on that port under the policies that select it."""
    policies = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and d["metadata"]["namespace"] == "kvspread"
        and _matches(d["spec"]["podSelector"], labels)
        and "Ingress" in d["spec"]["policyTypes"]
    ]
    if not policies:
        return {"unrestricted"}
    allowed: set[str] = set()
    for pol in policies:
        for rule in pol["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports and not any(p.get("port") in (port, number) for p in ports):
                continue
            peers = rule.get("from")
            allowed |= {ANYONE} if not peers else {_peer(p) for p in peers}
    return allowed


EXPECTED = {
    ("kvspread-extender", "http"): {"kvspread-scheduler", PROMETHEUS},
    ("kvspread-scheduler", "https"): {PROMETHEUS},
    ("kvspread-adapter", "https"): {ANYONE},  # the API server; mTLS guards it (see the policy)
    ("kvspread-adapter", "otlp-http"): {"kvspread-collector", PROMETHEUS},
    ("kvspread-collector", "metrics"): {PROMETHEUS},
}


def test_every_port_of_every_pod_is_covered(docs) -> None:
    found = {(name, port) for name, w in _workloads(docs).items() for port in w["ports"]}
    assert found == set(EXPECTED), "a port without an expectation (or a policy) here"


@pytest.mark.parametrize("pod,port", sorted(EXPECTED), ids=lambda x: str(x))
def test_port_admits_only_its_callers(docs, pod: str, port: str) -> None:
    w = _workloads(docs)[pod]
    assert _sources(docs, w["labels"], port, w["ports"][port]) == EXPECTED[(pod, port)]


def test_policies_restrict_ingress_only(docs) -> None:
    """Egress is left open: every part needs the API server, the collector the engines."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert len(policies) == 4
    assert all(p["spec"]["policyTypes"] == ["Ingress"] for p in policies)
