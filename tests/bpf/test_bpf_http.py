"""HTTP/1.1 prefix parsing: methods, routes, modality, LLM headers, statuses."""

from __future__ import annotations

import pytest

from bpf.http import OTHER_ROUTE, RouteTemplates, parse_request, parse_response, sniff_modality


def req(first: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [first] + [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@pytest.mark.parametrize(
    "path,route",
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1/chat/completions/", "/v1/chat/completions"),
        ("/v1/models/llava-1.5-7b", "/v1/models/{model}"),
        ("/v2/models/ensemble/generate_stream", "/v2/models/{model}/generate_stream"),
        ("/items/12345", "/items/{id}"),
        ("/jobs/3f2b8c1e-5d6a-4e7f-8a9b-0c1d2e3f4a5b/status", "/jobs/{id}/status"),
    ],
    ids=["exact", "trailing slash", "template", "triton v2", "generic number", "generic uuid"],
)
def test_routes(path: str, route: str) -> None:
    assert RouteTemplates().route(path) == route


def test_unmatched_routes_are_bounded() -> None:
    rt = RouteTemplates(["/v1/chat/completions"], max_routes=2)
    assert rt.route("/a") == "/a"
    assert rt.route("/b") == "/b"
    assert rt.route("/c") == OTHER_ROUTE
    assert rt.route("/a") == "/a"


def test_bad_pattern_rejected() -> None:
    with pytest.raises(ValueError, match="must start with"):
        RouteTemplates(["v1/x"])


@pytest.mark.parametrize(
    "body,modality,images",
    [
        (b'{"messages":[{"role":"user","content":"hi"}]}', "text", 0),
        (b'{"content":[{"type":"image_url","image_url":{"url":"x"}}]}', "image", 1),
        (
            b'{"content":[{"type": "image_url","image_url":{}},{"type":"image_url","image_url":{}}]}',
            "multi-image",
            2,
        ),
        (b'{"input":[{"type":"input_image","image_url":"x"}]}', "image", 1),
        (b'{"content":[{"type":"input_audio","input_audio":{"data":"..."}}]}', "audio", 0),
        (b'{"content":[{"image_url":{"url":"x"}}]}', "image", 1),
    ],
    ids=["text", "one image", "two images", "responses api image", "audio", "untyped image"],
)
def test_sniff_modality(body: bytes, modality: str, images: int) -> None:
    assert sniff_modality(body) == (modality, images)


def test_request_headers_and_declared_modality() -> None:
    data = req(
        "POST /v1/chat/completions?stream=true HTTP/1.1",
        {
            "Host": "x",
            "x-modality": "Multi-Image",
            "X-LLM-Context-ID": "ctx-9",
            "X-Chunk-Seq": "4",
            "Content-Length": "17",
        },
        b'{"messages":[]}',
    )
    info = parse_request(data, RouteTemplates())
    assert info is not None
    assert (info.method, info.path, info.route) == (
        "POST",
        "/v1/chat/completions",
        "/v1/chat/completions",
    )
    assert info.modality == "multi-image"
    assert (info.context_id, info.chunk_seq, info.content_length) == ("ctx-9", 4, 17)


def test_request_unknown_declared_modality_falls_back_to_sniff() -> None:
    data = req(
        "POST /v1/chat/completions HTTP/1.1",
        {"X-Modality": "video"},
        b'{"c":[{"type":"image_url"}]}',
    )
    info = parse_request(data, RouteTemplates())
    assert info is not None and info.modality == "image"


@pytest.mark.parametrize(
    "data",
    [b"", b"\x16\x03\x01\x02\x00", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"HELLO world", b"GET"],
    ids=["empty", "tls", "http2 preface", "not a method", "truncated"],
)
def test_not_http_requests(data: bytes) -> None:
    assert parse_request(data, RouteTemplates()) is None


def test_truncated_headers_still_give_method_and_route() -> None:
    info = parse_request(b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nX-Cut", RouteTemplates())
    assert info is not None and info.route == "/v1/completions" and info.modality == "text"


def test_absolute_form_target() -> None:
    info = parse_request(b"GET http://h:1/v1/models HTTP/1.1\r\n\r\n", RouteTemplates())
    assert info is not None and info.path == "/v1/models"


@pytest.mark.parametrize(
    "data,status,streaming,length",
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{}",
            200,
            False,
            12,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n\r\ndata: x",
            200,
            True,
            None,
        ),
        (b"HTTP/1.0 503 Service Unavailable\r\n\r\n", 503, False, None),
        (b"HTTP/1.1 4", None, False, None),
        (b"\x00\x01garbage", None, False, None),
    ],
    ids=["json", "sse", "http/1.0 503", "cut status", "garbage"],
)
def test_parse_response(
    data: bytes, status: int | None, streaming: bool, length: int | None
) -> None:
    r = parse_response(data)
    assert (r.status, r.streaming, r.content_length) == (status, streaming, length)
