"""`envoy.service.ext_proc.v3.ExternalProcessor/Process`, as the Gateway API Inference
Extension's endpoint picker protocol uses it (grpc.aio; stubs from the `xds-protos` wheel).

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
read too). No eligible endpoint: ImmediateResponse 503; shedding: 429; unreadable body: 400.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import orjson
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from router.picker import Outcome, Picker

__all__ = [
    "ExtProcServicer",
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
DESTINATION_HEADER = "x-gateway-destination-endpoint"
DESTINATION_NAMESPACE = "envoy.lb"
FALLBACK_KEY = "x-gateway-destination-endpoint-fallback"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
BODY_CHUNK_BYTES = 64 * 1024
"""Size of the streamed_response chunks that return the body to Envoy."""

_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
_STATUS = {
    400: http_status_pb2.BadRequest,
    429: http_status_pb2.TooManyRequests,
    503: http_status_pb2.ServiceUnavailable,
}


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
    opt = base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=DESTINATION_HEADER, raw_value=destination.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )
    return pb.CommonResponse(
        header_mutation=pb.HeaderMutation(set_headers=[opt]), clear_route_cache=True
    )


def _metadata(outcome: Outcome) -> struct_pb2.Struct:
    d = outcome.decision
    inner: dict[str, Any] = {DESTINATION_HEADER: d.destination}
    if d.fallbacks:
        inner[FALLBACK_KEY] = d.fallbacks[0]
    md = struct_pb2.Struct()
    md.update({DESTINATION_NAMESPACE: inner})
    return md


def _immediate(outcome: Outcome) -> pb.ProcessingResponse:
    d = outcome.decision
    body = orjson.dumps(
        {
            "error": {
                "message": f"kvspread router: {d.message or d.reason}",
                "type": d.reason,
                "code": d.status,
            }
        }
    )
    opt = base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key="content-type", raw_value=b"application/json")
    )
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=_STATUS.get(d.status, d.status)),
            headers=pb.HeaderMutation(set_headers=[opt]),
            body=body,
            details=f"kvspread_router_{d.reason}",
        )
    )


class _Stream:
    """One HTTP request's state on its Process stream."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.subset: list[str] | None = None
        self.duplex = False
        self.response_duplex = False
        self.headers_answered = False
        self.chunks: list[bytes] = []
        self.size = 0


class ExtProcServicer(pb_grpc.ExternalProcessorServicer):
    def __init__(self, picker: Picker, *, duplex_default: bool = False) -> None:
        self.picker = picker
        self._duplex_default = duplex_default

    def _decide(self, st: _Stream) -> Outcome:
        return self.picker.pick(b"".join(st.chunks), st.headers, st.subset)

    async def Process(  # noqa: N802 - the gRPC method name
        self,
        request_iterator: AsyncIterator[pb.ProcessingRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.ProcessingResponse]:
        st = _Stream()
        async for req in request_iterator:
            kind = req.WhichOneof("request")
            if kind == "request_headers":
                st.headers = _headers(req.request_headers)
                st.subset = subset_hint(req)
                if req.HasField("protocol_config"):
                    st.duplex = req.protocol_config.request_body_mode == _DUPLEX
                    st.response_duplex = req.protocol_config.response_body_mode == _DUPLEX
                else:
                    st.duplex = self._duplex_default
                if req.request_headers.end_of_stream:
                    outcome = self._decide(st)
                    if outcome.decision.status != 200:
                        yield _immediate(outcome)
                        return
                    st.headers_answered = True
                    yield pb.ProcessingResponse(
                        request_headers=pb.HeadersResponse(
                            response=_mutation(outcome.decision.destination)
                        ),
                        dynamic_metadata=_metadata(outcome),
                    )
                elif not st.duplex:
                    st.headers_answered = True
                    yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
            elif kind == "request_body":
                body = req.request_body
                st.chunks.append(body.body)
                st.size += len(body.body)
                if not body.end_of_stream:
                    if not st.duplex:
                        # STREAMED mode would wait for an answer per chunk: pass it on.
                        yield pb.ProcessingResponse(request_body=pb.BodyResponse())
                    continue
                async for resp in self._after_body(st, trailers=False):
                    yield resp
                    if resp.HasField("immediate_response"):
                        return
            elif kind == "request_trailers":
                if st.duplex and not st.headers_answered:
                    async for resp in self._after_body(st, trailers=True):
                        yield resp
                        if resp.HasField("immediate_response"):
                            return
                yield pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
            elif kind == "response_headers":
                yield pb.ProcessingResponse(response_headers=pb.HeadersResponse())
            elif kind == "response_body":
                rb = req.response_body
                yield pb.ProcessingResponse(
                    response_body=pb.BodyResponse(
                        response=pb.CommonResponse(
                            body_mutation=pb.BodyMutation(
                                streamed_response=pb.StreamedBodyResponse(
                                    body=rb.body, end_of_stream=rb.end_of_stream
                                )
                            )
                        )
                    )
                    if st.response_duplex
                    else pb.BodyResponse()
                )
            elif kind == "response_trailers":
                yield pb.ProcessingResponse(response_trailers=pb.TrailersResponse())
            # other kinds carry nothing the picker answers

    async def _after_body(
        self, st: _Stream, *, trailers: bool
    ) -> AsyncIterator[pb.ProcessingResponse]:
        """The responses once the whole body is known."""
        outcome = self._decide(st)
        if outcome.decision.status != 200:
            yield _immediate(outcome)
            return
        common = _mutation(outcome.decision.destination)
        md = _metadata(outcome)
        if not st.duplex:
            yield pb.ProcessingResponse(
                request_body=pb.BodyResponse(response=common), dynamic_metadata=md
            )
            return
        st.headers_answered = True
        yield pb.ProcessingResponse(
            request_headers=pb.HeadersResponse(response=common), dynamic_metadata=md
        )
        body = b"".join(st.chunks)
        st.chunks = []
        n = max(1, -(-len(body) // BODY_CHUNK_BYTES))
        for i in range(n):
            part = body[i * BODY_CHUNK_BYTES : (i + 1) * BODY_CHUNK_BYTES]
            last = i == n - 1 and not trailers
            yield pb.ProcessingResponse(
                request_body=pb.BodyResponse(
                    response=pb.CommonResponse(
                        body_mutation=pb.BodyMutation(
                            streamed_response=pb.StreamedBodyResponse(body=part, end_of_stream=last)
                        )
                    )
                )
            )
            if i % 16 == 15:
                await asyncio.sleep(0)
