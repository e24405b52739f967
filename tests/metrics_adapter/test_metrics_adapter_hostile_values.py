"""Hostile numbers and shapes on the OTLP port: values past 2**53, points stamped in the
future, attributes nested past protobuf's depth limit, and a pressure whose ratio overflows.
Each is refused with a message (400 / partial success on the OTLP port, 422 on the API),
never a 500, and loses nothing that was stored before (docs/adapter.md, "What is refused")."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from kvspread import names
from kvspread.clock import FakeClock
from metrics_adapter.rules import parse_rules
from metrics_adapter.server import AdapterThread
from metrics_adapter.sources.otlp_decode import MAX_ATTR_BYTES, MAX_EXACT, MAX_FUTURE_S, to_points
from tests.metrics_adapter.adapter_otlp_payloads import gauge, histogram, post, request
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers

T0 = 1_800_000_000.0
NS = "llm"
RES = {names.ATTR_K8S_NAMESPACE: NS, names.ATTR_SERVICE_NAME: "vision"}
WAITING = names.ENGINE_REQUESTS_WAITING.name
API = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}"


def _raw_post(port: int, req: ExportMetricsServiceRequest) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{port}/v1/metrics", content=req.SerializeToString(),
                      headers={"content-type": "application/x-protobuf"})  # fmt: skip


def _queue(pki: Pki, a: AdapterThread, selector: str = "service=vision") -> httpx.Response:
    with api_client(pki, a) as c:
        return c.get(f"{API}/{names.SLI_QUEUE_DEPTH}", params={"labelSelector": selector},
                     headers=hpa_headers())  # fmt: skip


@pytest.mark.parametrize(
    ("value", "accepted"), [(float(MAX_EXACT), True), (-float(MAX_EXACT), True),
                            (MAX_EXACT * 2.0, False), (1.7e308, False), (-1e300, False)]
)  # fmt: skip
def test_a_value_past_2_53_is_rejected_with_its_reason(value: float, accepted: bool) -> None:
    req = request(RES, [gauge(WAITING, [(T0, value, {})])])
    got = to_points(req, T0)
    assert (got.accepted, got.rejected) == ((1, 0) if accepted else (0, 1))
    if not accepted:
        assert got.errors == [f"{WAITING}: value {value:g} is past 2**53 in magnitude"]


def test_a_histogram_sum_past_2_53_is_rejected() -> None:
    h = histogram("h", [(T0 - 10, T0, [1, 0], {})], (1.0,))
    h.histogram.data_points[0].sum = 1e300
    ok = histogram("ok", [(T0 - 10, T0, [1, 0], {})], (1.0,))
    got = to_points(request(RES, [h, ok]), T0)
    assert (got.accepted, got.rejected) == (1, 1)
    assert got.errors == ["h: sum 1e+300 is past 2**53 in magnitude"]


def test_a_point_from_the_future_is_rejected_and_skew_within_the_limit_is_not() -> None:
    ahead = [(T0 + MAX_FUTURE_S - 1, 1.0, {"p": "skewed"}), (T0 + 3600, 2.0, {"p": "future"})]
    hist = histogram("h", [(T0, T0 + 86400 * 365, [1, 0], {})], (1.0,))
    got = to_points(request(RES, [gauge(WAITING, ahead), hist]), T0)
    assert (got.accepted, got.rejected) == (1, 2)
    assert got.errors[0] == (
        f"{WAITING}: time_unix_nano is 3600 s ahead of the receiver's clock"
        f" (at most {MAX_FUTURE_S:.0f} s: check the sender's clock)"
    )
    assert got.errors[1].startswith("h: time_unix_nano is 31536000 s ahead")
    assert to_points(request(RES, [gauge(WAITING, ahead)])).accepted == 2  # no clock: no check


def test_over_the_wire_a_future_point_does_not_hide_the_real_ones(pki: Pki) -> None:
    """Before the check, a point stamped 100 years ahead was the newest of its series:
    served, and every real point after it ignored as out of order."""
    with AdapterThread(base_config(pki), clock=FakeClock(t=T0 + 5)) as a:
        port = a.adapter.otlp_port
        future = _raw_post(port, request(RES, [gauge(WAITING, [(T0 + 3.2e9, 100.0, {})])]))
        post(port, request(RES, [gauge(WAITING, [(T0, 5.0, {})])]))
        served = _queue(pki, a)
    assert future.status_code == 400
    status = status_pb2.Status.FromString(future.content)
    assert "ahead of the receiver's clock" in status.message
    assert served.status_code == 200
    assert [i["value"] for i in served.json()["items"]] == ["5"]


def test_a_huge_value_is_refused_and_the_stored_one_still_served(pki: Pki) -> None:
    """1.7e308 used to be stored and make every read over its series a 500 (fsum
    overflowed); now the push is refused and the value before it still served."""
    with AdapterThread(base_config(pki), clock=FakeClock(t=T0 + 5)) as a:
        port = a.adapter.otlp_port
        post(port, request(RES, [gauge(WAITING, [(T0, 3.0, {"pod": "a"})])]))
        pods = [(T0 + 1, 1.7e308, {"pod": "a"}), (T0 + 1, 1.7e308, {"pod": "b"})]
        huge = _raw_post(port, request(RES, [gauge(WAITING, pods)]))
        served = [_queue(pki, a), _queue(pki, a, "")]
    assert huge.status_code == 400
    assert "past 2**53 in magnitude" in status_pb2.Status.FromString(huge.content).message
    for r in served:
        assert r.status_code == 200 and [i["value"] for i in r.json()["items"]] == ["3"]


def test_attributes_nested_past_the_depth_limit_are_a_400_in_the_requests_encoding(
    pki: Pki,
) -> None:
    """Attributes are parsed lazily from raw bytes, so protobuf's nesting limit was met
    after the body was accepted: a 500 with a JSON body to a protobuf client."""
    req = request(RES, [gauge(WAITING, [(T0, 1.0, {})])])
    value = req.resource_metrics[0].resource.attributes.add(key="deep").value
    for _ in range(120):
        value = value.array_value.values.add()
    value.string_value = "x"
    with AdapterThread(base_config(pki), clock=FakeClock(t=T0 + 5)) as a:
        r = _raw_post(a.adapter.otlp_port, req)
        after = _raw_post(a.adapter.otlp_port, request(RES, [gauge(WAITING, [(T0, 1.0, {})])]))
    assert r.status_code == 400 and r.headers["content-type"] == "application/x-protobuf"
    status = status_pb2.Status.FromString(r.content)
    assert status.code == 3 and "an attribute" in status.message
    assert after.status_code == 200
    ExportMetricsServiceResponse.FromString(after.content)


def test_a_pressure_whose_ratio_overflows_is_a_422_naming_the_metric(pki: Pki) -> None:
    rules = parse_rules([
        {"name": "q", "metric": WAITING, "aggregation": "last"},
        {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 1e-320}},
    ])  # fmt: skip
    cfg = replace(base_config(pki), rules=rules)
    with AdapterThread(cfg, clock=FakeClock(t=T0 + 5)) as a:
        post(a.adapter.otlp_port, request(RES, [gauge(WAITING, [(T0, 3.0, {})])]))
        with api_client(pki, a) as c:
            r = c.get(f"{API}/p", params={"labelSelector": "service=vision"},
                      headers=hpa_headers())  # fmt: skip
            q = c.get(f"{API}/q", params={"labelSelector": "service=vision"},
                      headers=hpa_headers())  # fmt: skip
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    assert "metric 'p': the value is inf" in body["message"]
    assert "value / target overflows" in body["message"]
    assert q.status_code == 200 and q.json()["items"][0]["value"] == "3"


def test_an_attribute_past_max_attr_bytes_is_rejected_resource_or_point() -> None:
    """Each distinct 3 MB attribute used to be kept (about 6 MB a push, for the series'
    life); now a KeyValue over MAX_ATTR_BYTES rejects its points, and one under is kept."""
    fits = "v" * (MAX_ATTR_BYTES - 20)
    big = "v" * MAX_ATTR_BYTES
    point = gauge(WAITING, [(T0, 1.0, {"a": fits}), (T0, 2.0, {"a": big}), (T0, 3.0, {})])
    got = to_points(request(RES, [point, histogram("h", [(T0, T0, [1, 0], {"a": big})], (1.0,))]))
    assert (got.accepted, got.rejected) == (2, 2)
    assert got.errors[0].startswith(f"{WAITING}: point attribute of {MAX_ATTR_BYTES + 9} bytes")
    assert got.errors[1].startswith("h: point attribute of")
    res = to_points(request({**RES, "big": big}, [gauge(WAITING, [(T0, 1.0, {}), (T0, 2.0, {})])]))
    assert (res.accepted, res.rejected) == (0, 2)
    assert res.errors == [f"resource attribute of {MAX_ATTR_BYTES + 11} bytes (at most 4096)"]


def test_distinct_huge_attributes_leave_the_store_empty(pki: Pki) -> None:
    with AdapterThread(base_config(pki), clock=FakeClock(t=T0 + 5)) as a:
        for i in range(20):
            big = {**RES, "junk": f"{i}" + "x" * 1_000_000}
            r = _raw_post(a.adapter.otlp_port, request(big, [gauge(WAITING, [(T0, 1.0, {})])]))
            assert r.status_code == 400
        assert a.call(len, a.adapter.store) == 0


def test_a_rule_whose_aggregation_cannot_read_the_series_is_a_422_naming_both(pki: Pki) -> None:
    """A quantile (or rate, over-ratio, good-rate) rule over a gauge, or `last` over a
    histogram, used to answer 200 with no items, counted as a stale read: the rules'
    mistake looked like a collector that had stopped."""
    rules = parse_rules([
        {"name": "q95", "metric": WAITING, "aggregation": "quantile", "quantile": 0.95},
        {"name": "r", "metric": WAITING, "aggregation": "rate"},
        {"name": "over", "metric": WAITING, "aggregation": "over-ratio", "threshold": 1},
        {"name": "lasth", "metric": "h", "aggregation": "last"},
        {"name": "ok", "metric": WAITING, "aggregation": "last"},
    ])  # fmt: skip
    cfg = replace(base_config(pki), rules=rules)
    hist = histogram("h", [(T0 - 30, T0, [1, 0], {})], (1.0,))
    with AdapterThread(cfg, clock=FakeClock(t=T0 + 5)) as a:
        post(a.adapter.otlp_port, request(RES, [gauge(WAITING, [(T0, 3.0, {})]), hist]))
        with api_client(pki, a) as c:
            got = {m: c.get(f"{API}/{m}", params={"labelSelector": "service=vision"},
                            headers=hpa_headers()) for m in ("q95", "r", "over", "lasth", "ok")}  # fmt: skip
        stale = dict(a.adapter.provider.stale_reads)
    assert got["ok"].status_code == 200 and got["ok"].json()["items"][0]["value"] == "3"
    for m in ("q95", "r", "over", "lasth"):
        assert got[m].status_code == 422, (m, got[m].text)
        assert got[m].json()["reason"] == "Invalid"
    assert got["q95"].json()["message"] == (
        f"metric 'q95': aggregation 'quantile' reads exponential histogram or histogram points,"
        f" but the 1 matching series of '{WAITING}' are gauge: fix the rule's aggregation or metric"
    )
    assert (
        "reads gauge or sum points, but the 1 matching series of 'h' are histogram"
        in (got["lasth"].json()["message"])
    )
    assert stale == {}


def test_the_store_evicts_by_attribute_bytes_as_well_as_by_count() -> None:
    """Series of 3,000-character attributes, 10 of them over a 20,000-character budget:
    the oldest go (counted as dropped) until the rest fit; the count bound still holds."""
    from metrics_adapter.sources.store import SeriesStore

    store = SeriesStore(max_series=1000, max_label_bytes=20_000)
    for i in range(10):
        store.add_runs(to_points(request({**RES, "big": f"{i}" + "x" * 3000},
                                         [gauge(WAITING, [(T0, 1.0, {})])])).runs, T0)  # fmt: skip
    assert len(store) == 6 and store.dropped == 4
    assert store.label_bytes <= 20_000
    kept = sorted(s.attr_map()["big"][0] for s in store)
    assert kept == ["4", "5", "6", "7", "8", "9"]
    one = SeriesStore(max_label_bytes=10)  # one series over the budget alone is kept
    one.add_runs(to_points(request(RES, [gauge(WAITING, [(T0, 1.0, {})])])).runs, T0)
    assert len(one) == 1


def test_the_decoders_attribute_caches_are_bounded_by_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from metrics_adapter.sources import otlp_decode

    monkeypatch.setattr(otlp_decode, "CACHE_MAX_BYTES", 50_000)
    otlp_decode.clear_caches()
    try:
        for i in range(100):  # 4,000-character resource and point attributes, all distinct
            req = request({**RES, "r": f"{i}" + "r" * 4000},
                          [gauge(WAITING, [(T0, 1.0, {"p": f"{i}" + "p" * 4000})])])  # fmt: skip
            assert to_points(req).accepted == 1
            assert otlp_decode._ATTRS.bytes <= 50_000 + 3 * 8200 * 2
            assert otlp_decode._ATTRS_CACHE_BYTES[0] <= 50_000
    finally:
        otlp_decode.clear_caches()


def test_the_shared_pair_table_is_bounded_by_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    """200,000 pairs of 4 KiB would have been 800 MB: the table starts again past its
    characters, and a pair handed out before stays valid (series keep theirs)."""
    from metrics_adapter.sources import store

    monkeypatch.setattr(store, "_PAIRS_MAX_CHARS", 40_000)
    first = store.canonical_pair("k", "0" + "v" * 4000)
    for i in range(1, 100):
        store.canonical_pair("k", f"{i}" + "v" * 4000)
        assert store._PAIRS_CHARS[0] <= 40_000 + 4010
    assert first == ("k", "0" + "v" * 4000)
