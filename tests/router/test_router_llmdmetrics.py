"""llm-d's `llm_d_epp_*` families on the picker's /metrics (router/llmdmetrics.py): names,
types and labels as llm-d-router defines them, values from requests driven over real gRPC,
bounded label values; and a real Prometheus (Debian's `prometheus`) scraping the picker and
answering the queries of llm-d's "Failure & Saturation Indicators" dashboard."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from router.endpoints import Endpoint
from router.llmdmetrics import BOUNDED_VALUES, OVERFLOW, LlmdMetrics
from router.objectives import DEFAULT, Objective
from tests.ports import free_port
from tests.router.conftest import router_config, wait, wait_fresh
from tests.router.test_router_extproc import CHAT, duplex

PREMIUM = {"x-llm-d-inference-objective": "premium", "x-llm-d-inference-fairness-id": "tenant-a"}

# The query strings of llm-d's dashboard guides/recipes/observability/grafana/dashboards/
# llm-d-failure-saturation-dashboard.json (github.com/llm-d/llm-d, commit 6b7ac826da7e),
# panels "Overall Error Rate", "Per-Model Error Rate", "Request Rate", "EPP E2E Latency P99";
# the dashboard's $namespace and $model_name variables are given as ".*" (All).
DASHBOARD = {
    "error_rate": 'sum(rate(llm_d_epp_request_error_total{namespace=~"$namespace"}[5m])) / '
    'sum(rate(llm_d_epp_request_total{namespace=~"$namespace"}[5m]))',
    "model_error_rate": "sum by(model_name) (rate(llm_d_epp_request_error_total"
    '{namespace=~"$namespace",model_name=~"$model_name"}[5m])) / sum by(model_name) '
    '(rate(llm_d_epp_request_total{namespace=~"$namespace",model_name=~"$model_name"}[5m]))',
    "request_rate": "sum by(model_name, target_model_name) (rate(llm_d_epp_request_total"
    '{namespace=~"$namespace",model_name=~"$model_name"}[5m]))',
    "epp_p99": "histogram_quantile(0.99, sum by(le) (rate("
    'llm_d_epp_scheduler_e2e_duration_seconds_bucket{namespace=~"$namespace"}[5m])))',
}


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fam: Any, suffix: str = "", **labels: str) -> float:
    got = [
        s.value
        for s in fam.samples
        if s.name == fam.name + suffix and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(got) == 1, (fam.name, labels, fam.samples)
    return float(got[0])


@pytest.fixture
def two(engines, start_router):  # type: ignore[no-untyped-def]
    busy, idle = engines("busy", "idle")
    busy.set(waiting=12, running=20, kv=0.7)
    idle.set(waiting=0, running=1, kv=0.1)
    router = start_router(
        router_config([busy.address, idle.address], objectives={"classes": {"premium": 10}})
    )
    wait_fresh(router, 2)
    return router, busy, idle


def _drive(port: int) -> None:
    """3 routed premium requests, 1 routed without objective, 1 bad header, 1 with no
    eligible endpoint (an empty subset hint)."""
    for _ in range(3):
        assert duplex(port, CHAT, extra=PREMIUM)[0].WhichOneof("response") == "request_headers"
    assert duplex(port, CHAT)[0].WhichOneof("response") == "request_headers"
    (bad,) = duplex(port, CHAT, extra={"x-llm-d-slo-ttft-ms": "soon"})
    assert bad.immediate_response.status.code == 400
    (none,) = duplex(port, CHAT, subset=[])
    assert none.immediate_response.status.code == 503


def test_families_types_labels_and_values(two) -> None:  # type: ignore[no-untyped-def]
    router, busy, idle = two
    _drive(router.grpc_port)
    fams = _families(httpx.get(f"http://127.0.0.1:{router.http_port}/metrics").text)
    req = fams["llm_d_epp_request"]
    assert req.type == "counter"
    assert _value(req, "_total", model_name="qwen", target_model_name="qwen",
                  fairness_id="tenant-a", priority="10") == 3  # fmt: skip
    assert _value(req, "_total", fairness_id="default-flow", priority="0") == 1
    err = fams["llm_d_epp_request_error"]
    assert _value(err, "_total", error_code="BadRequest", model_name="") == 1
    assert _value(err, "_total", error_code="ServiceUnavailable", model_name="qwen") == 1
    attempts = fams["llm_d_epp_scheduler_attempts"]
    # the busy engine is saturated (12 waiting): every routed request went to the idle one
    assert _value(attempts, "_total", status="success", target_model_name="qwen",
                  endpoint_name=idle.address, namespace="",
                  port=idle.address.rpartition(":")[2]) == 4  # fmt: skip
    assert _value(attempts, "_total", status="failure", endpoint_name="") == 1
    hist = fams["llm_d_epp_scheduler_e2e_duration_seconds"]
    assert hist.type == "histogram"
    assert _value(hist, "_count") == 5  # four choices and the one that found no endpoint
    bounds = sorted(float(s.labels["le"]) for s in hist.samples if s.name.endswith("_bucket"))
    assert bounds[:-1] == [0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1]
    assert _value(fams["llm_d_epp_ready_endpoints"], name="") == 2
    assert _value(fams["llm_d_epp_average_queue_size"], name="") == pytest.approx(6.0)
    assert _value(fams["llm_d_epp_average_kv_cache_utilization"], name="") == pytest.approx(0.4)
    assert _value(fams["llm_d_epp_average_running_requests"], name="") == pytest.approx(10.5)
    assert _value(fams["llm_d_epp_std_dev_queue_size"], name="") == pytest.approx(6.0)
    # kvspread's own families are still there beside them
    assert "kvspread_router_picks" in fams


def test_shed_request_is_resource_exhausted_without_an_attempt(saturated) -> None:  # type: ignore[no-untyped-def]
    router = saturated
    (resp,) = duplex(router.grpc_port, CHAT, extra={"x-llm-d-inference-objective": "batch"})
    assert resp.immediate_response.status.code == 429
    fams = _families(httpx.get(f"http://127.0.0.1:{router.http_port}/metrics").text)
    err = fams["llm_d_epp_request_error"]
    assert _value(err, "_total", error_code="ResourceExhausted", priority="-1") == 1
    assert not [
        s for s in fams["llm_d_epp_scheduler_attempts"].samples if s.name.endswith("_total")
    ]


def test_request_label_values_are_bounded() -> None:
    registry = CollectorRegistry()
    m = LlmdMetrics(registry, "pool")
    ep = Endpoint("10.0.0.5:8001", "", namespace="llm", pod="vllm-0", rank=1)
    for i in range(BOUNDED_VALUES + 50):
        m.routed(f"model-{i}", Objective("x", 0, fairness_id=f"t{i}"), ep.address, ep, 0.001)
    m.routed("m" * 300, DEFAULT, ep.address, ep, 0.001)
    fams = _families(generate_latest(registry).decode())
    samples = [s for s in fams["llm_d_epp_request"].samples if s.name.endswith("_total")]
    models = {s.labels["model_name"] for s in samples}
    assert len(models) == BOUNDED_VALUES + 1 and OVERFLOW in models
    assert (
        _value(fams["llm_d_epp_request"], "_total", model_name=OVERFLOW, fairness_id=OVERFLOW)
        == 51  # 50 past the bound, and the 300-character model (its default-flow is the 1001st id)
    )
    # llm-d's endpoint labels: pod-rank-i, the pod's namespace, the port
    (attempt,) = {
        (s.labels["endpoint_name"], s.labels["namespace"], s.labels["port"])
        for s in fams["llm_d_epp_scheduler_attempts"].samples
        if s.name.endswith("_total") and s.labels["target_model_name"] == "model-0"
    }
    assert attempt == ("vllm-0-rank-1", "llm", "8001")
    # series of endpoints that left the set go
    m.keep_only([])
    fams = _families(generate_latest(registry).decode())
    assert not [
        s for s in fams["llm_d_epp_scheduler_attempts"].samples if s.name.endswith("_total")
    ]


PROMETHEUS = shutil.which("prometheus")


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback only
        doc = json.loads(resp.read())
    assert doc["status"] == "success", (expr, doc)
    return list(doc["data"]["result"])


@pytest.mark.prometheus
@pytest.mark.slow
def test_llmd_dashboard_queries_on_real_prometheus(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (Debian package prometheus)")
    router, *_ = two
    port = free_port()
    cfg = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                # what a ServiceMonitor adds in a cluster: the picker pod's namespace
                "job_name": "kvspread-router",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{router.http_port}"], "labels": {"namespace": "llm"}}
                ],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    prom = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: _ready(prom), 60)
        _drive(router.grpc_port)  # the series exist from the first scrape on
        wait(lambda: _total(prom, "llm_d_epp_request_total") == 4, 30)
        _drive(router.grpc_port)  # an increase for rate() to see
        wait(lambda: _total(prom, "llm_d_epp_request_total") == 8, 30)
        time.sleep(1.5)  # one more scrape, so every family has its second sample
        exprs = {k: v.replace("$namespace", ".*").replace("$model_name", ".*")
                 for k, v in DASHBOARD.items()}  # fmt: skip
        (err,) = _query(prom, exprs["error_rate"])
        assert 0.2 < float(err["value"][1]) < 1.0  # 2 refused per 4 routed in the window
        by_model = {r["metric"]["model_name"]: float(r["value"][1])
                    for r in _query(prom, exprs["model_error_rate"])}  # fmt: skip
        assert by_model["qwen"] > 0  # the 503; the 400's body was never read: model ""
        (rate,) = _query(prom, exprs["request_rate"])
        assert rate["metric"] == {"model_name": "qwen", "target_model_name": "qwen"}
        assert float(rate["value"][1]) > 0
        (p99,) = _query(prom, exprs["epp_p99"])
        assert 0 < float(p99["value"][1]) <= 0.1
        # the pool gauges, as read by llm-d's guides
        (ready,) = _query(prom, 'llm_d_epp_ready_endpoints{namespace="llm"}')
        assert float(ready["value"][1]) == 2
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _ready(prom: str) -> bool:
    try:
        with urllib.request.urlopen(f"{prom}/-/ready", timeout=2) as resp:  # noqa: S310
            return bool(resp.status == 200)
    except OSError:
        return False


def _total(prom: str, name: str) -> float:
    res = _query(prom, f"sum({name})")
    return float(res[0]["value"][1]) if res else 0.0
