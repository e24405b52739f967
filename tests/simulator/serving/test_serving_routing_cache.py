"""The serving simulation's cache-aware routing: request bodies that carry the simulated
request's content ids (so the router's prefix and image indexes see repeats), the kvspread
policy through `router.cacheterms.CacheTerms`, and the `llm-d` policy (queue 2, KV 2,
prefix 3) (issue 24, point 5)."""

from __future__ import annotations

import numpy as np

from router.prefix import PrefixIndex
from router.request import parse_request
from simulator.serving.cluster import Pod
from simulator.serving.engine import Engine
from simulator.serving.routing import (
    LLM_D_PREFIX,
    ROUTINGS,
    KvspreadPicker,
    LlmD,
    make_router,
    request_body,
)
from simulator.serving.workload import Request
from tests.simulator.serving.test_serving_routing import CFG, KINDS, MODEL, MODELS, NODES, load


def pod(pid: str) -> Pod:
    """A ready replica with an engine of 27,434 16-token blocks (an 8B model on one H100)."""
    p = Pod(pid, "chat", 24.0, 0.0, state="ready", node=0, tiebreak=0.5)
    p.engine = Engine(CFG.cost, CFG.gpu, MODEL, 16 * 27_434)
    return p


def with_ids(rid: int, hashes: tuple[int, ...], block: int = 512, images: tuple[int, ...] = (),
             image_ids: tuple[int, ...] = ()) -> Request:  # fmt: skip
    """A request whose prompt is `hashes` blocks of `block` tokens (images first)."""
    prompt = sum(images) + block * len(hashes)
    r = Request(rid, "chat", "text", 0.0, prompt, images, 50)
    ends = tuple(sum(images) + block * (i + 1) for i in range(len(hashes)))
    for name, value in (("block_hashes", hashes), ("block_ends", ends), ("image_ids", image_ids)):
        if hasattr(r, name) or not hasattr(r, "__slots__"):
            setattr(r, name, value)
        else:  # before the simulator's requests carry content ids: a stand-in with them
            r = _Ided(r)
            setattr(r, name, value)
    return r


class _Ided:
    """A request with content ids, for a Request class that has no such fields yet."""

    def __init__(self, r: object) -> None:
        self.__dict__["_r"] = r

    def __getattr__(self, name: str) -> object:
        return getattr(self.__dict__["_r"], name)

    def __setattr__(self, name: str, value: object) -> None:
        self.__dict__[name] = value


def test_bodies_share_text_where_the_requests_share_blocks() -> None:
    idx = PrefixIndex(LLM_D_PREFIX)
    a = parse_request(request_body(with_ids(1, (11, 12, 13)), "m", 28))
    b = parse_request(request_body(with_ids(2, (11, 12, 99)), "m", 28))
    ha, hb = idx.hashes(a), idx.hashes(b)
    shared = next(i for i, (x, y) in enumerate(zip(ha, hb, strict=True)) if x != y)
    assert shared == 2 * 512 * 4 // 64  # two 512-token blocks of 64-character hash blocks
    assert a.prompt_tokens == 3 * 512
    img = parse_request(request_body(with_ids(3, (5,), images=(256,), image_ids=(42,)), "m", 28))
    again = parse_request(request_body(with_ids(4, (6,), images=(256,), image_ids=(42,)), "m", 28))
    other = parse_request(request_body(with_ids(5, (5,), images=(256,), image_ids=(43,)), "m", 28))
    assert img.images[0].digest == again.images[0].digest != other.images[0].digest
    assert img.image_tokens == 256


def test_kvspread_keeps_a_shared_prefix_where_it_went_until_the_queue_costs_more() -> None:
    ks = KvspreadPicker(MODELS, KINDS)
    pods = [pod("a"), pod("b"), pod("c")]
    ks.scrape({"chat": pods}, NODES, 0.0)
    first = ks.pick(with_ids(1, (1, 2, 3, 4)), pods, 0.1).pid
    # after the first prompt's prefill (2048 tokens drain in 0.26 s at 8000 tokens/s): at
    # 0.1 its hit would only save what the wait behind that prefill costs
    again = [ks.pick(with_ids(10 + i, (1, 2, 3, 4, 50 + i)), pods, 0.5).pid for i in range(3)]
    assert again == [first] * 3
    reason = "cache"
    assert ks.cache["chat"].prefix.entries > 0 and reason in router_reasons()
    busy = {p.pid: p for p in pods}
    load(busy[first], waiting=12, running=30)  # a long queue: 2048 cached tokens are not worth it
    ks.scrape({"chat": pods}, NODES, 1.0)
    assert ks.pick(with_ids(20, (1, 2, 3, 4, 77)), pods, 1.1).pid != first
    ks.close()


def test_requests_without_ids_are_never_looked_up() -> None:
    from tests.simulator.serving.test_serving_routing import request

    ks = KvspreadPicker(MODELS, KINDS)
    pods = [pod("a"), pod("b")]
    ks.scrape({"chat": pods}, NODES, 0.0)
    for i in range(5):
        ks.pick(request(i, prompt=4000), pods, 0.1)
    assert ks.cache["chat"].prefix.entries == 0  # their filler text shares nothing
    ks.close()


def test_llm_d_adds_the_prefix_scorer_at_weight_3() -> None:
    assert "llm-d" in ROUTINGS
    ld = make_router("llm-d", MODELS, KINDS, np.random.default_rng(0))
    assert isinstance(ld, LlmD)
    pods = [pod("a"), pod("b"), pod("c")]
    ld.scrape({"chat": pods}, NODES, 0.0)
    first = ld.pick(with_ids(1, (1, 2, 3, 4)), pods, 0.1).pid
    assert all(
        ld.pick(with_ids(2 + i, (1, 2, 3, 4, 9 + i)), pods, 0.1).pid == first for i in range(4)
    )
    # the prefix weight (3) outweighs the whole queue scorer (2): stickiness that ignores
    # load, as BLIS found of llm-d's profiles
    load({p.pid: p for p in pods}[first], waiting=40, running=60)
    ld.scrape({"chat": pods}, NODES, 1.0)
    assert ld.pick(with_ids(9, (1, 2, 3, 4, 5)), pods, 1.1).pid == first


def router_reasons() -> tuple[str, ...]:
    from router.scoring import REASONS

    return REASONS
