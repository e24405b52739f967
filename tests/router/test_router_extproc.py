"""The ext_proc protocol over real gRPC: Envoy's message sequences replayed by a grpcio
client against the picker, for FULL_DUPLEX_STREAMED and BUFFERED request bodies."""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
from collections.abc import Iterator

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from router.config import GRPC_SERVERS
from router.extproc import BODY_CHUNK_BYTES, SERVICE
from router.proto import ext_proc_pb2 as pb
from tests.router.conftest import issue_tls, router_config, wait, wait_fresh

DUPLEX = pb.ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = pb.ProcessingMode.BUFFERED

CHAT = json.dumps(
    {"model": "qwen", "stream": True, "messages": [{"role": "user", "content": "hello " * 50}]}
).encode()


def headers_msg(
    mode: int | None,
    *,
    end_of_stream: bool = False,
    extra: dict[str, str] | None = None,
    subset: list[str] | None = None,
) -> pb.ProcessingRequest:
    hv = [
        (":method", "POST" if not end_of_stream else "GET"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway"),
        ("content-type", "application/json"),
        ("x-request-id", "req-1"),
    ] + list((extra or {}).items())
    msg = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(
            headers=pb.HeaderMap(
                headers=[pb.HeaderValue(key=k, raw_value=v.encode()) for k, v in hv]
            ),
            end_of_stream=end_of_stream,
        )
    )
    if mode is not None:
        msg.protocol_config.request_body_mode = mode
    if subset is not None:
        s = struct_pb2.Struct()
        s.update({"x-gateway-destination-endpoint-subset": subset})
        msg.metadata_context.filter_metadata["envoy.lb.subset_hint"].CopyFrom(s)
    return msg


def body_msgs(body: bytes, chunk: int) -> list[pb.ProcessingRequest]:
    parts = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    return [
        pb.ProcessingRequest(request_body=pb.HttpBody(body=p, end_of_stream=i == len(parts) - 1))
        for i, p in enumerate(parts)
    ]


def channel(port: int) -> grpc.Channel:
    return grpc.insecure_channel(
        f"127.0.0.1:{port}",
        options=[
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ],  # fmt: skip
    )


def duplex(port: int, body: bytes, chunk: int = 16384, **kw: object) -> list[pb.ProcessingResponse]:
    """Envoy in FULL_DUPLEX_STREAMED: headers and every chunk sent without waiting."""
    msgs = [headers_msg(DUPLEX, **kw)] + body_msgs(body, chunk)  # type: ignore[arg-type]
    with channel(port) as ch:
        return list(SERVICE.stub(ch).Process(iter(msgs), timeout=10))


def buffered(port: int, body: bytes, **kw: object) -> list[pb.ProcessingResponse]:
    """Envoy in BUFFERED mode: each message waits for the answer to the previous one."""
    q: queue.Queue[pb.ProcessingRequest | None] = queue.Queue()

    def gen() -> Iterator[pb.ProcessingRequest]:
        while (m := q.get()) is not None:
            yield m

    out: list[pb.ProcessingResponse] = []
    with channel(port) as ch:
        q.put(headers_msg(BUFFERED, **kw))  # type: ignore[arg-type]
        it = SERVICE.stub(ch).Process(gen(), timeout=10)
        first = next(it)
        out.append(first)
        if first.WhichOneof("response") == "request_headers":
            q.put(body_msgs(body, len(body) or 1)[0])
            out.append(next(it))
        q.put(None)
        out.extend(it)
    return out


def destination(resp: pb.ProcessingResponse) -> tuple[str, str, bool]:
    """(header value, metadata value, clear_route_cache) of a picking response."""
    common = getattr(resp, resp.WhichOneof("response")).response
    hdr = {h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers}
    md = resp.dynamic_metadata.fields["envoy.lb"].struct_value.fields
    return (
        hdr["x-gateway-destination-endpoint"],
        md["x-gateway-destination-endpoint"].string_value,
        common.clear_route_cache,
    )


@pytest.fixture(params=GRPC_SERVERS)
def two(request, engines, start_router):  # type: ignore[no-untyped-def]
    """Two engines behind the picker, on each gRPC server (the own HTTP/2 one, grpcio)."""
    busy, idle = engines("busy", "idle")
    busy.set(waiting=12, running=20, kv=0.7)
    idle.set(waiting=0, running=1, kv=0.1)
    router = start_router(
        router_config([busy.address, idle.address], server={"grpc_server": request.param})
    )
    wait_fresh(router, 2)
    return router, busy, idle


def test_unparseable_bytes_are_invalid_argument(two, caplog) -> None:  # type: ignore[no-untyped-def]
    """Bytes that are no ProcessingRequest get INVALID_ARGUMENT naming the message from both
    gRPC servers (the h2 server's own parser; grpcio through kvspread.grpcservice's lenient
    deserialiser), never grpcio's UNKNOWN with a logged traceback; the next stream is served."""
    router, _, _ = two
    method = f"/{SERVICE.name}/Process"
    with channel(router.grpc_port) as ch:
        raw = ch.stream_stream(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        with caplog.at_level(logging.DEBUG), pytest.raises(grpc.RpcError) as err:
            list(raw(iter([b"\x0a\xff\xff\xff\xff\x0f"]), timeout=10))  # a length past the end
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ProcessingRequest" in (err.value.details() or "")
        assert "Traceback" not in caplog.text
        msgs = [headers_msg(DUPLEX), *body_msgs(CHAT, 65536)]
        out = list(SERVICE.stub(ch).Process(iter(msgs), timeout=10))
    assert out and not any(r.HasField("immediate_response") for r in out)


def test_duplex_headers_answered_after_body_with_destination(two) -> None:  # type: ignore[no-untyped-def]
    router, busy, idle = two
    body = json.dumps({"model": "q", "prompt": "x" * 200_000}).encode()
    resps = duplex(router.grpc_port, body)
    kinds = [r.WhichOneof("response") for r in resps]
    assert kinds[0] == "request_headers"
    assert set(kinds[1:]) == {"request_body"}
    header, metadata, clear = destination(resps[0])
    assert header == metadata == f"{idle.address},{busy.address}"
    assert clear is True
    fb = resps[0].dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert fb["x-gateway-destination-endpoint-fallback"].string_value == busy.address
    streamed = [r.request_body.response.body_mutation.streamed_response for r in resps[1:]]
    assert b"".join(s.body for s in streamed) == body
    assert [s.end_of_stream for s in streamed] == [False] * (len(streamed) - 1) + [True]
    assert len(streamed) == -(-len(body) // BODY_CHUNK_BYTES)


def test_buffered_headers_continue_then_body_carries_destination(two) -> None:  # type: ignore[no-untyped-def]
    router, busy, idle = two
    resps = buffered(router.grpc_port, CHAT)
    assert resps[0].WhichOneof("response") == "request_headers"
    assert not resps[0].request_headers.response.header_mutation.set_headers
    assert resps[1].WhichOneof("response") == "request_body"
    header, metadata, clear = destination(resps[1])
    assert header.split(",")[0] == idle.address and metadata == header and clear


def test_bodiless_request_picked_on_headers(two) -> None:  # type: ignore[no-untyped-def]
    router, busy, idle = two
    with channel(router.grpc_port) as ch:
        resps = list(
            SERVICE.stub(ch).Process(iter([headers_msg(DUPLEX, end_of_stream=True)]), timeout=10)
        )
    assert len(resps) == 1
    assert destination(resps[0])[0].startswith(idle.address)


def test_subset_hint_is_obeyed_and_empty_subset_is_503(two) -> None:  # type: ignore[no-untyped-def]
    router, busy, idle = two
    resps = duplex(router.grpc_port, CHAT, subset=[busy.address])
    assert destination(resps[0])[0] == busy.address  # the only eligible one, no fallback
    resps = duplex(router.grpc_port, CHAT, subset=["10.9.9.9:8000"])
    assert len(resps) == 1
    imm = resps[0].immediate_response
    assert imm.status.code == 503
    assert "subset" in json.loads(imm.body)["error"]["message"]


def test_shedding_answers_429(engines, start_router) -> None:  # type: ignore[no-untyped-def]
    a, b = engines("a", "b")
    a.set(waiting=40)
    b.set(waiting=55)
    router = start_router(router_config([a.address, b.address], scoring={"shed_queue": 32}))
    wait_fresh(router, 2)
    (resp,) = duplex(router.grpc_port, CHAT)
    assert resp.immediate_response.status.code == 429
    text = httpx.get(f"http://127.0.0.1:{router.http_port}/metrics").text
    assert "kvspread_router_sheds_total 1.0" in text


def test_unreadable_body_is_400_with_message(two) -> None:  # type: ignore[no-untyped-def]
    router, *_ = two
    (resp,) = buffered(router.grpc_port, b"{not json")[1:]
    assert resp.immediate_response.status.code == 400
    assert "not JSON" in json.loads(resp.immediate_response.body)["error"]["message"]


def test_six_megabyte_image_body_in_one_message(two) -> None:  # type: ignore[no-untyped-def]
    router, busy, idle = two
    png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + (1344).to_bytes(4, "big") * 2
    data = base64.b64encode(png + b"\x00" * (6 << 20)).decode()
    body = json.dumps(
        {
            "model": "q",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this"},
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:image/png;base64,{data}"},
                        },
                    ],
                }
            ],
        }  # fmt: skip
    ).encode()
    assert len(body) > 8 << 20
    resps = buffered(router.grpc_port, body)
    assert destination(resps[1])[0].startswith(idle.address)
    explain = httpx.get(
        f"http://127.0.0.1:{router.http_port}/debug/explain", params={"request_id": "req-1"}
    ).json()
    assert explain["request"]["modality"] == "image"
    assert explain["request"]["images"][0]["width"] == 1344
    assert explain["request"]["image_tokens_estimate"] == 48 * 48


def test_health_services(two) -> None:  # type: ignore[no-untyped-def]
    router, *_ = two
    with channel(router.grpc_port) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for svc in (
            "liveness",
            "readiness",
            "envoy.service.ext_proc.v3.ExternalProcessor",
            "inference-extension",  # GIE's chart's probes
        ):
            got = stub.Check(health_pb2.HealthCheckRequest(service=svc), timeout=5)
            assert got.status == health_pb2.HealthCheckResponse.SERVING, svc


@pytest.mark.parametrize("kind", GRPC_SERVERS)
def test_every_readiness_name_turns_not_serving_when_the_drain_starts(  # type: ignore[no-untyped-def]
    engines, start_router, kind
) -> None:
    """Health Watch streams opened before the stop, one per name router/run.py answers: the
    readiness names (GIE's `inference-extension` among them) go NOT_SERVING as the drain
    begins, the liveness names stay SERVING, on both gRPC servers."""
    from router.run import LIVE_SERVICES, READY_SERVICES

    (e,) = engines("e")
    router = start_router(router_config([e.address], server={"grpc_server": kind}))
    wait_fresh(router, 1)
    serving = health_pb2.HealthCheckResponse.SERVING
    seen: dict[str, list[int]] = {svc: [] for svc in LIVE_SERVICES + READY_SERVICES}
    with channel(router.grpc_port) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        calls = {
            svc: stub.Watch(health_pb2.HealthCheckRequest(service=svc), timeout=20) for svc in seen
        }

        def follow(svc: str) -> None:
            try:
                for msg in calls[svc]:
                    seen[svc].append(msg.status)
            except grpc.RpcError:
                pass  # the drain ends the watch

        readers = [threading.Thread(target=follow, args=(svc,)) for svc in seen]
        for t in readers:
            t.start()
        wait(lambda: all(seen[svc][:1] == [serving] for svc in seen))
        router.stop()
        for t in readers:
            t.join(20)
    for svc in READY_SERVICES:
        assert health_pb2.HealthCheckResponse.NOT_SERVING in seen[svc], (svc, seen[svc])
    for svc in LIVE_SERVICES:
        assert set(seen[svc]) == {serving}, (svc, seen[svc])


@pytest.mark.parametrize("kind", GRPC_SERVERS)
def test_tls_when_cert_given(engines, start_router, tmp_path, kind) -> None:  # type: ignore[no-untyped-def]
    ca = issue_tls(tmp_path)
    (e,) = engines("e")
    cfg = router_config(
        [e.address],
        server={
            "tls_cert": str(tmp_path / "cert.pem"),
            "tls_key": str(tmp_path / "key.pem"),
            "grpc_server": kind,
        },
    )
    router = start_router(cfg)
    wait_fresh(router, 1)
    creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
    with grpc.secure_channel(f"127.0.0.1:{router.grpc_port}", creds) as ch:
        msgs = [headers_msg(DUPLEX)] + body_msgs(CHAT, 4096)
        resps = list(SERVICE.stub(ch).Process(iter(msgs), timeout=10))
    assert destination(resps[0])[0] == e.address
    with channel(router.grpc_port) as ch, pytest.raises(grpc.RpcError):
        list(SERVICE.stub(ch).Process(iter(msgs), timeout=3))
