"""Bytes that are no ProcessingRequest get INVALID_ARGUMENT naming the message from both gRPC
servers (the h2 server's own parser; grpcio through kvspread.grpcservice's lenient
deserialiser), never grpcio's UNKNOWN with a logged traceback; the picker serves the next
stream."""

from __future__ import annotations

import logging

import grpc
import pytest

from router.config import GRPC_SERVERS
from router.extproc import SERVICE
from tests.router.conftest import router_config, wait_fresh
from tests.router.test_router_extproc import CHAT, DUPLEX, body_msgs, channel, headers_msg


@pytest.fixture(params=GRPC_SERVERS)
def picker(request, engines, start_router):  # type: ignore[no-untyped-def]
    (idle,) = engines("idle")
    router = start_router(router_config([idle.address], server={"grpc_server": request.param}))
    wait_fresh(router, 1)
    return router


def test_unparseable_bytes_are_invalid_argument(picker, caplog) -> None:  # type: ignore[no-untyped-def]
    method = f"/{SERVICE.name}/Process"
    with channel(picker.grpc_port) as ch:
        raw = ch.stream_stream(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        with caplog.at_level(logging.DEBUG), pytest.raises(grpc.RpcError) as err:
            list(raw(iter([b"\x0a\xff\xff\xff\xff\x0f"]), timeout=10))  # a length past the end
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ProcessingRequest" in (err.value.details() or "")
        assert "Traceback" not in caplog.text
        # the next stream is served as ever
        msgs = [headers_msg(DUPLEX), *body_msgs(CHAT, 65536)]
        out = list(SERVICE.stub(ch).Process(iter(msgs), timeout=10))
    assert out and not any(r.HasField("immediate_response") for r in out)
