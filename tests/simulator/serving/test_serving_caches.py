"""The engine's prefix (KV) cache and image-encoder cache on hand-made cases.

The toy cost model of test_serving_engine (prefill 1 ms per token, 4-token blocks) keeps
the times readable; content blocks here are 8 tokens (two engine blocks each).
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator.serving.config import CacheSpec
from simulator.serving.encodercache import EncoderCache
from simulator.serving.engine import Engine
from simulator.serving.prefixcache import PrefixCache, block_sizes, chain
from simulator.serving.workload import Request
from tests.simulator.serving.test_serving_engine import TOY_COST, TOY_GPU, TOY_MODEL


def prompt_req(
    rid: int,
    ids: tuple[int, ...],
    out: int = 1,
    tail: int = 0,
    images: tuple[int, ...] = (),
    image_ids: tuple[int, ...] = (),
) -> Request:
    """A prompt of 8-token content blocks `ids` (+ `tail` unshared tokens)."""
    prompt = 8 * len(ids) + tail
    ends = tuple(8 * (i + 1) for i in range(len(ids)))
    return Request(
        rid,
        "svc",
        "text",
        0.0,
        prompt,
        images,
        out,
        block_hashes=chain(ids),
        block_ends=ends,
        image_ids=image_ids,
    )


def engine(pool_tokens: int = 1000, cache: CacheSpec | None = None) -> Engine:
    return Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=pool_tokens, cache=cache)


def check_pool(eng: Engine) -> None:
    """Blocks in use = private blocks of running requests + cached blocks in use, each
    shared block once; cached free blocks fit in the free room."""
    private = sum(r.blocks - r.shared for r in eng.running)
    cached = eng.prefix.in_use if eng.prefix is not None else 0
    assert eng.used_blocks == private + cached
    assert all(0 <= r.shared <= r.blocks for r in eng.running)
    if eng.prefix is not None:
        assert eng.used_blocks + eng.prefix.free <= eng.pool_blocks


def run(eng: Engine, t: float = 0.0) -> float:
    """Run until idle (checking the pool after every segment); returns the time."""
    while True:
        end = eng.plan(t, 1.0)
        if end is None:
            return t
        t = end
        eng.finish(t)
        check_pool(eng)


def ttft(eng: Engine, r: Request, t: float = 0.0) -> float:
    r.arrival = t
    eng.enqueue(r)
    run(eng, t)
    return r.first_token - t


def test_a_repeated_prompt_prefills_only_its_new_blocks() -> None:
    eng = engine()
    first = prompt_req(0, (1, 2, 3, 4, 5))
    assert ttft(eng, first) == pytest.approx(0.040)  # 40 tokens, nothing cached
    assert first.prefix_hit_tokens == 0 and first.prefix_query_tokens == 40
    # the same four leading blocks, then two new ones: only the 16 new tokens prefill
    again = prompt_req(1, (1, 2, 3, 4, 8, 9))
    assert ttft(eng, again, 1.0) == pytest.approx(0.016)
    assert (again.prefix_hit_tokens, again.prefix_query_tokens) == (32, 48)
    # a different first block shares nothing (a hash chain: the rest cannot match)
    other = prompt_req(2, (7, 2, 3, 4, 5))
    assert ttft(eng, other, 2.0) == pytest.approx(0.040)
    assert other.prefix_hit_tokens == 0


def test_the_last_token_is_always_computed() -> None:
    """vLLM caps a hit at num_tokens - 1 in whole blocks: a prompt cached whole still
    prefills its last block."""
    eng = engine()
    ttft(eng, prompt_req(0, (1, 2, 3)))
    again = prompt_req(1, (1, 2, 3))
    assert ttft(eng, again, 1.0) == pytest.approx(0.008)  # blocks 1-2 hit, block 3 again
    assert again.prefix_hit_tokens == 16


def test_running_requests_share_cached_blocks_once() -> None:
    eng = engine()
    ttft(eng, prompt_req(0, (1, 2, 3, 4)))
    a = prompt_req(1, (1, 2, 3, 9), out=50)
    b = prompt_req(2, (1, 2, 3, 10), out=50)
    eng.enqueue(a)
    eng.enqueue(b)
    end = eng.plan(1.0, 1.0)
    assert end is not None
    eng.finish(end)
    check_pool(eng)
    # blocks 1-3 (6 engine blocks) are held by both; each has its own fourth block
    assert a.shared >= 6 and b.shared >= 6
    assert eng.used_blocks < a.blocks + b.blocks
    run(eng, end)


def test_freed_blocks_stay_cached_until_the_pool_needs_room() -> None:
    eng = engine(pool_tokens=64)  # 16 engine blocks
    ttft(eng, prompt_req(0, (1, 2, 3, 4, 5)))  # 10 blocks, all cached and free now
    assert eng.prefix is not None
    assert (eng.used_blocks, eng.prefix.free, eng.prefix.evicted) == (0, 10, 0)
    # an unrelated prompt takes 10 blocks: 4 cached ones must go, the deepest first
    ttft(eng, prompt_req(1, (21, 22, 23, 24, 25)), 1.0)
    assert eng.prefix.evicted == 4
    # the first prompt again: its head survived the eviction, its tail did not
    again = prompt_req(2, (1, 2, 3, 4, 5), tail=4)
    ttft(eng, again, 2.0)
    # 11 blocks needed; the survivors a[0..2] (6 blocks) are taken back, b's tail evicted
    assert again.prefix_hit_tokens == 24
    assert eng.prefix.evicted == 10


def test_eviction_is_least_recently_freed_first() -> None:
    cache = PrefixCache()
    a, b = chain((1, 2)), chain((5, 6))
    for h in (*a, *b):
        cache.register(h, 2)
    cache.release(a)  # a freed first: a[1] (its tail) is the oldest entry, then a[0]
    cache.release(b)
    assert (cache.in_use, cache.free) == (0, 8)
    assert cache.evict_to(4) == 4
    assert a[0] not in cache and a[1] not in cache and b[0] in cache and b[1] in cache


def test_a_block_cached_shorter_ends_the_hit() -> None:
    """A content block cached from a prompt that ended inside it holds fewer engine
    blocks than a longer prompt's: the hit stops there (nothing after it is contiguous)."""
    cache = PrefixCache()
    h = chain((1, 2, 3))
    cache.register(h[0], 2)
    cache.register(h[1], 1)  # the earlier prompt ended half-way into block 2
    cache.register(h[2], 2)
    sizes = block_sizes((8, 16, 24), 4)
    assert sizes == [2, 2, 2]
    assert cache.match(h, sizes, 100)[:2] == (2, 3)


def test_caching_off_prefills_everything() -> None:
    eng = engine(cache=CacheSpec(prefix_caching=False))
    ttft(eng, prompt_req(0, (1, 2, 3, 4)))
    again = prompt_req(1, (1, 2, 3, 4, 5))
    assert ttft(eng, again, 1.0) == pytest.approx(0.040)
    assert again.prefix_hit_tokens == 0


def test_requests_without_ids_run_as_without_caches() -> None:
    """No content ids: the caches change nothing (existing workloads keep their numbers)."""
    times = []
    for spec in (CacheSpec(), CacheSpec(prefix_caching=False, encoder_caching=False)):
        eng = engine(pool_tokens=40, cache=spec)
        reqs = [Request(i, "svc", "text", 0.0, 10 + i, (4,) * (i % 2), 5 + i) for i in range(6)]
        for r in reqs:
            eng.enqueue(r)
        run(eng)
        times.append([(r.first_token, r.finish, r.preemptions) for r in reqs])
    assert times[0] == times[1]


def image_req(rid: int, image_id: int, text: int = 10, tokens: int = 100) -> Request:
    return Request(rid, "svc", "image", 0.0, text + tokens, (tokens,), 1, image_ids=(image_id,))


def test_an_image_sent_twice_to_one_replica_is_encoded_once() -> None:
    eng = engine()
    first = image_req(0, 77)
    # encode 5 + 0.1 x 100 = 15 ms, then 110 tokens of prefill
    assert ttft(eng, first) == pytest.approx(0.125)
    second = image_req(1, 77, text=30)  # the same image with other text
    assert ttft(eng, second, 1.0) == pytest.approx(0.130)  # prefill only, no encoding
    assert (first.images_encoded, second.images_encoded, second.images_encoder_hits) == (1, 0, 1)
    third = image_req(2, 78)
    assert ttft(eng, third, 2.0) == pytest.approx(0.125)
    assert third.images_encoded == 1


def test_the_encoder_cache_evicts_the_least_recent_image() -> None:
    eng = engine(cache=CacheSpec(encoder_cache_tokens=250))  # room for two 100-token images
    for i, image in enumerate((1, 2, 1, 3)):  # 1 is used again before 3 arrives
        ttft(eng, image_req(i, image), float(i))
    assert eng.encoder is not None and eng.encoder.evicted == 1
    assert 1 in eng.encoder and 3 in eng.encoder and 2 not in eng.encoder
    again = image_req(9, 2)
    ttft(eng, again, 9.0)
    assert again.images_encoded == 1


def test_encoder_cache_budget_defaults_to_the_step_budget() -> None:
    eng = engine()
    assert eng.encoder is not None and eng.encoder.capacity == TOY_COST.chunk_tokens
    big = EncoderCache(100)
    big.insert(1, 300)  # larger than the budget: kept alone, as vLLM sizes for the largest
    assert len(big) == 1 and big.tokens == 300
    big.insert(2, 50)
    assert 1 not in big and 2 in big
    with pytest.raises(ValueError, match="capacity"):
        EncoderCache(0)


def test_an_image_inside_the_cached_prefix_needs_no_encoder() -> None:
    """The next turn re-sends the image at the start of its prompt: its tokens are in the
    cached prefix, so no encoder output is needed, not even a cache lookup."""
    eng = engine(cache=CacheSpec(encoder_caching=False))
    ids = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)  # 112 tokens: image 100 + text
    first = dataclasses.replace(prompt_req(0, ids), images=(100,), image_ids=(5,))
    ttft(eng, first)
    assert first.images_encoded == 1
    turn2 = dataclasses.replace(prompt_req(1, (*ids, 15, 16)), images=(100,), image_ids=(5,))
    assert ttft(eng, turn2, 1.0) == pytest.approx(0.016)  # blocks 1-14 cached: 16 new tokens
    assert (turn2.images_prefix, turn2.images_encoded) == (1, 0)


def test_cache_columns_of_a_run() -> None:
    """summary.csv's cache columns: token hit rate over the requests with ids, its spread
    over replicas, the encoder hit rate over images that needed an output; NaN (shown
    as '-') where no request carried ids."""
    import math

    from simulator.serving.report import cache_summary

    def done(instance: int, hit: int, query: int, enc: tuple[int, int, int] = (0, 0, 0)) -> Request:
        r = prompt_req(instance, (1, 2))
        r.instance, r.prefix_hit_tokens, r.prefix_query_tokens = instance, hit, query
        r.image_ids = (1,) if any(enc) else ()
        r.images_prefix, r.images_encoder_hits, r.images_encoded = enc
        return r

    rows = cache_summary([done(0, 0, 100), done(0, 50, 100), done(1, 90, 100, (1, 1, 2))])
    assert rows["prefix_hit_rate"] == pytest.approx(140 / 300)
    assert rows["prefix_hit_rate_min_replica"] == pytest.approx(0.25)
    assert rows["prefix_hit_rate_max_replica"] == pytest.approx(0.9)
    assert rows["encoder_cache_hit_rate"] == pytest.approx(1 / 3)
    assert rows["images_in_cached_prefix"] == 1
    plain = cache_summary([Request(0, "svc", "text", 0.0, 10, (), 1)])
    assert all(math.isnan(v) for v in plain.values())
