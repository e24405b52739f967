"""What one OpenAI-compatible request asks of an endpoint: modality, image count, token
estimates. Pure: bytes in, `RequestInfo` out.

Why estimates: the picker must choose before the engine tokenizes anything, so the KV
headroom check and the image-token share use an estimate. Text tokens are characters / 4
(the usual English ratio); an image's tokens are its patches, ceil(w/patch) *
ceil(h/patch) (Qwen2-VL / LLaVA-style 28-pixel merged patches by default), read from the
image header in the base64 data URL without decoding the whole image; an image whose size
cannot be read (a remote URL) counts `default_image_tokens`. Output tokens are the body's
`max_tokens` / `max_completion_tokens`, else `default_max_tokens`.

For the cache-aware terms it also keeps the prompt as the engine will see its start:
`prompt_parts`, the messages' text in order with the system messages first (chat
templates render them first) and each image as a marker naming its digest
(router/images.py), so router/prefix.py can hash it into blocks without parsing again;
a completions prompt of token ids is kept as `token_ids` for the precise mode
(router/kvevents.py).

Bounded: `prompt_parts` holds at most `head_chars` characters (the picker passes what its
prefix index reads, `max_blocks` blocks), and `prompt_chars` the whole prompt's length, so
a prompt costs the head it is matched on, not its size: an image's marker is as long as
its tokens' text (64 KiB for 16,384 tokens), and a 115 KB body of 1,000 image headers
claiming as many would otherwise build 64 MB of markers. `token_ids` keeps the first
`MAX_TOKEN_IDS`, `token_count` all of them.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass
from typing import Any, Final

import orjson

from kvspread.settings import bounded
from router.images import image_digest

__all__ = [
    "RequestInfo",
    "RequestError",
    "ImageEstimate",
    "parse_request",
    "RequestConfig",
    "DEFAULT_ESTIMATES",
    "image_size",
    "BODILESS",
    "image_marker",
    "MAX_TOKEN_IDS",
]

MAX_TOKEN_IDS: Final = 131_072
"""Token ids of a completions prompt kept for the precise mode's match (the first 128 Ki:
at most about 5 MB per request in flight)."""

# Enough of the decoded image to find its size: PNG/GIF/WebP say it in the first 30 bytes,
# JPEG after its APPn segments (EXIF thumbnails can push SOF past 20 KB).
_HEADER_B64_CHARS = 96 * 1024


class RequestError(ValueError):
    """The body is not an OpenAI-compatible request the picker can read."""


@dataclass(frozen=True)
class ImageEstimate:
    """One image part: its encoded size and, when readable, its pixel size."""

    source: str  # "data" (base64 data URL) or "url"
    encoded_bytes: int | None  # decoded size of base64 data, None for remote URLs
    width: int | None
    height: int | None
    tokens: int
    digest: int = 0  # router.images.image_digest of its URL text


@dataclass(frozen=True)
class RequestInfo:
    """The routing-relevant facts of one request."""

    model: str
    modality: str  # text | image | multi-image
    images: tuple[ImageEstimate, ...]
    text_tokens: int
    image_tokens: int
    max_tokens: int
    stream: bool
    prompt_parts: tuple[str, ...] = ()
    """The prompt's text in the engine's order (system first), images as digest markers."""
    token_ids: tuple[int, ...] = ()
    """A completions prompt given as token ids (else empty): the first `MAX_TOKEN_IDS`."""
    prompt_chars: int = 0
    """Characters of the whole prompt as `prompt_parts` would hold them uncut."""
    token_count: int = 0
    """Token ids of the completions prompt, all of them (`token_ids` may be cut)."""

    @property
    def prompt_tokens(self) -> int:
        return self.text_tokens + self.image_tokens

    @property
    def total_tokens(self) -> int:
        """Tokens the request may hold in the KV cache at its end."""
        return self.prompt_tokens + self.max_tokens


BODILESS = RequestInfo("", "text", (), 0, 0, 0, False)
"""A request without a body (GET /v1/models, health checks): routed as a light text one."""


def _png(head: bytes) -> tuple[int, int] | None:
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24 and head[12:16] == b"IHDR":
        w, h = struct.unpack(">II", head[16:24])
        return w, h
    return None


def _gif(head: bytes) -> tuple[int, int] | None:
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return w, h
    return None


def _webp(head: bytes) -> tuple[int, int] | None:
    if head[:4] != b"RIFF" or head[8:12] != b"WEBP" or len(head) < 30:
        return None
    chunk = head[12:16]
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", head[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L":
        b = head[21:25]
        w = 1 + (((b[1] & 0x3F) << 8) | b[0])
        h = 1 + (((b[3] & 0xF) << 10) | (b[2] << 2) | ((b[1] & 0xC0) >> 6))
        return w, h
    if chunk == b"VP8X":
        w = 1 + int.from_bytes(head[24:27], "little")
        h = 1 + int.from_bytes(head[27:30], "little")
        return w, h
    return None


_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg(head: bytes) -> tuple[int, int] | None:
    if head[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _JPEG_SOF:
            h, w = struct.unpack(">HH", head[i + 5 : i + 9])
            return w, h
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (seg_len,) = struct.unpack(">H", head[i + 2 : i + 4])
        i += 2 + seg_len
    return None


def image_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from the first bytes of a PNG, JPEG, GIF or WebP file, else None."""
    for probe in (_png, _jpeg, _gif, _webp):
        size = probe(head)
        if size is not None and size[0] > 0 and size[1] > 0:
            return size
    return None


def _data_url(url: str) -> tuple[int, bytes] | None:
    """(decoded size, decoded head) of a base64 data URL, decoding only its head."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",")
    if comma < 0 or ";base64" not in url[:comma]:
        return None
    b64_len = len(url) - comma - 1
    padding = url.count("=", max(comma + 1, len(url) - 2))
    size = max(0, b64_len * 3 // 4 - padding)
    take = min(b64_len, _HEADER_B64_CHARS) // 4 * 4
    try:
        head = base64.b64decode(url[comma + 1 : comma + 1 + take], validate=False)
    except (binascii.Error, ValueError):
        head = b""
    return size, head


@dataclass(frozen=True)
class RequestConfig:
    """Token estimates read from a request body (YAML `request:` of the router's config):
    `parse_request`'s parameters, so their defaults are written once."""

    patch: int = 28
    """Image patch side in pixels: an image is ceil(w/patch) x ceil(h/patch) tokens."""
    default_image_tokens: int = 1024
    """Tokens counted for an image whose size cannot be read (a remote URL)."""
    max_image_tokens: int = 16384
    """Cap of one image's token estimate."""
    default_max_tokens: int = 256
    """Output tokens assumed when the request gives no max_tokens."""

    def validate(self) -> None:
        bounded(self, "patch", "max_image_tokens", at_least=1, what="an integer")
        bounded(self, "default_image_tokens", "default_max_tokens", at_least=0, what="an integer")


DEFAULT_ESTIMATES: Final = RequestConfig()


def _estimate_image(url: str, estimates: RequestConfig) -> ImageEstimate:
    digest = image_digest(url)
    data = _data_url(url)
    if data is None:
        return ImageEstimate("url", None, None, None, estimates.default_image_tokens, digest)
    size, head = data
    dims = image_size(head)
    if dims is None:
        return ImageEstimate("data", size, None, None, estimates.default_image_tokens, digest)
    w, h = dims
    patch = estimates.patch
    tokens = min(estimates.max_image_tokens, math.ceil(w / patch) * math.ceil(h / patch))
    return ImageEstimate("data", size, w, h, tokens, digest)


def image_marker(digest: int, tokens: int = 0, limit: int | None = None) -> str:
    """An image's place in `prompt_parts`: the same image, the same text, as long as the
    text of its tokens (4 characters each, this module's ratio), so a prefix that covers an
    image counts the image's tokens (the engine caches them with the text around them);
    its first `limit` characters where given."""
    mark = f"\x00image:{digest:016x}\x00"
    size = marker_chars(tokens)
    if limit is not None and limit < size:
        return (mark * -(-limit // len(mark)))[:limit]
    return mark * (size // len(mark))


_MARK_CHARS: Final = len(f"\x00image:{0:016x}\x00")


def marker_chars(tokens: int) -> int:
    """The length of `image_marker(_, tokens)`, without building it."""
    return _MARK_CHARS * max(1, -(-4 * tokens // _MARK_CHARS))


class _Head:
    """Text parts appended in order, kept up to `limit` characters, with the whole length."""

    __slots__ = ("parts", "kept", "total", "limit")

    def __init__(self, limit: int | None) -> None:
        self.parts: list[str] = []
        self.kept = 0
        self.total = 0
        self.limit = limit

    def add(self, text: str) -> None:
        self.total += len(text)
        self._keep(text)

    def add_image(self, digest: int, tokens: int) -> None:
        """An image's marker (`image_marker`), built only as far as the head has room."""
        self.total += marker_chars(tokens)
        room = self._room()
        if room is None or room > 0:
            self._keep(image_marker(digest, tokens, room))

    def _room(self) -> int | None:
        return None if self.limit is None else self.limit - self.kept

    def _keep(self, text: str) -> None:
        room = self._room()
        if room is None:
            self.parts.append(text)
        elif room > 0:
            piece = text[:room]
            self.parts.append(piece)
            self.kept += len(piece)

    def add_ids(self, ids: list[int]) -> None:
        """Token ids as the text `1,2,3`: only its head is built."""
        room = self._room()
        if room is None:
            self.add(",".join(map(str, ids)))
            return
        n = room // 2 + 1 if room > 0 else 0  # an id and its comma are 2 characters or more
        self.add(",".join(map(str, ids[:n])))
        rest = ids[n:]
        if rest:  # the remaining ids' characters and commas, counted, not built
            self.total += sum(len(str(i)) for i in rest) + len(rest) - (0 if n else 1)


def _image_url(part: dict[str, Any]) -> str | None:
    iu = part.get("image_url")
    if isinstance(iu, str):
        return iu
    if isinstance(iu, dict):
        url = iu.get("url")
        if isinstance(url, str):
            return url
    return None


def parse_request(
    body: bytes, estimates: RequestConfig = DEFAULT_ESTIMATES, head_chars: int | None = None
) -> RequestInfo:
    """Read a chat/completions or completions body. Raises RequestError on garbage.
    `head_chars`: the most prompt characters kept in `prompt_parts` (None: all)."""
    if not body:
        raise RequestError("empty request body (a JSON object was expected)")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"request body is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise RequestError("request body must be a JSON object")
    model = doc.get("model", "")
    if not isinstance(model, str):
        raise RequestError("'model' must be a string")
    chars = 0
    images: list[ImageEstimate] = []
    system = _Head(head_chars)
    parts = _Head(head_chars)
    token_ids: tuple[int, ...] = ()
    token_count = 0
    messages = doc.get("messages")
    if messages is not None:
        if not isinstance(messages, list):
            raise RequestError("'messages' must be a list")
        for n, msg in enumerate(messages):
            if not isinstance(msg, dict):
                raise RequestError(f"messages[{n}] must be an object")
            role = msg.get("role")
            dest = system if role == "system" else parts
            dest.add(f"\x00{role}\x00")
            content = msg.get("content")
            if isinstance(content, str):
                chars += len(content)
                dest.add(content)
            elif isinstance(content, list):
                for part in content:
                    if not isinstance(part, dict):
                        continue
                    if isinstance(part.get("text"), str):
                        chars += len(part["text"])
                        dest.add(part["text"])
                    url = _image_url(part)
                    if part.get("type") == "image_url" or url is not None:
                        if url is None:
                            raise RequestError(f"messages[{n}]: image_url part without a url")
                        img = _estimate_image(url, estimates)
                        images.append(img)
                        dest.add_image(img.digest, img.tokens)
    else:
        prompt = doc.get("prompt")
        if isinstance(prompt, str):
            chars += len(prompt)
            parts.add(prompt)
        elif isinstance(prompt, list):
            texts = [p for p in prompt if isinstance(p, str)]
            chars += sum(len(p) for p in texts)
            for text in texts:
                parts.add(text)
            ids = [p for p in prompt if isinstance(p, int) and not isinstance(p, bool)]
            if ids:
                chars += 4 * len(ids)  # token ids
                token_ids = tuple(ids[:MAX_TOKEN_IDS])
                token_count = len(ids)
                parts.add_ids(ids)
        elif prompt is not None:
            raise RequestError("'prompt' must be a string or a list")
    out = doc.get("max_completion_tokens", doc.get("max_tokens"))
    if out is None:
        out = estimates.default_max_tokens
    if isinstance(out, bool) or not isinstance(out, int) or out < 0:
        raise RequestError("'max_tokens' must be a non-negative integer")
    modality = "text" if not images else ("image" if len(images) == 1 else "multi-image")
    return RequestInfo(
        model=model,
        modality=modality,
        images=tuple(images),
        text_tokens=math.ceil(chars / 4),
        image_tokens=sum(i.tokens for i in images),
        max_tokens=out,
        stream=bool(doc.get("stream", False)),
        prompt_parts=_joined(system, parts, head_chars),
        token_ids=token_ids,
        prompt_chars=system.total + parts.total,
        token_count=token_count,
    )


def _joined(first: _Head, then: _Head, limit: int | None) -> tuple[str, ...]:
    """`first`'s parts then `then`'s, cut to `limit` characters in all."""
    if limit is None or first.kept + then.kept <= limit:
        return tuple(first.parts + then.parts)
    out = list(first.parts)
    room = limit - first.kept
    for p in then.parts:
        if room <= 0:
            break
        out.append(p[:room])
        room -= len(out[-1])
    return tuple(out)
