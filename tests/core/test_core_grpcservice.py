"""kvspread.grpcservice: a service read from its descriptor, served and called over a real
grpc server (the KEDA scaler's messages, a servicer of the test's own)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from kvspread.grpcservice import Service
from metrics_adapter.keda import externalscaler_pb2 as pb

SERVICE = Service.of(pb.DESCRIPTOR.services_by_name["ExternalScaler"])


class Echo:
    """Answers from the request, so the test sees what arrived."""

    def IsActive(self, request: pb.ScaledObjectRef, context: Any) -> pb.IsActiveResponse:  # noqa: N802
        return pb.IsActiveResponse(result=request.name == "on")

    def StreamIsActive(self, request: pb.ScaledObjectRef, context: Any) -> Iterator[Any]:  # noqa: N802
        for name in ("on", "off", "on"):
            yield pb.IsActiveResponse(result=name == request.name)

    def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Any) -> Any:  # noqa: N802
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"no spec for {request.name}")

    def GetMetrics(self, request: pb.GetMetricsRequest, context: Any) -> Any:  # noqa: N802
        return pb.GetMetricsResponse(
            metricValues=[pb.MetricValue(metricName=request.metricName, metricValueFloat=1.5)]
        )


@pytest.fixture
def stub() -> Iterator[Any]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    SERVICE.add_to_server(Echo(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield SERVICE.stub(ch)
    finally:
        server.stop(None)


def test_the_service_is_read_from_the_descriptor() -> None:
    assert SERVICE.name == "externalscaler.ExternalScaler"
    kinds = {m.name: (m.client_streaming, m.server_streaming) for m in SERVICE.methods}
    assert kinds == {
        "IsActive": (False, False),
        "StreamIsActive": (False, True),
        "GetMetricSpec": (False, False),
        "GetMetrics": (False, False),
    }
    assert {m.name: m.request for m in SERVICE.methods}["GetMetrics"] is pb.GetMetricsRequest


def test_unary_and_streaming_calls_round_trip(stub: Any) -> None:
    assert stub.IsActive(pb.ScaledObjectRef(name="on"), timeout=10).result is True
    got = [r.result for r in stub.StreamIsActive(pb.ScaledObjectRef(name="off"), timeout=10)]
    assert got == [False, True, False]
    resp = stub.GetMetrics(pb.GetMetricsRequest(metricName="m"), timeout=10)
    assert [(v.metricName, v.metricValueFloat) for v in resp.metricValues] == [("m", 1.5)]


def test_an_abort_reaches_the_client_with_its_code(stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.GetMetricSpec(pb.ScaledObjectRef(name="x"), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "no spec for x"


def test_an_unknown_attribute_is_an_attribute_error(stub: Any) -> None:
    with pytest.raises(AttributeError):
        stub.NoSuchMethod  # noqa: B018
