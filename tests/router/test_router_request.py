"""Reading OpenAI-compatible bodies: modality, image sizes from real encoded images
(Pillow writes them), token estimates, and clear errors for bad bodies."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from router.request import RequestError, image_size, parse_request


def encoded(fmt: str, w: int, h: int, exif: bool = False) -> bytes:
    buf = io.BytesIO()
    img = Image.new("RGB", (w, h), (120, 30, 200))
    kw = {}
    if exif:
        ex = Image.Exif()
        ex[0x010E] = "x" * 30_000  # ImageDescription: a large APP1 segment before SOF
        kw["exif"] = ex.tobytes()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def data_url(raw: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def chat(*parts: dict, **extra: object) -> bytes:
    return json.dumps(
        {"model": "qwen", "messages": [{"role": "user", "content": list(parts)}], **extra}
    ).encode()


@pytest.mark.parametrize(
    "fmt,exif", [("PNG", False), ("JPEG", False), ("JPEG", True), ("GIF", False), ("WEBP", False)]
)
def test_image_size_from_the_header(fmt: str, exif: bool) -> None:
    raw = encoded(fmt, 1000, 700, exif)
    assert image_size(raw[:100_000]) == (1000, 700)


def test_lossless_webp_size() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (333, 222)).save(buf, format="WEBP", lossless=True)
    assert image_size(buf.getvalue()) == (333, 222)


def test_text_request() -> None:
    body = json.dumps(
        {
            "model": "m",
            "max_tokens": 100,
            "stream": True,
            "messages": [
                {"role": "system", "content": "a" * 400},
                {"role": "user", "content": "b" * 400},
            ],
        }  # fmt: skip
    ).encode()
    r = parse_request(body)
    assert (r.modality, r.text_tokens, r.image_tokens, r.max_tokens, r.stream) == (
        "text", 200, 0, 100, True
    )  # fmt: skip


def test_one_and_several_images() -> None:
    png = data_url(encoded("PNG", 560, 280), "image/png")
    one = parse_request(
        chat({"type": "text", "text": "what"}, {"type": "image_url", "image_url": {"url": png}})
    )
    assert one.modality == "image"
    assert one.images[0].width == 560 and one.images[0].tokens == 20 * 10
    assert one.images[0].encoded_bytes == len(encoded("PNG", 560, 280))
    remote = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.jpg"}}
    many = parse_request(
        chat({"type": "image_url", "image_url": {"url": png}}, remote, max_tokens=7)
    )
    assert many.modality == "multi-image"
    assert many.images[1].source == "url" and many.images[1].tokens == 1024  # the default
    assert many.image_tokens == 200 + 1024
    assert many.total_tokens == many.prompt_tokens + 7


def test_huge_image_is_capped_and_not_decoded_whole() -> None:
    # a 6 MB base64 payload whose PNG header says 20000x20000
    small = encoded("PNG", 8, 8)
    header = small[:16] + (20000).to_bytes(4, "big") * 2 + small[24:33]  # IHDR says 20000
    url = "data:image/png;base64," + base64.b64encode(header + b"\0" * (6 << 20)).decode()
    r = parse_request(chat({"type": "image_url", "image_url": {"url": url}}))
    assert r.images[0].width == 20000
    assert r.images[0].tokens == 16384
    assert r.images[0].encoded_bytes == 33 + (6 << 20)


def test_completions_prompt() -> None:
    r = parse_request(b'{"model": "m", "prompt": ["abcd", "efgh"]}')
    assert r.modality == "text" and r.text_tokens == 2 and r.max_tokens == 256


@pytest.mark.parametrize(
    "body,message",
    [
        (b"", "empty"),
        (b"{nope", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"model": 3}', "'model'"),
        (b'{"messages": {"a": 1}}', "'messages' must be a list"),
        (b'{"messages": [{"content": [{"type": "image_url"}]}]}', "without a url"),
        (b'{"prompt": "x", "max_tokens": -1}', "max_tokens"),
    ],
)
def test_bad_bodies_say_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        parse_request(body)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        _json.map(lambda d: json.dumps(d).encode()),
        st.fixed_dictionaries(
            {"messages": st.lists(st.dictionaries(st.sampled_from(["role", "content"]), _json))}
        ).map(lambda d: json.dumps(d).encode()),
    )
)
def test_any_body_is_read_or_refused_with_request_error(body: bytes) -> None:
    try:
        r = parse_request(body)
    except RequestError:
        return
    assert r.modality in ("text", "image", "multi-image")
    assert r.text_tokens >= 0 and r.image_tokens >= 0 and r.max_tokens >= 0
