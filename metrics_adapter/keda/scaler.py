"""The KEDA external scaler service and its gRPC server.

Trigger metadata (ScaledObject `spec.triggers[].metadata`, type `external`):

    scalerAddress: kvspread-adapter-keda.kvspread.svc:6000   (read by KEDA itself)
    metricName: kvspread_request_latency_p95_seconds          an SLI name (required)
    labelSelector: service=vision                             a label selector (optional)
    targetValue: "2"                                          required, > 0
    activationThreshold: "0.5"                                optional, default 0

The namespace is the ScaledObject's (ScaledObjectRef.namespace). `GetMetrics` returns the
values the external metrics API serves for the same namespace, metric and selector (one
MetricValue per ExternalMetricValue item, `metricValueFloat` exact, `metricValue` rounded);
`GetMetricSpec` gives `targetSizeFloat` = targetValue (`targetSize` rounded); `IsActive` is
"some value > activationThreshold"; `StreamIsActive` re-evaluates every `stream_interval`
seconds and pushes each change. Errors carry the REST API's message with the code:

    unknown metric (MetricNotFound)                        NOT_FOUND
    bad selector, namespace or trigger metadata            INVALID_ARGUMENT
    no fresh data, source down                             UNAVAILABLE
    quantile refused (coarse histogram)                    FAILED_PRECONDITION
    a value no quantity can hold (ValueOutOfRange)         OUT_OF_RANGE
    a rule whose aggregation cannot read the series        FAILED_PRECONDITION

`metricValue` is int64 on the wire: a value past its range is sent as its nearest end
(`metricValueFloat` carries the value). A targetValue or activationThreshold past 2**53
is refused (INVALID_ARGUMENT): `targetSize` could not hold it.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import grpc

from kvspread.grpcservice import Service, Unreadable
from kvspread.grpcservice import address as grpc_address
from metrics_adapter.errors import (
    AdapterError,
    BadRequest,
    HistogramTooCoarse,
    MetricNotFound,
    NotFound,
    SourceUnavailable,
    ValueOutOfRange,
    WrongKind,
)
from metrics_adapter.keda import externalscaler_pb2 as pb
from metrics_adapter.provider import ExternalMetricsProvider
from metrics_adapter.reads import parse_read
from metrics_adapter.selectors import Selector
from metrics_adapter.values import MetricValue

__all__ = [
    "SERVICE",
    "Trigger",
    "parse_trigger",
    "status_code",
    "ExternalScaler",
    "KedaServer",
]

log = logging.getLogger("kvspread.adapter.keda")

_R = TypeVar("_R")
_Q = TypeVar("_Q")
_S = TypeVar("_S", bound="ExternalScaler")

SERVICE = Service.of(pb.DESCRIPTOR.services_by_name["ExternalScaler"])
"""`externalscaler.ExternalScaler`, from KEDA's externalscaler.proto."""


@dataclass(frozen=True)
class Trigger:
    """One ScaledObject trigger, checked."""

    namespace: str
    metric: str
    selector: Selector
    target: float
    activation: float


def _number(meta: dict[str, str], key: str, default: float | None) -> float:
    text = meta.get(key)
    if text is None or not text.strip():
        if default is None:
            raise BadRequest(f"trigger metadata {key} is required")
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"trigger metadata {key}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise BadRequest(f"trigger metadata {key}: {text!r} is not a finite number")
    if abs(value) > MAX_TRIGGER_NUMBER:
        raise BadRequest(f"trigger metadata {key}: {text!r} is past 2**53 in magnitude")
    return value


MAX_TRIGGER_NUMBER: Final = 2.0**53
"""The largest targetValue / activationThreshold taken: one KEDA's int64 targetSize and a
float64 both hold exactly."""
_INT64: Final = (-(2**63), 2**63 - 1)


def _int64(value: float) -> int:
    """`value` rounded for an int64 field, past the range sent as its nearest end."""
    if value != value:  # NaN: never served (the provider refuses it), but never a crash
        return 0
    if value >= _INT64[1]:
        return _INT64[1]
    if value <= _INT64[0]:
        return _INT64[0]
    return round(value)


def parse_trigger(ref: pb.ScaledObjectRef) -> Trigger:
    """The trigger of a ScaledObjectRef; BadRequest (INVALID_ARGUMENT) naming the bad key."""
    meta = dict(ref.scalerMetadata)
    metric = meta.get("metricName", "").strip()
    if not metric:
        raise BadRequest("trigger metadata metricName is required (an SLI name)")
    selector = parse_read(ref.namespace, meta.get("labelSelector") or None)
    target = _number(meta, "targetValue", None)
    if target <= 0:
        raise BadRequest(f"trigger metadata targetValue: {meta['targetValue']!r} must be > 0")
    activation = _number(meta, "activationThreshold", 0.0)
    return Trigger(ref.namespace, metric, selector, target, activation)


def status_code(exc: AdapterError) -> grpc.StatusCode:
    """The gRPC code of an adapter error (module docstring)."""
    if isinstance(exc, NotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, BadRequest):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, SourceUnavailable):  # NoFreshData included
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(exc, HistogramTooCoarse):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, ValueOutOfRange):
        return grpc.StatusCode.OUT_OF_RANGE
    if isinstance(exc, WrongKind):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


def _unary(
    method: str, compute: Callable[[_S, _Q], Awaitable[_R]]
) -> Callable[[_S, _Q, grpc.aio.ServicerContext[Any, Any]], Coroutine[Any, Any, _R]]:
    """The unary RPC `method`, answered by `compute(self, request)` through
    `ExternalScaler._answer`: the unary methods differ only in what they compute."""

    async def rpc(self: _S, request: _Q, context: grpc.aio.ServicerContext[Any, Any]) -> _R:
        await self._refuse_unreadable(method, context, request)
        return await self._answer(method, context, compute(self, request))

    rpc.__name__ = rpc.__qualname__ = method
    return rpc


class ExternalScaler:
    """`externalscaler.ExternalScaler` over an `ExternalMetricsProvider` (asyncio)."""

    def __init__(self, provider: ExternalMetricsProvider, stream_interval: float = 5.0) -> None:
        self.provider = provider
        self.stream_interval = stream_interval
        self.calls: dict[tuple[str, str], int] = {}
        """(method, gRPC code name) -> count."""

    def _count(self, method: str, code: grpc.StatusCode) -> None:
        key = (method, code.name)
        self.calls[key] = self.calls.get(key, 0) + 1

    async def _read(self, trig: Trigger) -> list[MetricValue]:
        args = (trig.namespace, trig.metric, trig.selector)
        if self.provider.is_blocking(trig.metric):
            return await asyncio.to_thread(self.provider.read, *args)
        return self.provider.read(*args)

    async def _active(self, ref: pb.ScaledObjectRef) -> bool:
        trig = parse_trigger(ref)
        return any(v.value > trig.activation for v in await self._read(trig))

    async def _fail(
        self, method: str, context: grpc.aio.ServicerContext[Any, Any], exc: AdapterError
    ) -> None:
        code = status_code(exc)
        self._count(method, code)
        await context.abort(code, exc.message)

    async def _refuse_unreadable(
        self, method: str, context: grpc.aio.ServicerContext[Any, Any], request: object
    ) -> None:
        """Abort with INVALID_ARGUMENT when the request's bytes did not parse."""
        if isinstance(request, Unreadable):
            await self._fail(method, context, BadRequest(request.message))

    async def _answer(
        self, method: str, context: grpc.aio.ServicerContext[Any, Any], answer: Awaitable[_R]
    ) -> _R:
        """Await a unary call's answer: an AdapterError aborts the call with its gRPC code
        and the REST API's message; every outcome is counted."""
        try:
            reply = await answer
        except AdapterError as exc:
            await self._fail(method, context, exc)
        self._count(method, grpc.StatusCode.OK)
        return reply

    async def _is_active(self, request: pb.ScaledObjectRef) -> pb.IsActiveResponse:
        return pb.IsActiveResponse(result=await self._active(request))

    IsActive = _unary("IsActive", _is_active)

    async def StreamIsActive(  # noqa: N802
        self,
        request: pb.ScaledObjectRef,
        context: grpc.aio.ServicerContext[pb.ScaledObjectRef, pb.IsActiveResponse],
    ) -> AsyncIterator[pb.IsActiveResponse]:
        await self._refuse_unreadable("StreamIsActive", context, request)
        last: bool | None = None
        while True:
            try:
                active = await self._active(request)
            except (NotFound, BadRequest) as exc:  # will not get better: end the stream
                await self._fail("StreamIsActive", context, exc)
            except AdapterError as exc:  # transient (no fresh data): push nothing new
                log.debug("stream evaluation failed", extra={"kv": {"error": exc.message}})
            else:
                if active != last:
                    last = active
                    yield pb.IsActiveResponse(result=active)
            await asyncio.sleep(self.stream_interval)

    async def _metric_spec(self, request: pb.ScaledObjectRef) -> pb.GetMetricSpecResponse:
        trig = parse_trigger(request)
        if trig.metric not in self.provider.list_metrics():  # as GetMetrics would answer
            raise MetricNotFound(trig.metric, "no rule defines it")
        spec = pb.MetricSpec(
            metricName=trig.metric, targetSize=_int64(trig.target), targetSizeFloat=trig.target
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    GetMetricSpec = _unary("GetMetricSpec", _metric_spec)

    async def _metrics(self, request: pb.GetMetricsRequest) -> pb.GetMetricsResponse:
        trig = parse_trigger(request.scaledObjectRef)
        values = await self._read(trig)
        name = request.metricName or trig.metric
        return pb.GetMetricsResponse(
            metricValues=[
                pb.MetricValue(
                    metricName=name, metricValue=_int64(v.value), metricValueFloat=v.value
                )
                for v in values
            ]
        )

    GetMetrics = _unary("GetMetrics", _metrics)


@dataclass(eq=False)
class KedaServer:
    """The gRPC server (grpc.aio, on the adapter's event loop).

    Parameters:
        scaler: the service.
        host, port: where to listen (port 0: any free port, see `port` after start).
        tls: (certificate chain PEM, private key PEM) or None for plaintext.
        client_ca: PEM of the CA client certificates must chain to (None: not asked).
        max_connections: connections served at once; more are closed at accept by gRPC
            (clients see UNAVAILABLE and reconnect with backoff).
        max_rpcs: calls in progress at once, StreamIsActive streams included; more get
            RESOURCE_EXHAUSTED.
        idle_s: a connection without a call for this long gets GOAWAY (KEDA reconnects at
            its next poll), so idle connections do not hold places for ever. 60 s: KEDA
            calls at every pollingInterval (30 s by default) and on every HPA read (15 s),
            so a real client is seldom idle that long, and one that is pays a reconnect;
            idle connections filling the port keep KEDA out for a minute, not five.

    Without these, 5,000 connections that sent the HTTP/2 preface and nothing more were
    all kept (RSS 74 -> 146 MiB), with no end.
    """

    scaler: ExternalScaler
    host: str
    port: int
    tls: tuple[bytes, bytes] | None = None
    client_ca: bytes | None = None
    max_connections: int = 1024
    max_rpcs: int = 4096
    idle_s: float = 60.0
    _server: grpc.aio.Server | None = field(default=None, init=False, repr=False)

    async def start(self) -> None:
        """Listen; raises `httpserver.PortInUse` when the port is taken (no SO_REUSEPORT)."""
        from metrics_adapter.httpserver import HttpServer, PortInUse

        # the TLS and HTTP/2 handshake's time: the adapter's HTTP ports' (gRPC's is 120 s)
        handshake_ms = int(HttpServer.handshake_timeout * 1000)

        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_allowed_incoming_connections", self.max_connections),
                ("grpc.max_connection_idle_ms", int(self.idle_s * 1000)),
                ("grpc.server_handshake_timeout_ms", handshake_ms),
            ],
            maximum_concurrent_rpcs=self.max_rpcs,
        )
        SERVICE.add_to_server(self.scaler, server, lenient=True)
        address = grpc_address(self.host or "0.0.0.0", self.port)
        try:
            if self.tls is None:
                bound = server.add_insecure_port(address)
            else:
                creds = grpc.ssl_server_credentials(
                    [(self.tls[1], self.tls[0])],
                    root_certificates=self.client_ca,
                    require_client_auth=self.client_ca is not None,
                )
                bound = server.add_secure_port(address, creds)
        except RuntimeError:
            bound = 0
        if not bound:
            raise PortInUse(self.host, self.port)
        self.port = bound
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None
