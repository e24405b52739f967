"""The batched user-space path: histogram values added per label set, memoized parses and
labels, OTLP request histograms read from the collector's tables (or per request with
delta temporality)."""

from __future__ import annotations

import math
from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData

from bpf.agent import Agent
from bpf.config import CollectorConfig
from bpf.events import ConnState, HttpEvent, HttpEventKind, encode_http_event
from bpf.export import OtlpExporter, otlp_attributes
from bpf.state import CollectorState
from bpf.stats import DURATION_BUCKETS, HistogramTable, RecentWindow
from kvspread import names
from tests.otel_fake import FakeOtlpExporter

REQ = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
LABELS = ((names.ATTR_HTTP_METHOD, "GET"),)


def test_observe_many_equals_one_by_one() -> None:
    values = [0.003, 0.2, 7.5, 0.2, math.nan, 120.0]
    one, many = HistogramTable(DURATION_BUCKETS), HistogramTable(DURATION_BUCKETS)
    for v in values:
        one.observe(LABELS, v)
    assert many.observe_many(LABELS, values) == 5  # the NaN is not recorded
    assert one.snapshot() == many.snapshot()
    st = many.snapshot()[LABELS]
    assert (st.count, st.min, st.max) == (5, 0.003, 120.0)


def test_observe_many_on_a_full_table_records_nothing() -> None:
    t = HistogramTable(DURATION_BUCKETS, max_series=1)
    t.observe(LABELS, 1.0)
    assert t.observe_many(((names.ATTR_HTTP_METHOD, "PUT"),), [1.0, 2.0]) == 0
    assert t.dropped == 2 and len(t) == 1


def test_window_add_many() -> None:
    w = RecentWindow(window_s=10)
    w.add_many(5.0, [(0.1, 0), (0.3, 2)])
    assert w.counts(6.0) == (2, 2) and w.p95(6.0) == 0.3
    assert w.counts(16.0) == (0, 0)


def test_otlp_attributes_drop_empty_values_and_type_numbers() -> None:
    labels = (
        (names.ATTR_HTTP_STATUS, "503"),
        (names.ATTR_SERVER_PORT, "8000"),
        (names.ATTR_K8S_POD, ""),
        (names.ATTR_HTTP_ROUTE, "/v1/models/{model}"),
    )
    assert otlp_attributes(labels) == {
        names.ATTR_HTTP_STATUS: 503,
        names.ATTR_SERVER_PORT: 8000,
        names.ATTR_HTTP_ROUTE: "/v1/models/{model}",
    }


def _events(n: int, tgid: int = 4242) -> list[bytes]:
    out = []
    for i in range(n):
        t = 1_000_000_000 + i * 10_000_000
        req = HttpEvent(
            HttpEventKind.REQUEST, t, 1, tgid, 7, 8000, len(REQ), ConnState.IDLE, 0, 0, REQ
        )
        resp = HttpEvent(
            HttpEventKind.RESPONSE_DONE, t + 4_000_000, 1, tgid, 7, 8000, len(RESP),
            ConnState.REQUEST, 0, len(RESP), RESP, t + 1_000,
        )  # fmt: skip
        out += [encode_http_event(req), encode_http_event(resp)]
    return out


def test_a_batch_records_what_single_events_record() -> None:
    cfg = CollectorConfig(standalone=True, port=0)
    batched, single = Agent(cfg), Agent(cfg)
    raws = _events(20)
    batched.on_http_batch(raws + [b"short"])
    for raw in raws + [b"short"]:
        single.on_http_bytes(raw)
    for a in (batched, single):
        a.server.httpd.server_close()
    assert batched.state.requests.snapshot() == single.state.requests.snapshot()
    assert batched.state.ttfb.snapshot() == single.state.ttfb.snapshot()
    assert batched.state.events == single.state.events == {"http_latency": 40}
    assert batched.state.dropped == single.state.dropped == {"bad_event": 1}
    ((labels, st),) = batched.state.requests.snapshot().items()
    assert st.count == 20 and math.isclose(st.total, 20 * 0.004)
    assert dict(labels)[names.ATTR_HTTP_ROUTE] == "/v1/chat/completions"
    assert batched.tracker.counters.requests == 20


def _points(data: MetricsData, name: str) -> list[Any]:
    return [
        p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
    ]


def test_otlp_request_histograms_come_from_the_tables() -> None:
    state = CollectorState()
    exp = FakeOtlpExporter()
    otlp = OtlpExporter(state, [], 60, {"service.name": "t"}, exp)
    assert not otlp.per_request
    labels = ((names.ATTR_HTTP_METHOD, "GET"), (names.ATTR_SERVER_PORT, "8000"))
    state.requests.observe_many(labels, [0.01, 0.02, 3.0])
    state.ttfb.observe_many(labels, [0.001, 0.002, 0.5])
    assert otlp.flush()
    otlp.shutdown()
    (p,) = _points(exp.got[0], names.HTTP_SERVER_REQUEST_DURATION.name)
    assert dict(p.attributes) == {names.ATTR_HTTP_METHOD: "GET", names.ATTR_SERVER_PORT: 8000}
    assert (p.count, p.min, p.max) == (3, 0.01, 3.0) and math.isclose(p.sum, 3.03)
    assert list(p.explicit_bounds) == list(DURATION_BUCKETS) and sum(p.bucket_counts) == 3
    (t,) = _points(exp.got[0], names.HTTP_SERVER_TIME_TO_FIRST_BYTE.name)
    assert t.count == 3 and math.isclose(t.sum, 0.503)


def test_delta_temporality_records_per_request_through_the_sdk() -> None:
    state = CollectorState()
    exp = FakeOtlpExporter(delta=True)
    otlp = OtlpExporter(state, [], 60, {"service.name": "t"}, exp)
    assert otlp.per_request
    otlp.record_request({names.ATTR_HTTP_METHOD: "GET"}, 0.25, 0.01)
    state.requests.observe_many(LABELS, [9.0])  # not read: the SDK has the requests
    assert otlp.flush()
    otlp.shutdown()
    (p,) = _points(exp.got[0], names.HTTP_SERVER_REQUEST_DURATION.name)
    assert p.count == 1 and p.sum == 0.25


def test_observe_many_in_bulk_matches_the_per_value_loop(monkeypatch: Any) -> None:
    """From BULK_VALUES values on, the array path: the same buckets (values on the
    bounds included), sum, count, min and max as observe_many's per-value loop."""
    import random

    from bpf import stats

    rng = random.Random(12)
    batches = [
        [
            rng.choice([rng.expovariate(20), rng.random() * 30, *DURATION_BUCKETS[:4], 0.0])
            for _ in range(rng.randint(stats.BULK_VALUES, 4 * stats.BULK_VALUES))
        ]
        for _ in range(20)
    ]
    bulk, loop = HistogramTable(DURATION_BUCKETS), HistogramTable(DURATION_BUCKETS)
    for values in batches:
        assert bulk.observe_many(LABELS, values) == len(values)
    monkeypatch.setattr(stats, "BULK_VALUES", 10**9)
    for values in batches:
        loop.observe_many(LABELS, values)
    assert bulk.snapshot() == loop.snapshot()
    monkeypatch.undo()
    nan = [0.5] * stats.BULK_VALUES + [float("nan")]  # non-finite: the loop, NaN left out
    assert bulk.observe_many(LABELS, nan) == stats.BULK_VALUES
