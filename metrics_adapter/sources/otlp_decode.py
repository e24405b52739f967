"""OTLP metrics decoding (pure): request bodies to validated store `Point`s.

No I/O and no HTTP: the receiver (`metrics_adapter.receiver`) calls `decode_body` and
`to_points` and answers the client; benchmarks and tests call them directly.

- Bodies are `ExportMetricsServiceRequest` as binary protobuf
  (`application/x-protobuf`) or protobuf-JSON (`application/json`; unknown fields
  ignored), optionally gzip-compressed. `decode_body` raises `OtlpBadRequest` when a body
  cannot be decoded and `OtlpTooLarge` when it (decompressed) is over the limit.
- A point is invalid when its value is NaN or infinite, its time is missing, histogram
  bounds are not finite and strictly increasing, there is not one more bucket count than
  bounds, bucket counts do not add up to `count`, a count, a value or a histogram's sum
  exceeds 2**53 in magnitude (float64 could no longer count exactly, and sums over every
  series could overflow), an attribute (resource or point) is over `MAX_ATTR_BYTES`
  encoded, or its time is more than `MAX_FUTURE_S` ahead of the receiver's
  clock (kept, it would be the newest point of its series and hide every real one after it
  until that time). Points flagged NO_RECORDED_VALUE are skipped, not rejected.
  Summaries are rejected as unsupported (the adapter cannot merge precomputed quantiles).

Attributes: a series' identity is its metric name plus its resource attributes and its point
attributes (each sorted, resource first; where both have a key the point's value is the one
labels see), with values rendered as strings (ints as decimal, bools as true/false).

Speed (docs/adapter.md, "Benchmark"): bodies are parsed with `FastRequest`, in which
attributes and the explicit histograms' packed numbers arrive as raw bytes; attribute sets
are decoded once and cached (`_AttrCache`); a metric's histogram points are validated
together with numpy (`_fast_histograms`) and handed over column-wise (`store.Run`). A metric
with any point to reject, bounds that differ between its points, or numbers that are not
packed is read point by point from the exact parse (`RawRequest`, `_histograms`), so errors
and their order are those of a point-by-point reader. Not detected: a field sent partly
packed and partly unpacked whose packed part alone is consistent (legal protobuf that no
OTel SDK or Collector writes) is read from its packed part.
"""

from __future__ import annotations

import gzip
import math
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
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
    Attrs,
    Point,
    Run,
    canonical_pair,
)

__all__ = [
    "DecodeResult",
    "Decoded",
    "decode_body",
    "clear_caches",
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
MAX_ATTR_BYTES: Final = 4096
"""The largest attribute (its KeyValue's encoded bytes) a point may carry, resource or
point attribute: Kubernetes label values are at most 63 characters and names 253, so no
selector can need more, and without a bound each push of a distinct 3 MB attribute held
about 6 MB for as long as its series lived (1.26 GB after 200 such pushes)."""
MAX_FUTURE_S: Final = 60.0
"""How far ahead of the receiver's clock a point's time may be (clock skew between nodes)."""
_CUMULATIVE = 2  # AggregationTemporality
_DELTA = 1
_NO_RECORDED_VALUE = 1


class OtlpBadRequest(ValueError):
    """The body cannot be decoded (400)."""


class OtlpTooLarge(ValueError):
    """The (decompressed) body is over the limit (413)."""


@dataclass
class DecodeResult:
    runs: list[Run]
    """The valid points, column-wise, in request order (`SeriesStore.add_runs`)."""
    rejected: int
    errors: list[str]
    ms_bounds_in_seconds: list[tuple[str, tuple[tuple[str, str], ...]]] = field(
        default_factory=list
    )
    """(metric, attributes) of histograms with unit `s` but the SDK's millisecond bounds."""

    @property
    def accepted(self) -> int:
        return sum(len(r) for r in self.runs)

    @property
    def points(self) -> list[Point]:
        """The valid points as `Point` objects (tests)."""
        return [p for r in self.runs for p in r.points()]


SDK_DEFAULT_BOUNDS: Final = (
    0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
    7500.0, 10000.0,
)  # fmt: skip
"""The OTel SDKs' default explicit bucket boundaries (specification, "Explicit Bucket
Histogram Aggregation"), meant for milliseconds: on a histogram whose unit is `s` they put
every request under 5 s into one bucket (the receiver logs that once per series)."""


def decode_body(body: bytes, content_type: str, encoding: str | None, limit: int) -> Decoded:
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
            text = body.decode("utf-8")
            if not text.lstrip().startswith("{"):  # json_format reads `[]` as an empty message
                raise ValueError('expected a JSON object {"resourceMetrics": [...]}')
            json_format.Parse(text, req, ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, ValueError, TypeError) as exc:
            raise OtlpBadRequest(
                f"body is not a valid ExportMetricsServiceRequest JSON: {exc}"
            ) from None
        body = req.SerializeToString()
    try:
        return Decoded(body, FastRequest.FromString(body))
    except (DecodeError, ValueError) as exc:
        raise OtlpBadRequest(
            f"body is not a valid ExportMetricsServiceRequest protobuf: {exc}"
        ) from None


def _raw_class(prefix: str, packed_as_bytes: bool) -> Any:
    """ExportMetricsServiceRequest with every `attributes` field declared `repeated bytes`
    (and, with `packed_as_bytes`, the explicit-histogram `explicit_bounds` and
    `bucket_counts` too).

    Why: a repeated KeyValue and a repeated bytes field have the same wire encoding, so
    this schema parses the same bodies but hands each attribute over as its raw bytes
    instead of a message wrapper. Those bytes are a cache key (`_AttrCache`): a series'
    attributes are decoded once, not on every push. A packed repeated double / fixed64 is
    length-delimited too: as bytes it arrives as one little-endian block per data point
    that numpy reads without a Python object per number (`_fast_histograms`). Built at
    import from the OTLP descriptors themselves (copied into a private pool under the
    package prefix `prefix.`), so it follows the installed opentelemetry-proto exactly."""
    files = [
        common_pb2.DESCRIPTOR,
        resource_pb2.DESCRIPTOR,
        metrics_pb2.DESCRIPTOR,
        metrics_service_pb2.DESCRIPTOR,
    ]
    pool = descriptor_pool.DescriptorPool()
    kv = ".opentelemetry.proto.common.v1.KeyValue"

    def as_bytes(f: Any) -> None:
        f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
        f.ClearField("type_name")
        f.ClearField("options")  # [packed] does not apply to bytes

    def rewrite(msgs: Any) -> None:
        for msg in msgs:
            for f in msg.field:
                if f.type_name == kv and f.name == "attributes":
                    as_bytes(f)
                elif (
                    packed_as_bytes
                    and msg.name == "HistogramDataPoint"
                    and f.name in ("explicit_bounds", "bucket_counts")
                ):
                    as_bytes(f)
                elif f.type_name.startswith(".opentelemetry."):
                    f.type_name = f".{prefix}{f.type_name}"
            rewrite(msg.nested_type)

    for fd in files:
        fdp = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(fdp)
        fdp.name = f"{prefix}/{fdp.name}"
        fdp.package = f"{prefix}.{fdp.package}"
        deps = [(f"{prefix}/{d}" if d.startswith("opentelemetry/") else d) for d in fdp.dependency]
        del fdp.dependency[:]
        fdp.dependency.extend(deps)
        rewrite(fdp.message_type)
        del fdp.service[:]  # only messages are needed
        pool.Add(fdp)
    name = f"{prefix}.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest"
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


RawRequest = _raw_class("kvspread_raw", packed_as_bytes=False)
"""Attributes as raw bytes, every number as protobuf declares it: the exact reading."""
FastRequest = _raw_class("kvspread_fast", packed_as_bytes=True)
"""Attributes and the explicit histograms' packed numbers as raw bytes: the fast reading."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """A parsed request (what `decode_body` returns and `to_points` takes): the protobuf
    body and its fast reading; the exact reading is parsed from `body` only when needed."""

    body: bytes
    fast: Any


_ATTRS_CACHE: dict[tuple[bytes, ...], tuple[tuple[str, str], ...]] = {}
_ATTRS_CACHE_MAX = 100_000
"""Resource attribute sets (raw KeyValue bytes -> decoded pairs), bounded like
`_AttrCache`."""
CACHE_MAX_BYTES: Final = 64 << 20
"""Attribute bytes each decoder cache may hold (raw, and decoded about as much again)
before it starts again empty: with attributes of up to `MAX_ATTR_BYTES`, a count alone
would let 100,000 distinct ones hold 800 MB."""
_ATTRS_CACHE_BYTES = [0]


def _point_attrs(raw: tuple[bytes, ...]) -> tuple[tuple[str, str], ...]:
    """Sorted (key, rendered value) pairs of raw KeyValue bytes; each distinct KeyValue is
    decoded once (`_AttrCache.kv`: a new series usually shares all but its pod name with
    others), into the store's shared, interned pairs (`store.canonical_pair`)."""
    kvs = _ATTRS.kv
    items = []
    for b in raw:
        got = kvs.get(b)
        if got is None:
            kv = KeyValue.FromString(b)
            value = kv.value.string_value or _attr_value(kv.value)
            got = kvs[b] = (b, canonical_pair(sys.intern(kv.key), value))
            _ATTRS.bytes += 2 * len(b)
        items.append(got[1])
    items.sort()
    return tuple(items)


def _resource_key(raw: tuple[bytes, ...]) -> tuple[tuple[str, str], ...]:
    """A resource's pairs (cached); a repeated key keeps its last value."""
    got = _ATTRS_CACHE.get(raw)
    if got is None:
        got = tuple(sorted(dict(_point_attrs(raw)).items()))
        size = 2 * sum(map(len, raw))
        if len(_ATTRS_CACHE) >= _ATTRS_CACHE_MAX or _ATTRS_CACHE_BYTES[0] + size > CACHE_MAX_BYTES:
            _ATTRS_CACHE.clear()
            _ATTRS_CACHE_BYTES[0] = 0
        _ATTRS_CACHE[raw] = got
        _ATTRS_CACHE_BYTES[0] += size
    return got


class _AttrCache:
    """Series attributes (resource pairs, then point pairs) by raw point-attribute bytes,
    one table per resource attribute set: an attribute set is decoded on its first push
    only, later pushes cost one dict lookup per point.

    Bounded: about 300 bytes per distinct attribute set (a key tuple of shared raw
    attributes; the pairs are the store's shared ones), at most `MAX` sets (~30 MB) and
    `CACHE_MAX_BYTES` of attribute bytes; past either it starts again empty, and decoding
    costs what it did without a cache."""

    MAX = 100_000

    def __init__(self) -> None:
        self.tables: dict[tuple[bytes, ...], dict[tuple[bytes, ...], Attrs]] = {}
        self.kv: dict[bytes, tuple[bytes, tuple[str, str]]] = {}
        """Raw KeyValue -> (the same bytes, shared; its decoded pair)."""
        self.size = 0
        self.bytes = 0
        """Attribute bytes held: resource keys, and each cached KeyValue twice (raw and
        decoded)."""

    def clear(self) -> None:
        self.tables.clear()
        self.kv.clear()
        self.size = 0
        self.bytes = 0

    def table(self, res_raw: tuple[bytes, ...]) -> dict[tuple[bytes, ...], Attrs]:
        t = self.tables.get(res_raw)
        if t is None:  # counted here, cleared in `miss` (never between a decode and its use)
            t = self.tables[res_raw] = {}
            self.bytes += sum(map(len, res_raw))
        return t

    def miss(self, res_raw: tuple[bytes, ...], res_key: Attrs, raw: tuple[bytes, ...]) -> Attrs:
        """Decode and remember one point attribute set (resource pairs first: dict(attrs)
        lets the point's value win where both have a key)."""
        if self.size >= self.MAX or len(self.kv) >= self.MAX or self.bytes >= CACHE_MAX_BYTES:
            self.clear()
        items = _point_attrs(raw)
        got = res_key + items if res_key else items
        self.size += 1
        # the stored key shares the bytes of attributes that many series have in common
        kv = self.kv
        self.table(res_raw)[tuple([kv[b][0] for b in raw])] = got
        return got


_ATTRS = _AttrCache()


def clear_caches() -> None:
    """Empty the decoder's attribute caches (benchmarks measure memory without them)."""
    _ATTRS_CACHE.clear()
    _ATTRS_CACHE_BYTES[0] = 0
    _ATTRS.clear()


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


def _oversized(raw: tuple[bytes, ...]) -> int:
    """The size of the first raw KeyValue over `MAX_ATTR_BYTES`, else 0."""
    for b in raw:
        if len(b) > MAX_ATTR_BYTES:
            return len(b)
    return 0


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


class _Out:
    """What `to_points` collects: runs of valid points, and the rejections."""

    def __init__(self, future_ns: float = math.inf) -> None:
        self.future_ns = future_ns
        """Points stamped after this (ns since the epoch) are rejected (`MAX_FUTURE_S`)."""
        self.runs: list[Run] = []
        self.errors: list[str] = []
        self.rejected = 0
        self.ms_bounds: list[tuple[str, Attrs]] = []
        self._run: Run | None = None

    def reject(self, msg: str, n: int = 1) -> None:
        self.rejected += n
        if len(self.errors) < 5:
            self.errors.append(msg)

    def run(
        self, metric: str, kind: int, delta: bool, monotonic: bool, bounds: tuple[float, ...]
    ) -> Run:
        """The run to append the next point to (a new one when its layout differs)."""
        r = self._run
        if (
            r is None
            or r.metric is not metric
            or r.kind != kind
            or r.delta != delta
            or r.monotonic != monotonic
            or r.bounds != bounds
        ):
            r = self._run = Run(metric, kind, delta, monotonic, bounds)
            self.runs.append(r)
        return r

    def add_run(self, r: Run) -> None:
        self.runs.append(r)
        self._run = None


def to_points(req: Any, now: float | None = None) -> DecodeResult:
    """Validate every point and collect the valid ones, column-wise, as store `Run`s
    (pure). `req` is what `decode_body` returns, or an ExportMetricsServiceRequest; `now`
    (seconds since the epoch) rejects points stamped more than `MAX_FUTURE_S` after it
    (None: no such check). OtlpBadRequest when an attribute cannot be decoded (nested past
    protobuf's depth limit: the body is parsed with attributes as raw bytes, so that limit
    is met only here)."""
    try:
        return _to_points(req, now)
    except DecodeError as exc:
        raise OtlpBadRequest(
            f"body is not a valid ExportMetricsServiceRequest protobuf: an attribute: {exc}"
        ) from None


def _to_points(req: Any, now: float | None) -> DecodeResult:
    if not isinstance(req, Decoded):
        body = req.SerializeToString()
        req = Decoded(body, FastRequest.FromString(body))
    out = _Out(math.inf if now is None else (now + MAX_FUTURE_S) * 1e9)
    exact: Any = None  # the exact reading, parsed only if a histogram metric needs it
    tables = _ATTRS.table
    for ri, rm in enumerate(req.fast.resource_metrics):
        # one decode per resource; a repeated key keeps its last value
        res_raw = tuple(rm.resource.attributes)
        big = _oversized(res_raw)
        if big:
            n = sum(
                len(getattr(m, w).data_points) if (w := m.WhichOneof("data")) else 0
                for sm in rm.scope_metrics
                for m in sm.metrics
            )
            out.reject(f"resource attribute of {big} bytes (at most {MAX_ATTR_BYTES})", max(n, 1))
            continue
        res_key = _resource_key(res_raw)
        table = tables(res_raw)
        for si, sm in enumerate(rm.scope_metrics):
            for mi, m in enumerate(sm.metrics):
                name = sys.intern(m.name)
                which = m.WhichOneof("data")
                if not name:
                    n = len(getattr(m, which).data_points) if which else 1
                    for _ in range(max(n, 1)):
                        out.reject("metric without a name")
                    continue
                if which is None:
                    continue
                if which == "summary":
                    for _ in m.summary.data_points:
                        out.reject(f"{name}: summary points are not supported")
                    continue
                data = getattr(m, which)
                if which != "gauge" and data.aggregation_temporality not in (_DELTA, _CUMULATIVE):
                    for _ in data.data_points:
                        out.reject(f"{name}: aggregation temporality is unspecified")
                    continue
                delta = which != "gauge" and data.aggregation_temporality == _DELTA
                attrs_of = _Attrs(table, res_raw, res_key)
                if which == "histogram":
                    run = _fast_histograms(name, m.unit == "s", delta, data, attrs_of, out)
                    if run is not None:
                        if len(run):
                            out.add_run(run)
                        continue
                    # something to reject, or an encoding the fast reading does not take
                    if exact is None:
                        exact = RawRequest.FromString(req.body)
                    em = exact.resource_metrics[ri].scope_metrics[si].metrics[mi]
                    _histograms(name, m.unit == "s", delta, em.histogram, attrs_of, out)
                elif which == "exponential_histogram":
                    _exponential(name, delta, data, attrs_of, out)
                else:
                    _numbers(name, which == "gauge", delta, data, attrs_of, out)
    return DecodeResult(out.runs, out.rejected, out.errors, out.ms_bounds)


class _Attrs:
    """Series attributes of raw point attributes under one resource (`_AttrCache`)."""

    __slots__ = ("table", "res_raw", "res_key")

    def __init__(
        self, table: dict[tuple[bytes, ...], Attrs], res_raw: tuple[bytes, ...], res_key: Attrs
    ) -> None:
        self.table, self.res_raw, self.res_key = table, res_raw, res_key

    def __call__(self, raw: tuple[bytes, ...]) -> Attrs:
        got = self.table.get(raw)
        if got is None:
            got = _ATTRS.miss(self.res_raw, self.res_key, raw)
        return got


_F64: Final = np.dtype("<f8")
_U64: Final = np.dtype("<u8")
_BOUNDS: dict[bytes, tuple[tuple[float, ...], bool]] = {}


def _bounds_of(raw: bytes) -> tuple[tuple[float, ...], bool]:
    """(bounds, valid) of packed little-endian doubles (cached: there are few layouts)."""
    got = _BOUNDS.get(raw)
    if got is None:
        bounds = tuple(np.frombuffer(raw, _F64).tolist())
        got = (bounds, _bounds_ok(bounds))
        if len(_BOUNDS) < 10_000:
            _BOUNDS[raw] = got
    return got


def _fast_histograms(
    name: str, seconds: bool, delta: bool, data: Any, attrs_of: _Attrs, out: _Out
) -> Run | None:
    """The explicit-histogram points of one metric, validated in bulk with numpy; None
    when a point needs the exact path (`_histograms`): one to reject, bounds that differ
    between points, or numbers not in the packed encoding this reading takes."""
    table = attrs_of.table
    attrs: list[Attrs] = []
    ts: list[int] = []
    starts: list[int] = []
    blobs: list[bytes] = []
    counts: list[int] = []
    sums: list[float] = []
    raw_bounds = b""
    first = True
    join = b"".join
    for dp in data.data_points:
        if dp.flags & _NO_RECORDED_VALUE:
            continue
        t = dp.time_unix_nano
        if not t or t > out.future_ns:
            return None
        rep = dp.explicit_bounds  # a packed field: one element, unless split on the wire
        rb = rep[0] if len(rep) == 1 else join(rep)
        if first:
            raw_bounds, first = rb, False
        elif rb != raw_bounds:
            return None
        rep = dp.bucket_counts
        cb = rep[0] if len(rep) == 1 else join(rep)
        if len(cb) != len(rb) + 8:
            return None
        raw = tuple(dp.attributes)
        a = table.get(raw)
        if a is None:
            if _oversized(raw):
                return None
            a = attrs_of(raw)
        attrs.append(a)
        ts.append(t)
        starts.append(dp.start_time_unix_nano)
        blobs.append(cb)
        counts.append(dp.count)
        sums.append(dp.sum)
    n = len(ts)
    if len(raw_bounds) % 8:
        return None
    bounds, ok = _bounds_of(raw_bounds)
    width = len(bounds) + 1
    if not ok or width > 2048:  # wider: the uint64 row sums below could overflow
        return None
    if not n:
        return Run(name, HISTOGRAM, delta, True, bounds)
    buckets = np.frombuffer(join(blobs), _U64).reshape(n, width)
    if (
        int(buckets.max()) > MAX_EXACT
        or not np.array_equal(buckets.sum(axis=1, dtype=np.uint64), np.array(counts, np.uint64))
        or not (np.abs(np.array(sums, np.float64)) <= MAX_EXACT).all()
    ):
        return None
    if seconds and bounds == SDK_DEFAULT_BOUNDS:
        out.ms_bounds.extend((name, a) for a in attrs)
    # nanoseconds to seconds in bulk: the same correctly rounded int -> float and / 1e9
    # as `t / 1e9` per point
    secs = (np.array([ts, starts], np.float64) / 1e9).tolist()
    run = Run(name, HISTOGRAM, delta, True, bounds, attrs, secs[0], secs[1])
    run.values.frombytes(buckets.astype(np.float64).tobytes())
    return run


def _timed(name: str, data: Any, attrs_of: _Attrs, out: _Out) -> Iterator[tuple[Any, Attrs]]:
    """(point, series attributes) of the points to read: NO_RECORDED_VALUE ones skipped,
    those without a time rejected."""
    for dp in data.data_points:
        if dp.flags & _NO_RECORDED_VALUE:
            continue
        if not dp.time_unix_nano:
            out.reject(f"{name}: data point without time_unix_nano")
            continue
        if dp.time_unix_nano > out.future_ns:
            ahead = dp.time_unix_nano / 1e9 - (out.future_ns / 1e9 - MAX_FUTURE_S)
            out.reject(
                f"{name}: time_unix_nano is {ahead:.0f} s ahead of the receiver's clock"
                f" (at most {MAX_FUTURE_S:.0f} s: check the sender's clock)"
            )
            continue
        raw = tuple(dp.attributes)
        a = attrs_of.table.get(raw)  # a set seen before passed the size check then
        if a is None:
            big = _oversized(raw)
            if big:
                out.reject(f"{name}: point attribute of {big} bytes (at most {MAX_ATTR_BYTES})")
                continue
            a = attrs_of(raw)
        yield dp, a


def _histograms(
    name: str, seconds: bool, delta: bool, data: Any, attrs_of: _Attrs, out: _Out
) -> None:
    """Explicit-histogram points one by one, from the exact reading (every rejection, in
    order, with its message)."""
    for dp, key in _timed(name, data, attrs_of, out):
        bounds = tuple(dp.explicit_bounds)
        if seconds and bounds == SDK_DEFAULT_BOUNDS:
            out.ms_bounds.append((name, key))
        counts = list(dp.bucket_counts)
        if len(counts) != len(bounds) + 1:
            out.reject(
                f"{name}: {len(bounds)} explicit_bounds need {len(bounds) + 1} "
                f"bucket_counts, got {len(counts)}"
            )
            continue
        if not _bounds_ok(bounds):
            out.reject(f"{name}: explicit_bounds must be finite and strictly increasing")
            continue
        err = _check_counts(counts, name)
        if err:
            out.reject(err)
            continue
        total = sum(counts)
        if total != dp.count:
            out.reject(f"{name}: bucket_counts add up to {total}, count is {dp.count}")
            continue
        if dp.HasField("sum") and not math.isfinite(dp.sum):
            out.reject(f"{name}: sum {dp.sum} is not finite")
            continue
        if dp.HasField("sum") and abs(dp.sum) > MAX_EXACT:
            out.reject(f"{name}: sum {dp.sum:g} is past 2**53 in magnitude")
            continue
        r = out.run(name, HISTOGRAM, delta, True, bounds)
        r.attrs.append(key)
        r.ts.append(dp.time_unix_nano / 1e9)
        r.starts.append(dp.start_time_unix_nano / 1e9)
        r.values.extend(counts)


def _numbers(name: str, gauge: bool, delta: bool, data: Any, attrs_of: _Attrs, out: _Out) -> None:
    """Gauge and sum points."""
    monotonic = not gauge and data.is_monotonic
    r: Run | None = None
    for dp, key in _timed(name, data, attrs_of, out):
        vk = dp.WhichOneof("value")
        if vk is None:
            out.reject(f"{name}: number point without a value")
            continue
        v = float(dp.as_double if vk == "as_double" else dp.as_int)
        if not math.isfinite(v):
            out.reject(f"{name}: value {v} is not finite")
            continue
        if abs(v) > MAX_EXACT:
            out.reject(f"{name}: value {v:g} is past 2**53 in magnitude")
            continue
        if monotonic and v < 0:
            out.reject(f"{name}: monotonic sum has negative value {v}")
            continue
        if r is None:
            r = out.run(name, GAUGE if gauge else SUM, delta, monotonic, ())
        r.attrs.append(key)
        r.ts.append(dp.time_unix_nano / 1e9)
        r.starts.append(dp.start_time_unix_nano / 1e9)
        r.values.append(v)


def _exponential(name: str, delta: bool, data: Any, attrs_of: _Attrs, out: _Out) -> None:
    """Exponential-histogram points (one `ExponentialHistogram` each)."""
    for dp, key in _timed(name, data, attrs_of, out):
        if not -10 <= dp.scale <= 20:
            out.reject(f"{name}: exponential scale {dp.scale} outside [-10, 20]")
            continue
        pos, neg = list(dp.positive.bucket_counts), list(dp.negative.bucket_counts)
        err = _check_counts([*pos, *neg, dp.zero_count], name)
        if err:
            out.reject(err)
            continue
        if sum(pos) + sum(neg) + dp.zero_count != dp.count:
            out.reject(f"{name}: exponential buckets add up to "
                       f"{sum(pos) + sum(neg) + dp.zero_count}, count is {dp.count}")  # fmt: skip
            continue
        if (dp.HasField("sum") and not math.isfinite(dp.sum)) or not math.isfinite(
            dp.zero_threshold
        ):
            out.reject(f"{name}: sum or zero_threshold is not finite")
            continue
        if dp.HasField("sum") and abs(dp.sum) > MAX_EXACT:
            out.reject(f"{name}: sum {dp.sum:g} is past 2**53 in magnitude")
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
        r = out.run(name, EXP_HISTOGRAM, delta, True, ())
        r.attrs.append(key)
        r.ts.append(dp.time_unix_nano / 1e9)
        r.starts.append(dp.start_time_unix_nano / 1e9)
        r.exps.append(exp)


def gzip_body(body: bytes) -> bytes:
    """gzip a body (tests and benchmarks)."""
    return gzip.compress(body)
