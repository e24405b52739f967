"""The decoder's fast reading of explicit histograms (packed numbers as raw bytes, checked
in bulk) gives exactly what the point-by-point exact reading gives: for valid payloads, for
every kind of invalid point (same errors, same order), and for the other legal wire
encodings of repeated numbers (unpacked, split packed records), which it hands over to the
exact reading."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mp
from opentelemetry.proto.resource.v1 import resource_pb2

from metrics_adapter.sources import otlp_decode
from metrics_adapter.sources.otlp_decode import PROTOBUF, decode_body, to_points
from metrics_adapter.sources.store import SeriesStore
from tests.metrics_adapter.adapter_otlp_payloads import (
    DELTA,
    counter,
    gauge,
    histogram,
    request,
)

T0 = 1_800_000_000.0
BOUNDS = (0.1, 0.2, 0.5, 1.0)
RES: dict[str, str | int] = {"k8s.namespace.name": "llm", "service.name": "text"}


def _exact(body: bytes) -> otlp_decode.DecodeResult:
    """The reference: every histogram metric read point by point from the exact reading."""
    exact = otlp_decode.RawRequest.FromString(body)
    out = otlp_decode._Out()
    for rm in exact.resource_metrics:
        res_raw = tuple(rm.resource.attributes)
        attrs_of = otlp_decode._Attrs(
            otlp_decode._ATTRS.table(res_raw), res_raw, otlp_decode._resource_key(res_raw)
        )
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                data = m.histogram
                delta = data.aggregation_temporality == DELTA
                otlp_decode._histograms(m.name, m.unit == "s", delta, data, attrs_of, out)
    return otlp_decode.DecodeResult(out.runs, out.rejected, out.errors, out.ms_bounds)


def _same(got: otlp_decode.DecodeResult, want: otlp_decode.DecodeResult) -> None:
    assert got.points == want.points
    assert (got.rejected, got.errors) == (want.rejected, want.errors)
    assert got.ms_bounds_in_seconds == want.ms_bounds_in_seconds


def _random_request(rng: random.Random, bad: bool) -> Any:
    metrics = []
    for mi in range(rng.randint(1, 3)):
        bounds = otlp_decode.SDK_DEFAULT_BOUNDS if mi == 1 else BOUNDS
        pts: list[tuple[float, float, list[int], dict[str, str | int]]] = []
        for i in range(rng.randint(1, 40)):
            counts = [rng.randrange(50) for _ in range(len(bounds) + 1)]
            pts.append((T0, T0 + 10 + i, counts, {"pod": f"p{i % 7}", "code": 200 + i % 3}))
        m = histogram(f"h{mi}", pts, bounds, DELTA if mi == 2 else 1)
        for dp in m.histogram.data_points:
            dp.sum = rng.random()
            dp.flags = 1 if rng.random() < 0.05 else 0
            if bad and rng.random() < 0.15:
                case = rng.randrange(6)
                if case == 0:
                    dp.time_unix_nano = 0
                elif case == 1:
                    dp.bucket_counts.append(1)
                elif case == 2:
                    dp.explicit_bounds[1] = dp.explicit_bounds[0]
                elif case == 3:
                    dp.count += 1
                elif case == 4:
                    dp.sum = float("inf")
                else:
                    dp.count += 2**53 + 1 - dp.bucket_counts[0]
                    dp.bucket_counts[0] = 2**53 + 1
        metrics.append(m)
    return request(RES, metrics)


@pytest.mark.parametrize("bad", [False, True])
def test_fast_reading_matches_the_exact_one(bad: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7 + bad)
    exact_calls = 0
    histograms = otlp_decode._histograms

    def counted(*args: Any) -> None:
        nonlocal exact_calls
        exact_calls += 1
        histograms(*args)

    for _ in range(60):
        body = _random_request(rng, bad).SerializeToString()
        want = _exact(body)
        with monkeypatch.context() as mp_:
            mp_.setattr(otlp_decode, "_histograms", counted)
            got = to_points(decode_body(body, PROTOBUF, None, 1 << 20))
        _same(got, want)
    # valid payloads never leave the fast reading; invalid ones are handed to the exact one
    assert (exact_calls > 0) == bad


def test_bounds_that_differ_between_points_of_one_metric() -> None:
    m = histogram("h", [(T0, T0 + 1, [1, 2, 3, 4, 5], {"a": "x"})], BOUNDS)
    m2 = histogram("h", [(T0, T0 + 1, [1, 2, 3], {"a": "y"})], (1.0, 2.0))
    m.histogram.data_points.extend(m2.histogram.data_points)
    body = request(RES, [m]).SerializeToString()
    got = to_points(decode_body(body, PROTOBUF, None, 1 << 20))
    _same(got, _exact(body))
    assert [p.bounds for p in got.points] == [BOUNDS, (1.0, 2.0)]


def _unpacked_request_class() -> Any:
    """ExportMetricsServiceRequest whose repeated numbers are declared [packed = false]:
    serializing through it writes the other legal wire encoding."""
    pool = descriptor_pool.DescriptorPool()
    for fd in (
        common_pb2.DESCRIPTOR,
        resource_pb2.DESCRIPTOR,
        mp.DESCRIPTOR,
        metrics_service_pb2.DESCRIPTOR,
    ):
        fdp = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(fdp)
        for msg in fdp.message_type:
            for f in msg.field:
                if f.label == f.LABEL_REPEATED and f.type in (f.TYPE_DOUBLE, f.TYPE_FIXED64):
                    f.options.packed = False
        pool.Add(fdp)
    name = "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest"
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_unpacked_and_split_encodings_read_exactly() -> None:
    req = request(
        RES,
        [
            histogram(
                "h",
                [(T0, T0 + 1, [1, 2, 3, 4, 5], {"a": "x"}), (T0, T0 + 1, [0, 0, 1, 0, 0], {})],
                BOUNDS,
            )
        ],
    )
    packed = req.SerializeToString()
    unpacked = _unpacked_request_class().FromString(packed).SerializeToString()
    assert unpacked != packed and len(unpacked) > len(packed)
    want = to_points(decode_body(packed, PROTOBUF, None, 1 << 20))
    assert len(want.points) == 2 and want.points[0].values == (1.0, 2.0, 3.0, 4.0, 5.0)
    _same(to_points(decode_body(unpacked, PROTOBUF, None, 1 << 20)), want)
    # packed fields split into two records each (parsers concatenate them): written
    # through the fast reading's schema, whose two `bytes` elements are two records
    fast = otlp_decode.FastRequest.FromString(packed)
    fdp = fast.resource_metrics[0].scope_metrics[0].metrics[0].histogram.data_points[0]
    for rep in (fdp.bucket_counts, fdp.explicit_bounds):
        blob = rep[0]
        del rep[:]
        rep.extend([blob[:16], blob[16:]])
    split = fast.SerializeToString()
    std = metrics_service_pb2.ExportMetricsServiceRequest.FromString(split)
    std_dp = std.resource_metrics[0].scope_metrics[0].metrics[0].histogram.data_points[0]
    assert list(std_dp.bucket_counts) == [1, 2, 3, 4, 5]
    assert tuple(std_dp.explicit_bounds) == BOUNDS
    _same(to_points(decode_body(split, PROTOBUF, None, 1 << 20)), want)


def test_runs_store_like_points() -> None:
    """add_runs (the receiver's path) and add (Point objects) leave identical series."""
    rng = random.Random(3)
    metrics = [
        histogram("h", [(T0, T0 + 10, [1, 2, 3, 4, 5], {"pod": "a"})], BOUNDS),
        histogram("hd", [(T0, T0 + 10, [1, 0, 0, 0, 1], {"pod": "a"})], BOUNDS, DELTA),
        counter("c", [(T0, T0 + 10, 5.0, {"pod": "a"}), (T0, T0 + 10, 2.0, {"pod": "b"})]),
        counter("cd", [(T0, T0 + 10, 1.0, {"pod": "a"})], DELTA),
        gauge("g", [(T0 + 10, 0.5, {"pod": "a"})]),
    ]
    a, b = SeriesStore(retention=60), SeriesStore(retention=60)
    for rnd in range(12):
        for m in metrics:
            data = getattr(m, str(m.WhichOneof("data")))
            for dp in data.data_points:
                dp.time_unix_nano += 10 * 10**9
                if rnd == 6:
                    dp.start_time_unix_nano = dp.time_unix_nano - 5 * 10**9  # a restart
                if m.HasField("histogram"):
                    dp.bucket_counts[rng.randrange(5)] += 1
                    dp.count = sum(dp.bucket_counts)
                else:
                    dp.as_double += rng.random()
        res = to_points(request(RES, metrics))
        assert res.rejected == 0
        now = T0 + 20 * rnd
        assert a.add_runs(res.runs, now) == b.add(res.points, now) == 6
    assert len(a) == len(b) == 6
    for sa, sb in zip(a, b, strict=True):
        assert (sa.metric, sa.attrs, sa.start) == (sb.metric, sb.attrs, sb.start)
        assert list(sa.data) == list(sb.data) and len(sa) > 2


def test_store_finds_series_by_the_decoders_attribute_tuples() -> None:
    """The store looks series up by the identity of the decoder's attribute tuple; an equal
    tuple that is another object (the decoder's cache started again) still finds the same
    series, and eviction and expiry keep every index consistent."""
    store = SeriesStore(retention=60, max_series=3, idle_expiry=30)

    def push(pods: list[str], t: float, fresh: bool) -> None:
        if fresh:
            otlp_decode.clear_caches()
        pod: list[dict[str, str | int]] = [{"pod": p} for p in pods]
        pts = [(T0, t, [1, 1, 1, 1, 1], a) for a in pod]
        res = to_points(request(RES, [histogram("h", pts, BOUNDS)]))
        store.add_runs(res.runs, t)

    push(["a", "b"], T0 + 10, fresh=False)
    push(["a", "b"], T0 + 20, fresh=True)  # equal attributes, new tuples
    assert len(store) == 2 and all(len(s) == 3 for s in store)  # zero point + 2 pushes
    push(["c", "d"], T0 + 30, fresh=False)  # over max_series: "a" is evicted
    assert store.dropped == 1 and sorted(dict(s.attrs)["pod"] for s in store) == ["b", "c", "d"]
    push(["c"], T0 + 60, fresh=False)
    assert store.expire(T0 + 61) == 2 and [dict(s.attrs)["pod"] for s in store] == ["c"]
    assert len(store._lru) == 1 and len(store._index["h"]["llm"]) == 1
    assert list(store._by_id["h"].values()) == list(store._lru)
