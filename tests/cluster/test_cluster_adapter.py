"""The metrics adapter behind a real kube-apiserver v1.26 aggregator: the shipped APIService
(its Service made an ExternalName for localhost, since no kube-proxy runs here), the adapter
reading the request-header CA from the real kube-system/extension-apiserver-authentication
and authorising by SubjectAccessReview under its shipped RBAC and ServiceAccount token. A
queue-depth gauge pushed over OTLP comes back through
/apis/external.metrics.k8s.io/v1beta1 for the HPA controller's identity; a user the
shipped ClusterRole does not name gets 403."""

from __future__ import annotations

import socket
import ssl
import time

from kvspread import names
from tests.cluster.aggregated import HPA, METRIC, WAIT_S, behind_the_aggregator
from tests.cluster.captures import record
from tests.cluster.controlplane import ControlPlane


def test_external_metrics_through_the_real_aggregator(cp: ControlPlane) -> None:
    with behind_the_aggregator(cp) as (_, value):
        stranger = cp.request("GET", METRIC, as_user="system:serviceaccount:default:someone")
        status = cp.ok(
            "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.external.metrics.k8s.io"
        )
    assert value["kind"] == "ExternalMetricValueList"
    assert [i["value"] for i in value["items"]] == ["7"]
    assert stranger.status_code == 403
    conds = {c["type"]: c["status"] for c in status["status"]["conditions"]}
    assert conds["Available"] == "True"
    record(
        "external-metrics-through-aggregator",
        {
            "request": f"GET {METRIC} as {HPA}",
            "answer": {"kind": value["kind"], "apiVersion": value["apiVersion"],
                       "items": [{"metricName": i["metricName"], "value": i["value"]} for i in value["items"]]},
            "other user status": stranger.status_code,
            "APIService Available": conds["Available"],
        },
    )  # fmt: skip


def test_slo_pressure_class_through_the_real_aggregator(cp: ControlPlane) -> None:
    """The HPA's selector `service=text,qos=batch` passes the aggregator unchanged and picks
    the batch queue target (40) for the queue gauge of 7 (no llm.qos on it): 7 / 40; with
    `service=text` alone the default target 4 applies: 7 / 4."""
    path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/{names.SLI_SLO_PRESSURE}"
    with behind_the_aggregator(cp):
        batch = cp.request("GET", path, as_user=HPA,
                           params={"labelSelector": "service=text,qos=batch"})  # fmt: skip
        plain = cp.request("GET", path, as_user=HPA, params={"labelSelector": "service=text"})
    assert batch.status_code == 200 and plain.status_code == 200, (batch.text, plain.text)
    (b,) = batch.json()["items"]
    (p,) = plain.json()["items"]
    assert b["value"] == "175m" and b["metricLabels"]["class"] == "batch"
    assert p["value"] == "1750m" and "class" not in p["metricLabels"]
    assert (
        b["metricLabels"]["term"] == p["metricLabels"]["term"] == names.SLI_QUEUE_DEPTH_PER_REPLICA
    )


def test_connection_bounds_behind_the_real_aggregator(cp: ControlPlane) -> None:
    """max_connections with the aggregator as the client: idle connections filling the port
    make room for it (its reads stay 200); connections each in the middle of a request keep
    it out, and it passes the adapter's 503 on; once they close it reads again."""
    limit = 4
    with behind_the_aggregator(cp, max_connections=limit) as (a, _):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        port = a.adapter.api_port

        def tls() -> ssl.SSLSocket:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            return ctx.wrap_socket(raw, server_hostname="localhost")

        idle = [tls() for _ in range(limit)]
        try:
            assert cp.request("GET", METRIC, as_user=HPA).status_code == 200
        finally:
            for s in idle:
                s.close()
        busy = [tls() for _ in range(limit)]
        try:
            for s in busy:
                s.sendall(b"GET /livez HTTP/1.1\r\n")  # begun, not finished
            deadline = time.monotonic() + WAIT_S
            while (got := cp.request("GET", METRIC, as_user=HPA)).status_code == 200:
                assert time.monotonic() < deadline, "the busy connections never filled the port"
                time.sleep(0.2)
            refused = got
        finally:
            for s in busy:
                s.close()
        deadline = time.monotonic() + WAIT_S
        while (again := cp.request("GET", METRIC, as_user=HPA)).status_code != 200:
            assert time.monotonic() < deadline, (again.status_code, again.text[:300])
            time.sleep(0.2)
        evicted = a.adapter.api_http.evicted_connections
        refusals = a.adapter.api_http.refused_connections
    assert refused.status_code == 503, (refused.status_code, refused.text[:300])
    assert "max_connections" in refused.text
    assert evicted >= 1
    assert refusals >= 1
    record(
        "adapter-connection-bounds-through-aggregator",
        {
            "max_connections": limit,
            "with idle connections filling the port": 200,
            "with busy connections filling the port": refused.status_code,
            "answer body": refused.text[:200],
            "after they closed": again.status_code,
        },
    )
