"""OTLP metrics decoding (pure): request bodies to validated store `Point`s.

No I/O and no HTTP: the receiver (`metrics_adapter.receiver`) calls `decode_body` and
`to_points` and answers the client; benchmarks and tests call them directly.

- Bodies are `ExportMetricsServiceRequest` as binary protobuf
  (`application/x-protobuf`) or protobuf-JSON (`application/json`; unknown fields
  ignored), optionally gzip-compressed. `decode_body` raises `OtlpBadRequest` when a body
  cannot be decoded and `OtlpTooLarge` when it (decompressed) is over the limit.
- A point is invalid when its value is NaN or infinite, its time is missing, histogram
  bounds are not finite and strictly increasing, there is not one more bucket count than
  bounds, bucket counts do not add up to `count`, or a count exceeds 2**53 (float64 could
  no longer count exactly). Points flagged NO_RECORDED_VALUE are skipped, not rejected.
  Summaries are rejected as unsupported (the adapter cannot merge precomputed quantiles).

Attributes: a series' identity is its metric name plus its resource attributes and its point
attributes (each sorted, resource first; where both have a key the point's value is the one
labels see), with values rendered as strings (ints as decimal, bools as true/false).
"""

from __future__ import annotations

import gzip
import math
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any, Final, cast

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2

from metrics_adapter.sli import ExponentialHistogram
from metrics_adapter.sources.store import (
    EXP_HISTOGRAM,
    GAUGE,
    HISTOGRAM,
    SUM,
    Point,
    canonical_attrs,
)

__all__ = [
    "DecodeResult",
    "decode_body",
    "to_points",
    "PROTOBUF",
    "JSON",
    "OtlpBadRequest",
    "OtlpTooLarge",
    "gzip_body",
    "SDK_DEFAULT_BOUNDS",
]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_EXACT = 2**53
_CUMULATIVE = 2  # AggregationTemporality
_DELTA = 1
_NO_RECORDED_VALUE = 1


class OtlpBadRequest(ValueError):
    """The body cannot be decoded (400)."""


class OtlpTooLarge(ValueError):
    """The (decompressed) body is over the limit (413)."""


@dataclass
class DecodeResult:
    points: list[Point]
    rejected: int
    errors: list[str]
    ms_bounds_in_seconds: list[tuple[str, tuple[tuple[str, str], ...]]] = field(
        default_factory=list
    )
    """(metric, attributes) of histograms with unit `s` but the SDK's millisecond bounds."""


SDK_DEFAULT_BOUNDS: Final = (
    0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
    7500.0, 10000.0,
)  # fmt: skip
"""The OTel SDKs' default explicit bucket boundaries (specification, "Explicit Bucket
Histogram Aggregation"), meant for milliseconds: on a histogram whose unit is `s` they put
every request under 5 s into one bucket (the receiver logs that once per series)."""


def decode_body(
    body: bytes, content_type: str, encoding: str | None, limit: int
) -> ExportMetricsServiceRequest:
    """Decompress and parse a request body; raises OtlpBadRequest / OtlpTooLarge."""
    enc = (encoding or "identity").strip().lower()
    if enc == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            body = d.decompress(body, limit + 1)
        except zlib.error as exc:
            raise OtlpBadRequest(f"body is not valid gzip: {exc}") from None
        if len(body) > limit or d.unconsumed_tail:
            raise OtlpTooLarge(f"decompressed body exceeds {limit} bytes")
    elif enc not in ("identity", ""):
        raise OtlpBadRequest(f"unsupported Content-Encoding {encoding!r} (gzip or none)")
    if content_type != PROTOBUF:
        req = ExportMetricsServiceRequest()
        try:
            json_format.Parse(body.decode("utf-8"), req, ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, ValueError, TypeError) as exc:
            raise OtlpBadRequest(
                f"body is not a valid ExportMetricsServiceRequest JSON: {exc}"
            ) from None
        body = req.SerializeToString()
    raw = RawRequest()
    try:
        raw.ParseFromString(body)
    except (DecodeError, ValueError) as exc:
        raise OtlpBadRequest(
            f"body is not a valid ExportMetricsServiceRequest protobuf: {exc}"
        ) from None
    return cast(ExportMetricsServiceRequest, raw)  # the same fields, attributes as raw bytes


def _raw_attributes_class() -> Any:
    """ExportMetricsServiceRequest with every `attributes` field declared `repeated bytes`.

    Why: a repeated KeyValue and a repeated bytes field have the same wire encoding, so
    this schema parses the same bodies but hands each attribute over as its raw bytes
    instead of a message wrapper. Those bytes are a cache key (`_point_attrs`): a series'
    attributes are decoded once, not on every push. Built at import from the OTLP
    descriptors themselves (copied into a private pool under the package prefix
    `kvspread_raw.`), so it follows the installed opentelemetry-proto exactly."""
    files = [
        common_pb2.DESCRIPTOR,
        resource_pb2.DESCRIPTOR,
        metrics_pb2.DESCRIPTOR,
        metrics_service_pb2.DESCRIPTOR,
    ]
    pool = descriptor_pool.DescriptorPool()
    kv = ".opentelemetry.proto.common.v1.KeyValue"

    def rewrite(msgs: Any) -> None:
        for msg in msgs:
            for f in msg.field:
                if f.type_name == kv and f.name == "attributes":
                    f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                    f.ClearField("type_name")
                elif f.type_name.startswith(".opentelemetry."):
                    f.type_name = ".kvspread_raw" + f.type_name
            rewrite(msg.nested_type)

    for fd in files:
        fdp = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(fdp)
        fdp.name = "kvspread_raw/" + fdp.name
        fdp.package = "kvspread_raw." + fdp.package
        deps = [
            ("kvspread_raw/" + d if d.startswith("opentelemetry/") else d) for d in fdp.dependency
        ]
        del fdp.dependency[:]
        fdp.dependency.extend(deps)
        rewrite(fdp.message_type)
        del fdp.service[:]  # only messages are needed
        pool.Add(fdp)
    name = "kvspread_raw.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest"
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


RawRequest = _raw_attributes_class()
"""The request class `decode_body` returns (see `_raw_attributes_class`)."""

_ATTRS_CACHE: dict[tuple[bytes, ...], tuple[tuple[str, str], ...]] = {}
_RAW_KV: dict[bytes, bytes] = {}
_ATTRS_CACHE_MAX = 100_000
"""About 300 bytes per distinct attribute set (a key tuple of shared raw attributes; the
pairs are the store's shared ones): at most ~30 MB. Past it the cache starts again empty, and decoding costs what it did
without a cache."""


def _point_attrs(raw: tuple[bytes, ...]) -> tuple[tuple[str, str], ...]:
    """Sorted (key, rendered value) pairs of raw KeyValue bytes (cached, bounded); the pairs
    are the store's shared, interned ones (`store.canonical_attrs`)."""
    got = _ATTRS_CACHE.get(raw)
    if got is None:
        items = []
        for b in raw:
            kv = KeyValue.FromString(b)
            items.append((sys.intern(kv.key), kv.value.string_value or _attr_value(kv.value)))
        got = canonical_attrs(tuple(sorted(items)))
        if len(_ATTRS_CACHE) >= _ATTRS_CACHE_MAX:
            _ATTRS_CACHE.clear()
            _RAW_KV.clear()
        # the stored key shares the bytes of attributes that many series have in common
        _ATTRS_CACHE[tuple([_RAW_KV.setdefault(b, b) for b in raw])] = got
    return got


def _attr_value(v: object) -> str:
    which = v.WhichOneof("value")  # type: ignore[attr-defined]
    if which == "string_value":
        return v.string_value  # type: ignore[attr-defined,no-any-return]
    if which == "int_value":
        return str(v.int_value)  # type: ignore[attr-defined]
    if which == "bool_value":
        return "true" if v.bool_value else "false"  # type: ignore[attr-defined]
    if which == "double_value":
        d = v.double_value  # type: ignore[attr-defined]
        return str(int(d)) if d.is_integer() else repr(d)
    if which == "bytes_value":
        return v.bytes_value.hex()  # type: ignore[attr-defined,no-any-return]
    if which == "array_value":
        return ",".join(_attr_value(x) for x in v.array_value.values)  # type: ignore[attr-defined]
    if which == "kvlist_value":
        return ",".join(f"{kv.key}={_attr_value(kv.value)}" for kv in v.kvlist_value.values)  # type: ignore[attr-defined]
    return ""


_GOOD_BOUNDS: dict[tuple[float, ...], bool] = {}


def _bounds_ok(bounds: tuple[float, ...]) -> bool:
    ok = _GOOD_BOUNDS.get(bounds)
    if ok is None:
        ok = all(math.isfinite(b) for b in bounds) and all(
            lo < hi for lo, hi in zip(bounds, bounds[1:], strict=False)
        )
        if len(_GOOD_BOUNDS) < 10_000:
            _GOOD_BOUNDS[bounds] = ok
    return ok


def _check_counts(counts: list[int], where: str) -> str | None:
    if counts and max(counts) > MAX_EXACT:
        return f"{where}: bucket count {max(counts)} exceeds 2**53 and cannot be stored exactly"
    return None


def to_points(req: Any) -> DecodeResult:
    """Validate every point and turn the valid ones into store `Point`s (pure). `req` is
    what `decode_body` returns, or an ExportMetricsServiceRequest (converted)."""
    if isinstance(req, ExportMetricsServiceRequest):
        req = RawRequest.FromString(req.SerializeToString())
    points: list[Point] = []
    errors: list[str] = []
    ms_bounds: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    rejected = 0

    def reject(msg: str) -> None:
        nonlocal rejected
        rejected += 1
        if len(errors) < 5:
            errors.append(msg)

    for rm in req.resource_metrics:
        # one decode per resource; a repeated key keeps its last value
        res_key = tuple(sorted(dict(_point_attrs(tuple(rm.resource.attributes))).items()))
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                name = sys.intern(m.name)
                if not name:
                    kind_field = m.WhichOneof("data")
                    n = len(getattr(m, kind_field).data_points) if kind_field else 1
                    for _ in range(max(n, 1)):
                        reject("metric without a name")
                    continue
                which = m.WhichOneof("data")
                if which is None:
                    continue
                if which == "summary":
                    for _ in m.summary.data_points:
                        reject(f"{name}: summary points are not supported")
                    continue
                data = getattr(m, which)
                delta = which != "gauge" and data.aggregation_temporality == _DELTA
                if which != "gauge" and data.aggregation_temporality not in (_DELTA, _CUMULATIVE):
                    for _ in data.data_points:
                        reject(f"{name}: aggregation temporality is unspecified")
                    continue
                monotonic = which == "sum" and data.is_monotonic
                seconds = which == "histogram" and m.unit == "s"
                for dp in data.data_points:
                    if dp.flags & _NO_RECORDED_VALUE:
                        continue
                    if not dp.time_unix_nano:
                        reject(f"{name}: data point without time_unix_nano")
                        continue
                    # resource pairs first, then point pairs: dict(key) lets the point win
                    items = _point_attrs(tuple(dp.attributes))
                    key = res_key + items if res_key else items
                    t = dp.time_unix_nano / 1e9
                    start = dp.start_time_unix_nano / 1e9
                    if which in ("gauge", "sum"):
                        vk = dp.WhichOneof("value")
                        if vk is None:
                            reject(f"{name}: number point without a value")
                            continue
                        v = float(getattr(dp, vk))
                        if not math.isfinite(v):
                            reject(f"{name}: value {v} is not finite")
                            continue
                        if monotonic and v < 0:
                            reject(f"{name}: monotonic sum has negative value {v}")
                            continue
                        points.append(
                            Point(name, GAUGE if which == "gauge" else SUM, key, t, start, (v,),
                                  delta, monotonic)
                        )  # fmt: skip
                    elif which == "histogram":
                        bounds = tuple(dp.explicit_bounds)
                        if seconds and bounds == SDK_DEFAULT_BOUNDS:
                            ms_bounds.append((name, key))
                        counts = list(dp.bucket_counts)
                        if len(counts) != len(bounds) + 1:
                            reject(
                                f"{name}: {len(bounds)} explicit_bounds need {len(bounds) + 1} "
                                f"bucket_counts, got {len(counts)}"
                            )
                            continue
                        if not _bounds_ok(bounds):
                            reject(
                                f"{name}: explicit_bounds must be finite and strictly increasing"
                            )
                            continue
                        err = _check_counts(counts, name)
                        if err:
                            reject(err)
                            continue
                        total = sum(counts)
                        if total != dp.count:
                            reject(f"{name}: bucket_counts add up to {total}, count is {dp.count}")
                            continue
                        if dp.HasField("sum") and not math.isfinite(dp.sum):
                            reject(f"{name}: sum {dp.sum} is not finite")
                            continue
                        points.append(
                            Point(name, HISTOGRAM, key, t, start, counts, delta,
                                  True, bounds)
                        )  # fmt: skip
                    else:
                        if not -10 <= dp.scale <= 20:
                            reject(f"{name}: exponential scale {dp.scale} outside [-10, 20]")
                            continue
                        pos, neg = list(dp.positive.bucket_counts), list(dp.negative.bucket_counts)
                        err = _check_counts([*pos, *neg, dp.zero_count], name)
                        if err:
                            reject(err)
                            continue
                        if sum(pos) + sum(neg) + dp.zero_count != dp.count:
                            reject(f"{name}: exponential buckets add up to "
                                   f"{sum(pos) + sum(neg) + dp.zero_count}, count is {dp.count}")  # fmt: skip
                            continue
                        if (dp.HasField("sum") and not math.isfinite(dp.sum)) or not math.isfinite(
                            dp.zero_threshold
                        ):
                            reject(f"{name}: sum or zero_threshold is not finite")
                            continue
                        exp = ExponentialHistogram(
                            scale=dp.scale,
                            zero_count=float(dp.zero_count),
                            positive_offset=dp.positive.offset,
                            positive_counts=tuple(map(float, pos)),
                            negative_offset=dp.negative.offset,
                            negative_counts=tuple(map(float, neg)),
                            zero_threshold=dp.zero_threshold,
                            sum=dp.sum if dp.HasField("sum") else math.nan,
                        )
                        points.append(
                            Point(name, EXP_HISTOGRAM, key, t, start, (), delta, True, (), exp)
                        )
    return DecodeResult(points, rejected, errors, ms_bounds)


def gzip_body(body: bytes) -> bytes:
    """gzip a body (tests and benchmarks)."""
    return gzip.compress(body)
