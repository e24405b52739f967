"""The pure choice: load weight, queue, KV headroom, modality and context affinity, tiers
that keep stale endpoints behind fresh ones, shedding and the subset hint."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.affinity import ContextAffinity
from router.request import RequestInfo, parse_request
from router.scoring import (
    CacheHit,
    EndpointView,
    ScoringConfig,
    _terms,
    choose,
    modality_term,
)

CFG = ScoringConfig()
TEXT = parse_request(b'{"model": "m", "prompt": "hello", "max_tokens": 100}')
IMAGE = RequestInfo("m", "image", (), 10, 1000, 100, False)


def ep(addr: str, **kw: object) -> EndpointView:
    base = dict(fresh=True, stale_reason="", waiting=0.0, running=0.0, kv_usage=0.1,
                kv_capacity_tokens=100_000, gpu_memory_share=0.5, image_token_share=0.0)  # fmt: skip
    base.update(kw)
    return EndpointView(address=addr, **base)  # type: ignore[arg-type]


def test_load_weight_is_the_design_notes_formula() -> None:
    d = choose(TEXT, [ep("a:1", gpu_memory_share=0.5, running=32, image_token_share=0.2)], CFG)
    load = d.candidates[0].terms["load"]
    assert load == pytest.approx(0.4 * 0.5 + 0.3 * 32 / 64 + 0.3 * 0.2)


def test_long_queue_loses() -> None:
    d = choose(TEXT, [ep("a:1", waiting=6), ep("b:1", waiting=0)], CFG)
    assert d.chosen == "b:1" and d.fallbacks == ("a:1",) and d.reason == "score"
    assert d.destination == "b:1,a:1"


def test_picks_since_scrape_count_against_an_endpoint() -> None:
    d = choose(TEXT, [ep("a:1", picks_since_scrape=12), ep("b:1", waiting=2)], CFG)
    assert d.chosen == "b:1"
    # once the engine reports a queue, every pick since the scrape queues too
    d = choose(TEXT, [ep("a:1", waiting=1, picks_since_scrape=3), ep("b:1", waiting=3)], CFG)
    assert d.chosen == "b:1"


def test_picks_alone_never_saturate_an_endpoint() -> None:
    """The router's own pick count is no saturation: only the engine's reported queue and
    KV (with the picks' tokens) against its own capacity are (issue 24, point 4)."""
    d = choose(TEXT, [ep("a:1", picks_since_scrape=40)], CFG)
    assert d.candidates[0].tier == 0 and d.reason == "score"
    full = ep("a:1", picks_since_scrape=40, pending_tokens=90_000, kv_usage=0.1)
    assert choose(TEXT, [full], CFG).candidates[0].tier == 2  # its KV would not hold them
    waiting = ep("a:1", waiting=CFG.saturation_queue)
    assert choose(TEXT, [waiting], CFG).candidates[0].tier == 2


def test_cache_hits_trade_saved_prefill_against_queue() -> None:
    """A cached endpoint keeps a request while its extra queue costs less than the prefill
    it saves; a cache hit is never a reason to pile onto a long queue."""
    eps = [ep("a:1", waiting=2), ep("b:1", waiting=0)]
    hit = {"a:1": CacheHit(prefix_share=0.9, saved_tokens=4000)}  # 0.5 s of prefill
    d = choose(TEXT, eps, CFG, hits=hit)
    assert d.chosen == "a:1" and d.reason == "cache"
    a = next(c for c in d.candidates if c.address == "a:1")
    assert a.terms["prefix"] == 0.9 and a.terms["saved_s"] == pytest.approx(0.5)
    assert a.terms["bonus"] == pytest.approx(min(CFG.max_bonus, 0.5 / 0.1 / 16))
    eps[0] = ep("a:1", waiting=7)  # 7 queued cost more than 0.5 s of prefill
    assert choose(TEXT, eps, CFG, hits=hit).chosen == "b:1"
    small = {"a:1": CacheHit(prefix_share=0.1, saved_tokens=80)}
    assert choose(TEXT, [ep("a:1", waiting=2), ep("b:1")], CFG, hits=small).chosen == "b:1"


def test_prefill_backlog_counts_as_queued_time() -> None:
    """A replica prefilling long prompts reports one running request and little KV; the
    prompt tokens sent there and not yet drained are seconds a new request waits, in the
    bonus's units, so a hit is worth the detour only while it saves more than the
    backlog adds."""
    busy = ep("a:1", running=1, prefill_tokens=8000)  # 1 s of prefill ahead
    assert choose(TEXT, [busy, ep("b:1", running=3)], CFG).chosen == "b:1"
    d = choose(TEXT, [busy], CFG)
    assert d.candidates[0].terms["prefill"] == pytest.approx(1.0 / 0.1 / 16)
    saves = {"a:1": CacheHit(prefix_share=0.9, saved_tokens=12_000)}  # 1.5 s saved
    assert choose(TEXT, [busy, ep("b:1")], CFG, hits=saves).chosen == "a:1"
    little = {"a:1": CacheHit(prefix_share=0.3, saved_tokens=4000)}  # 0.5 s saved
    assert choose(TEXT, [busy, ep("b:1")], CFG, hits=little).chosen == "b:1"
    huge = choose(TEXT, [ep("a:1", prefill_tokens=10**9)], CFG)
    assert huge.candidates[0].terms["prefill"] == 1.0  # bounded as every term


def test_image_cache_hits_count_the_encoder_time() -> None:
    eps = [ep("i:1", modality="image", running=4), ep("j:1", modality="image")]
    d = choose(IMAGE, eps, CFG, hits={"i:1": CacheHit(images=1)})
    assert d.chosen == "i:1" and d.reason == "cache"
    assert d.candidates[0].terms["images_cached"] == 1


def test_modality_pools_hold_while_an_image_pod_has_room() -> None:
    """An image request never goes to a text-only pod while an image pod is fresh and not
    saturated, however busy the image pod is short of saturation."""
    busy_image = ep("i:1", modality="image", waiting=7, running=60, kv_usage=0.9)
    idle_text = ep("t:1", modality="text", waiting=0, running=0, kv_usage=0.0)
    d = choose(IMAGE, [idle_text, busy_image], CFG, hits={"t:1": CacheHit(images=1)})
    assert d.chosen == "i:1"
    saturated = dataclasses.replace(busy_image, waiting=CFG.saturation_queue)
    assert choose(IMAGE, [idle_text, saturated], CFG).chosen == "t:1"


def test_kv_headroom_excludes_endpoints_the_request_does_not_fit() -> None:
    big = dataclasses.replace(TEXT, max_tokens=30_000)
    d = choose(big, [ep("a:1", kv_usage=0.8), ep("b:1", kv_usage=0.5, waiting=5)], CFG)
    assert d.chosen == "b:1"
    a = next(c for c in d.candidates if c.address == "a:1")
    assert a.tier == 2 and "do not fit" in a.note


def test_image_requests_prefer_image_pods_text_prefers_text() -> None:
    eps = [ep("t:1", modality="text"), ep("i:1", modality="image")]
    assert choose(IMAGE, eps, CFG).chosen == "i:1"
    assert choose(TEXT, eps, CFG).chosen == "t:1"
    assert modality_term("multi-image", "multi-image") == 0.0
    assert modality_term("image", None) == 1.0  # unlabelled pods count as text


def test_stale_never_beats_fresh_even_with_better_numbers() -> None:
    stale = ep("s:1", fresh=False, stale_reason="metrics 9.0s old", waiting=0, kv_usage=0.0)
    busy = ep("f:1", waiting=9, kv_usage=0.9, running=60)
    d = choose(TEXT, [stale, busy], CFG)
    assert d.chosen == "f:1" and d.reason == "saturated"
    only_stale = choose(TEXT, [stale], CFG)
    assert only_stale.chosen == "s:1" and only_stale.reason == "stale"


def test_missing_numbers_count_as_the_worst() -> None:
    full = ep("a:1", waiting=3, kv_usage=0.3)
    blank = ep("b:1", waiting=None, running=None, kv_usage=None, gpu_memory_share=None)
    d = choose(TEXT, [blank, full], CFG)
    assert d.chosen == "a:1"
    terms = next(c for c in d.candidates if c.address == "b:1").terms
    assert terms["queue"] == 1.0 and terms["kv"] == 1.0


def test_context_sticks_while_not_saturated() -> None:
    eps = [ep("a:1", waiting=3), ep("b:1", waiting=0)]
    d = choose(TEXT, eps, CFG, context_endpoint="a:1")
    assert d.chosen == "a:1" and d.reason == "context"
    eps[0] = ep("a:1", waiting=9)  # saturated: the context moves
    d = choose(TEXT, eps, CFG, context_endpoint="a:1")
    assert d.chosen == "b:1" and d.reason == "score"


def test_subset_and_no_endpoint() -> None:
    eps = [ep("a:1"), ep("b:1", waiting=4)]
    d = choose(TEXT, eps, CFG, subset=["b:1"])
    assert d.chosen == "b:1" and d.fallbacks == () and "a:1" in d.excluded
    assert choose(TEXT, eps, CFG, subset=[]).status == 503
    assert choose(TEXT, [], CFG).status == 503


def test_shed_only_when_every_endpoint_is_over_the_bound() -> None:
    cfg = dataclasses.replace(CFG, shed_queue=20)
    assert choose(TEXT, [ep("a:1", waiting=25), ep("b:1", waiting=30)], cfg).status == 429
    assert choose(TEXT, [ep("a:1", waiting=25), ep("b:1", waiting=3)], cfg).chosen == "b:1"
    stale = ep("c:1", fresh=False, waiting=50)
    assert choose(TEXT, [ep("a:1", waiting=25), stale], cfg).status == 200


def test_weights_change_the_choice() -> None:
    eps = [ep("t:1", modality="text", waiting=5), ep("i:1", modality="image")]
    assert choose(TEXT, eps, CFG).chosen == "i:1"  # queue outweighs the modality mismatch
    heavy = dataclasses.replace(CFG, w_modality=5.0)
    assert choose(TEXT, eps, heavy).chosen == "t:1"


def test_affinity_expires_and_is_bounded() -> None:
    aff = ContextAffinity(ttl_s=10, max_entries=2)
    aff.bind("c1", "a:1", now=0, seq=1)
    aff.bind("c1", "a:1", now=1, seq=3)
    aff.bind("c1", "a:1", now=2, seq=2)
    b = aff.lookup("c1", now=5)
    assert b is not None and b.address == "a:1" and b.last_seq == 3 and b.chunks == 3
    assert aff.lookup("c1", now=20) is None
    for i in range(3):
        aff.bind(f"k{i}", "a:1", now=30)
    assert len(aff) == 2 and aff.lookup("k0", now=30) is None


def _reference_terms(
    e: EndpointView, req: RequestInfo, cfg: ScoringConfig
) -> tuple[dict[str, float], bool, str]:
    """The terms as docs/router.md states them, written plainly: the oracle for the
    scorer's tuned `_terms`."""

    def clip(x: float) -> float:
        return min(1.0, max(0.0, x))

    notes = [] if e.gpu_memory_share is not None else ["no GPU memory signal"]
    mem = 1.0 if e.gpu_memory_share is None else clip(e.gpu_memory_share)
    img = 1.0 if e.image_token_share is None else clip(e.image_token_share)
    known = e.fresh and e.running is not None and e.waiting is not None
    streams = clip((e.running + e.waiting + e.picks_since_scrape) / cfg.max_streams) if known else 1.0  # type: ignore[operator]  # fmt: skip
    load = cfg.load_memory * mem + cfg.load_streams * streams + cfg.load_image * img
    waiting = e.waiting if e.fresh else None
    picks = e.picks_since_scrape
    if waiting is not None and waiting <= 0:
        picks = max(0, picks - cfg.absorb_picks)  # absorbed by a batch that has room
    queue = 1.0 if waiting is None else clip((waiting + picks) / cfg.queue_norm)
    usage = clip(e.kv_usage) if e.fresh and e.kv_usage is not None else None
    no_room, kv = False, 1.0
    if usage is not None:
        kv = usage
        if e.kv_capacity_tokens:
            usage = min(1.0, usage + e.pending_tokens / e.kv_capacity_tokens)
            kv = usage
            free = (1.0 - usage) * e.kv_capacity_tokens
            no_room = req.total_tokens > free
            if no_room:
                notes.append(f"{req.total_tokens} tokens do not fit {int(free)} free")
            kv = 1.0 if no_room else clip(usage + req.total_tokens / e.kv_capacity_tokens)
    saturated = (
        no_room
        or (waiting is not None and waiting >= cfg.saturation_queue)
        or (usage is not None and usage >= cfg.saturation_kv)
    )
    backlog_s = e.prefill_tokens / cfg.prefill_tokens_per_s  # seconds of prefill ahead
    queued = backlog_s / cfg.queued_request_s  # as that many queued requests
    prefill = clip(queued * cfg.w_queue / cfg.queue_norm) if e.fresh else 1.0
    terms = {"load": load, "queue": queue, "kv": kv, "modality": modality_term(req.modality, e.modality), "prefill": prefill}  # fmt: skip
    return terms, saturated, "; ".join(notes)


maybe_share = st.none() | st.floats(-0.5, 1.5)


@settings(max_examples=400, deadline=None)
@given(
    fresh=st.booleans(),
    waiting=st.none() | st.floats(-2, 40),
    running=st.none() | st.floats(0, 100),
    kv=maybe_share,
    capacity=st.none() | st.sampled_from([0, 500, 100_000]),
    mem=maybe_share,
    img=maybe_share,
    picks=st.integers(0, 20),
    pending=st.integers(0, 3000),
    backlog=st.integers(0, 40_000),
    modality=st.sampled_from([None, "text", "image", "multi-image", "mixed", "audio"]),
    req_modality=st.sampled_from(["text", "image", "multi-image"]),
    tokens=st.integers(0, 5000),
)
def test_terms_match_the_plain_formulas(
    fresh: bool,
    waiting: float | None,
    running: float | None,
    kv: float | None,
    capacity: int | None,
    mem: float | None,
    img: float | None,
    picks: int,
    pending: int,
    backlog: int,
    modality: str | None,
    req_modality: str,
    tokens: int,
) -> None:
    e = EndpointView("a:1", modality=modality, fresh=fresh, waiting=waiting, running=running,
                     kv_usage=kv, kv_capacity_tokens=capacity, gpu_memory_share=mem,
                     image_token_share=img, picks_since_scrape=picks, pending_tokens=pending,
                     prefill_tokens=backlog)  # fmt: skip
    req = RequestInfo("m", req_modality, (), tokens, tokens // 2, 100, False)
    assert _terms(e, req, CFG, req.total_tokens) == _reference_terms(e, req, CFG)
