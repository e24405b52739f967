"""The aggregated-API shell: discovery, OpenAPI, health and metric reads for
`external.metrics.k8s.io/v1beta1`, behind request-header authentication and authorisation.

It knows nothing of OTLP or PromQL: values come from an `ExternalMetricsProvider`, and
every failure is an `errors.AdapterError` written as a Kubernetes `Status`. Answers are
JSON whatever the `Accept` header says (the HPA controller asks for protobuf first and
accepts JSON). Routes:

    GET /healthz /livez /readyz (and /healthz/ping ...)     no authentication (probes)
    GET /apis                                                APIGroupList
    GET /apis/external.metrics.k8s.io                        APIGroup
    GET /apis/external.metrics.k8s.io/v1beta1                APIResourceList (one per metric)
    GET /apis/external.metrics.k8s.io/v1beta1/namespaces/NS/METRIC?labelSelector=...
                                                             ExternalMetricValueList
    GET /openapi/v2, /openapi/v3, /openapi/v3/apis/external.metrics.k8s.io/v1beta1
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from kvspread.quantity import format_quantity
from metrics_adapter.auth import (
    AlwaysAllowAuthorizer,
    Authorizer,
    RequestHeaderAuthenticator,
    UserInfo,
    forbidden,
)
from metrics_adapter.errors import (
    AdapterError,
    BadRequest,
    MethodNotAllowed,
    NotFound,
    status_object,
)
from metrics_adapter.httpserver import Request, Response
from metrics_adapter.provider import ExternalMetricsProvider
from metrics_adapter.reads import parse_read
from metrics_adapter.requestinfo import request_attributes
from metrics_adapter.values import MetricValue

__all__ = [
    "ApiServer",
    "rfc3339",
    "GROUP",
    "VERSION",
    "GROUP_VERSION",
    "value_list",
    "openapi_v2",
    "openapi_v3",
]

log = logging.getLogger("kvspread.adapter.api")

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
HEALTH_PATHS = ("/healthz", "/livez", "/readyz")
DURATION_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Buckets (seconds) of kvspread_adapter_request_duration_seconds."""
_READ = re.compile(r"^/apis/external\.metrics\.k8s\.io/v1beta1/namespaces/([^/]*)/([^/]*)$")
_VALUE_LIST_DEF = "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList"
_VALUE_DEF = "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValue"


def rfc3339(t: float) -> str:
    """metav1.Time's JSON form: RFC 3339, UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def value_list(values: list[MetricValue]) -> dict[str, Any]:
    """An ExternalMetricValueList document (quantities via kvspread.quantity)."""
    items = []
    for v in values:
        item: dict[str, Any] = {
            "metricName": v.name,
            "metricLabels": dict(v.labels),
            "timestamp": rfc3339(v.timestamp),
            "value": format_quantity(v.value),
        }
        if v.window is not None:
            item["window"] = int(round(v.window))
        items.append(item)
    return {
        "kind": "ExternalMetricValueList",
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "items": items,
    }


def _group() -> dict[str, Any]:
    gv = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"name": GROUP, "versions": [gv], "preferredVersion": gv}


def _definitions() -> dict[str, Any]:
    return {
        _VALUE_DEF: {
            "description": "ExternalMetricValue is a metric value for external metric.",
            "type": "object",
            "required": ["metricName", "metricLabels", "timestamp", "value"],
            "properties": {
                "metricName": {"type": "string", "description": "the name of the metric"},
                "metricLabels": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "a set of labels that identify a single time series for the metric",
                },
                "timestamp": {
                    "type": "string",
                    "format": "date-time",
                    "description": "when the value was computed (RFC 3339)",
                },
                "window": {
                    "type": "integer",
                    "format": "int64",
                    "description": "seconds over which the value was computed",
                },
                "value": {"type": "string", "description": "the value as a Kubernetes quantity"},
            },
        },
        _VALUE_LIST_DEF: {
            "description": "ExternalMetricValueList is a list of values for a given metric for some set labels.",
            "type": "object",
            "required": ["items"],
            "properties": {
                "kind": {"type": "string"},
                "apiVersion": {"type": "string"},
                "metadata": {"type": "object"},
                "items": {"type": "array", "items": {"$ref": "#/definitions/" + _VALUE_DEF}},
            },
            "x-kubernetes-group-version-kind": [
                {"group": GROUP, "version": VERSION, "kind": "ExternalMetricValueList"}
            ],
        },
    }


def _params_v2() -> list[dict[str, Any]]:
    return [
        {
            "name": "namespace",
            "in": "path",
            "required": True,
            "type": "string",
            "description": "object name and auth scope",
        },
        {
            "name": "metric",
            "in": "path",
            "required": True,
            "type": "string",
            "description": "the external metric name",
        },
        {
            "name": "labelSelector",
            "in": "query",
            "required": False,
            "type": "string",
            "description": "a selector to restrict the series by their labels",
        },
    ]


def _document(
    version: str, parameters: list[dict[str, Any]], ok: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    """`info` and `paths` of both OpenAPI documents: the one GET of a metric; `ok` is what
    the 200 response carries, `fields` the operation's version-specific keys."""
    return {
        "info": {"title": "kvspread external metrics", "version": version},
        "paths": {
            f"/apis/{GROUP_VERSION}/namespaces/{{namespace}}/{{metric}}": {
                "get": {
                    "description": "read the value of an external metric",
                    "operationId": "readExternalMetricsV1beta1NamespacedMetric",
                    "parameters": parameters,
                    "responses": {
                        "200": {"description": "OK", **ok},
                        "401": {"description": "Unauthorized"},
                        "404": {"description": "the metric does not exist"},
                    },
                    **fields,
                }
            }
        },
    }


def openapi_v2(version: str) -> dict[str, Any]:
    """A Swagger 2.0 document for the group (what the aggregator merges into /openapi/v2)."""
    return {
        "swagger": "2.0",
        **_document(
            version,
            _params_v2(),
            {"schema": {"$ref": "#/definitions/" + _VALUE_LIST_DEF}},
            produces=["application/json"],
            schemes=["https"],
            tags=["externalMetrics_v1beta1"],
        ),
        "definitions": _definitions(),
    }


def openapi_v3(version: str) -> dict[str, Any]:
    """An OpenAPI 3.0 document for /openapi/v3/apis/external.metrics.k8s.io/v1beta1."""
    defs = json.loads(json.dumps(_definitions()).replace("#/definitions/", "#/components/schemas/"))
    params = [
        {
            "name": p["name"],
            "in": p["in"],
            "required": p["required"],
            "description": p["description"],
            "schema": {"type": "string"},
        }
        for p in _params_v2()
    ]
    ref = {"$ref": "#/components/schemas/" + _VALUE_LIST_DEF}
    return {
        "openapi": "3.0.0",
        **_document(version, params, {"content": {"application/json": {"schema": ref}}}),
        "components": {"schemas": defs},
    }


class ApiServer:
    """Route, authenticate, authorise and answer (see the module docstring).

    Parameters:
        provider: where metric values come from.
        authenticator: request-header authenticator (None: everyone is anonymous and
            allowed -- only for tests of the routes).
        authorizer: decides per request; SubjectAccessReview calls run in a thread.
        ready: () -> bool for /readyz.
    """

    def __init__(
        self,
        provider: ExternalMetricsProvider,
        authenticator: RequestHeaderAuthenticator | None,
        authorizer: Authorizer | None = None,
        ready: Callable[[], bool] = lambda: True,
        version: str = "v0.1.0",
    ) -> None:
        self.provider = provider
        self.authenticator = authenticator
        self.authorizer = authorizer or AlwaysAllowAuthorizer()
        self.ready = ready
        self.version = version
        self.requests: dict[tuple[str, int], int] = {}
        """(route kind, status code) -> count, for kvspread_adapter_requests_total."""
        self.duration_counts = [0] * (len(DURATION_BOUNDS) + 1)
        """Non-cumulative counts of request durations per DURATION_BOUNDS bucket (+Inf last)."""
        self.duration_sum = 0.0
        v2 = json.dumps(openapi_v2(version)).encode()
        v3 = json.dumps(openapi_v3(version)).encode()
        h = hashlib.sha512(v3).hexdigest().upper()
        self._static = {
            "/openapi/v2": v2,
            f"/openapi/v3/apis/{GROUP_VERSION}": v3,
            "/openapi/v3": json.dumps(
                {
                    "paths": {
                        f"apis/{GROUP_VERSION}": {
                            "serverRelativeURL": f"/openapi/v3/apis/{GROUP_VERSION}?hash={h}"
                        }
                    }
                }
            ).encode(),
            "/apis": json.dumps(
                {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group()]}
            ).encode(),
            f"/apis/{GROUP}": json.dumps(
                {"kind": "APIGroup", "apiVersion": "v1", **_group()}
            ).encode(),
        }

    def _json(self, status: int, doc: dict[str, Any] | bytes) -> Response:
        body = doc if isinstance(doc, bytes) else json.dumps(doc, separators=(",", ":")).encode()
        return Response(status, body, "application/json")

    def _error(self, exc: AdapterError) -> Response:
        return self._json(exc.code, exc.status())

    def _count(self, kind: str, code: int) -> None:
        self.requests[(kind, code)] = self.requests.get((kind, code), 0) + 1

    async def handle(self, req: Request) -> Response:
        start = time.perf_counter()
        kind = "other"
        try:
            path = req.path.rstrip("/") or "/"
            if path in HEALTH_PATHS or path.startswith(tuple(p + "/" for p in HEALTH_PATHS)):
                kind = "health"
                if path.startswith("/readyz") and not self.ready():
                    resp = Response(500, b"readyz check failed: not ready", "text/plain")
                else:
                    resp = Response(200, b"ok", "text/plain")
            else:
                kind = "read" if _READ.match(path) else "discovery"
                resp = await self._authorized(req, path)
        except AdapterError as exc:
            resp = self._error(exc)
        except Exception:  # noqa: BLE001 - a bug must still answer with a Status
            log.exception("request failed", extra={"kv": {"path": req.path}})
            resp = self._json(500, status_object(500, "InternalError", "internal error"))
        self._count(kind, resp.status)
        took = time.perf_counter() - start
        self.duration_sum += took
        self.duration_counts[bisect.bisect_left(DURATION_BOUNDS, took)] += 1
        return resp

    async def _authorized(self, req: Request, path: str) -> Response:
        user = (
            self.authenticator.authenticate(req)
            if self.authenticator is not None
            else UserInfo("system:anonymous", ("system:unauthenticated",))
        )
        m = _READ.match(path)
        attrs = request_attributes(req.method, path, req.query)
        if self.authorizer.blocking:
            allowed, reason = await asyncio.to_thread(self.authorizer.authorize, user, attrs)
        else:
            allowed, reason = self.authorizer.authorize(user, attrs)
        if not allowed:
            raise forbidden(user, attrs, reason)
        if req.method != "GET":
            raise MethodNotAllowed(
                f"the server does not allow this method on the requested resource: {req.method}"
            )
        static = self._static.get(path)
        if static is not None:
            return self._json(200, static)
        if path == f"/apis/{GROUP_VERSION}":
            return self._json(200, self._resources())
        if m:
            return await self._read(req, m.group(1), m.group(2))
        raise NotFound(f"the server could not find the requested resource ({req.method} {path})")

    def _resources(self) -> dict[str, Any]:
        try:
            names = self.provider.list_metrics()
        except Exception:  # noqa: BLE001 - the contract says never, but discovery must answer
            log.exception("list_metrics failed")
            names = []
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": GROUP_VERSION,
            "resources": [
                {
                    "name": n,
                    "singularName": "",
                    "namespaced": True,
                    "kind": "ExternalMetricValueList",
                    "verbs": ["get"],
                }
                for n in names
            ],
        }

    async def _read(self, req: Request, namespace: str, metric: str) -> Response:
        sel_values = req.query.get("labelSelector", [])
        if len(sel_values) > 1:
            raise BadRequest("labelSelector given more than once")
        selector = parse_read(namespace, sel_values[0] if sel_values else None)
        if self.provider.is_blocking(metric):
            values = await asyncio.to_thread(
                self.provider.get_external_metric, namespace, metric, selector
            )
        else:
            values = self.provider.get_external_metric(namespace, metric, selector)
        return self._json(200, value_list(values))
