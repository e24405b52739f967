"""HTTP routes of the extender (FastAPI; routes only, the decisions live in service.py).

    POST /<filterVerb>       ExtenderArgs -> ExtenderFilterResult      (default /filter)
    POST /<prioritizeVerb>   ExtenderArgs -> HostPriorityList          (default /prioritize)
    GET  /debug/explain?pod=NS/NAME[&top=N]   each node's terms for the last decisions
                             (404 when `explain.enabled` is false)
    GET  /metrics            Prometheus text format
    GET  /healthz            200 while the process serves
    GET  /readyz             200 after the first list of nodes, pods and NodeSignals (when
                             kubernetes.node_signals; always, standalone)

Bodies are read raw and parsed by wire.py (no pydantic on the hot path). A body that is
not an ExtenderArgs gets 400 with a JSON {"error": message}; one larger than
`server.max_body_bytes` (default 256 MiB, a 15,000-node full NodeList) gets 413, refused
from its Content-Length or while streaming, never buffered whole. Nothing the scheduler can
send produces a 5xx: an unexpected failure is logged and counted (code "internal") and
answered with `Error` set (filter; kube-scheduler then treats the extender as failed,
or skips it when registered `ignorable: true`) or neutral scores (prioritize).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender.decisions import FilterDecision, PrioritizeDecision
from extender.service import NEUTRAL_SCORE, Extender
from extender.wire import WireError, dumps, encode_filter, encode_prioritize, parse_args

__all__ = ["create_app"]

log = logging.getLogger("kvspread.extender.server")

_JSON = "application/json"


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None when it exceeds `limit` bytes: refused from Content-Length before
    reading, else while streaming, so an oversized body is never buffered whole."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(ext: Extender, ready: Callable[[], bool]) -> FastAPI:
    """Build the ASGI app for `ext`; `ready()` backs /readyz."""
    app = FastAPI(
        title="kvspread scheduler extender",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    m = ext.metrics
    limit = ext.cfg.server.max_body_bytes
    fverb = ext.cfg.server.filter_verb.strip("/")
    pverb = ext.cfg.server.prioritize_verb.strip("/")

    async def handle(request: Request, verb: str) -> Response:
        start = time.perf_counter()
        code = "200"
        try:
            body = await _read_body(request, limit)
            if body is None:
                code = "413"
                return JSONResponse(
                    {
                        "error": f"request body is larger than server.max_body_bytes "
                        f"({limit} bytes); raise it for clusters with larger NodeLists, or "
                        "register the extender with nodeCacheCapable: true (names only)"
                    },
                    status_code=413,
                )
            try:
                args = parse_args(body)
            except WireError as exc:
                code = "400"
                return JSONResponse({"error": str(exc)}, status_code=400)
            except RecursionError:
                code = "400"
                return JSONResponse({"error": "request body nests too deeply"}, status_code=400)
            try:
                if verb == "filter":
                    out = encode_filter(args, ext.filter(args))
                else:
                    out = encode_prioritize(args, ext.prioritize(args))
            except Exception:
                code = "internal"
                log.exception("extender failed on a valid request", extra={"kv": {"verb": verb}})
                n = len(args.names)
                if verb == "filter":
                    out = encode_filter(args, FilterDecision.failure(n))
                else:
                    out = encode_prioritize(args, PrioritizeDecision.neutral(n, NEUTRAL_SCORE))
            return Response(content=out, media_type=_JSON)
        finally:
            m.requests.labels(verb, code).inc()
            m.duration.labels(verb).observe(time.perf_counter() - start)

    @app.post("/" + fverb)
    async def filter_route(request: Request) -> Response:
        return await handle(request, "filter")

    @app.post("/" + pverb)
    async def prioritize_route(request: Request) -> Response:
        return await handle(request, "prioritize")

    @app.get("/debug/explain")
    async def explain_route(pod: str = "", top: int | None = None) -> Response:
        if not ext.cfg.explain.enabled:
            return JSONResponse({"error": "/debug/explain is off (explain.enabled)"}, 404)
        if "/" not in pod or pod.startswith("/") or pod.endswith("/"):
            return JSONResponse(
                {"error": "query parameter pod must be NAMESPACE/NAME, e.g. ?pod=default/llm-0"},
                status_code=400,
            )
        if top is not None and top < 1:
            return JSONResponse({"error": "top must be >= 1"}, status_code=400)
        doc = ext.explain(pod, top)
        if doc is None:
            return JSONResponse({"error": f"no recent decision about pod {pod}"}, status_code=404)
        return Response(content=dumps(doc), media_type=_JSON)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        for resource, synced in ext.state.synced().items():
            m.cache_synced.labels(resource).set(1 if synced else 0)
        return Response(content=generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(content=b"ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        if ready():
            return Response(content=b"ok", media_type="text/plain")
        pending = ", ".join(r for r, done in ext.state.synced().items() if not done)
        return Response(
            content=f"not ready: first list not complete: {pending}".encode(),
            media_type="text/plain",
            status_code=503,
        )

    return app
