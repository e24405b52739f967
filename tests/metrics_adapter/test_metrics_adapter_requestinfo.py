"""Authorization attributes as kube-apiserver's request-info resolver assigns them.

The captured aggregator requests (tests/fixtures/k8s-wire/external-metrics-requests.jsonl,
recorded from a real v1.25 control plane) give the shapes the adapter really receives; the
table adds the other shapes of requestinfo.go (its test table, requestinfo_test.go).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from metrics_adapter.auth import Attributes
from metrics_adapter.requestinfo import request_attributes

CAPTURE = Path(__file__).parents[1] / "fixtures" / "k8s-wire" / "external-metrics-requests.jsonl"
G, V = "external.metrics.k8s.io", "v1beta1"


def _captured() -> list[tuple[str, str, dict[str, list[str]]]]:
    out = {}
    for line in CAPTURE.read_text().splitlines():
        d = json.loads(line)
        url = urlsplit(d["path"])
        out[(d["method"], d["path"])] = (d["method"], url.path, parse_qs(url.query))
    return sorted(out.values(), key=lambda x: x[1])


CAPTURED_EXPECT = {
    f"/apis/{G}/{V}": Attributes("get", f"/apis/{G}/{V}"),
    f"/apis/{G}/{V}/namespaces/default/mymetric": Attributes(
        "list", f"/apis/{G}/{V}/namespaces/default/mymetric", "default", G, V, "mymetric"
    ),
    "/openapi/v2": Attributes("get", "/openapi/v2"),
    "/openapi/v3": Attributes("get", "/openapi/v3"),
}


def test_every_captured_shape_is_covered() -> None:
    shapes = {path for _, path, _ in _captured()}
    assert shapes == set(CAPTURED_EXPECT)


@pytest.mark.parametrize("method,path,query", _captured(), ids=lambda x: str(x)[:60])
def test_captured_aggregator_requests(method: str, path: str, query: dict[str, list[str]]) -> None:
    got = request_attributes(method, path, query)
    assert got == CAPTURED_EXPECT[path]
    if got.is_resource:
        # the HPA's read is a collection of ExternalMetricValue: kube-apiserver said `list`
        assert got.verb == "list" and query == {"labelSelector": ["queue=jobs"]}


NS = f"/apis/{G}/{V}/namespaces"


@pytest.mark.parametrize(
    "method,path,query,expect",
    [
        ("GET", "/apis", {}, Attributes("get", "/apis")),
        ("GET", f"/apis/{G}", {}, Attributes("get", f"/apis/{G}")),
        ("GET", "/healthz", {}, Attributes("get", "/healthz")),
        ("GET", "/openapi/v3/apis/x/v1", {}, Attributes("get", "/openapi/v3/apis/x/v1")),
        ("HEAD", f"{NS}/ns/m", {}, Attributes("list", f"{NS}/ns/m", "ns", G, V, "m")),
        ("GET", f"{NS}/ns/m", {"watch": ["true"]}, Attributes("watch", f"{NS}/ns/m", "ns", G, V, "m")),
        ("GET", f"{NS}/ns/m", {"watch": ["false"]}, Attributes("list", f"{NS}/ns/m", "ns", G, V, "m")),
        ("GET", f"{NS}/ns/m/x", {}, Attributes("get", f"{NS}/ns/m/x", "ns", G, V, "m", "x")),
        ("GET", f"{NS}/ns/m/x/sub", {}, Attributes("get", f"{NS}/ns/m/x/sub", "ns", G, V, "m", "x", "sub")),
        ("GET", f"{NS}/ns", {}, Attributes("get", f"{NS}/ns", "ns", G, V, "namespaces", "ns")),
        ("GET", f"{NS}/ns/status", {}, Attributes("get", f"{NS}/ns/status", "ns", G, V, "namespaces", "ns", "status")),
        ("GET", f"{NS}", {}, Attributes("list", f"{NS}", None, G, V, "namespaces")),
        ("GET", f"/apis/{G}/{V}/m", {}, Attributes("list", f"/apis/{G}/{V}/m", None, G, V, "m")),
        ("GET", f"/apis/{G}/{V}/watch/namespaces/ns/m", {}, Attributes("watch", f"/apis/{G}/{V}/watch/namespaces/ns/m", "ns", G, V, "m")),
        ("POST", f"{NS}/ns/m", {}, Attributes("create", f"{NS}/ns/m", "ns", G, V, "m")),
        ("DELETE", f"{NS}/ns/m", {}, Attributes("deletecollection", f"{NS}/ns/m", "ns", G, V, "m")),
        ("DELETE", f"{NS}/ns/m/x", {}, Attributes("delete", f"{NS}/ns/m/x", "ns", G, V, "m", "x")),
        ("GET", "/api/v1/namespaces/ns/pods", {}, Attributes("list", "/api/v1/namespaces/ns/pods", "ns", "", "v1", "pods")),
        ("POST", "/apis", {}, Attributes("post", "/apis")),
    ],
)  # fmt: skip
def test_path_shapes(
    method: str, path: str, query: dict[str, list[str]], expect: Attributes
) -> None:
    assert request_attributes(method, path, query) == expect
