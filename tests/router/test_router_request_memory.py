"""Memory per request and for /debug/explain is bounded (router/request.py `head_chars`,
router/picker.py `EXPLAIN_MAX_BYTES`): a small body whose images claim many tokens, long
prompts, long ids. Found black-box: 1,000 PNG headers claiming 16,384 tokens each in a
115 KB body took the picker's RSS up 63 MiB a request, and kept it."""

from __future__ import annotations

import base64
import gc
import json
import struct
import tracemalloc
import zlib

from kvspread.engine import EngineSample
from router.config import RouterConfig
from router.endpoints import Endpoint, EndpointSet
from router.metrics import RouterMetrics
from router.picker import EXPLAIN_MAX_BYTES, HEADER_CONTEXT, MAX_ID_CHARS, Picker, id_key
from router.prefix import CacheConfig, PrefixIndex
from router.request import MAX_TOKEN_IDS, marker_chars, parse_request

ENGINES = ",".join(f"127.0.0.{i}:8000" for i in range(1, 9))


def png_header(width: int, height: int) -> bytes:
    """A PNG signature and IHDR chunk: all the picker reads of an image."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )


def many_images(n: int, seed: int = 0) -> bytes:
    """One user message of `n` distinct images, each claiming the most tokens (16,384)."""
    parts = [
        {
            "type": "image_url",
            "image_url": {
                "url": "data:image/png;base64,"
                + base64.b64encode(png_header(458752 + seed * n + i, 28)).decode()
            },
        }
        for i in range(n)
    ]
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": parts}]}).encode()


def chat(system: str, user: str) -> bytes:
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return json.dumps({"model": "m", "messages": msgs}).encode()


def test_the_prompt_head_is_cut_and_its_whole_length_counted() -> None:
    body = many_images(1000)
    assert len(body) < 150_000
    whole = parse_request(body)
    cut = parse_request(body, head_chars=65_536)
    assert sum(len(p) for p in cut.prompt_parts) == 65_536
    assert cut.prompt_chars == whole.prompt_chars == sum(len(p) for p in whole.prompt_parts)
    assert whole.prompt_chars > 1000 * marker_chars(16_384) - 1  # 64 MB uncut
    assert cut.image_tokens == whole.image_tokens == 1000 * 16_384
    assert len(cut.images) == 1000


def test_a_cut_prompt_hashes_and_matches_as_the_whole_one() -> None:
    cfg = CacheConfig(block_tokens=16)  # 64-character blocks
    head = cfg.block_chars * cfg.max_blocks
    for body in (
        many_images(40),
        chat("s" * 10_000, "u" * 100_000),
        chat("s" * 100_000, "u" * 10),  # the system prompt alone passes the head
        json.dumps({"model": "m", "prompt": list(range(50_000))}).encode(),
        json.dumps({"model": "m", "prompt": ["text " * 100, 7, 8, 9]}).encode(),
    ):
        whole, cut = parse_request(body), parse_request(body, head_chars=head)
        assert sum(len(p) for p in cut.prompt_parts) <= head
        a, b = PrefixIndex(cfg), PrefixIndex(cfg)
        ha, hb = a.hashes(whole), b.hashes(cut)
        assert ha == hb and ha
        a.record("e", ha, None)
        b.record("e", hb, None)
        assert a.match(ha, whole) == b.match(hb, cut)
        assert cut.prompt_chars == whole.prompt_chars


def test_token_ids_are_kept_up_to_the_bound_and_counted_whole() -> None:
    ids = list(range(MAX_TOKEN_IDS + 5000))
    req = parse_request(json.dumps({"model": "m", "prompt": ids}).encode(), head_chars=4096)
    assert len(req.token_ids) == MAX_TOKEN_IDS and req.token_ids == tuple(ids[:MAX_TOKEN_IDS])
    assert req.token_count == len(ids)
    assert req.prompt_chars == len(",".join(map(str, ids)))
    assert sum(len(p) for p in req.prompt_parts) == 4096
    # the head already full of text before the ids: none built, all counted
    body = {"model": "m", "prompt": ["t" * 5000, *range(100, 1100)]}
    full = parse_request(json.dumps(body).encode())
    cut = parse_request(json.dumps(body).encode(), head_chars=4096)
    assert cut.prompt_chars == full.prompt_chars == 5000 + len(",".join(map(str, range(100, 1100))))


def _picker(endpoints: int = 8, **cache: object) -> Picker:
    """A picker over `endpoints` engines a fake scraper reports idle (no engine here), so
    each decision scores them all."""
    cfg = RouterConfig.from_mapping({"endpoints": {"static": ENGINES}, "cache": cache})
    eps = EndpointSet(
        cfg.metrics,
        scraper=lambda ep: [EngineSample("vllm", "m", kv_usage=0.1, running=1.0, waiting=0.0)],
    )
    eps.replace([Endpoint(f"10.0.0.{i}:8000", f"sim://{i}/metrics") for i in range(endpoints)])
    eps.scrape_all()
    return Picker(cfg, eps, RouterMetrics())


def _grown(picker: Picker, bodies: list[bytes], prefix: str) -> int:
    """Bytes tracemalloc sees kept after picking `bodies` (the parse's transient copies
    freed)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, body in enumerate(bodies):
            picker.pick(body, {"x-request-id": f"{prefix}-{i}"}, None)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_pick_keeps_no_prompt_for_its_explanation() -> None:
    picker = _picker()
    kept = _grown(picker, [many_images(200, seed=s) for s in range(5)], "img")
    # before: each request kept 200 x 64 KiB of markers (13 MB); now its decision, 200
    # image estimates of which 64 are listed, and the image index's entries
    assert kept < 1_000_000, kept
    doc = picker.explain("img-4")
    assert doc is not None
    assert len(doc["request"]["images"]) == 64 and doc["request"]["images_total"] == 200
    assert doc["request"]["prefix_blocks"] == 256  # the head the prefix index reads
    text = _grown(_picker(), [chat("s" * 1000, "u" * 100_000 + str(i)) for i in range(50)], "t")
    assert text < 50 * 20_000, text  # 100 KB prompts: about 3 KB a decision


def test_the_size_estimate_is_within_a_factor_of_two_of_what_is_kept() -> None:
    for endpoints in (1, 8, 64):
        picker = _picker(endpoints, prefix=False, images=False)
        kept = _grown(picker, [chat("s", f"question {i}") for i in range(300)], "q")
        estimated = picker.explain_bytes
        assert len(picker.explain("q-299")["candidates"]) == endpoints  # type: ignore[index]
        assert estimated / 2 <= kept <= estimated * 2, (endpoints, kept, estimated)


def test_decisions_are_kept_by_count_and_by_bytes() -> None:
    picker = _picker()
    picker._explain_max_bytes = 200_000  # a small budget, to see it bind
    for i in range(500):
        picker.pick(chat("s", f"q{i}"), {"x-request-id": f"r{i}"}, None)
    assert picker.explain_bytes <= 200_000
    assert picker.explain("r499") is not None and picker.explain("r0") is None
    kept = len(picker.recent_ids(10_000))
    assert 10 < kept < 500
    assert EXPLAIN_MAX_BYTES == 64 << 20


def test_long_request_and_context_ids_are_kept_under_their_digest() -> None:
    picker = _picker()
    rid, ctx = "r" * 60_000, "c" * 60_000
    first = picker.pick(chat("s", "q"), {"x-request-id": rid, HEADER_CONTEXT: ctx}, None)
    doc = picker.explain(rid)
    assert doc is not None and doc["request_id"] == rid
    assert doc["context_id"] == "c" * MAX_ID_CHARS + "..."
    assert id_key(rid) in picker.recent_ids() and rid not in picker.recent_ids()
    again = picker.pick(chat("s", "q2"), {"x-request-id": "r2", HEADER_CONTEXT: ctx}, None)
    assert again.decision.chosen == first.decision.chosen
    assert picker.explain("r2")["context_bound_to"] == first.decision.chosen  # type: ignore[index]
    assert len(id_key(ctx)) == len("sha256:") + 64 and id_key("short") == "short"
