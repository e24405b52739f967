"""PromQL source: matcher building and caching (FakePromClient), and a real Prometheus."""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from kvspread.clock import FakeClock
from kvspread.quantity import parse_quantity
from metrics_adapter.errors import SourceUnavailable
from metrics_adapter.rules import parse_rules
from metrics_adapter.selectors import parse_selector
from metrics_adapter.server import AdapterThread
from metrics_adapter.sources.promql import (
    FakePromClient,
    HttpPromClient,
    PromQLSource,
    PromSample,
    build_matchers,
)
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers
from tests.ports import free_port

RULE_DOC = {
    "name": "queue_from_prometheus",
    "source": "promql",
    "query": "sum by (namespace, service) (test_queue_length{<<.LabelMatchers>>})",
    "labels": {"namespace": "namespace", "service": "service"},
}


def test_matchers_from_namespace_and_selector() -> None:
    (rule,) = parse_rules([RULE_DOC])
    sel = parse_selector("service in (a,b.c),service!=z,absent,!gone,unmapped=x")
    m = build_matchers(rule, "llm", sel)
    assert m == 'namespace="llm",service=~"a|b\\\\.c",service!="z"'


def test_cache_and_filtering() -> None:
    (rule,) = parse_rules([RULE_DOC])
    clock = FakeClock()
    q = 'sum by (namespace, service) (test_queue_length{namespace="llm",service="text"})'
    fake = FakePromClient(
        {q: [PromSample({"namespace": "llm", "service": "text"}, clock.now(), 7.0)]}
    )
    src = PromQLSource(fake, clock.now, cache_ttl=5)
    for _ in range(3):
        (v,) = src.evaluate(rule, "llm", parse_selector("service=text"))
        assert v.value == 7 and v.labels == {"namespace": "llm", "service": "text"}
    assert fake.calls == [q]
    clock.advance(6)
    fake.answers[q] = SourceUnavailable("down")
    with pytest.raises(SourceUnavailable):
        src.evaluate(rule, "llm", parse_selector("service=text"))


class _Target(http.server.BaseHTTPRequestHandler):
    body = (
        b"# TYPE test_queue_length gauge\n"
        b'test_queue_length{namespace="llm",service="text",pod="a"} 3\n'
        b'test_queue_length{namespace="llm",service="text",pod="b"} 4\n'
        b'test_queue_length{namespace="llm",service="vision",pod="c"} 9\n'
        b'test_queue_length{namespace="other",service="text",pod="d"} 100\n'
    )

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_real_prometheus_behind_a_promql_rule(pki: Pki, tmp_path: Path) -> None:
    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Target)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: test\n    static_configs: [{{targets: ['127.0.0.1:{target.server_address[1]}']}}]\n"
    )
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 40
        while True:
            try:
                r = httpx.get(
                    f"{url}/api/v1/query", params={"query": "test_queue_length"}, timeout=2
                )
                if r.status_code == 200 and len(r.json()["data"]["result"]) == 4:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "Prometheus did not scrape the test target"
            time.sleep(0.3)
        rules = [RULE_DOC, {**RULE_DOC, "name": "broken", "query": "sum(("}]
        conf = base_config(pki, rules=rules, prometheus_url=url, prometheus_cache_ttl="0.2s")
        with AdapterThread(conf) as a, api_client(pki, a) as c:
            base = "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm"
            r = c.get(
                f"{base}/queue_from_prometheus",
                params={"labelSelector": "service=text"},
                headers=hpa_headers(),
            )
            assert r.status_code == 200, r.text
            (item,) = r.json()["items"]
            assert parse_quantity(item["value"]) == 7
            assert item["metricLabels"] == {"namespace": "llm", "service": "text"}
            r = c.get(f"{base}/queue_from_prometheus", headers=hpa_headers())
            assert sorted(parse_quantity(i["value"]) for i in r.json()["items"]) == [7, 9]
            r = c.get(f"{base}/broken", headers=hpa_headers())
            assert r.status_code == 500 and "rejected the query" in r.json()["message"]
            prom.terminate()
            prom.wait(20)
            time.sleep(0.3)
            r = c.get(f"{base}/queue_from_prometheus", headers=hpa_headers())
            assert r.status_code == 503, r.text
            assert f"Prometheus at {url} is unreachable" in r.json()["message"]
    finally:
        if prom.poll() is None:
            prom.terminate()
            prom.wait(20)
        target.shutdown()


def test_client_timeout_message() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts, never answers
        client = HttpPromClient(f"http://127.0.0.1:{s.getsockname()[1]}")
        with pytest.raises(SourceUnavailable, match="did not answer within 0.3 s"):
            client.query("up", 0.3)
