"""A gRPC service served and called from its protobuf descriptor.

protoc's `*_pb2_grpc.py` plugin writes, for every service, a servicer base class, an
`add_…_to_server` function and a client stub that each list the methods again. The service
descriptor in the `*_pb2` module already says every method's name, streaming kind and message
types, so one `Service` built from it registers a servicer object's methods on a server and
builds a client stub: the KEDA external scaler (metrics_adapter/keda) and the router's ext_proc
(router/) use it, and there is no generated servicer code to keep in step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError

if TYPE_CHECKING:  # grpcio is imported where a server or a channel is made: the router's
    import grpc  # own HTTP/2 server reads the descriptors and never needs it

__all__ = ["Method", "Service", "Stub", "Unreadable", "address"]

_SERVER: dict[tuple[bool, bool], str] = {
    (False, False): "unary_unary_rpc_method_handler",
    (False, True): "unary_stream_rpc_method_handler",
    (True, False): "stream_unary_rpc_method_handler",
    (True, True): "stream_stream_rpc_method_handler",
}
"""(client streams, server streams) -> grpc's handler factory for that kind."""

_CHANNEL = {
    (False, False): "unary_unary",
    (False, True): "unary_stream",
    (True, False): "stream_unary",
    (True, True): "stream_stream",
}
"""(client streams, server streams) -> the `grpc.Channel` method that calls that kind."""


def address(host: str, port: int) -> str:
    """grpcio's `host:port` target; an IPv6 host in brackets (`[::1]:6000`), since grpcio
    reads `::1:6000` as a host name and reports only that it could not bind."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Method:
    """One RPC: its name, streaming kind and message classes."""

    name: str
    client_streaming: bool
    server_streaming: bool
    request: type[Any]
    response: type[Any]


@dataclass(frozen=True)
class Service:
    """A service's full name and methods, read from its descriptor."""

    name: str
    methods: tuple[Method, ...]

    @classmethod
    def of(cls, descriptor: ServiceDescriptor) -> Service:
        """The service a `*_pb2` module describes (`pb.DESCRIPTOR.services_by_name[...]`)."""
        return cls(
            descriptor.full_name,
            tuple(
                Method(
                    m.name,
                    m.client_streaming,
                    m.server_streaming,
                    message_factory.GetMessageClass(m.input_type),
                    message_factory.GetMessageClass(m.output_type),
                )
                for m in descriptor.methods
            ),
        )

    def add_to_server(
        self,
        servicer: object,
        server: grpc.Server | grpc.aio.Server,
        *,
        lenient: bool = False,
        reader: Callable[[bytes], object | None] | None = None,
    ) -> None:
        """Serve `servicer`'s methods (attributes named as the RPCs) on `server`.

        `lenient`: a request that does not parse reaches the method as an `Unreadable`
        (which it answers with INVALID_ARGUMENT) instead of failing in grpcio, which answers
        UNKNOWN and logs a traceback. `reader` (with `lenient`): tried on the bytes before
        protobuf's parse; what it returns other than None reaches the method instead (a
        large body chunk read without copies, router/bodywire.py)."""
        import grpc

        handlers = {
            m.name: getattr(grpc, _SERVER[m.client_streaming, m.server_streaming])(
                getattr(servicer, m.name),
                request_deserializer=(
                    _lenient(m.request, reader) if lenient else m.request.FromString
                ),
                response_serializer=m.response.SerializeToString,
            )
            for m in self.methods
        }
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(self.name, handlers),)
        )
        server.add_registered_method_handlers(self.name, handlers)

    def stub(self, channel: grpc.Channel) -> Stub:
        """A client: one callable attribute per RPC (`stub.GetMetrics(request, timeout=…)`)."""
        return Stub(self, channel)


@dataclass(frozen=True)
class Unreadable:
    """A request whose bytes are not its message (`add_to_server(lenient=True)`)."""

    message: str


def _lenient(
    request: type[Any], reader: Callable[[bytes], object | None] | None = None
) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        if reader is not None and (got := reader(data)) is not None:
            return got
        try:
            return request.FromString(data)
        except DecodeError as exc:
            return Unreadable(f"unreadable {request.DESCRIPTOR.name}: {exc}")

    return parse


class Stub:
    """A service's client over a channel; each RPC is an attribute of the same name."""

    def __init__(self, service: Service, channel: grpc.Channel) -> None:
        self._calls: dict[str, Any] = {
            m.name: getattr(channel, _CHANNEL[m.client_streaming, m.server_streaming])(
                f"/{service.name}/{m.name}",
                request_serializer=m.request.SerializeToString,
                response_deserializer=m.response.FromString,
            )
            for m in service.methods
        }

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_calls"][name]
        except KeyError:
            raise AttributeError(name) from None
