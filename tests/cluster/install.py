"""kvspread's shipped objects on a test control plane: the NodeSignals CRD, the namespaces,
every part's ServiceAccount and the RBAC manifests as shipped, so the parts run under
exactly the privileges an installation gives them. Idempotent (409s are ignored)."""

from __future__ import annotations

from tests.cluster.controlplane import ControlPlane

SERVICE_ACCOUNTS = {
    "extender": ("kvspread", "kvspread-extender"),
    "scheduler": ("kvspread", "kvspread-scheduler"),
    "collector": ("kvspread", "kvspread-collector"),
    "adapter": ("kvspread", "kvspread-adapter"),
    "router": ("llm", "kvspread-router"),
}
RBAC = (
    "manifests/extender/rbac.yaml",
    "manifests/router/rbac.yaml",
    "manifests/collector/base/rbac.yaml",
    "manifests/metrics-adapter/rbac.yaml",
)
ANNOTATION_OVERLAY = "manifests/collector/annotation-channel/rbac-annotation.yaml"

# an InferencePool CRD for the router's pool mode (the Gateway API inference extension's
# group and kind; the schema is left open, the router reads spec.selector and targetPorts)
INFERENCE_POOL_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {
        "name": "inferencepools.inference.networking.k8s.io",
        # *.k8s.io groups need this annotation; "unapproved..." is accepted and says so
        "annotations": {"api-approved.kubernetes.io": "unapproved, a test stand-in"},
    },
    "spec": {
        "group": "inference.networking.k8s.io",
        "scope": "Namespaced",
        "names": {"kind": "InferencePool", "plural": "inferencepools", "singular": "inferencepool"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def install(cp: ControlPlane) -> None:
    cp.apply_files("manifests/crds/nodesignals/nodesignals.yaml")
    cp.create(INFERENCE_POOL_CRD)
    cp.wait_established("nodesignals.kvspread.io")
    cp.wait_established("inferencepools.inference.networking.k8s.io")
    cp.apply_files("manifests/namespace/namespace.yaml")
    for ns, name in SERVICE_ACCOUNTS.values():
        cp.service_account(ns, name)
    cp.apply_files(*RBAC)
