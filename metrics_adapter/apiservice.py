"""Who serves `v1beta1.external.metrics.k8s.io`: the check before the adapter's APIService
is applied, so that it never silently takes the API from another server.

A cluster has one APIService per group version; KEDA, Datadog's cluster agent and
prometheus-adapter each register this one. `kubectl apply -k manifests/` would replace
theirs with kvspread's, and every HPA or ScaledObject reading their metrics would fail.
`kvspread adapter preflight` reads the APIService and refuses (exit 2, one line naming the
owner) when another Service serves it, pointing to manifests/overlays/keda/, where the
adapter serves KEDA's external scaler instead and leaves the APIService alone.
"""

from __future__ import annotations

from typing import Any

from kvspread.settings import ConfigError

__all__ = ["APISERVICE", "OWN_SERVICE", "owner_of", "check_apiservice", "fetch_apiservice"]

APISERVICE = "v1beta1.external.metrics.k8s.io"
OWN_SERVICE = ("kvspread", "kvspread-adapter")
"""(namespace, name) of the Service manifests/metrics-adapter/apiservice.yaml points to."""

KNOWN_OWNERS = {
    "keda": "KEDA",
    "datadog": "the Datadog cluster agent",
    "prometheus-adapter": "prometheus-adapter",
}
"""Name fragments of the usual other servers' Services, to say who they are."""


def owner_of(doc: dict[str, Any] | None) -> tuple[str, str] | None:
    """(namespace, name) of the Service an APIService document sends the API to; None
    for an absent one or one served locally (no `spec.service`)."""
    service = ((doc or {}).get("spec") or {}).get("service") or None
    if not isinstance(service, dict):
        return None
    return str(service.get("namespace", "")), str(service.get("name", ""))


def check_apiservice(doc: dict[str, Any] | None, own: tuple[str, str] = OWN_SERVICE) -> str:
    """A one-line verdict when applying kvspread's APIService is safe; ConfigError naming
    the other owner when it is not."""
    owner = owner_of(doc)
    if owner is None:
        return f"APIService {APISERVICE} is not registered: the adapter's manifests may add it"
    if owner == own:
        return f"APIService {APISERVICE} is already kvspread's ({owner[0]}/{owner[1]})"
    who = next((v for k, v in KNOWN_OWNERS.items() if k in "/".join(owner)), "another server")
    raise ConfigError(
        f"APIService {APISERVICE} is served by Service {owner[0]}/{owner[1]} ({who}); "
        "applying manifests/ or manifests/metrics-adapter/ would take it from it: apply "
        "manifests/overlays/keda/ instead (the adapter serves KEDA's external scaler, "
        "docs/adapter.md) or remove that server first"
    )


def fetch_apiservice(api: Any) -> dict[str, Any] | None:
    """The APIService as JSON through a `kubernetes` ApiClient; None when it is absent."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        obj = client.ApiregistrationV1Api(api).read_api_service(APISERVICE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise ConfigError(
            f"cannot read APIService {APISERVICE}: {exc.status} {exc.reason} (the check needs "
            "get on apiservices.apiregistration.k8s.io)"
        ) from None
    data = api.sanitize_for_serialization(obj)
    return data if isinstance(data, dict) else None
