"""The NodeSignals CRD and the collector's namespace on a real kube-apiserver v1.26: the
printer columns `kubectl get nodesignals` shows (the server's Table answer, which kubectl
prints upper-cased), and that creating the namespace and the collector DaemonSet draws no
PodSecurity warning (issue 26, points 6 and 7); a baseline-warn namespace, which does, shows
the check is live."""

from __future__ import annotations

import re

import yaml

from bpf.publish_crd import NodeSignalsWriter
from kvspread.kube import api_client
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.cluster.captures import record
from tests.cluster.controlplane import ROOT, ControlPlane

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def document(node: str, ts: float = 1764700000.0) -> str:
    """A collector's signals document: one 80 GiB GPU with 1000 MiB used."""
    gpu = GpuSignal(index=0, mem_total_mib=81920, mem_used_mib=1000)
    return encode_signals(NodeSignals(ts=ts, node=node, gpus=(gpu,)))


def install_crd(cp: ControlPlane) -> None:
    cp.apply_files("manifests/crds/nodesignals/nodesignals.yaml")
    cp.wait_established("nodesignals.kvspread.io")


def node(name: str, gpus: int = 4) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
        },
    }


def test_kubectl_get_nodesignals_columns(cp: ControlPlane) -> None:
    install_crd(cp)
    cp.create(node("gpu-1"))
    admin = cp.kubeconfig_admin()
    NodeSignalsWriter(api_client(str(admin)), "gpu-1")(document("gpu-1"))
    table = cp.ok("GET", "/apis/kvspread.io/v1alpha1/nodesignals", headers={"Accept": TABLE})
    names = [c["name"].upper() for c in table["columnDefinitions"]]
    assert names == ["NAME", "MEASURED", "GPUS", "LARGEST-FREE-MIB", "AGE"]
    (row,) = [r for r in table["rows"] if r["cells"][0] == "gpu-1"]
    assert row["cells"][2:4] == [1, 81920 - 1000]
    # a date column: the server renders the measurement time as an age (1 year old here)
    assert re.fullmatch(r"\d+[smhdy]\S*", row["cells"][1]), row["cells"][1]
    record(
        "nodesignals-table",
        {
            "request": "GET /apis/kvspread.io/v1alpha1/nodesignals, Accept: " + TABLE,
            "columnDefinitions": table["columnDefinitions"],
            "row": {"cells": row["cells"][:4]},
        },
    )


def test_the_collector_namespace_and_daemonset_draw_no_podsecurity_warning(
    cp: ControlPlane,
) -> None:
    ns = yaml.safe_load((ROOT / "manifests/namespace/namespace.yaml").read_text())
    ds = yaml.safe_load((ROOT / "manifests/collector/base/daemonset.yaml").read_text())
    warnings = {}
    for r in [cp.create(ns), *cp.apply_files("manifests/collector/base/serviceaccount.yaml")]:
        warnings[r.request.url.path] = r.headers.get_list("warning")
    r = cp.create(ds)
    assert r.status_code == 201, r.text
    warnings[r.request.url.path] = r.headers.get_list("warning")
    assert all(not w for w in warnings.values()), warnings
    # control: the same DaemonSet in a namespace that warns at baseline gets warnings
    cp.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "psa-baseline",
                "labels": {"pod-security.kubernetes.io/warn": "baseline"},
            },
        }
    )
    ds["metadata"]["namespace"] = "psa-baseline"
    control = cp.create(ds).headers.get_list("warning")
    assert any("hostPID" in w for w in control), control
    record(
        "podsecurity-warnings",
        {
            "kvspread namespace (manifests/namespace) + collector DaemonSet": warnings,
            "same DaemonSet in a namespace with pod-security.kubernetes.io/warn=baseline": control,
        },
    )
