"""The aggregator's captured requests (tests/fixtures/k8s-wire/external-metrics-requests.jsonl)
replayed, paths and headers, over real TLS with a front-proxy client certificate."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from kvspread.quantity import parse_quantity
from metrics_adapter.server import AdapterThread
from metrics_adapter.sources.store import GAUGE, Point
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config

FIXTURE = Path(__file__).parents[1] / "fixtures" / "k8s-wire" / "external-metrics-requests.jsonl"
RULES = [
    {
        "name": "mymetric",
        "metric": "jobs.queue.length",
        "aggregation": "last",
        "labels": {"k8s.namespace.name": "namespace", "queue": "queue"},
    }
]
SKIP_HEADERS = {"host", "accept-encoding", "content-length", "connection"}


def validate(doc: dict) -> None:
    """Validate an OpenAPI document with openapi-spec-validator (a test dependency); without
    it, check the shape the aggregator relies on."""
    try:
        from openapi_spec_validator import validate as full
    except ImportError:  # pragma: no cover - the test extra installs it
        assert doc.get("swagger") == "2.0" or str(doc.get("openapi", "")).startswith("3.")
        assert doc["paths"] and doc["info"]["version"]
        return
    full(doc)


def _requests() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def replay_adapter(pki: Pki):
    with AdapterThread(base_config(pki, rules=RULES)) as a:
        now = time.time()
        a.call(
            a.adapter.store.add,
            [
                Point(
                    "jobs.queue.length",
                    GAUGE,
                    (("k8s.namespace.name", "default"), ("queue", "jobs")),
                    now,
                    0,
                    (42.0,),
                ),
                Point(
                    "jobs.queue.length",
                    GAUGE,
                    (("k8s.namespace.name", "default"), ("queue", "mail")),
                    now,
                    0,
                    (7.0,),
                ),
            ],
            now,
        )
        yield a


def test_every_captured_request_gets_a_valid_answer(
    pki: Pki, replay_adapter: AdapterThread
) -> None:
    reqs = _requests()
    assert len(reqs) >= 50
    seen: set[str] = set()
    with api_client(pki, replay_adapter) as c:
        for rec in reqs:
            headers = [(k, v) for k, v in rec["headers"] if k.lower() not in SKIP_HEADERS]
            r = c.request(rec["method"], rec["path"], headers=headers)
            assert r.status_code == 200, (rec["path"], r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/json")
            doc = r.json()
            path = rec["path"].split("?")[0]
            seen.add(path)
            if path == "/apis/external.metrics.k8s.io/v1beta1":
                assert doc["kind"] == "APIResourceList"
                assert doc["groupVersion"] == "external.metrics.k8s.io/v1beta1"
                res = doc["resources"]
                assert [x["name"] for x in res] == ["mymetric"]
                assert res[0] == {
                    "name": "mymetric",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "ExternalMetricValueList",
                    "verbs": ["get"],
                }
            elif path.endswith("/mymetric"):
                assert doc["kind"] == "ExternalMetricValueList"
                assert doc["apiVersion"] == "external.metrics.k8s.io/v1beta1"
                (item,) = doc["items"]  # labelSelector queue=jobs picks one series
                assert item["metricName"] == "mymetric"
                assert item["metricLabels"] == {"namespace": "default", "queue": "jobs"}
                assert parse_quantity(item["value"]) == 42
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["timestamp"])
                assert item["window"] == 60
            elif path == "/openapi/v2":
                validate(doc)
            elif path == "/openapi/v3":
                (entry,) = doc["paths"].values()
                v3 = c.get(entry["serverRelativeURL"], headers=headers)
                assert v3.status_code == 200
                validate(v3.json())
    assert seen == {
        "/apis/external.metrics.k8s.io/v1beta1",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/mymetric",
        "/openapi/v2",
        "/openapi/v3",
    }


def test_discovery_documents_and_unknown_metric(pki: Pki, replay_adapter: AdapterThread) -> None:
    hdr = {
        "X-Remote-User": "u",
        "X-Remote-Group": "system:authenticated",
        "Accept": "application/vnd.kubernetes.protobuf",
    }
    with api_client(pki, replay_adapter) as c:
        g = c.get("/apis", headers=hdr).json()
        assert g["kind"] == "APIGroupList"
        assert (
            g["groups"][0]["preferredVersion"]["groupVersion"] == "external.metrics.k8s.io/v1beta1"
        )
        assert c.get("/apis/external.metrics.k8s.io", headers=hdr).json()["kind"] == "APIGroup"
        r = c.get(
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/nosuchmetric", headers=hdr
        )
        assert r.status_code == 404
        st = r.json()
        assert (
            st["kind"] == "Status"
            and st["reason"] == "NotFound"
            and "nosuchmetric" in st["message"]
        )
        r = c.get("/apis/external.metrics.k8s.io/v1beta1/namespaces/default/mymetric",
                  params={"labelSelector": "queue in (jobs,mail)"}, headers=hdr)  # fmt: skip
        assert parse_quantity(r.json()["items"][0]["value"]) == 49
        r = c.get("/apis/external.metrics.k8s.io/v1beta1/namespaces/other/mymetric", headers=hdr)
        assert r.json()["items"] == [], "series are visible only in their own namespace"
        r = c.get("/apis/external.metrics.k8s.io/v1beta1/namespaces/default/mymetric",
                  params={"labelSelector": "queue in ("}, headers=hdr)  # fmt: skip
        assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
        assert c.post("/apis/external.metrics.k8s.io/v1beta1", headers=hdr).status_code == 405
