"""When the engine takes KV blocks: all of a prompt at admission, or per step (vLLM V1).

vLLM V1's scheduler allocates blocks only for the tokens each step schedules
(KVCacheManager.allocate_slots(request, num_new_tokens)); `cost.kv_alloc: step` (the
default) models that, `prompt` reserves the whole prompt at admission. The toy cost model
of test_serving_engine (4-token blocks) with a chunk budget of 8 tokens.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import pytest

from kvspread.settings import ConfigError
from simulator.serving.config import CacheSpec, config_from_mapping
from simulator.serving.engine import Engine
from simulator.serving.prefixcache import chain
from simulator.serving.workload import Request
from tests.simulator.serving.test_serving_caches import run
from tests.simulator.serving.test_serving_engine import TOY_COST, TOY_GPU, TOY_MODEL


def engine(alloc: str, pool_tokens: int, caching: bool = False) -> Engine:
    cost = dataclasses.replace(TOY_COST, chunk_tokens=8, kv_alloc=alloc)
    cache = CacheSpec(prefix_caching=caching)
    return Engine(cost, TOY_GPU, TOY_MODEL, pool_tokens=pool_tokens, cache=cache)


def req(rid: int, prompt: int, out: int, ids: tuple[int, ...] = ()) -> Request:
    """A request; `ids` are 4-token content blocks (one engine block each)."""
    r = Request(rid, "svc", "text", 0.0, prompt, (), out)
    if ids:
        r.block_hashes = chain(ids)
        r.block_ends = tuple(4 * (i + 1) for i in range(len(ids)))
    return r


def test_per_step_allocation_admits_more_prompts_and_so_preempts() -> None:
    """Two 40-token prompts in a 15-block pool: reserving whole prompts runs them one after
    the other; per-step allocation starts the second while the first decodes, and their
    growth then preempts the newer one (as vLLM V1 does)."""
    done = {}
    for alloc in ("prompt", "step"):
        eng = engine(alloc, pool_tokens=60)
        a, b = req(1, 40, 20), req(2, 40, 20)
        eng.enqueue(a)
        eng.enqueue(b)
        run(eng)
        assert (a.status, b.status) == ("ok", "ok")
        done[alloc] = (eng.preemptions, a.preemptions, b.preemptions)
        assert eng.used_blocks == 0
    assert done["prompt"] == (0, 0, 0)
    assert done["step"][0] >= 1 and done["step"][1] == 0  # only the newer one is preempted


def test_per_step_admission_takes_only_the_first_chunk() -> None:
    eng = engine("step", pool_tokens=400)
    r = req(1, 40, 2)
    eng.enqueue(r)
    eng.plan(0.0, 1.0)
    assert r.blocks == 2  # 8 tokens of the step's budget, not the 10 blocks of the prompt
    assert eng.used_blocks == 2
    t = eng.seg_end
    eng.finish(t)
    eng.enqueue(req(2, 40, 2))
    assert eng.plan(t, 1.0) is not None
    assert [x.rid for x in eng.running] == [1]  # the budget went to the running prompt
    assert r.blocks == 4
    t = eng.seg_end
    eng.finish(t)
    run(eng, t)


def test_per_step_caching_lets_a_preempted_prompt_hit_its_own_chunks() -> None:
    """Blocks are cached as chunks compute, so a request preempted before its prefill ends
    finds them again on readmission; those hits are counted apart (vLLM's
    preempted_hits) and every block taken is counted once (BLIS's misses)."""
    eng = engine("step", pool_tokens=60, caching=True)
    a = req(1, 40, 20, ids=tuple(range(100, 110)))
    b = req(2, 40, 20, ids=tuple(range(200, 210)))
    eng.enqueue(a)
    eng.enqueue(b)
    run(eng)  # checks the pool after every segment
    assert (a.status, b.status) == ("ok", "ok")
    assert b.preemptions >= 1
    assert b.prefix_rehit_tokens > 0
    assert b.prefix_rehit_tokens == b.prefix_hit_tokens  # nothing to hit on its first try
    assert a.prefix_hit_tokens == 0
    # a never preempted request takes exactly the blocks of its context
    assert a.kv_blocks_new == -(-(40 + 20 - 1) // 4)


def test_the_default_is_per_step() -> None:
    assert config_from_mapping({}).cost.kv_alloc == "step"


def test_prompt_still_reserves_the_whole_prompt() -> None:
    eng = engine("prompt", pool_tokens=400)
    r = req(1, 40, 2)
    eng.enqueue(r)
    eng.plan(0.0, 1.0)
    assert r.blocks == 10


def test_an_unknown_kv_alloc_is_one_line() -> None:
    with pytest.raises(ConfigError, match="cost.kv_alloc"):
        config_from_mapping({"cost": {"kv_alloc": "lazy"}})


def test_blis_least_loaded_counts_a_fresh_dispatch_once() -> None:
    """BLIS's EffectiveLoad (bench/blis_router.py): a request routed less than alpha0 ago
    counts once, an older one twice, so the replica just sent one looks lighter."""
    from types import SimpleNamespace

    from bench.blis_router import BlisLeastLoaded

    a = SimpleNamespace(pid="a", engine=SimpleNamespace(load=0))
    b = SimpleNamespace(pid="b", engine=SimpleNamespace(load=1))
    router = BlisLeastLoaded(alpha0_s=0.0156, seed=1)
    router._sent["b"] = deque([0.0])  # b's request was routed at 0
    pick = router.pick(req(1, 8, 1), [a, b], 0.010)  # type: ignore[list-item]
    assert pick is a and router.effective_load(b, 0.010) == 1  # type: ignore[arg-type]
    a.engine.load = 1
    assert router.effective_load(a, 0.012) == 1  # type: ignore[arg-type]
    assert router.effective_load(b, 0.020) == 2  # type: ignore[arg-type]  # alpha0 passed
    # every pick counts once at first, so the replica just chosen stays the lighter one
    assert {router.pick(req(2, 8, 1), [a, b], 1.0).pid for _ in range(5)} == {"a"}  # type: ignore[list-item]
    # equal loads (dispatches older than alpha0): ties at random
    picks = {router.pick(req(3, 8, 1), [a, b], 2.0 + i).pid for i in range(20)}  # type: ignore[list-item]
    assert picks == {"a", "b"}
