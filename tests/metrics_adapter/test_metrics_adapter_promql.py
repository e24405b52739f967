"""PromQL source: matcher building, caching and quantile rules (FakePromClient), and a real
Prometheus behind a rule and behind the PromQL overlay's rules as shipped."""

from __future__ import annotations

import http.server
import shutil
import socket
import threading
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest

from kvspread import names
from kvspread.clock import FakeClock
from kvspread.quantity import parse_quantity
from kvspread.settings import ConfigError
from metrics_adapter.errors import AdapterError, HistogramTooCoarse, NoFreshData, SourceUnavailable
from metrics_adapter.rules import parse_rules
from metrics_adapter.selectors import parse_selector
from metrics_adapter.server import AdapterThread
from metrics_adapter.sli import bucket_quantile
from metrics_adapter.sources.promql import (
    MAX_ANSWER_BYTES,
    MAX_ANSWER_SAMPLES,
    FakePromClient,
    HttpPromClient,
    PromQLSource,
    PromSample,
    build_matchers,
)
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers
from tests.metrics_adapter.prom_testing import TTFT_LE, Histograms, overlay_rules, scraping

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


def test_an_aggregating_query_answers_the_selector_it_was_sent() -> None:
    """`sum(x{<<.LabelMatchers>>})` returns a sample without the service label: the selector
    went to Prometheus as a matcher, so the sample answers it (before session 22 the result
    was filtered on it again and every overlay rule served nothing for `service=...`).
    Requirements Prometheus never saw still filter the results."""
    (rule,) = parse_rules([{**RULE_DOC, "query": "sum(test_queue_length{<<.LabelMatchers>>})"}])
    clock = FakeClock()
    fake = FakePromClient(
        {
            'sum(test_queue_length{namespace="llm",service="text"})': [
                PromSample({}, clock.now(), 7.0)
            ],
            'sum(test_queue_length{namespace="llm"})': [PromSample({}, clock.now(), 9.0)],
        }
    )
    src = PromQLSource(fake, clock.now, cache_ttl=0)
    (v,) = src.evaluate(rule, "llm", parse_selector("service=text"))
    assert v.value == 7 and v.labels == {}
    assert src.evaluate(rule, "llm", parse_selector("unmapped=x")) == []
    assert src.evaluate(rule, "llm", parse_selector("service>3")) == []
    (no_placeholder,) = parse_rules(
        [{**RULE_DOC, "query": 'sum(test_queue_length{namespace="llm"})'}]
    )
    assert src.evaluate(no_placeholder, "llm", parse_selector("service=text")) == []


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
    with scraping(_Target, tmp_path, "test_queue_length", 4) as (url, prom):
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


def test_client_timeout_message() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts, never answers
        client = HttpPromClient(f"http://127.0.0.1:{s.getsockname()[1]}")
        with pytest.raises(SourceUnavailable, match="did not answer within 0.3 s"):
            client.query("up", 0.3)


# --- aggregation: quantile (bucket rates by le, merged and refused by the adapter) --------

QUANTILE_DOC = {
    "name": "ttft_p95",
    "source": "promql",
    "aggregation": "quantile",
    "quantile": 0.95,
    "query": "sum by (le, llm_qos) (rate(ttft_bucket{<<.LabelMatchers>>}[1m]))",
    "labels": {"namespace": "namespace", "service": "service", "llm_qos": "qos"},
}


def _buckets(at: float, rate: float, t: float, bounds: tuple[str, ...] = TTFT_LE,
             **labels: str) -> list[PromSample]:  # fmt: skip
    """Cumulative bucket rates of a histogram whose observations all lie at `at` s."""
    return [PromSample({**labels, "le": le}, t, rate if at <= float(le) else 0.0) for le in bounds]


def _quantile_source(samples: list[PromSample] | Exception) -> tuple[PromQLSource, str]:
    (rule,) = parse_rules([QUANTILE_DOC])
    clock = FakeClock()
    q = 'sum by (le, llm_qos) (rate(ttft_bucket{namespace="llm",service="text"}[1m]))'
    return PromQLSource(FakePromClient({q: samples}), clock.now, cache_ttl=0), q


def test_a_promql_quantile_is_prometheus_arithmetic_over_the_merged_buckets() -> None:
    """Two qos groups at 0.8 s and 3 s, 19 to 1: the merged p95 is Prometheus' answer for
    `sum by (le)`, and the groups disagree on qos, so no qos label is served."""
    (rule,) = parse_rules([QUANTILE_DOC])
    t = FakeClock().now()
    both = [*_buckets(0.8, 1.9, t, llm_qos="realtime"), *_buckets(3.0, 0.1, t, llm_qos="batch")]
    src, _ = _quantile_source(both)
    (v,) = src.evaluate(rule, "llm", parse_selector("service=text"))
    summed: dict[str, float] = {}
    for smp in both:
        summed[smp.labels["le"]] = summed.get(smp.labels["le"], 0.0) + smp.value
    assert v.value == pytest.approx(
        bucket_quantile(0.95, [(float(k), c) for k, c in summed.items()])
    )
    assert "qos" not in v.labels
    src, _ = _quantile_source(_buckets(0.8, 2.0, t, llm_qos="realtime"))
    (v,) = src.evaluate(rule, "llm", parse_selector("service=text"))
    assert v.value == pytest.approx(0.75 + 0.25 * 0.95) and v.labels == {"qos": "realtime"}


def test_a_promql_quantile_from_a_too_wide_bucket_is_refused() -> None:
    """The issue's one-bucket case, bounds [0.1, 10] and every request at 0.8 s: Prometheus'
    histogram_quantile says 9.505 s; the quantile rule refuses it, with the floor 0.1 s."""
    (rule,) = parse_rules([QUANTILE_DOC])
    t = FakeClock().now()
    src, _ = _quantile_source(_buckets(0.8, 1.0, t, ("0.1", "10", "+Inf"), llm_qos="batch"))
    with pytest.raises(HistogramTooCoarse, match=r"estimate 9\.505 lies in \(0\.1, 10\]") as exc:
        src.evaluate(rule, "llm", parse_selector("service=text"))
    assert exc.value.refusal == "wide_bucket"
    assert exc.value.floor is not None and exc.value.floor.value == 0.1
    assert exc.value.floor.labels == {"qos": "batch"}


@pytest.mark.parametrize(
    "samples, error, message",
    [
        ([PromSample({}, 0.0, 1.0)], AdapterError, "needs its query to return bucket rates by le"),
        ([PromSample({"le": "x"}, 0.0, 1.0)], AdapterError, "has le='x'"),
        (_buckets(0.8, 1.0, 0.0, ("0.5", "1")), AdapterError, 'without le="\\+Inf"'),
        (_buckets(0.8, 0.0, 0.0), NoFreshData, "no observations inside the query's range"),
    ],
    ids=["no-le", "bad-le", "no-inf", "no-observations"],
)
def test_promql_quantile_results_it_cannot_use_are_named(
    samples: list[PromSample], error: type[Exception], message: str
) -> None:
    (rule,) = parse_rules([QUANTILE_DOC])
    src, _ = _quantile_source(samples)
    src.clock = lambda: 0.0
    with pytest.raises(error, match=message):
        src.evaluate(rule, "llm", parse_selector("service=text"))


def test_promql_rules_take_last_or_quantile_only() -> None:
    with pytest.raises(ConfigError, match=r"rules\[0\]\.aggregation: .*got 'rate'"):
        parse_rules([{**RULE_DOC, "aggregation": "rate"}])
    with pytest.raises(ConfigError, match=r"rules\[0\]\.quantile"):
        parse_rules([{**QUANTILE_DOC, "quantile": 2}])


# What each overlay rule serves for `service=chat` (one pod: 10 requests/s of 1.8 s, TTFT
# 0.8 s, TPOT 15 ms, 80 ms per output token end to end, 1 waiting, KV 0.3); None: a value whose size the test does not pin.
OVERLAY_VALUES: dict[str, float | None] = {
    "kvspread_request_latency_p50_seconds": 1.0 + 1.5 * 0.5,  # (1, 2.5]: 1.75
    "kvspread_request_latency_p95_seconds": 1.0 + 1.5 * 0.95,
    "kvspread_request_latency_p99_seconds": 1.0 + 1.5 * 0.99,
    "kvspread_requests_per_second": None,  # about 10 (a rate over scrapes)
    "kvspread_requests_per_second_long": None,
    "kvspread_good_requests_per_second": 0.0,  # none under 0.2 s
    "kvspread_error_ratio": 0.0,
    "kvspread_queue_depth": 1.0,
    "kvspread_kv_cache_usage_ratio": 0.3,
    "kvspread_time_to_first_token_p95_seconds": 0.75 + 0.25 * 0.95,
    "kvspread_time_per_output_token_p95_seconds": 0.01 + 0.015 * 0.95,
    "kvspread_queue_depth_per_replica": 1.0,
    "kvspread_engine_replicas": 1.0,
    "kvspread_requests_over_50ms_per_token_ratio": 1.0,  # every stream at 80 ms per token
    "kvspread_requests_over_120ms_per_token_ratio": 0.0,
    "kvspread_slo_pressure": (0.75 + 0.25 * 0.95) / 2,
}


@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_every_overlay_rule_answers_an_hpas_service_selector(pki: Pki, tmp_path: Path) -> None:
    """Each rule of the PromQL overlay, as shipped, read as an HPA reads it (`service=chat`)
    through the adapter from a real Prometheus: one value, the one the series give. Before
    session 22 every one of them answered no items: the aggregated samples carry no
    `service` label and were filtered on the selector a second time."""
    rules = overlay_rules()
    assert {r["name"] for r in rules} == set(OVERLAY_VALUES)
    ready = 'rate(http_server_request_duration_seconds_count{service_name="chat"}[1m])'
    with scraping(Histograms, tmp_path, ready, 1) as (url, _):
        conf = base_config(pki, rules=rules, prometheus_url=url, prometheus_cache_ttl="0.1s")
        with AdapterThread(conf) as a, api_client(pki, a) as c:
            for name, want in OVERLAY_VALUES.items():
                r = c.get(
                    f"/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/{name}",
                    params={"labelSelector": "service=chat"},
                    headers=hpa_headers(),
                )
                assert r.status_code == 200, (name, r.text)
                items = r.json()["items"]
                assert len(items) == 1, (name, items)
                got = float(parse_quantity(items[0]["value"]))
                if want is None:
                    assert got > 0, (name, got)
                else:
                    assert got == pytest.approx(want, abs=0.002), name


@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_the_promql_overlay_serves_class_and_refusals_from_a_real_prometheus(
    pki: Pki, tmp_path: Path
) -> None:
    """The overlay's rules as shipped, on a real Prometheus scraping TTFT histograms that
    carry llm_qos: the pressure takes each service's class from the series (batch 20
    waiting -> 0.5; realtime TTFT), pods that disagree get the defaults, the TTFT p95 is
    the value Prometheus' own histogram_quantile gives, and the [0.1, 10] case is refused."""
    ttft_bucket = "gen_ai_server_time_to_first_token_seconds_bucket"
    ready = f'rate({ttft_bucket}{{le="+Inf"}}[1m])'  # two scrapes of each series: rates
    with scraping(Histograms, tmp_path, ready, len(Histograms.pods)) as (url, _):

        def prom_value(expr: str) -> float | None:
            r = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=2)
            result = r.json()["data"]["result"]
            return float(result[0]["value"][1]) if result else None

        conf = base_config(
            pki, rules=overlay_rules(), prometheus_url=url, prometheus_cache_ttl="0.1s"
        )
        with AdapterThread(conf) as a, api_client(pki, a) as c:
            base = "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm"

            def read(metric: str, service: str) -> httpx.Response:
                return c.get(
                    f"{base}/{metric}",
                    params={"labelSelector": f"service={service}"},
                    headers=hpa_headers(),
                )

            def item(metric: str, service: str) -> tuple[float, dict[str, str]]:
                r = read(metric, service)
                assert r.status_code == 200, r.text
                (it,) = r.json()["items"]
                return float(parse_quantity(it["value"])), it["metricLabels"]

            ttft, labels = item(names.SLI_TTFT_P95, "chat")
            theirs = prom_value(
                f"histogram_quantile(0.95, sum by (le) (rate({ttft_bucket}"
                f'{{k8s_namespace_name="llm",service_name="chat"}}[1m])))'
            )
            assert theirs is not None and ttft == pytest.approx(theirs, abs=0.001)
            assert ttft == pytest.approx(0.9875, abs=0.001) and labels["qos"] == "realtime"
            batch, labels = item(names.SLI_SLO_PRESSURE, "assistant")
            # batch: queue 20 / 40 = 0.5 over TTFT 4.875 / 10; realtime targets would say 5
            assert batch == pytest.approx(0.5, abs=0.001) and labels["class"] == "batch"
            chat, labels = item(names.SLI_SLO_PRESSURE, "chat")
            assert chat == pytest.approx(0.9875 / 2, abs=0.001) and labels["class"] == "realtime"
            mixed, labels = item(names.SLI_SLO_PRESSURE, "mixed")
            assert mixed == pytest.approx(10 / 4, abs=0.001) and "class" not in labels
            r = read(names.SLI_TTFT_P95, "coarse")
            assert r.status_code == 422 and "(0.1, 10]" in r.json()["message"]
            r = read(names.SLI_SLO_PRESSURE, "coarse")
            assert r.status_code == 422 and names.SLI_TTFT_P95 in r.json()["message"]


class _Hostile(http.server.BaseHTTPRequestHandler):
    """A Prometheus that answers too much, too many samples, or one byte at a time."""

    def do_GET(self) -> None:  # noqa: N802
        kind = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if kind == "drip":
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:  # the client gave up, as it should
                pass
            return
        if kind == "huge":
            pad = b" " * (MAX_ANSWER_BYTES + 1024)
            body = b'{"status":"success","data":{"resultType":"vector","result":[]}' + pad + b"}"
        else:
            one = '{"metric":{"le":"1"},"value":[1,"1"]}'
            result = ",".join([one] * (MAX_ANSWER_SAMPLES + 1))
            body = f'{{"status":"success","data":{{"resultType":"vector","result":[{result}]}}}}'.encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    "kind, error, message",
    [
        ("huge", AdapterError, "over 16 MiB; aggregate in the query"),
        ("many", AdapterError, f"{MAX_ANSWER_SAMPLES + 1} samples, over the {MAX_ANSWER_SAMPLES}"),
        ("drip", SourceUnavailable, "did not answer within 0.5 s"),
    ],
)
def test_an_answer_is_read_within_its_bounds(
    kind: str, error: type[Exception], message: str
) -> None:
    """Bounded reads (docs/adapter.md, "PromQL rules"): the whole query within its timeout,
    however slowly the answer drips, and no answer past 16 MiB or 20,000 samples."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = HttpPromClient(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        with pytest.raises(error, match=message):
            client.query(kind, 0.5 if kind == "drip" else 10.0)
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_the_answer_cache_holds_a_bounded_number_of_samples() -> None:
    (rule,) = parse_rules([RULE_DOC])
    clock = FakeClock()
    answers: dict[str, list[PromSample] | Exception] = {}
    for svc in ("a", "b"):
        q = f'sum by (namespace, service) (test_queue_length{{namespace="llm",service="{svc}"}})'
        answers[q] = [PromSample({"service": svc}, clock.now(), float(i)) for i in range(6)]
    fake = FakePromClient(answers)
    src = PromQLSource(fake, clock.now, cache_ttl=60, cache_samples=10)
    for svc in ("a", "b", "a"):
        src.evaluate(rule, "llm", parse_selector(f"service={svc}"))
    # 6 + 6 > 10: b's answer emptied the cache, so a was asked again
    assert len(fake.calls) == 3
    src.evaluate(rule, "llm", parse_selector("service=a"))
    assert len(fake.calls) == 3
