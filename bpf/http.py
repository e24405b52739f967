"""Pure HTTP/1.1 parsing of the byte prefixes the BPF programs capture.

The kernel sends the first bytes of each request and response; this module turns them
into method, templated route, status code, modality and the LLM request headers. It
never raises on bad input: what cannot be read is reported as unknown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from kvspread import names

__all__ = [
    "RequestInfo",
    "ResponseInfo",
    "RouteTemplates",
    "DEFAULT_ROUTES",
    "parse_request",
    "parse_request_head",
    "with_body",
    "RequestHead",
    "parse_response",
    "sniff_modality",
    "request_end",
    "target_path",
    "OTHER_ROUTE",
]

DEFAULT_ROUTES: tuple[str, ...] = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/models",
    "/v1/models/{model}",
    "/v1/audio/transcriptions",
    "/v1/audio/speech",
    "/v1/images/generations",
    "/generate",
    "/generate_stream",
    "/v2/models/{model}/generate",
    "/v2/models/{model}/generate_stream",
    "/v2/models/{model}/infer",
    "/v2/models/{model}/versions/{version}/infer",
    "/tokenize",
    "/detokenize",
    "/health",
    "/healthz",
    "/readyz",
    "/metrics",
)
"""OpenAI-compatible (vLLM, SGLang, trtllm-serve), TGI and Triton/KServe v2 routes."""

OTHER_ROUTE = "other"
"""Route label of paths no pattern matches once the table of seen routes is full."""

_METHODS = frozenset(
    ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE")
)
_STATUS = re.compile(rb"HTTP/\d(?:\.\d)? (\d{3})")
_IMAGE_PART = re.compile(rb'"type"\s*:\s*"(?:image_url|input_image|image)"')
_AUDIO_PART = re.compile(rb'"type"\s*:\s*"(?:input_audio|audio_url)"')
_ID_SEGMENT = re.compile(
    r"^(?:\d+|[0-9a-fA-F]{16,}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12}|(?=.*\d)[A-Za-z0-9_-]{20,})$"
)


@dataclass(frozen=True)
class RequestInfo:
    """What the first bytes of a request say."""

    method: str
    path: str
    route: str
    modality: str
    images: int = 0
    context_id: str | None = None
    chunk_seq: int | None = None
    content_length: int | None = None


@dataclass(frozen=True)
class ResponseInfo:
    status: int | None
    streaming: bool = False
    content_length: int | None = None


class RouteTemplates:
    """Map raw paths to low-cardinality route labels.

    Patterns are paths whose `{name}` segments match any one segment (`/v1/models/{model}`);
    the first match wins. Unmatched paths are templated generically (numbers, UUIDs and
    long ids become `{id}`); after `max_routes` distinct such routes, further ones become
    `other`, so a client cannot grow the label set without bound.
    """

    def __init__(self, patterns: Iterable[str] = DEFAULT_ROUTES, max_routes: int = 64) -> None:
        self._patterns: list[tuple[str, re.Pattern[str]]] = []
        for p in patterns:
            if not p.startswith("/"):
                raise ValueError(f"route pattern {p!r} must start with '/'")
            parts = []
            for seg in p.strip("/").split("/"):
                if re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_]*\}", seg):
                    parts.append("[^/]+")
                else:
                    parts.append(re.escape(seg))
            regex = re.compile("^/" + "/".join(parts) + "/?$")
            self._patterns.append((p, regex))
        self._max = max_routes
        self._seen: set[str] = set()
        self._cache: dict[str, str] = {}  # path -> route, bounded (hot path: one per request)

    def route(self, path: str) -> str:
        hit = self._cache.get(path)
        if hit is not None:
            return hit
        route = self._match(path)
        if len(self._cache) >= 4096:
            self._cache.clear()
        self._cache[path] = route
        return route

    def _match(self, path: str) -> str:
        for template, regex in self._patterns:
            if regex.match(path):
                return template
        segs = [s for s in path.split("/") if s]
        generic = "/" + "/".join("{id}" if _ID_SEGMENT.match(s) else s for s in segs)
        if generic in self._seen:
            return generic
        if len(self._seen) >= self._max:
            return OTHER_ROUTE
        self._seen.add(generic)
        return generic


_WANTED: tuple[tuple[str, bytes], ...] = tuple(
    (name, b"\n" + name.encode() + b":")
    for name in ("x-modality", "x-llm-context-id", "x-chunk-seq", "content-length", "content-type")
)


def _split_head(data: bytes) -> tuple[bytes, bytes, bytes]:
    """The start line, the header block and the body start (empty when cut off)."""
    end = data.find(b"\r\n\r\n")
    head, body = (data, b"") if end < 0 else (data[:end], data[end + 4 :])
    first, _, fields = head.partition(b"\r\n")
    return first, fields, body


def _headers(fields: bytes) -> dict[str, str]:
    """The few header fields the collector uses: one lowercase copy and a `find` per
    wanted name (C speed; this runs per request), not a full parse. The first occurrence
    of a field wins."""
    low = b"\n" + fields.lower()
    out: dict[str, str] = {}
    for name, needle in _WANTED:
        i = low.find(needle)
        if i < 0:
            continue
        start = i + len(needle) - 1  # in `fields` (low has one byte more in front)
        stop = fields.find(b"\n", start)
        value = fields[start:] if stop < 0 else fields[start:stop]
        out[name] = value.strip(b" \t\r").decode("latin-1")
    return out


def sniff_modality(body: bytes) -> tuple[str, int]:
    """Modality of an OpenAI-style request body start, and the image parts seen.

    Two or more `image_url` / `input_image` parts -> multi-image, one -> image; an
    `input_audio` part -> audio; else text. Only the captured prefix is seen, so a long
    text part before the images hides them (see docs/collector.md).
    """
    if b"image" not in body and b"audio" not in body:
        return "text", 0  # every pattern below names an image or audio part
    images = len(_IMAGE_PART.findall(body))
    if not images and (b'"image_url"' in body or b'"input_image"' in body):
        images = 1  # a part without a "type" key, or its type cut off by the capture
    if images >= 2:
        return "multi-image", images
    if images == 1:
        return "image", 1
    if _AUDIO_PART.search(body) or b'"input_audio"' in body:
        return "audio", 0
    return "text", 0


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def parse_request(data: bytes, routes: RouteTemplates) -> RequestInfo | None:
    """Parse a request prefix; None when it is not an HTTP/1.x request line."""
    end = data.find(b"\r\n\r\n")
    head = parse_request_head(data if end < 0 else data[: end + 4], routes)
    return None if head is None else with_body(head, b"" if end < 0 else data[end + 4 :])


class RequestHead(NamedTuple):
    """A request's head parsed on its own; `declared`: its modality came from X-Modality."""

    info: RequestInfo  # modality "text" (or the declared one), no image parts yet
    declared: bool


def with_body(head: RequestHead, body: bytes) -> RequestInfo:
    """The request of `head` with the modality and image parts its body start shows (an
    X-Modality header still names the modality)."""
    modality, images = sniff_modality(body)
    info = head.info
    if head.declared:
        modality = info.modality
    if modality == info.modality and images == info.images:
        return info  # text bodies: no new object
    return replace(info, modality=modality, images=images)


def parse_request_head(head: bytes, routes: RouteTemplates) -> RequestHead | None:
    """Parse a request's head (the bytes up to and with the blank line, or all of them
    when it is cut off); None when it is not an HTTP/1.x request line. Apart from the body
    so that requests with the same head and different bodies (prompts) parse the head
    once (bpf/tracker.py memoizes it)."""
    first, fields, _ = _split_head(head)
    parts = first.split(b" ")
    if len(parts) < 2:
        return None
    method = parts[0].decode("latin-1")
    if method not in _METHODS:
        return None
    path = target_path(parts[1])
    hdr = _headers(fields)
    declared = hdr.get("x-modality", "").strip().lower()
    known = declared in names.MODALITIES
    info = RequestInfo(
        method=method,
        path=path,
        route=routes.route(path),
        modality=declared if known else "text",
        context_id=hdr.get("x-llm-context-id") or None,
        chunk_seq=_int(hdr.get("x-chunk-seq")),
        content_length=_int(hdr.get("content-length")),
    )
    return RequestHead(info, known)


def target_path(target: bytes) -> str:
    """The path of a request line's target: origin or absolute form (`http://host/p`),
    without query or fragment."""
    text = target.decode("latin-1", "replace")
    if text.startswith(("http://", "https://")):
        text = "/" + text.split("://", 1)[1].partition("/")[2]
    return text.split("?", 1)[0].split("#", 1)[0] or "/"


def request_end(data: bytes) -> int | None:
    """Offset just past the first request in `data` (head + Content-Length body), or None
    when its end is not in `data` (head cut off, chunked body) or what follows is not a
    request line: where a pipelined request read in the same bytes starts."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    fields = data[:end].partition(b"\r\n")[2]
    hdr = _headers(fields)
    if "transfer-encoding" in fields.lower().decode("latin-1"):
        return None
    n = end + 4 + (_int(hdr.get("content-length")) or 0)
    if n > len(data):
        return None
    rest = data[n:]
    if rest and rest.split(b" ", 1)[0].decode("latin-1") not in _METHODS:
        return None  # not a request start: keep the bytes (a body without its length)
    return n


def parse_response(data: bytes) -> ResponseInfo:
    """Status and framing of a response prefix; status None when unreadable."""
    first, fields, _ = _split_head(data)
    m = _STATUS.match(first)
    if not m:
        return ResponseInfo(status=None)
    hdr = _headers(fields)
    return ResponseInfo(
        status=int(m.group(1)),
        streaming="text/event-stream" in hdr.get("content-type", "").lower(),
        content_length=_int(hdr.get("content-length")),
    )
