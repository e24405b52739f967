"""Precise mode (router/kvevents.py) against a fake publisher that sends vLLM's own wire:
ZMQ PUB, (topic, sequence, msgpack KVEventBatch) in both of vLLM's encodings."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from router.config import RouterConfig
from router.endpoints import EndpointSet
from router.kvevents import KvEventSubscriber, decode_batch
from router.metrics import RouterMetrics
from router.picker import Picker
from router.prefix import CacheConfig, PrefixIndex
from router.request import parse_request
from tests.router.conftest import wait
from tests.router.kv_event_publisher import FakeKvEventPublisher

ENGINE = "127.0.0.1:8000"
TOKENS = list(range(1000, 1048))  # three 16-token blocks


@pytest.fixture(params=[True, False], ids=["array-like", "map"])
def feed(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[FakeKvEventPublisher, KvEventSubscriber]]:
    pub = FakeKvEventPublisher(array_like=request.param)
    prefix = PrefixIndex(CacheConfig(block_tokens=16))  # the engine's block size
    sub = KvEventSubscriber(prefix, lambda: [ENGINE], port=pub.port).start()
    try:
        # PUB drops what it sends before the SUB has joined: send until one arrives (the
        # removal of a block never stored, which changes nothing)
        def joined() -> bool:
            pub.send(pub.removed([0]))
            return sub.messages > 0

        wait(joined)
        yield pub, sub
    finally:
        sub.stop()
        pub.close()


def sent(pub: FakeKvEventPublisher, sub: KvEventSubscriber, *events: object, **kw: int) -> None:
    """Send one batch and wait until it is applied (every earlier one was, in order)."""
    pub.send(*events, **kw)
    wait(lambda: sub.last_seq(ENGINE) == pub.seq - 1)


def test_stored_and_removed_blocks_are_what_the_engine_holds(
    feed: tuple[FakeKvEventPublisher, KvEventSubscriber],
) -> None:
    pub, sub = feed
    sent(pub, sub, pub.stored([11, 12], None, TOKENS[:32]))
    sent(pub, sub, pub.stored([13], 12, TOKENS[32:48]))
    assert sub.match(tuple(TOKENS)) == {ENGINE: 48}
    assert sub.match(tuple(TOKENS[:40])) == {ENGINE: 32}  # full blocks only
    assert sub.match(tuple([7] + TOKENS[1:])) == {}  # a different first block
    sent(pub, sub, pub.removed([13]))
    assert sub.match(tuple(TOKENS)) == {ENGINE: 32}
    assert sub.engines[ENGINE].tokens == 32
    sent(pub, sub, pub.cleared())
    assert sub.match(tuple(TOKENS)) == {} and sub.engines[ENGINE].tokens == 0


def test_the_approximate_index_follows_removals_and_clears(
    feed: tuple[FakeKvEventPublisher, KvEventSubscriber],
) -> None:
    pub, sub = feed
    req = parse_request(json.dumps({"model": "m", "prompt": "w" * 64 * 20}).encode())
    hashes = sub.prefix.hashes(req)
    sub.prefix.record(ENGINE, hashes, None)
    sent(pub, sub, pub.stored([21, 22, 23], None, TOKENS))  # 48 tokens: 3 blocks of 16
    sent(pub, sub, pub.removed([23]))
    assert sub.prefix.blocks_of(ENGINE) == 2  # no more than the engine holds
    sent(pub, sub, pub.cleared())
    assert sub.prefix.blocks_of(ENGINE) == 0 and sub.prefix.match(hashes, req) == {}


def test_garbage_and_gaps_are_counted_never_fatal(
    feed: tuple[FakeKvEventPublisher, KvEventSubscriber],
) -> None:
    pub, sub = feed
    pub.send_raw(b"", (99).to_bytes(8, "big"), b"\xc1 not msgpack")
    pub.send_raw(b"only two frames", b"x")
    wait(lambda: sub.bad >= 2)
    sent(pub, sub, pub.stored([31], None, TOKENS[:16]), skip_seq=5)
    assert sub.gaps >= 1 and sub.match(tuple(TOKENS[:16])) == {ENGINE: 16}
    with pytest.raises(ValueError, match="batch"):
        decode_batch(b"\x01")


def test_the_picker_uses_what_the_engine_holds_for_token_prompts(
    feed: tuple[FakeKvEventPublisher, KvEventSubscriber],
) -> None:
    pub, sub = feed
    cfg = RouterConfig.from_mapping({"endpoints": {"static": ENGINE}})
    picker = Picker(cfg, EndpointSet(cfg.metrics), RouterMetrics())
    picker.cache.kv_events = sub
    sent(pub, sub, pub.stored([41, 42, 43], None, TOKENS))
    req = parse_request(json.dumps({"model": "m", "prompt": TOKENS}).encode())
    hit = picker.cache.lookup(req).hits[ENGINE]
    assert hit.saved_tokens == 48 and hit.prefix_share == 1.0
