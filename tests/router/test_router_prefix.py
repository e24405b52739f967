"""The approximate prefix index (router/prefix.py) and the image index (router/images.py):
hashing, matching, bounds and evictions, and the picker using them."""

from __future__ import annotations

import base64
import json

import pytest

from kvspread.settings import ConfigError
from router.images import DIGEST_SLICE_CHARS, ImageIndex, image_digest
from router.prefix import ENTRY_BYTES, CacheConfig, PrefixIndex
from router.request import parse_request

SYSTEM = "You are a careful assistant. " * 40  # ~1120 characters: 17 blocks of 64
CFG16 = CacheConfig(block_tokens=16)  # 64-character blocks: short prompts have several


def chat(*messages: tuple[str, object], model: str = "m") -> bytes:
    msgs = [{"role": r, "content": c} for r, c in messages]
    return json.dumps({"model": model, "messages": msgs}).encode()


def test_the_system_prompt_comes_first_and_blocks_chain() -> None:
    idx = PrefixIndex(CFG16)
    a = parse_request(chat(("system", SYSTEM), ("user", "tell me about cats")))
    b = parse_request(chat(("user", "tell me about cats"), ("system", SYSTEM)))
    assert idx.hashes(a) == idx.hashes(b)  # the system prompt is first either way
    c = parse_request(chat(("system", SYSTEM), ("user", "dogs, please " * 20)))
    ha, hc = idx.hashes(a), idx.hashes(c)
    shared = len(SYSTEM) // 64
    assert ha[:shared] == hc[:shared]  # the shared system prompt's blocks agree
    assert len(hc) > shared + 1 and set(hc[shared + 1 :]).isdisjoint(ha)  # the questions differ
    other_model = parse_request(chat(("system", SYSTEM), model="n"))
    assert not set(idx.hashes(other_model)) & set(ha)  # seeded by the model
    assert idx.hashes(parse_request(chat(("user", "short")))) == []  # under one block


def test_a_match_is_the_leading_run_and_its_share() -> None:
    idx = PrefixIndex(CFG16)
    first = parse_request(chat(("system", SYSTEM), ("user", "question one " * 10)))
    idx.record("a:1", idx.hashes(first), None)
    again = parse_request(chat(("system", SYSTEM), ("user", "question two " * 10)))
    m = idx.match(idx.hashes(again), again)
    assert set(m) == {"a:1"}
    assert 0.6 < m["a:1"].share < 1.0  # the system prompt, not the new question
    assert m["a:1"].saved_tokens == m["a:1"].blocks * 16
    same = idx.match(idx.hashes(first), first)["a:1"]
    assert same.blocks == len(idx.hashes(first)) and same.share > 0.95


def test_capacity_follows_the_engines_kv_and_evictions_are_counted() -> None:
    idx = PrefixIndex(CFG16)
    assert idx.capacity(27434 * 16) == 27434  # num_gpu_blocks x block_size / 16-token blocks
    assert idx.capacity(None) == CFG16.default_capacity_blocks
    assert PrefixIndex(CacheConfig(capacity_blocks=5)).capacity(10**9) == 5
    req = parse_request(chat(("user", "x" * 64 * 40)))
    hashes = idx.hashes(req)
    idx.record("a:1", hashes, kv_capacity_tokens=10 * 16)  # room for 10 blocks
    assert idx.blocks_of("a:1") == 10 and idx.evictions == len(hashes) - 10
    assert idx.match(hashes, req) == {}  # the oldest (leading) blocks went first


def test_memory_is_bounded_in_mib() -> None:
    cfg = CacheConfig(block_tokens=16, memory_mib=0.01)  # 32 entries at ENTRY_BYTES each
    idx = PrefixIndex(cfg)
    for n in range(20):
        req = parse_request(chat(("user", f"{n} " + "y" * 64 * 30)))
        idx.record(f"10.0.0.{n}:8000", idx.hashes(req), None)
        assert idx.entries <= cfg.max_entries
    assert idx.memory_bytes() <= cfg.memory_mib * (1 << 20)
    assert idx.evictions > 0 and cfg.max_entries == int(0.01 * (1 << 20)) // ENTRY_BYTES


def test_forget_and_shrink() -> None:
    idx = PrefixIndex(CFG16)
    req = parse_request(chat(("user", "z" * 64 * 10)))
    h = idx.hashes(req)
    idx.record("a:1", h, None)
    idx.record("b:1", h, None)
    idx.shrink("a:1", 3)
    assert idx.blocks_of("a:1") == 3
    idx.keep_only({"a:1"})
    assert idx.blocks_of("b:1") == 0 and idx.entries == 3
    idx.forget("a:1")
    assert idx.entries == 0 and idx.match(h, req) == {}


@pytest.mark.parametrize(
    "section,message",
    [
        ({"block_tokens": 8}, "cache.block_tokens"),
        ({"memory_mib": 0}, "cache.memory_mib"),
        ({"max_blocks": 0}, "cache.max_blocks"),
    ],
)
def test_bad_cache_config_names_the_key(section: dict[str, object], message: str) -> None:
    from router.config import RouterConfig

    with pytest.raises(ConfigError, match=message):
        RouterConfig.from_mapping({"endpoints": {"static": "10.0.0.1:1"}, "cache": section})


def test_image_digest_is_of_the_text_in_slices() -> None:
    raw = base64.b64encode(b"\x89PNG" + b"\x01" * (3 * DIGEST_SLICE_CHARS)).decode()
    url = "data:image/png;base64," + raw
    assert image_digest(url) == image_digest(str(url))
    assert image_digest(url) != image_digest(url[:-4] + "AAAA")
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}]}]}  # fmt: skip
    req = parse_request(json.dumps(body).encode())
    assert req.images[0].digest == image_digest(url)
    assert any(f"{image_digest(url):016x}" in p for p in req.prompt_parts)


def test_image_index_is_bounded_and_counts_evictions() -> None:
    idx = ImageIndex(max_images=2, max_endpoints_per_image=2)
    idx.record("a:1", [1, 2])
    idx.record("b:1", [2])
    assert idx.hits([1, 2, 9]) == {"a:1": 2, "b:1": 1}
    idx.record("c:1", [2])  # at most 2 endpoints an image: the oldest goes
    assert idx.hits([2]) == {"b:1": 1, "c:1": 1}
    idx.record("a:1", [3])
    assert len(idx) == 2 and idx.evictions == 1 and idx.hits([1]) == {}
    idx.forget("c:1")
    assert idx.hits([2]) == {"b:1": 1} and idx.addresses() == {"a:1", "b:1"}


def test_a_huge_prompt_hashes_only_max_blocks() -> None:
    """Hashing is bounded by `max_blocks`, however long the prompt (a 4 MB one here)."""
    cfg = CacheConfig(max_blocks=8)
    idx = PrefixIndex(cfg)
    req = parse_request(chat(("system", SYSTEM), ("user", "x" * (4 << 20))))
    hashes = idx.hashes(req)
    assert len(hashes) == 8
    assert hashes == PrefixIndex(cfg).hashes(
        parse_request(chat(("system", SYSTEM), ("user", "x" * 5000)))
    )


def test_record_returns_what_was_new_and_discard_takes_only_that_back() -> None:
    """A pick another endpoint served (router/served.py) takes back only the blocks and
    images the pick added: what the picked endpoint already held stays."""
    idx = PrefixIndex(CFG16)
    old = idx.hashes(parse_request(chat(("system", SYSTEM))))
    idx.record("a:1", old, None)
    both = idx.hashes(parse_request(chat(("system", SYSTEM), ("user", "q " * 100))))
    added = idx.record("a:1", both, None)
    assert added == tuple(both[len(old) :])  # the system prompt's blocks were held already
    idx.discard("a:1", added)
    assert idx.blocks_of("a:1") == len(old) and idx.entries == len(old)
    idx.discard("a:1", added)  # twice, or blocks gone meanwhile: nothing more happens
    idx.discard("nobody:1", added)
    assert idx.entries == len(old)
    idx.discard("a:1", tuple(old))
    assert idx.entries == 0 and idx.blocks_of("a:1") == 0
    images = ImageIndex()
    assert images.record("a:1", [1, 2]) == (1, 2)
    assert images.record("a:1", [2, 3]) == (3,)
    images.record("b:1", [3])
    images.discard("a:1", (3,))
    assert images.hits([1, 2, 3]) == {"a:1": 2, "b:1": 1}
    images.discard("b:1", (3,))
    assert len(images) == 2  # a digest with no endpoint left is dropped
