"""The NodeSignals channel across the shipped manifests: every installable set carries the
CRD (the extender waits for it), the collector and extender ClusterRoles grant what the
code does with it, and the shipped configs agree: the collector publishes on the resource
channel and the extender's staleness covers two of the collector's heartbeats."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bpf.config import from_mapping as collector_config
from extender.config import ExtenderConfig
from kvspread import nodesignals as ns

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")


def _render(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    res = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _rules_for(role: dict[str, Any], group: str, resource: str) -> set[str]:
    verbs: set[str] = set()
    for rule in role["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            verbs |= set(rule["verbs"])
    return verbs


@needs_kubectl
@pytest.mark.parametrize(
    "directory",
    [MANIFESTS, *sorted(p.parent for p in (MANIFESTS / "overlays").glob("*/kustomization.yaml"))],
    ids=lambda p: str(p.relative_to(MANIFESTS)) or ".",
)
def test_every_installable_set_carries_the_crd(directory: Path) -> None:
    docs = _render(directory)
    crd = _one(docs, "CustomResourceDefinition", ns.CRD_NAME)
    assert crd["spec"]["names"]["kind"] == ns.KIND
    if any(
        d["kind"] == "Deployment" and d["metadata"]["name"] == "kvspread-extender" for d in docs
    ):
        role = _one(docs, "ClusterRole", "kvspread-extender")
        assert _rules_for(role, ns.GROUP, ns.PLURAL) >= {"list", "watch"}


@needs_kubectl
def test_collector_role_grants_what_the_writer_does() -> None:
    role = _one(_render(MANIFESTS / "collector"), "ClusterRole", "kvspread-collector")
    assert _rules_for(role, ns.GROUP, ns.PLURAL) == {"create", "patch"}
    assert _rules_for(role, "", "nodes") == {"get"}  # the uid for the owner; no patch (issue 26)
    overlay = _render(MANIFESTS / "collector" / "annotation-channel")
    extra = _one(overlay, "ClusterRole", "kvspread-collector-annotation")
    assert _rules_for(extra, "", "nodes") == {"patch"}  # the annotation channel only


def _config(path: str, key: str) -> dict[str, Any]:
    cm = yaml.safe_load((MANIFESTS / path).read_text())
    return dict(yaml.safe_load(cm["data"][key]))


def test_shipped_configs_agree_on_channel_heartbeat_and_staleness() -> None:
    collector = collector_config(_config("collector/base/configmap.yaml", "collector.yaml"))
    extender = ExtenderConfig.from_mapping(
        _config("extender/configmap-extender.yaml", "extender.yaml")
    )
    assert collector.publish.channel == "nodesignals" and extender.kubernetes.node_signals
    heartbeat = collector.publish.max_interval_s
    cycle = collector.signals.interval_s
    assert extender.scoring.stale_after_s >= 2 * heartbeat + cycle
    # the budget alone keeps 5,000 nodes within 1 write/s per 100 nodes
    assert 5000 * collector.publish.writes_per_100s / 100 <= 5000 / 100
    assert 5000 / heartbeat <= 5000 / 100  # and so do the heartbeats of idle nodes
