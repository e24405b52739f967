"""OTLP/HTTP receiver: encodings, status codes, partial success, validation, store limits."""

from __future__ import annotations

import gzip
import json
import math
import socket
import time

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mp

from kvspread import names
from kvspread.clock import FakeClock
from metrics_adapter.errors import NoFreshData
from metrics_adapter.httpserver import Request
from metrics_adapter.provider import RuleProvider
from metrics_adapter.receiver import OtlpReceiver
from metrics_adapter.rules import default_rules, parse_rules
from metrics_adapter.selectors import parse_selector
from metrics_adapter.server import AdapterThread
from metrics_adapter.sources.otlp import OtlpSource
from metrics_adapter.sources.store import SeriesStore
from tests.metrics_adapter.adapter_otlp_payloads import DELTA, counter, gauge, histogram, request
from tests.metrics_adapter.adapter_testing import Pki

T0 = 1_800_000_000.0
BOUNDS = (0.1, 0.2, 0.5, 1.0)
RES = {names.ATTR_K8S_NAMESPACE: "llm", names.ATTR_SERVICE_NAME: "text"}


def _post(
    rx: OtlpReceiver, body: bytes, ctype: str = "application/x-protobuf", **hdr: str
) -> tuple[int, bytes]:
    headers = [("content-type", ctype)] + [(k.replace("_", "-"), v) for k, v in hdr.items()]
    resp = rx.handle_sync(Request("POST", "/v1/metrics", headers, body))
    return resp.status, resp.body


def _setup(max_series: int = 1000) -> tuple[FakeClock, SeriesStore, OtlpReceiver, RuleProvider]:
    clock = FakeClock(t=T0 + 45)
    store = SeriesStore(retention=180, max_series=max_series, idle_expiry=300)
    rx = OtlpReceiver(store, clock.now, max_body=1 << 20)
    prov = RuleProvider(default_rules(), {"otlp": OtlpSource(store, clock.now)})
    return clock, store, rx, prov


def _good_request():
    return request(
        RES,
        [
            histogram(
                names.HTTP_SERVER_REQUEST_DURATION.name,
                [
                    (T0, T0 + 30, [10, 20, 30, 30, 10], {names.ATTR_HTTP_STATUS: 200}),
                    (T0, T0 + 30, [0, 0, 0, 0, 5], {names.ATTR_HTTP_STATUS: 503}),
                ],  # fmt: skip
                BOUNDS,
            ),
            gauge(names.ENGINE_REQUESTS_WAITING.name, [(T0 + 30, 3, {})]),
        ],
    )


def _value(prov: RuleProvider, metric: str, selector: str = "") -> float | None:
    vals = prov.get_external_metric("llm", metric, parse_selector(selector))
    return vals[0].value if vals else None


def test_protobuf_request_is_stored_and_served() -> None:
    _, store, rx, prov = _setup()
    status, body = _post(rx, _good_request().SerializeToString())
    assert status == 200
    resp = ExportMetricsServiceResponse.FromString(body)
    assert not resp.HasField("partial_success")
    assert len(store) == 3
    # the zero at the start time plus the point at T0+30 give a 30 s window
    assert _value(prov, names.SLI_REQUESTS_PER_SECOND) == pytest.approx(105 / 30)
    assert _value(prov, names.SLI_ERROR_RATIO) == pytest.approx(5 / 105)
    assert _value(prov, names.SLI_QUEUE_DEPTH) == 3
    assert _value(prov, names.SLI_LATENCY_P50) == pytest.approx(0.2 + 0.3 * (52.5 - 30) / 30)


def test_json_and_gzip_encodings() -> None:
    _, store, rx, _ = _setup()
    doc = json_format.MessageToJson(_good_request())
    status, body = _post(rx, doc.encode(), "application/json")
    assert status == 200 and json.loads(body) == {}
    _, store2, rx2, _ = _setup()
    status, body = _post(
        rx2, gzip.compress(_good_request().SerializeToString()), content_encoding="gzip"
    )
    assert status == 200 and len(store2) == 3


def _stored(store: SeriesStore) -> list:
    return sorted((s.metric, s.attrs, tuple(s.data)) for s in store)


@pytest.mark.parametrize(
    "case",
    [
        "bad protobuf",
        "bad json",
        "json wrong types",
        "json array",
        "nan gauge",
        "inf counter",
        "huge bucket counts",
        "counts do not add up",
        "bounds not increasing",
        "wrong number of buckets",
        "missing time",
        "bad gzip",
    ],
)
def test_malformed_otlp_gets_400_and_stored_series_are_untouched(case: str) -> None:
    _, store, rx, _ = _setup()
    assert _post(rx, _good_request().SerializeToString())[0] == 200
    before = _stored(store)
    ctype, enc = "application/x-protobuf", {}
    dur = names.HTTP_SERVER_REQUEST_DURATION.name
    if case == "bad protobuf":
        body = b"\x0a\xff\xff\xff\xff\x0f garbage"
    elif case == "bad json":
        body, ctype = b'{"resourceMetrics": [', "application/json"
    elif case == "json wrong types":
        body = json.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
            {"name": dur, "histogram": {"dataPoints": [{"count": "many", "bucketCounts": [1]}]}}]}]}]}).encode()  # fmt: skip
        ctype = "application/json"
    elif case == "json array":  # protobuf's JSON parser reads `[]` as an empty message
        body, ctype = b" []", "application/json"
    elif case == "nan gauge":
        body = request(RES, [gauge("g", [(T0 + 40, math.nan, {})])]).SerializeToString()
    elif case == "inf counter":
        body = request(RES, [counter("c", [(T0, T0 + 40, math.inf, {})])]).SerializeToString()
    elif case == "huge bucket counts":
        body = request(
            RES, [histogram(dur, [(T0, T0 + 40, [2**62, 1, 0, 0, 0], {})], BOUNDS)]
        ).SerializeToString()
    elif case == "counts do not add up":
        req = request(RES, [histogram(dur, [(T0, T0 + 40, [1, 1, 1, 1, 1], {})], BOUNDS)])
        req.resource_metrics[0].scope_metrics[0].metrics[0].histogram.data_points[0].count = 99
        body = req.SerializeToString()
    elif case == "bounds not increasing":
        body = request(
            RES, [histogram(dur, [(T0, T0 + 40, [1, 1, 1, 1, 1], {})], (0.5, 0.2, 1, 2))]
        ).SerializeToString()
    elif case == "wrong number of buckets":
        body = request(
            RES, [histogram(dur, [(T0, T0 + 40, [1, 1], {})], BOUNDS)]
        ).SerializeToString()
    elif case == "missing time":
        body = request(RES, [gauge("g", [(0, 1, {})])]).SerializeToString()
    else:
        body, enc = b"not gzip at all", {"content_encoding": "gzip"}
    status, resp = _post(rx, body, ctype, **enc)
    assert status == 400, case
    if ctype == "application/json":
        msg = json.loads(resp)["message"]
    else:
        msg = status_pb2.Status.FromString(resp).message
    assert len(msg) > 10, msg
    assert _stored(store) == before, "a rejected request must not change stored series"


def test_partial_success_reports_rejected_points() -> None:
    _, store, rx, _ = _setup()
    req = request(
        RES, [gauge("g", [(T0 + 40, 1.0, {"a": "ok"}), (T0 + 40, math.nan, {"a": "bad"})])]
    )
    status, body = _post(rx, req.SerializeToString())
    assert status == 200
    ps = ExportMetricsServiceResponse.FromString(body).partial_success
    assert ps.rejected_data_points == 1 and "not finite" in ps.error_message
    assert len(store) == 1


def test_unsupported_content_type_method_and_path() -> None:
    _, _, rx, _ = _setup()
    assert _post(rx, b"x", "text/plain")[0] == 415
    assert rx.handle_sync(Request("GET", "/v1/metrics", [], b"")).status == 405
    assert (
        rx.handle_sync(
            Request("POST", "/v1/traces", [("content-type", "application/x-protobuf")], b"")
        ).status
        == 404
    )


def test_gzip_bomb_gets_413() -> None:
    _, _, rx, _ = _setup()
    status, _ = _post(rx, gzip.compress(b"\0" * (2 << 20)), content_encoding="gzip")
    assert status == 413


def test_body_limit_over_http(pki: Pki) -> None:
    from tests.metrics_adapter.adapter_testing import base_config

    # the clock at the points' time: a point over a minute ahead of it is refused
    with AdapterThread(base_config(pki, otlp_max_body_bytes=4096), clock=FakeClock(t=T0)) as a:
        url = f"http://127.0.0.1:{a.adapter.otlp_port}/v1/metrics"
        r = httpx.post(
            url, content=b"\0" * 10_000, headers={"content-type": "application/x-protobuf"}
        )
        # refused before it is read, yet in the request's encoding: a google.rpc.Status
        assert r.status_code == 413
        assert r.headers["content-type"] == "application/x-protobuf"
        refused = status_pb2.Status.FromString(r.content)
        assert refused.message == "request body of 10000 bytes exceeds 4096"
        r = httpx.post(url, content=b"{" * 10_000, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.headers["content-type"] == "application/json"
        assert r.json()["message"] == "request body of 10000 bytes exceeds 4096"
        r = httpx.post(
            url,
            content=_good_request().SerializeToString(),
            headers={"content-type": "application/x-protobuf"},
        )
        assert r.status_code == 200
        m = httpx.get(f"http://127.0.0.1:{a.adapter.otlp_port}/metrics")
        assert "kvspread_adapter_otlp_points_total 3.0" in m.text
        assert "kvspread_adapter_series 3.0" in m.text
        assert "kvspread_adapter_request_duration_seconds_bucket" in m.text


def _held_head(length: int) -> bytes:
    return (
        f"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _held_push(port: int, length: int, sent: int) -> socket.socket:
    """A push that declares `length` body bytes and sends `sent` of them, then waits: what
    a slow (or hostile) client on the unauthenticated OTLP port does."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(_held_head(length) + b"\0" * sent)
    return s


def test_bodies_in_flight_are_bounded_over_all_connections(pki: Pki) -> None:
    """Each push may hold up to otlp_max_body_bytes while its body arrives; without a bound
    over all of them, 100 clients that stop short of their 4 MiB bodies made the adapter hold
    400 MiB (RSS 72 -> 507 MiB). Past otlp_max_bodies_bytes a push gets 429 (OTLP exporters
    retry it), in the request's encoding, and the bytes come back when a held push ends.
    Bytes (head and body) are counted as they arrive, not from Content-Length: a push that
    declared 4096 and sent 100 holds its head and 100 (declared sizes let 16 clients that
    sent a byte now and then take the whole 64 MiB)."""
    from tests.metrics_adapter.adapter_testing import base_config

    cfg = base_config(pki, otlp_max_body_bytes=4096, otlp_max_bodies_bytes=6000)
    with AdapterThread(cfg, clock=FakeClock(t=T0)) as a:
        port = a.adapter.otlp_port
        url = f"http://127.0.0.1:{port}/v1/metrics"
        declared = _held_push(port, 4096, 100)
        arrived = len(_held_head(4096)) + 100
        for _ in range(200):
            if a.adapter.otlp_http.held == arrived:
                break
            time.sleep(0.025)
        assert a.adapter.otlp_http.held == arrived  # what arrived, not the 4096 declared
        declared.close()
        first = _held_push(port, 4096, 4000)
        try:
            # the first push's 4000 bytes are held (it answered nothing yet): 4096 more do not fit
            r = httpx.post(
                url, content=b"\0" * 4096, headers={"content-type": "application/x-protobuf"}
            )
            assert r.status_code == 429
            assert r.headers["retry-after"] == "1"
            refused = status_pb2.Status.FromString(r.content)
            assert "otlp_max_bodies_bytes" in refused.message
            # a small push still fits beside it
            small = _good_request().SerializeToString()
            assert len(small) + 200 < 6000 - len(_held_head(4096)) - 4000
            ok = httpx.post(url, content=small, headers={"content-type": "application/x-protobuf"})
            assert ok.status_code == 200
        finally:
            first.close()
        # the closed push gives its bytes back (the server sees the close on its next read)
        for _ in range(200):
            r = httpx.post(
                url, content=b"\0" * 4096, headers={"content-type": "application/x-protobuf"}
            )
            if r.status_code != 429:
                break
        assert r.status_code == 400  # zeros are no ExportMetricsServiceRequest: read, refused


def test_delta_temporality_and_counter_reset() -> None:
    clock, store, rx, _ = _setup()
    rules = parse_rules([
        {"name": "rps_delta", "metric": "req.delta", "aggregation": "rate"},
        {"name": "rps_cum", "metric": "req.cum", "aggregation": "rate"},
        {"name": "p50_delta", "metric": "lat.delta", "aggregation": "quantile", "quantile": 0.5},
    ])  # fmt: skip
    prov = RuleProvider(rules, {"otlp": OtlpSource(store, clock.now)})
    a = {"x": "1"}
    # delta counter: 10, 20, 30 over three 10 s intervals -> 60 in 30 s... from the first point
    pts = [(T0 + 10 * i, T0 + 10 * (i + 1), v, a) for i, v in enumerate((10.0, 20.0, 30.0))]
    assert _post(rx, request(RES, [counter("req.delta", pts, DELTA)]).SerializeToString())[0] == 200
    # cumulative with a reset at T0+20 (process restart; new start time)
    cum = [
        (T0, T0 + 10, 100.0, a),
        (T0, T0 + 20, 150.0, a),
        (T0 + 25, T0 + 30, 20.0, a),
        (T0 + 25, T0 + 40, 50.0, a),
    ]
    assert _post(rx, request(RES, [counter("req.cum", cum)]).SerializeToString())[0] == 200
    h = [
        (T0 + 10 * i, T0 + 10 * (i + 1), c, a)
        for i, c in enumerate(([5, 5, 0, 0, 0], [0, 10, 0, 0, 0]))
    ]
    assert (
        _post(rx, request(RES, [histogram("lat.delta", h, BOUNDS, DELTA)]).SerializeToString())[0]
        == 200
    )
    sel = parse_selector("")
    # delta sums accumulate from 0 at the first start: 0@T0, 10, 30, 60@T0+30
    assert prov.get_external_metric("llm", "rps_delta", sel)[0].value == pytest.approx(60 / 30)
    # 0@T0, 100, 150, reset -> 0@T0+25 inserted, 20, 50: increase 150 + 50 = 200 over 40 s
    assert prov.get_external_metric("llm", "rps_cum", sel)[0].value == pytest.approx(200 / 40)
    # windowed delta histogram: 5 + 15 observations, median rank 10 -> in (0.1, 0.2]
    assert prov.get_external_metric("llm", "p50_delta", sel)[0].value == pytest.approx(
        0.1 + 0.1 * (10 - 5) / 15
    )


def test_exponential_histogram_quantile() -> None:
    clock, store, rx, _ = _setup()
    m = mp.Metric(name="lat.exp")
    m.exponential_histogram.aggregation_temporality = mp.AGGREGATION_TEMPORALITY_CUMULATIVE
    for t, counts in ((T0 + 10, [0, 0, 0, 0]), (T0 + 40, [10, 10, 10, 10])):
        dp = m.exponential_histogram.data_points.add()
        dp.start_time_unix_nano = int(T0 * 1e9)
        dp.time_unix_nano = int(t * 1e9)
        dp.scale = 0
        dp.positive.offset = 0
        dp.positive.bucket_counts.extend(counts)
        dp.count = sum(counts)
    assert _post(rx, request(RES, [m]).SerializeToString())[0] == 200
    rules = parse_rules(
        [{"name": "p50", "metric": "lat.exp", "aggregation": "quantile", "quantile": 0.5}]
    )
    prov = RuleProvider(rules, {"otlp": OtlpSource(store, clock.now)})
    # 40 observations in (1,2], (2,4], (4,8], (8,16]; rank 20 ends bucket (2,4]
    assert prov.get_external_metric("llm", "p50", parse_selector(""))[0].value == pytest.approx(4.0)


def test_series_cap_evicts_least_recently_written_and_counts_drops() -> None:
    clock, store, rx, _ = _setup(max_series=5)
    for i in range(8):
        req = request(RES, [gauge("g", [(T0 + 30 + i, float(i), {"i": str(i)})])])
        assert _post(rx, req.SerializeToString())[0] == 200
    assert len(store) == 5 and store.dropped == 3
    assert {dict(s.attrs)["i"] for s in store} == {"3", "4", "5", "6", "7"}
    clock.advance(301)
    store.add([], clock.now())
    assert store.expire(clock.now()) == 5 and len(store) == 0


def test_stale_values_are_not_served() -> None:
    clock, _, rx, prov = _setup()
    assert _post(rx, _good_request().SerializeToString())[0] == 200
    assert _value(prov, names.SLI_QUEUE_DEPTH) == 3
    clock.advance(200)  # newest point now 230 s old, staleness 120 s
    assert prov.get_external_metric("llm", names.SLI_QUEUE_DEPTH, parse_selector("")) == []
    assert prov.stale_reads == {names.SLI_QUEUE_DEPTH: 1}


def test_otlp_over_tls(pki: Pki) -> None:
    from tests.metrics_adapter.adapter_testing import base_config, client_context

    cfg = base_config(
        pki, otlp_tls_cert_file=pki.serving_cert, otlp_tls_private_key_file=pki.serving_key
    )
    with AdapterThread(cfg, clock=FakeClock(t=T0)) as a:
        url = f"https://127.0.0.1:{a.adapter.otlp_port}/v1/metrics"
        body = _good_request().SerializeToString()
        with httpx.Client(verify=client_context(pki, None)) as c:
            r = c.post(url, content=body, headers={"content-type": "application/x-protobuf"})
        assert r.status_code == 200
        assert a.call(len, a.adapter.store) == 3
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served on a TLS port
            httpx.post(url.replace("https", "http"), content=body, timeout=3,
                       headers={"content-type": "application/x-protobuf"})  # fmt: skip


def test_no_fresh_data_has_one_definition_and_one_counter() -> None:
    """Between the window and the staleness limit (the old gap at ~95 s), the rate already
    has too few points: that read is no fresh data, counted exactly like a stale one."""
    clock, _, rx, prov = _setup()
    assert _post(rx, _good_request().SerializeToString())[0] == 200
    sel = parse_selector("")
    assert prov.get_external_metric("llm", names.SLI_REQUESTS_PER_SECOND, sel)
    clock.advance(95)  # newest point 110 s old: inside the 120 s staleness, outside the window
    with pytest.raises(NoFreshData, match=r"too few points inside the 60 s window"):
        prov.read("llm", names.SLI_REQUESTS_PER_SECOND, sel)
    assert prov.get_external_metric("llm", names.SLI_REQUESTS_PER_SECOND, sel) == []
    assert prov.stale_reads == {names.SLI_REQUESTS_PER_SECOND: 2}
    clock.advance(30)  # now past the staleness limit too: same definition, same counter
    with pytest.raises(NoFreshData, match=r"over the 120 s staleness limit"):
        prov.read("llm", names.SLI_REQUESTS_PER_SECOND, sel)
    assert prov.stale_reads == {names.SLI_REQUESTS_PER_SECOND: 3}
    # a selector nothing matches is an empty answer, not missing data
    assert prov.read("llm", names.SLI_REQUESTS_PER_SECOND, parse_selector("service=none")) == []
    assert prov.stale_reads == {names.SLI_REQUESTS_PER_SECOND: 3}


def test_attributes_of_every_kind_decode_from_raw_bytes() -> None:
    """The receiver parses attributes as raw bytes (a cache key) and decodes each distinct
    set once; the rendering is the same for every AnyValue kind, pushed twice."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

    from metrics_adapter.sources.otlp_decode import PROTOBUF, decode_body, to_points

    attrs = [
        KeyValue(key="s", value=AnyValue(string_value="x")),
        KeyValue(key="i", value=AnyValue(int_value=-3)),
        KeyValue(key="b", value=AnyValue(bool_value=True)),
        KeyValue(key="d", value=AnyValue(double_value=2.5)),
        KeyValue(key="w", value=AnyValue(double_value=4.0)),
        KeyValue(key="y", value=AnyValue(bytes_value=b"\x01\xff")),
        KeyValue(key="a", value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue(string_value="z")]))),
        KeyValue(key="e", value=AnyValue()),
    ]  # fmt: skip
    req = request(RES, [gauge("g", [(T0 + 1, 1.0, {})])])
    req.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0].attributes.extend(
        attrs
    )
    want = (
        (names.ATTR_K8S_NAMESPACE, "llm"), (names.ATTR_SERVICE_NAME, "text"),
        ("a", "1,z"), ("b", "true"), ("d", "2.5"), ("e", ""), ("i", "-3"), ("s", "x"),
        ("w", "4"), ("y", "01ff"),
    )  # fmt: skip
    body = req.SerializeToString()
    for _ in range(2):  # second time from the cache
        (p,) = to_points(decode_body(body, PROTOBUF, None, 1 << 20)).points
        assert p.attrs == want
    (p,) = to_points(req).points  # a regular ExportMetricsServiceRequest is accepted too
    assert p.attrs == want
