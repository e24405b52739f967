"""manifests/extender agrees with the code: the KubeSchedulerConfiguration registers the
extender the way it is served, and the extender ConfigMap parses strictly.
(Rendering and schema validation for Kubernetes 1.29..1.34 of every manifest directory is
tests/manifests/test_manifests_kustomize_validate.py.)"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import yaml

from extender.config import ExtenderConfig
from kvspread import __version__

DIR = Path(__file__).resolve().parents[2] / "manifests" / "extender"


def objects() -> list[dict]:
    kust = yaml.safe_load((DIR / "kustomization.yaml").read_text())
    out: list[dict] = []
    for res in kust["resources"]:
        out += [d for d in yaml.safe_load_all((DIR / res).read_text()) if d]
    return out


def one(kind: str, name: str) -> dict:
    found = [o for o in objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def test_scheduler_configuration_registers_the_extender() -> None:
    cm = one("ConfigMap", "kvspread-scheduler")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["kvspread-scheduler"]
    disabled = {p["name"] for p in cfg["profiles"][0]["plugins"]["score"]["disabled"]}
    # kvspread owns replica spread and packing: these scores would pull against it
    assert disabled == {"NodeResourcesFit", "NodeResourcesBalancedAllocation", "PodTopologySpread"}
    assert "filter" not in cfg["profiles"][0]["plugins"]  # every filter stays on
    # the extender packs and spreads over the cluster, not a rotating sample of it
    assert cfg["percentageOfNodesToScore"] == 100
    (ext,) = cfg["extenders"]
    for key in ("urlPrefix", "filterVerb", "prioritizeVerb", "weight", "httpTimeout"):
        assert key in ext
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is True
    served = ExtenderConfig.from_mapping(
        yaml.safe_load(one("ConfigMap", "kvspread-extender")["data"]["extender.yaml"])
    )
    assert ext["filterVerb"] == served.server.filter_verb
    assert ext["prioritizeVerb"] == served.server.prioritize_verb
    url = urlsplit(ext["urlPrefix"])
    svc = one("Service", "kvspread-extender")
    assert url.hostname == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
    assert url.port == svc["spec"]["ports"][0]["port"] == served.server.port
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    lease = cfg["leaderElection"]
    assert (
        lease["resourceNamespace"] == "kvspread" and lease["resourceName"] == "kvspread-scheduler"
    )


def test_deployments() -> None:
    ext = one("Deployment", "kvspread-extender")
    assert ext["spec"]["replicas"] == 2
    (c,) = ext["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"ghcr.io/kvspread/kvspread:{__version__}"
    assert c["command"] == ["kvspread"] and c["args"][:2] == ["extender", "serve"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    sched = one("Deployment", "kvspread-scheduler")
    (k,) = sched["spec"]["template"]["spec"]["containers"]
    image, _, tag = k["image"].rpartition(":")
    assert image == "registry.k8s.io/kube-scheduler" and tag.startswith("v1.")
    mounts = {m["name"]: m["mountPath"] for m in k["volumeMounts"]}
    assert f"--config={mounts['config']}/config.yaml" in k["command"]


def test_rbac_lets_the_extender_watch_nodes_pods_and_nodesignals() -> None:
    role = one("ClusterRole", "kvspread-extender")
    core, signals = role["rules"]
    assert core["apiGroups"] == [""] and set(core["resources"]) == {"nodes", "pods"}
    assert set(core["verbs"]) == {"list", "watch"}
    assert signals["apiGroups"] == ["kvspread.io"] and signals["resources"] == ["nodesignals"]
    assert set(signals["verbs"]) == {"list", "watch"}
    bound = {
        o["roleRef"]["name"]
        for o in objects()
        if o["kind"] == "ClusterRoleBinding" and o["subjects"][0]["name"] == "kvspread-scheduler"
    }
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= bound
