"""The embedded OTLP/HTTP metrics receiver: `POST /v1/metrics` into a `SeriesStore`.

Wire behaviour (OTLP/HTTP specification, "OTLP/HTTP Request" and "Response"):

- The response uses the request's encoding. 200 carries `ExportMetricsServiceResponse`,
  with `partial_success` (rejected_data_points + error_message) when some points were
  refused. 400 (`google.rpc.Status`, code INVALID_ARGUMENT) when the body cannot be decoded
  or *every* point in it is invalid -- nothing is stored then. 413 for bodies (compressed
  or decompressed) over the limit; 415 for other content types; 404/405 for other paths
  and methods. None of these is retryable by the spec, which is right: resending the same
  body cannot succeed.
- Decoding and validation are `sources.otlp_decode` (pure); validation happens before
  anything is stored, so a bad request never changes stored series.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)

from metrics_adapter.httpserver import Request, Response
from metrics_adapter.sources.otlp_decode import (
    JSON,
    PROTOBUF,
    OtlpBadRequest,
    OtlpTooLarge,
    decode_body,
    to_points,
)
from metrics_adapter.sources.store import SeriesStore

__all__ = ["OtlpReceiver"]

log = logging.getLogger("kvspread.adapter.otlp")

INVALID_ARGUMENT = 3  # google.rpc.Code
RPC_CODES: Final = {
    400: INVALID_ARGUMENT,
    404: 5,  # NOT_FOUND
    405: 12,  # UNIMPLEMENTED
    408: 4,  # DEADLINE_EXCEEDED
    413: 8,  # RESOURCE_EXHAUSTED
    415: INVALID_ARGUMENT,
    429: 8,  # RESOURCE_EXHAUSTED
    503: 14,  # UNAVAILABLE
}
"""The google.rpc.Code of each HTTP status the receiver answers, as google/rpc/code.proto
pairs them (a 413 and a 429 are both a limit: RESOURCE_EXHAUSTED)."""


class OtlpReceiver:
    """The `/v1/metrics` handler: decode, validate, store (see the module docstring).

    Parameters:
        store: where valid points go.
        clock: () -> seconds, the receive time recorded for idle expiry.
        max_body: byte limit for compressed and decompressed bodies (413 above).
    """

    def __init__(
        self, store: SeriesStore, clock: Callable[[], float], max_body: int = 4 << 20
    ) -> None:
        self.store = store
        self.clock = clock
        self.max_body = max_body
        self.requests = 0
        self.rejected_points = 0
        self._warned: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def _warn_ms_bounds(self, metric: str, attrs: tuple[tuple[str, str], ...]) -> None:
        """Log the unit-s-with-millisecond-bounds mistake once per series (bounded memory)."""
        if (metric, attrs) in self._warned or len(self._warned) >= 10_000:
            return
        self._warned.add((metric, attrs))
        log.warning(
            "histogram with unit s uses the OTel SDK's default millisecond bucket bounds "
            "(0, 5, 10, 25, ...): every request under 5 s lands in one bucket and its "
            "quantiles are refused; give the instrument a View with the bounds of "
            "docs/metrics.md, or use exponential histogram aggregation",
            extra={"kv": {"metric": metric, "series": dict(attrs)}},
        )

    def _encode(self, msg: Message, content_type: str, status: int) -> Response:
        if content_type == JSON:
            body = json_format.MessageToJson(msg).encode()
        else:
            body = msg.SerializeToString()
        return Response(status, body, content_type)

    def _error(self, status: int, message: str, content_type: str) -> Response:
        st = status_pb2.Status(code=RPC_CODES.get(status, INVALID_ARGUMENT), message=message)
        return self._encode(st, content_type, status)

    def refusal(self, status: int, message: str, request_content_type: str) -> Response:
        """The answer to a request the HTTP layer refused before reading it (413), in the
        request's encoding like every other OTLP error."""
        ctype = request_content_type.split(";")[0].strip().lower()
        return self._error(status, message, JSON if ctype == JSON else PROTOBUF)

    async def handle(self, req: Request) -> Response:
        return self.handle_sync(req)

    def handle_sync(self, req: Request) -> Response:
        """Process one request (synchronous: CPU-bound decoding, no awaits needed)."""
        ctype_raw = (req.header("content-type") or "").split(";")[0].strip().lower()
        reply_type = JSON if ctype_raw == JSON else PROTOBUF
        if req.path != "/v1/metrics":
            return self._error(
                404, f"no such path {req.path!r}; metrics go to /v1/metrics", reply_type
            )
        if req.method != "POST":
            refused = self._error(405, f"method {req.method} not allowed; use POST", reply_type)
            refused.headers.append(("allow", "POST"))
            return refused
        if ctype_raw not in (PROTOBUF, JSON):
            return self._error(
                415, f"unsupported Content-Type {ctype_raw!r}; use {PROTOBUF} or {JSON}", PROTOBUF
            )
        self.requests += 1
        now = self.clock()
        try:
            msg = decode_body(req.body, ctype_raw, req.header("content-encoding"), self.max_body)
            result = to_points(msg, now)  # its attributes decode here (OtlpBadRequest too)
        except OtlpTooLarge as exc:
            return self._error(413, str(exc), reply_type)
        except OtlpBadRequest as exc:
            return self._error(400, str(exc), reply_type)
        self.rejected_points += result.rejected
        accepted = result.accepted
        if result.rejected and not accepted:
            return self._error(
                400,
                f"all {result.rejected} data points rejected: " + "; ".join(result.errors),
                reply_type,
            )
        for series in result.ms_bounds_in_seconds:
            self._warn_ms_bounds(*series)
        if accepted:
            self.store.add_runs(result.runs, now)
        ok = ExportMetricsServiceResponse()
        if result.rejected:
            ok.partial_success.rejected_data_points = result.rejected
            ok.partial_success.error_message = "; ".join(result.errors)
            log.info(
                "otlp points rejected",
                extra={"kv": {"rejected": result.rejected, "error": result.errors[0]}},
            )
        return self._encode(ok, reply_type, 200)
