"""The cache-aware terms on the wire: a real Envoy, the picker, and fake engines that emulate
a prefix cache and an encoder cache (tests/router/fake_engine.py: time to first token grows
with the uncached prompt tokens), so what the terms save is visible end to end: in the
engines' `cached_tokens`, and in /debug/explain's prefix and image terms (issue 24, 6)."""

from __future__ import annotations

import base64
import math
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.router.envoy_harness import envoy_skip_reason
from tests.router.fake_engine import FakeEngine
from tests.router.gateway import Gateway, open_gateway, post, served_by

_SKIP = envoy_skip_reason()
pytestmark = [
    pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""),
    pytest.mark.slow,
]

HOSTS = {"image-0": "127.0.0.2", "image-1": "127.0.0.3", "image-2": "127.0.0.4", "text-0": "127.0.0.5"}  # fmt: skip
LABELS = {"image-0": "image", "image-1": "image", "image-2": "image", "text-0": "text"}
SYSTEM = "You are a meticulous assistant that answers about pictures and documents. " * 50


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    # the picker's default staleness bound (2 s): on this test machine's two cores the fakes,
    # the picker and the load share one process, and a busy fake answers /metrics late
    metrics = {"interval_s": 0.25, "stale_after_s": 2.0, "timeout_s": 1.0}
    # the engines' own prefill rate, as docs/router.md tells an operator to set it: the fakes
    # prefill 500,000 tokens/s (ttft_per_token_s 2 us), and the default 8,000 tokens/s
    # overstated their prefill backlog 62-fold, which sent 5-7 of 60 sessions off their pod in
    # some runs (the prefill term, not load); image_encode_s stays the default 50 ms, ten times
    # the fakes' 5 ms, so that a repeated image is worth keeping where it was encoded
    # and their batch room: a fake runs up to max_batch (64) requests at once and reports none
    # waiting until then, so the picks sent since a scrape began run there, they do not queue
    # (the default 8 is a busy engine's; on this shared machine a scrape can answer 0.5 s late,
    # and 42 requests/s to one pod then counted 10 of them as a queue, which traded 9 of 60
    # sessions away from a pod that had room in one CI run)
    probe = FakeEngine("probe")
    scoring = {"prefill_tokens_per_s": 1 / probe.ttft_per_token_s, "absorb_picks": probe.max_batch}
    with open_gateway(HOSTS, LABELS, "h2", metrics=metrics, scoring=scoring) as gw:
        for fake in gw.fakes.values():
            fake.cache_blocks = 65_536  # emulate the engines' prefix and encoder caches
        yield gw


def png(tokens: int, salt: int) -> str:
    """A PNG data URL whose header says a size of about `tokens` 28-pixel patches, with a
    tail that makes it this image and no other."""
    side = 28 * max(1, math.isqrt(tokens))
    head = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + side.to_bytes(4, "big") * 2
    tail = random.Random(salt).randbytes(2048)
    return "data:image/png;base64," + base64.b64encode(head + tail).decode()


def turn(system: str, history: list[dict[str, Any]], content: Any) -> dict[str, Any]:
    msgs = [{"role": "system", "content": system}, *history, {"role": "user", "content": content}]
    return {"model": "qwen", "messages": msgs, "max_tokens": 32}


def test_a_shared_prefix_goes_where_it_is_cached(gateway: Gateway) -> None:
    gateway.reset()
    served, cached = [], []
    for i in range(8):
        rid = f"prefix-{i}"
        resp = post(gateway, turn(SYSTEM, [], f"question number {i}: what is in the report?"), rid=rid)  # fmt: skip
        served.append(served_by(resp))
        cached.append(resp.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert len(set(served)) == 1, served  # every request where the system prompt is cached
    assert cached[0] == 0 and all(c >= len(SYSTEM) // 4 - 16 for c in cached[1:]), cached
    doc = gateway.explain("prefix-5")
    chosen = next(c for c in doc["candidates"] if c["address"] == doc["destination"])
    assert chosen["terms"]["prefix"] > 0.9 and chosen["terms"]["saved_tokens"] > 800
    assert chosen["terms"]["bonus"] > 0 and doc["request"]["prefix_blocks"] >= len(SYSTEM) // 256
    others = [c for c in doc["candidates"] if c["address"] != doc["destination"]]
    assert all("prefix" not in c["terms"] for c in others)
    url = f"http://127.0.0.1:{gateway.router.http_port}/metrics"
    metrics = httpx.get(url, timeout=5).text
    entries = next(ln for ln in metrics.splitlines() if ln.startswith("kvspread_router_prefix_index_entries "))  # fmt: skip
    assert float(entries.split()[1]) >= len(SYSTEM) // 256


def test_a_repeated_image_goes_where_it_was_encoded(gateway: Gateway) -> None:
    gateway.reset()
    for i in range(6):  # an image pool at work: each image pod has served images
        served_by(post(gateway, turn("Be brief.", [], [
            {"type": "image_url", "image_url": {"url": png(256, salt=100 + i)}}])))  # fmt: skip
    gateway.reset()
    url = png(256, salt=7)
    served, hits = [], []
    for i in range(5):
        rid = f"image-{i}"
        content = [
            {"type": "text", "text": f"detail {i}?"},
            {"type": "image_url", "image_url": {"url": url}},
        ]
        resp = post(gateway, turn("Be brief.", [], content), rid=rid)
        served.append(served_by(resp))
        hits.append(resp.json()["encoder_cache_hits"])
    assert len(set(served)) == 1 and served[0].startswith("image-"), served
    assert hits == [0, 1, 1, 1, 1]
    doc = gateway.explain("image-3")
    chosen = next(c for c in doc["candidates"] if c["address"] == doc["destination"])
    assert chosen["terms"]["images_cached"] == 1 and chosen["terms"]["saved_s"] > 0
    assert doc["request"]["images"][0]["digest"]


def servegen_sessions(n: int, turns: int, seed: int) -> list[list[tuple[int, tuple[int, ...]]]]:
    """`n` sessions of `turns` turns, each turn's (text tokens, image tokens) drawn from the
    bundled ServeGen multimodal-image workload (simulator/data/workloads/servegen)."""
    from simulator.serving.workloads import load_workload, workload_requests

    wl = load_workload("servegen-mm-image")
    reqs = workload_requests(wl, "chat", "chat", seed, 0, 12 * 3600.0, 600.0, 1.0)
    rng = random.Random(seed)
    picks = [reqs[rng.randrange(len(reqs))] for _ in range(n * turns)]
    return [
        [(max(1, r.prompt - sum(r.images)), r.images) for r in picks[s * turns : (s + 1) * turns]]
        for s in range(n)
    ]


def test_servegen_image_mix_holds_pools_and_sessions_at_60_rps(gateway: Gateway) -> None:
    """ServeGen's image mix as multi-turn sessions (each turn carries the history, its images
    included, and the session's X-LLM-Context-ID), sent at 60 requests/s through Envoy to
    three image pods and one text-only pod. No image request may reach the text-only pod
    while an image pod has room, and a session stays on one pod (issue 24's goals: 0, and
    >= 95 %). A session that moves off a pod that went stale or saturated (on this shared
    machine a busy fake can answer /metrics late) follows the rules; moves off a fresh pod
    with room, where load outweighed the affinity bonus, must stay under 5 % of the
    sessions. Paced by a schedule, not timed: no assertion is about time."""
    gateway.reset()
    sessions = servegen_sessions(n=60, turns=5, seed=24)
    rate = 60.0
    order = [(t, s) for t in range(5) for s in range(len(sessions))]
    histories: dict[int, list[dict[str, Any]]] = defaultdict(list)
    done: dict[tuple[int, int], threading.Event] = defaultdict(threading.Event)
    where: dict[int, list[str]] = defaultdict(list)
    image_on_text = 0
    lock = threading.Lock()

    def send(t: int, s: int) -> None:
        nonlocal image_on_text
        if t:
            done[(s, t - 1)].wait(30)
        text, images = sessions[s][t]
        content: list[dict[str, Any]] = [{"type": "text", "text": f"s{s}t{t} " + "w" * (4 * min(text, 600))}]  # fmt: skip
        content += [
            {"type": "image_url", "image_url": {"url": png(tok, salt=s * 100 + t * 10 + k)}}
            for k, tok in enumerate(images)
        ]
        body = turn(SYSTEM[:800], list(histories[s]), content)
        rid = f"mix-{s}-{t}"
        resp = post(gateway, body, rid=rid, x_llm_context_id=f"session-{s}", x_chunk_seq=str(t))
        name = served_by(resp)
        with lock:
            where[s].append(name)
            image_on_text += bool(images) and name == "text-0"
            histories[s] += [
                {"role": "user", "content": content},
                {"role": "assistant", "content": f"answer {t}"},
            ]
        done[(s, t)].set()

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=24) as pool:
        futures = []
        for i, (t, s) in enumerate(order):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(send, t, s))
        for f in futures:
            f.result()
    one_pod = sum(1 for s in where if len(set(where[s])) == 1) / len(where)
    spread = Counter(n for names in where.values() for n in names)
    print(f"\nServeGen image mix at {rate:.0f} req/s: {len(order)} requests, {len(where)} sessions; "
          f"image requests on the text-only pod: {image_on_text}; sessions on one pod: "
          f"{100 * one_pod:.1f} %; requests per pod: {dict(spread)}")  # fmt: skip
    moved = [
        (s, gateway.explain(f"mix-{s}-{t}"))
        for s, names in where.items()
        for t in range(1, len(names))
        if names[t] != names[t - 1]
    ]

    def bound(d: dict[str, Any]) -> dict[str, Any]:
        return next(c for c in d["candidates"] if c["address"] == d["context_bound_to"])

    # a move off a pod that went stale (a late scrape on this shared machine) or saturated
    # is the rules working; one off a fresh pod with room is affinity traded against load
    # (its terms are printed), and the goal holds only if such trades stay under 5 %
    forced = {s for s, d in moved if bound(d)["tier"] != "fresh"}
    traded = {s for s, d in moved if bound(d)["tier"] == "fresh"}
    print(
        f"sessions moved off a stale or saturated pod: {len(forced)}; traded for load: {len(traded)}"
    )
    for s, d in moved:
        if s in traded:
            chosen = next(c for c in d["candidates"] if c["address"] == d["destination"])
            print(f"  session {s}: bound {bound(d)['score']} {bound(d)['terms']}")
            print(f"  chose {chosen['score']} {chosen['terms']}")
    assert image_on_text == 0
    assert len(traded) <= 0.05 * len(where), traded
    assert one_pod >= 0.95 or len(forced) >= (1 - one_pod) * len(where) - len(traded), one_pod
    assert sum(v for k, v in spread.items() if k != "text-0") == len(order)
