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


PREFLIGHT_TIMEOUT_S = 10.0
"""How long the check waits for the API server (connect and read): a URL that accepts the
connection but never answers is then "cannot reach", not a hang."""


def fetch_apiservice(
    api: Any, fix: str = "--kube-api-server or --kubeconfig"
) -> dict[str, Any] | None:
    """The APIService as JSON through a `kubernetes` ApiClient; None when it is absent.

    What the environment can get wrong is a ConfigError (exit 2) naming the API's URL and,
    in `fix`, what to correct: an answer other than 200 or 404, no connection (refused, no
    such host, reset), an answer that is not a JSON object. The body is parsed here, not by
    the client's models, so that an HTML page or a list is reported as such."""
    import json

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    url = str(getattr(api.configuration, "host", "") or "the Kubernetes API")
    path = f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}"
    try:
        # the raw urllib3 response (the annotation says V1APIService, the model)
        raw: Any = client.ApiregistrationV1Api(api).read_api_service(
            APISERVICE, _preload_content=False, _request_timeout=PREFLIGHT_TIMEOUT_S
        )
        try:
            body, content_type = raw.data, raw.headers.get("content-type") or "no content type"
        finally:
            raw.release_conn()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise ConfigError(
            f"cannot read APIService {APISERVICE}: {exc.status} {exc.reason} (the check needs "
            "get on apiservices.apiregistration.k8s.io)"
        ) from None
    except HTTPError as exc:
        raise ConfigError(
            f"cannot reach the Kubernetes API at {url} ({_network_reason(exc)}); start the API "
            f"server (or kubectl proxy) there, or fix {fix}"
        ) from None
    try:
        doc = json.loads(body)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        doc = None
        what = "not JSON"
    else:
        what = f"JSON but not an object ({type(doc).__name__})"
    if not isinstance(doc, dict):
        sample = bytes(body[:80]).decode("utf-8", "replace")
        raise ConfigError(
            f"the answer of {url} to GET {path} is {what} ({content_type}: {sample!r}), so "
            f"it is not a Kubernetes API server; fix {fix} (the API server's or kubectl proxy's "
            "URL)"
        )
    return doc


def _network_reason(exc: BaseException) -> str:
    """The innermost OS error's words ("Connection refused", "Name or service not known")
    of a urllib3 error, whose own text repeats the pool, the URL and the retries."""
    reason = getattr(exc, "reason", None)
    seen: list[BaseException] = [exc] + ([reason] if isinstance(reason, BaseException) else [])
    while (nxt := seen[-1].__cause__ or seen[-1].__context__) is not None and nxt not in seen:
        seen.append(nxt)
    for e in reversed(seen):
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
    return str(seen[-1])[:160]
