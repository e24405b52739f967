"""The NodeSignals ValidatingAdmissionPolicy on a real kube-apiserver v1.26 (issue 26, point
3), converted to v1alpha1 (tests/cluster/vap_v1alpha1.py): every recorded admission case of
tests/fixtures/k8s-wire/nodesignals-admission-reviews.jsonl is replayed as the real request
(CREATE as a POST, UPDATE as the collector's merge patch), made by the admin impersonating
the case's user with its user-info extra, and the server decides as the case expects. Then
what a real 1.26 pod-bound token carries: no node name, so with the policy every write of
a real 1.26 collector is refused (docs/install.md: apply it on 1.30+ only)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.captures import record
from tests.cluster.controlplane import ROOT, ControlPlane
from tests.cluster.install import install
from tests.cluster.test_cluster_crd import document, node
from tests.cluster.vap_v1alpha1 import convert_binding, convert_policy

NS = "/apis/kvspread.io/v1alpha1/nodesignals"
CASES = [
    json.loads(line)
    for line in (ROOT / "tests/fixtures/k8s-wire/nodesignals-admission-reviews.jsonl")
    .read_text()
    .splitlines()
    if line.strip()
]
COLLECTOR = "system:serviceaccount:kvspread:kvspread-collector"
WAIT_S = 30.0


def _shipped() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = {
        d["kind"]: d
        for d in yaml.safe_load_all((ROOT / "manifests/crds/nodesignals-policy.yaml").read_text())
    }
    return docs["ValidatingAdmissionPolicy"], docs["ValidatingAdmissionPolicyBinding"]


def _write_as(cp: ControlPlane, request: dict[str, Any]) -> Any:
    """Replay one admission request's operation as its user (impersonated)."""
    user = request["userInfo"]
    obj = request["object"]
    kw: dict[str, Any] = {"as_user": user["username"], "extra": user.get("extra") or {}}
    if user["username"] == "kubernetes-admin":  # the admin itself, by its client cert
        kw = {}
    name = obj["metadata"]["name"]
    if request["operation"] == "CREATE":
        cp.request("DELETE", f"{NS}/{name}")
        return cp.request("POST", NS, obj, **kw)
    cp.create(obj)  # the object an UPDATE changes exists (created by the admin)
    patch = {
        "metadata": {"ownerReferences": obj["metadata"].get("ownerReferences")},
        "spec": obj["spec"],
    }
    return cp.request(
        "PATCH", f"{NS}/{name}", patch, content_type="application/merge-patch+json", **kw
    )


@pytest.fixture(scope="module")
def policy(cp: ControlPlane) -> Iterator[None]:
    install(cp)
    for n in ("gpu-1", "gpu-2"):
        cp.create(node(n))
    vap, binding = _shipped()
    cp.create(convert_policy(vap))
    cp.create(convert_binding(binding))
    # the policy takes effect once its controller has compiled it: wait for a refusal
    probe = next(c for c in CASES if c["case"] == "a node that does not exist")["review"]["request"]
    deadline = time.monotonic() + WAIT_S
    while _write_as(cp, probe).status_code < 300:
        assert time.monotonic() < deadline, "the policy never took effect"
        time.sleep(0.3)
    yield
    base = "/apis/admissionregistration.k8s.io/v1alpha1"
    cp.request("DELETE", f"{base}/validatingadmissionpolicybindings/{binding['metadata']['name']}")
    cp.request("DELETE", f"{base}/validatingadmissionpolicies/{vap['metadata']['name']}")
    # gone once the probe passes again: later tests write NodeSignals as the collector
    deadline = time.monotonic() + WAIT_S
    while _write_as(cp, probe).status_code >= 300:
        assert time.monotonic() < deadline, "the policy outlived its deletion"
        time.sleep(0.3)
    cp.request("DELETE", f"{NS}/{probe['object']['metadata']['name']}")


def test_the_policy_decides_each_recorded_case_on_a_real_server(
    cp: ControlPlane, policy: None
) -> None:
    answers = []
    for case in CASES:
        r = _write_as(cp, case["review"]["request"])
        body = r.json()
        answers.append(
            {
                "case": case["case"],
                "expect": case["expect"],
                "status": r.status_code,
                "message": body.get("message", "") if r.status_code >= 300 else "",
            }
        )
    for a in answers:
        if a["expect"] == "allow":
            assert a["status"] in (200, 201), a
        else:
            assert a["status"] == 403, a
            assert "kvspread-nodesignals-own-node" in a["message"], a
            assert "error" not in a["message"].lower(), a  # the policy's message, no CEL error
    record("nodesignals-policy-decisions", answers)


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return claims


def test_a_real_126_pod_token_names_no_node_so_the_policy_refuses_its_writes(
    cp: ControlPlane, policy: None, tmp_path: Path
) -> None:
    pod = cp.ok(
        "POST",
        "/api/v1/namespaces/kvspread/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kvspread-collector-gpu-1"},
            "spec": {
                "nodeName": "gpu-1",
                "serviceAccountName": "kvspread-collector",
                "containers": [{"name": "collector", "image": "ghcr.io/kvspread/kvspread:0.2.0"}],
            },
        },
    )
    token = cp.token("kvspread", "kvspread-collector", bound_pod=pod)["status"]["token"]
    review = cp.ok(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
    )["status"]
    assert review["authenticated"] is True
    assert review["user"]["username"] == COLLECTOR
    extra = review["user"].get("extra", {})
    assert sorted(extra) == [
        "authentication.kubernetes.io/pod-name",
        "authentication.kubernetes.io/pod-uid",
    ]
    claims = _claims(token)["kubernetes.io"]
    assert "node" not in claims and claims["pod"]["name"] == pod["metadata"]["name"]
    # the collector's own write of its own node's object, with this token: refused
    cp.request("DELETE", f"{NS}/gpu-1")
    from kubernetes.client.exceptions import ApiException

    from bpf.publish_crd import NodeSignalsWriter
    from kvspread.kube import api_client

    kc = cp.kubeconfig(token, "collector-pod")
    with pytest.raises(ApiException) as refused:
        NodeSignalsWriter(api_client(str(kc)), "gpu-1")(document("gpu-1"))
    assert refused.value.status == 403
    message = json.loads(refused.value.body or "{}")["message"]
    assert "names no node" in message
    record(
        "pod-bound-token",
        {
            "tokenreview.status.user.extra keys": sorted(extra),
            "jwt kubernetes.io claim keys": sorted(claims),
            "jwt kubernetes.io.pod keys": sorted(claims["pod"]),
            "own NodeSignals create with this token under the policy": {
                "status": refused.value.status,
                "message": message,
            },
        },
    )
