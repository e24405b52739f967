"""What makes an HTTP/2 request's header section well-formed (RFC 9113 sections 8.1-8.3).

Why a module of its own: the picker's HTTP/2 server (router/h2grpc.py) must answer a malformed
request with a stream error of type PROTOCOL_ERROR (RFC 9113 section 8.1.1) instead of
serving it; these are the rules, apart from the frame layer, so that each can be read against
the RFC's text and tested alone.
"""

from __future__ import annotations

__all__ = ["MalformedRequest", "request_fields", "check_trailers"]

_REQUEST_PSEUDO = frozenset((b":method", b":scheme", b":path", b":authority"))
# RFC 9113 section 8.2.2: connection-specific fields are malformed in HTTP/2
_CONNECTION_SPECIFIC = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade")
)
_FORBIDDEN_BYTES = (b"\x00", b"\r", b"\n")  # RFC 9113 section 8.2.1, in names and values


class MalformedRequest(ValueError):
    """The header section breaks RFC 9113 section 8 (a stream error PROTOCOL_ERROR)."""


def _check_regular(name: bytes, value: bytes) -> None:
    if name.lower() != name:
        raise MalformedRequest(f"field name {name[:40]!r} has upper-case letters")
    if name in _CONNECTION_SPECIFIC:
        raise MalformedRequest(f"connection-specific field {name.decode('latin-1')}")
    if name == b"te" and value != b"trailers":
        raise MalformedRequest("te other than 'trailers'")
    for bad in _FORBIDDEN_BYTES:
        if bad in name or bad in value:
            raise MalformedRequest(f"field {name[:40]!r} holds NUL, CR or LF")


def request_fields(headers: list[tuple[bytes, bytes]]) -> tuple[str, int | None]:
    """The request's :path and its content-length (None when absent); raises
    MalformedRequest when the section breaks RFC 9113 sections 8.2-8.3: pseudo-header fields
    first, only the request ones, each once, :method/:scheme/:path present (not for
    CONNECT), :path not empty, field names in lower case, no connection-specific fields,
    te only 'trailers', content-length a number."""
    seen: set[bytes] = set()
    regular = False
    path = b""
    method = b""
    length: int | None = None
    for name, value in headers:
        if name[:1] == b":":
            if regular:
                raise MalformedRequest(f"pseudo-header {name.decode('latin-1')} after a field")
            if name not in _REQUEST_PSEUDO:
                raise MalformedRequest(f"pseudo-header {name[:40]!r} is not a request's")
            if name in seen:
                raise MalformedRequest(f"pseudo-header {name.decode('latin-1')} twice")
            seen.add(name)
            if name == b":path":
                path = value
            elif name == b":method":
                method = value
            continue
        regular = True
        _check_regular(name, value)
        if name == b"content-length":
            if not value.isdigit() or (length is not None and int(value) != length):
                raise MalformedRequest("content-length is not one number")
            length = int(value)
    if b":method" not in seen:
        raise MalformedRequest("no :method")
    if method != b"CONNECT":
        if b":scheme" not in seen:
            raise MalformedRequest("no :scheme")
        if not path:
            raise MalformedRequest("no :path or an empty one")
    return path.decode("utf-8", "replace"), length


def check_trailers(headers: list[tuple[bytes, bytes]]) -> None:
    """Raises MalformedRequest for a trailer section with pseudo-header fields (RFC 9113
    section 8.1) or a field the request section may not hold either."""
    for name, value in headers:
        if name[:1] == b":":
            raise MalformedRequest(f"pseudo-header {name[:40]!r} in trailers")
        _check_regular(name, value)
