"""`envoy.service.ext_proc.v3.ExternalProcessor/Process`, as the Gateway API Inference
Extension's endpoint picker protocol uses it (messages generated from the project's own copy
of the protos it uses, router/proto/). `StreamHandler` is the protocol; `ExtProcStream`
carries it on the picker's own HTTP/2 server (router/h2grpc.py, `--grpc-server h2`) and
`ExtProcServicer` on grpcio's asyncio server (`--grpc-server grpcio`, served by
`kvspread.grpcservice`).

Per HTTP request Envoy opens one bidirectional stream:

- request headers without a body (end_of_stream): pick at once and answer the headers.
- FULL_DUPLEX_STREAMED body (Envoy says so in `protocol_config`; the spec's required
  mode): Envoy streams the chunks without waiting; the answer to the headers is held back
  until the body is complete, then the picker sends the headers response (destination
  header, `clear_route_cache`, dynamic metadata) followed by the body, unchanged, as
  `streamed_response` chunks (Envoy forwards only what the processor sends back), and a
  trailers response if the request had trailers.
- BUFFERED body: Envoy waits for each answer, so the headers get an empty CONTINUE, and the
  destination goes on the body response (header mutation + `clear_route_cache`; the route
  and the original-destination lookup happen after it).

The destination, `ip:port` then the fallbacks, comma-separated, is set both as the header
`x-gateway-destination-endpoint` and as dynamic metadata `envoy.lb` /
`x-gateway-destination-endpoint` (the first fallback also as
`x-gateway-destination-endpoint-fallback`). The subset hint is read from the request's
`metadata_context` filter metadata `envoy.lb.subset_hint` /
`x-gateway-destination-endpoint-subset` (a list of addresses; a comma-separated string is
read too). No eligible endpoint: ImmediateResponse 503; shedding: 429; unreadable body: 400;
the 503 and 429 carry llm-d's `x-llm-d-request-dropped-reason` (router/objectives.py).

When Envoy sends the response headers, the endpoint that served (router/served.py) gets the
pick's load if it is not the one picked, and with `server.conformance_hooks` the response
gets `x-conformance-test-served-endpoint` (router/conformance.py, which also steers picks).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, cast

import orjson
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

from kvspread.grpcservice import Service, Unreadable
from router.bodybudget import BodyBudget
from router.bodywire import BodyChunk, request_body
from router.conformance import SELECTION_HEADER, SERVED_HEADER
from router.h2grpc import INVALID_ARGUMENT, GrpcError
from router.objectives import DROPPED_REASON_HEADER, DROPPED_REASONS
from router.picker import Outcome, Picker
from router.proto import ext_proc_pb2 as pb
from router.served import SERVED_NAMESPACE, served_endpoint

if TYPE_CHECKING:  # grpcio only serves with --grpc-server grpcio (router/run.py imports it)
    import grpc

__all__ = [
    "SERVICE",
    "ExtProcServicer",
    "ExtProcStream",
    "StreamHandler",
    "PROCESS_PATH",
    "DESTINATION_HEADER",
    "DESTINATION_NAMESPACE",
    "SUBSET_NAMESPACE",
    "SUBSET_KEY",
    "FALLBACK_KEY",
    "SERVICE_NAME",
    "BODY_CHUNK_BYTES",
]

log = logging.getLogger("kvspread.router.extproc")

SERVICE_NAME = "envoy.service.ext_proc.v3.ExternalProcessor"
PROCESS_PATH = f"/{SERVICE_NAME}/Process"
DESTINATION_HEADER = "x-gateway-destination-endpoint"
DESTINATION_NAMESPACE = SERVED_NAMESPACE  # one namespace both ways (GIE)
FALLBACK_KEY = "x-gateway-destination-endpoint-fallback"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
BODY_CHUNK_BYTES = 64 * 1024
"""Size of the streamed_response chunks that return the body to Envoy."""

_DUPLEX = pb.ProcessingMode.FULL_DUPLEX_STREAMED


def _headers(msg: pb.HttpHeaders) -> dict[str, str]:
    out: dict[str, str] = {}
    for h in msg.headers.headers:
        value = h.raw_value.decode("utf-8", "replace") if h.raw_value else h.value
        out[h.key.lower()] = value
    return out


def subset_hint(req: pb.ProcessingRequest) -> list[str] | None:
    """The gateway's endpoint subset, or None when it sent none."""
    if not req.HasField("metadata_context"):
        return None
    ns = req.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if ns is None or SUBSET_KEY not in ns.fields:
        return None
    value = ns.fields[SUBSET_KEY]
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        return [v.string_value for v in value.list_value.values if v.string_value]
    if kind == "string_value":
        return [a.strip() for a in value.string_value.split(",") if a.strip()]
    return []


def _mutation(destination: str) -> pb.CommonResponse:
    common = pb.CommonResponse(clear_route_cache=True)
    opt = common.header_mutation.set_headers.add()
    opt.header.key = DESTINATION_HEADER
    opt.header.raw_value = destination.encode()
    opt.append_action = pb.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
    return common


def _metadata(outcome: Outcome) -> struct_pb2.Struct:
    d = outcome.decision
    md = struct_pb2.Struct()
    inner = md.fields[DESTINATION_NAMESPACE].struct_value.fields  # Struct.update is slow
    inner[DESTINATION_HEADER].string_value = d.destination
    if d.fallbacks:
        inner[FALLBACK_KEY].string_value = d.fallbacks[0]
    return md


_ANSWERS: dict[tuple[str, str, str], pb.ProcessingResponse] = {}
"""Destination answers by (phase, destination, first fallback): a pool has few endpoints,
so the same few messages serve every request (building one costs about as much as the
rest of the answer). Never mutated once built; cleared when it grows past _ANSWERS_MAX."""
_ANSWERS_MAX = 4096


def _destination_answer(phase: str, outcome: Outcome) -> pb.ProcessingResponse:
    """The headers (`phase` "headers") or BUFFERED body ("body") response that carries the
    destination: header mutation, `clear_route_cache` and the dynamic metadata."""
    d = outcome.decision
    key = (phase, d.destination, d.fallbacks[0] if d.fallbacks else "")
    out = _ANSWERS.get(key)
    if out is None:
        common = _mutation(d.destination)
        md = _metadata(outcome)
        if phase == "headers":
            out = pb.ProcessingResponse(
                request_headers=pb.HeadersResponse(response=common), dynamic_metadata=md
            )
        else:
            out = pb.ProcessingResponse(
                request_body=pb.BodyResponse(response=common), dynamic_metadata=md
            )
        if len(_ANSWERS) >= _ANSWERS_MAX:
            _ANSWERS.clear()
        _ANSWERS[key] = out
    return out


def _streamed(part: bytes, end_of_stream: bool, *, request: bool) -> pb.ProcessingResponse:
    """A body chunk given back to Envoy as a `streamed_response` body mutation."""
    out = pb.ProcessingResponse()
    body = out.request_body if request else out.response_body
    streamed = body.response.body_mutation.streamed_response
    streamed.body = part
    streamed.end_of_stream = end_of_stream
    return out


def _immediate(outcome: Outcome) -> pb.ProcessingResponse:
    d = outcome.decision
    return refusal(d.status, d.reason, d.message or d.reason, DROPPED_REASONS.get(d.reason, ""))


def refusal(status: int, kind: str, message: str, dropped: str = "") -> pb.ProcessingResponse:
    """An ImmediateResponse with an OpenAI-style JSON error body; `dropped`, when given, is
    llm-d's dropped-reason header value."""
    body = orjson.dumps(
        {"error": {"message": f"kvspread router: {message}", "type": kind, "code": status}}
    )
    opts = [
        pb.HeaderValueOption(
            header=pb.HeaderValue(key="content-type", raw_value=b"application/json")
        )
    ]
    if dropped:
        opts.append(
            pb.HeaderValueOption(
                header=pb.HeaderValue(key=DROPPED_REASON_HEADER, raw_value=dropped.encode())
            )
        )
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            # Envoy's StatusCode numbers are the HTTP codes (BadRequest = 400, ...) and proto3
            # enums are open, so the code goes over as it is
            status=pb.HttpStatus(code=cast(pb.StatusCode, status)),
            headers=pb.HeaderMutation(set_headers=opts),
            body=body,
            details=f"kvspread_router_{kind}",
        )
    )


class StreamHandler:
    """One HTTP request's Process stream as a state machine: `on_message` takes Envoy's next
    message and returns the answers to send now (possibly none). `done` turns true after an
    ImmediateResponse, when nothing more may be sent. Pure of I/O, so both gRPC servers
    and the tests drive the same logic."""

    def __init__(
        self, picker: Picker, duplex_default: bool = False, budget: BodyBudget | None = None
    ) -> None:
        self.picker = picker
        self.budget = budget
        self.held = 0  # body bytes counted in `budget`
        self.headers: dict[str, str] = {}
        self.subset: list[str] | None = None
        self.duplex = duplex_default
        self.response_duplex = False
        self.headers_answered = False
        # the body when it came in one chunk (not copied: maybe a view into its message)
        self.first: bytes | memoryview | None = None
        # from the second chunk on, the whole body in one buffer: a large body grows in one
        # mapping (realloc, no copies) instead of thousands of heap blocks that fragment
        self.joined: bytearray | None = None
        self.done = False
        self.outcome: Outcome | None = None  # the pick, once made
        self.hooks = picker.cfg.server.conformance_hooks

    @property
    def body(self) -> bytes | bytearray | memoryview:
        """The request body so far."""
        if self.joined is not None:
            return self.joined
        return self.first or b""

    def _add_chunk(self, chunk: bytes | memoryview) -> None:
        if self.joined is not None:
            self.joined += chunk
        elif self.first is None:
            self.first = chunk
        else:
            self.joined = bytearray(self.first)
            self.joined += chunk
            self.first = None

    def _drop_body(self) -> None:
        self.first = None
        self.joined = None

    def _decide(self) -> Outcome:
        # a joined body is a bytearray: the picker only tests it for emptiness and hands it
        # to orjson, which reads any bytes-like object, so it is not copied into bytes
        steer = self.headers.get(SELECTION_HEADER) if self.hooks else None
        self.outcome = self.picker.pick(cast(bytes, self.body), self.headers, self.subset, steer)
        return self.outcome

    def on_message(self, req: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        kind = req.WhichOneof("request")
        if kind == "request_headers":
            return self._on_headers(req)
        if kind == "request_body":
            body = req.request_body
            # each read of a bytes field is a copy: `on_body` from router/bodywire.py is not
            return self.on_body(body.body, body.end_of_stream)
        if kind == "request_trailers":
            out = []
            if self.duplex and not self.headers_answered:
                out = self._after_body(trailers=True)
                if self.done:
                    return out
            return out + [pb.ProcessingResponse(request_trailers=pb.TrailersResponse())]
        if kind == "response_headers":
            return [self._on_response_headers(req)]
        if kind == "response_body":
            rb = req.response_body
            if not self.response_duplex:
                return [pb.ProcessingResponse(response_body=pb.BodyResponse())]
            return [_streamed(rb.body, rb.end_of_stream, request=False)]
        if kind == "response_trailers":
            return [pb.ProcessingResponse(response_trailers=pb.TrailersResponse())]
        return []  # other kinds carry nothing the picker answers

    def on_body(
        self, chunk: bytes | memoryview, end_of_stream: bool
    ) -> list[pb.ProcessingResponse]:
        """A request_body message; `chunk` may be a view into the wire message (not copied
        until it joins the body, and not at all when refused or the body's only chunk)."""
        if self.budget is not None and not self._hold(len(chunk)):
            return self._refused(len(chunk))
        self._add_chunk(chunk)
        if end_of_stream:
            return self._after_body(trailers=False)
        # STREAMED mode waits for an answer per chunk; duplex never does
        return [] if self.duplex else [pb.ProcessingResponse(request_body=pb.BodyResponse())]

    def _on_response_headers(self, req: pb.ProcessingRequest) -> pb.ProcessingResponse:
        """Credit the endpoint that served; with the conformance hooks, echo it."""
        served = served_endpoint(req)
        if served is not None and self.outcome is not None:
            self.picker.served(self.outcome, served)
        out = pb.ProcessingResponse(response_headers=pb.HeadersResponse())
        if self.hooks:
            opt = out.response_headers.response.header_mutation.set_headers.add()
            opt.header.key = SERVED_HEADER
            opt.header.raw_value = (
                served or "fail: the gateway reported no served endpoint"
            ).encode()
            opt.append_action = pb.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
        return out

    def _hold(self, n: int) -> bool:
        """Count n more body bytes: False when over the request's or the total budget."""
        budget = cast(BodyBudget, self.budget)
        if self.held + n > budget.per_request:
            return False
        if not budget.take(n):
            return False
        self.held += n
        return True

    def _refused(self, n: int) -> list[pb.ProcessingResponse]:
        """413 over the request's budget, 429 over the total one; the body is dropped."""
        budget = cast(BodyBudget, self.budget)
        self.done = True
        self._drop_body()
        if self.held + n > budget.per_request:
            budget.refused_too_large += 1
            self.release()
            return [
                refusal(
                    413,
                    "request_too_large",
                    f"the request body is over the picker's limit of {budget.per_request} bytes"
                    " (server.max_body_bytes)",
                )
            ]
        self.release()
        return [
            refusal(
                429,
                "bodies_over_budget",
                f"the picker holds {budget.held} bytes of request bodies, its limit is"
                f" {budget.total} (server.max_bodies_bytes); retry later",
            )
        ]

    def release(self) -> None:
        """Give the body's bytes back to the budget (once the body is no longer held)."""
        if self.held and self.budget is not None:
            self.budget.give(self.held)
        self.held = 0

    @property
    def consumed(self) -> bool:
        """True once the body is no longer needed: the choice is made or the stream done."""
        return self.done or (self.headers_answered and self.first is None and self.joined is None)

    def _on_headers(self, req: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        self.headers = _headers(req.request_headers)
        self.subset = subset_hint(req)
        if req.HasField("protocol_config"):
            self.duplex = req.protocol_config.request_body_mode == _DUPLEX
            self.response_duplex = req.protocol_config.response_body_mode == _DUPLEX
        if req.request_headers.end_of_stream:
            outcome = self._decide()
            if outcome.decision.status != 200:
                self.done = True
                return [_immediate(outcome)]
            self.headers_answered = True
            return [_destination_answer("headers", outcome)]
        if self.duplex:
            return []  # answered once the body is complete
        self.headers_answered = True
        return [pb.ProcessingResponse(request_headers=pb.HeadersResponse())]

    def _after_body(self, *, trailers: bool) -> list[pb.ProcessingResponse]:
        """The answers once the whole body is known."""
        outcome = self._decide()
        if outcome.decision.status != 200:
            self.done = True
            self._drop_body()
            return [_immediate(outcome)]
        if not self.duplex:
            self._drop_body()
            self.headers_answered = True
            return [_destination_answer("body", outcome)]
        self.headers_answered = True
        out = [_destination_answer("headers", outcome)]
        body = self.body
        self._drop_body()
        n = max(1, -(-len(body) // BODY_CHUNK_BYTES))
        with memoryview(body) as view:
            for i in range(n):
                if n == 1 and isinstance(body, bytes):
                    part = body
                else:
                    part = bytes(view[i * BODY_CHUNK_BYTES : (i + 1) * BODY_CHUNK_BYTES])
                out.append(_streamed(part, i == n - 1 and not trailers, request=True))
        return out


SERVICE = Service.of(pb.DESCRIPTOR.services_by_name["ExternalProcessor"])
"""`envoy.service.ext_proc.v3.ExternalProcessor` (one bidirectional `Process`)."""


class ExtProcStream:
    """One Process stream for router/h2grpc.py: wire bytes in and out of a StreamHandler."""

    __slots__ = ("handler",)

    def __init__(self, picker: Picker, budget: BodyBudget | None = None) -> None:
        self.handler = StreamHandler(picker, budget=budget)

    def on_message(self, data: bytes | memoryview) -> list[bytes]:
        h = self.handler
        chunk = request_body(data)
        if chunk is not None:  # a body chunk, read without copies (router/bodywire.py)
            del data
            answers = h.on_body(chunk.body, chunk.end_of_stream)
            del chunk
        else:
            try:
                req = pb.ProcessingRequest.FromString(cast(bytes, data))  # reads views too
            except DecodeError as exc:
                raise GrpcError(INVALID_ARGUMENT, f"unreadable ProcessingRequest: {exc}") from exc
            del data
            answers = h.on_message(req)
            del req
        out = [r.SerializeToString() for r in answers]
        if h.held and h.consumed:
            h.release()
        return out

    def close(self) -> None:
        """The stream ended (answered, reset or its connection gone): give the body back."""
        self.handler.release()

    @property
    def finished(self) -> bool:
        return self.handler.done


class ExtProcServicer:
    """grpcio's asyncio servicer (`--grpc-server grpcio`): one StreamHandler per stream."""

    def __init__(
        self, picker: Picker, *, duplex_default: bool = False, budget: BodyBudget | None = None
    ) -> None:
        self.picker = picker
        self._duplex_default = duplex_default
        self._budget = budget

    async def Process(  # noqa: N802 - the gRPC method name
        self,
        request_iterator: AsyncIterator[pb.ProcessingRequest],
        context: grpc.aio.ServicerContext[pb.ProcessingRequest, pb.ProcessingResponse],
    ) -> AsyncIterator[pb.ProcessingResponse]:
        h = StreamHandler(self.picker, self._duplex_default, self._budget)
        try:
            async for req in request_iterator:
                if isinstance(req, Unreadable):  # add_to_server(lenient=True), router/run.py
                    import grpc

                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, req.message)
                answers = (
                    h.on_body(req.body, req.end_of_stream)
                    if isinstance(req, BodyChunk)
                    else h.on_message(req)
                )
                del req  # a refused chunk is not held while the answers go out
                for n, resp in enumerate(answers):
                    yield resp
                    if n % 16 == 15:
                        await asyncio.sleep(0)  # a large body: let other streams run
                if h.consumed:
                    h.release()
                if h.done:
                    return
        finally:
            h.release()
