"""kvspread's shipped objects on a test control plane: the NodeSignals CRD, stand-ins for the
InferencePool and InferenceObjective CRDs, the namespaces,
every part's ServiceAccount and the RBAC manifests as shipped, so the parts run under
exactly the privileges an installation gives them. Idempotent (409s are ignored)."""

from __future__ import annotations

from typing import Any

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


def inference_objective_crd(group: str, schema: dict[str, Any]) -> dict[str, Any]:
    """An InferenceObjective CRD (kind, plural and version as llm-d's and GIE's) in `group`."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"inferenceobjectives.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": "InferenceObjective",
                "listKind": "InferenceObjectiveList",
                "plural": "inferenceobjectives",
                "singular": "inferenceobjective",
            },
            "versions": [{"name": "v1alpha2", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": schema}}],
        },
    }  # fmt: skip


# llm-d.ai's: the fields the router reads with their types and defaults as llm-d-router's
# CRD declares them (spec.priority int32, spec.poolRef.group/kind defaulted, name required),
# written here; the server validates and defaults them
OBJECTIVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["poolRef"],
            "properties": {
                "priority": {"type": "integer", "format": "int32"},
                "poolRef": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "group": {"type": "string", "default": "inference.networking.k8s.io"},
                        "kind": {"type": "string", "default": "InferencePool"},
                        "name": {"type": "string", "minLength": 1},
                    },
                },
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
# GIE v1.0-v1.5's group, with an open schema (a test stand-in): it lets a malformed object
# reach the router through a real API server
LEGACY_OBJECTIVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
}
OBJECTIVE_CRDS = (
    inference_objective_crd("llm-d.ai", OBJECTIVE_SCHEMA),
    inference_objective_crd("inference.networking.x-k8s.io", LEGACY_OBJECTIVE_SCHEMA),
)


def install(cp: ControlPlane) -> None:
    cp.apply_files("manifests/crds/nodesignals/nodesignals.yaml")
    cp.create(INFERENCE_POOL_CRD)
    for crd in OBJECTIVE_CRDS:
        cp.create(crd)
    cp.wait_established("nodesignals.kvspread.io")
    cp.wait_established("inferencepools.inference.networking.k8s.io")
    for crd in OBJECTIVE_CRDS:
        cp.wait_established(crd["metadata"]["name"])
    cp.apply_files("manifests/namespace/namespace.yaml")
    for ns, name in SERVICE_ACCOUNTS.values():
        cp.service_account(ns, name)
    cp.apply_files(*RBAC)
