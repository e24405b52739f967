"""The engine's scheduler on tiny hand-made cases: step times, KV growth, preemption, OOM.

A toy cost model keeps the arithmetic readable: prefill 1 ms per token (p0 0), decode
10 ms + 1 ms per live KV token (weights 0, 1 byte per token at 1,000 B/s), 4-token blocks.
"""

from __future__ import annotations

import pytest

from simulator.serving.config import CostModel, GpuSpec, ModelSpec
from simulator.serving.engine import Engine
from simulator.serving.workload import Request

TOY_COST = CostModel(
    block_tokens=4,
    act_reserve_gb=0.0,
    max_num_seqs=256,
    chunk_tokens=2048,
    prefill_p0_ms=0.0,
    prefill_tok_s=1000.0,
    decode_d0_ms=10.0,
    eta=1.0,
    encode_e0_ms=5.0,
    encode_ke_ms=0.1,
    encode_qe_ms=0.0,
)
TOY_GPU = GpuSpec(name="toy", hbm_gib=1.0, bandwidth_tb_s=1e-9)  # 1,000 B/s
TOY_MODEL = ModelSpec(weights_gb=0.0, kv_bytes_per_token=1, max_model_len=1_000_000)


def req(rid: int, prompt: int, out: int, images: tuple[int, ...] = ()) -> Request:
    return Request(rid, "svc", "text", 0.0, prompt, images, out)


def drive(eng: Engine, t: float = 0.0, until: float = 1e9) -> tuple[float, list[Request]]:
    """Run the engine alone until idle; returns (time, requests that left, in order)."""
    left: list[Request] = []
    while t < until:
        end = eng.plan(t, 1.0)
        if end is None:
            break
        t = end
        left.extend(eng.finish(t))
        assert 0 <= eng.used_blocks <= eng.pool_blocks
        assert eng.used_blocks == sum(r.blocks for r in eng.running)
    return t, left


def test_single_request_by_hand() -> None:
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=1000)
    r = req(0, prompt=10, out=3)
    eng.enqueue(r)
    t, left = drive(eng)
    # prefill 10 tokens = 10 ms -> first token; decode steps read 11 then 12 live tokens:
    # (10 + 11) + (10 + 12) ms = 43 ms
    assert r.first_token == pytest.approx(0.010)
    assert r.finish == pytest.approx(0.053)
    assert left == [r] and r.status == "ok"
    assert eng.used_blocks == 0
    assert eng.steps == 3


def test_images_are_encoded_in_the_first_prefill_step() -> None:
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=1000)
    r = req(0, prompt=110, out=1, images=(100,))
    eng.enqueue(r)
    drive(eng)
    # encode 5 + 0.1 x 100 = 15 ms, prefill 110 ms; one output token ends at the prefill
    assert r.finish == pytest.approx(0.125)


def test_kv_grows_one_block_per_block_tokens() -> None:
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=1000)
    r = req(0, prompt=4, out=10)
    eng.enqueue(r)
    eng.finish(eng.plan(0.0, 1.0) or 0.0)  # prefill: 4 tokens -> 1 block
    assert (r.ctx, r.gen, r.blocks, eng.used_blocks) == (4, 1, 1, 1)
    end = eng.plan(0.004, 1.0)
    assert end is not None
    eng.finish(end)  # 9 decode steps in one segment: context 13 tokens -> 4 blocks
    assert (r.ctx, r.gen, r.blocks) == (13, 10, 0)
    assert r.status == "ok"


def test_preemption_recomputes_the_newest_request() -> None:
    # pool 4 blocks = 16 tokens; A and B (6-token prompts, 2 blocks each) fill it
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=16)
    a, b = req(0, 6, 10), req(1, 6, 10)
    eng.enqueue(a)
    eng.enqueue(b)
    t, left = drive(eng)
    assert eng.preemptions == 1
    assert (a.preemptions, b.preemptions) == (0, 1)  # the last admitted is preempted
    assert [x.rid for x in left] == [0, 1]
    assert a.status == b.status == "ok"
    # B had 3 tokens (ctx 8) when preempted: it is prefilled again with 6 + 3 = 9 tokens
    # after A finished, then decodes its remaining 6 tokens
    assert b.need_prefill == 9
    assert eng.used_blocks == 0


def test_preemption_timeline_by_hand() -> None:
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=16)
    a, b = req(0, 6, 10), req(1, 6, 10)
    eng.enqueue(a)
    eng.enqueue(b)
    t = 0.0
    times = []
    while True:
        end = eng.plan(t, 1.0)
        if end is None:
            break
        t = end
        eng.finish(t)
        times.append(round(t * 1000, 6))
    # prefill 12 tokens: 12 ms. Two decode steps for both (live 14, then 16 tokens):
    # 24 + 26 = 50 ms -> 62. Preempt B. A alone, 7 steps with live 9..15: sum(10 + l) = 154
    # -> 216. B re-prefill 9 tokens: 9 ms -> 225. B decodes 6 steps, live 10..15: 135 -> 360.
    assert times == [12.0, 62.0, 216.0, 225.0, 360.0]
    assert a.finish == pytest.approx(0.216)
    assert b.finish == pytest.approx(0.360)


def test_request_larger_than_the_pool_fails_as_oom() -> None:
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=16)
    big = req(0, prompt=20, out=2)
    eng.enqueue(big)
    _, left = drive(eng)
    assert left == [big] and big.status == "oom-kv"


def test_request_outgrowing_the_pool_alone_fails_as_oom() -> None:
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=16)
    r = req(0, prompt=10, out=20)  # would need 30 tokens of KV
    eng.enqueue(r)
    _, left = drive(eng)
    assert r.status == "oom-kv"
    assert r.gen == 7  # context reached the 16-token pool (10 + 6) before failing
    assert eng.used_blocks == 0


def test_max_num_seqs_limits_the_batch() -> None:
    cost = CostModel(**{**TOY_COST.__dict__, "max_num_seqs": 2})
    eng = Engine(cost, TOY_GPU, TOY_MODEL, pool_tokens=1000)
    rs = [req(i, 4, 5) for i in range(3)]
    for r in rs:
        eng.enqueue(r)
    eng.plan(0.0, 1.0)
    assert len(eng.running) == 2 and len(eng.waiting) == 1


def test_truncated_segment_gives_the_same_times_as_one_segment() -> None:
    one = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=10_000)
    r1 = req(0, 50, 200)
    one.enqueue(r1)
    drive(one)

    cut = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=10_000)
    r2 = req(0, 50, 200)
    cut.enqueue(r2)
    t = cut.plan(0.0, 1.0) or 0.0
    cut.finish(t)
    end = cut.plan(t, 1.0)
    assert end is not None
    # interrupt part-way: the segment ends after the step in progress
    new_end = cut.truncate(t + (end - t) / 3)
    assert new_end is not None and t < new_end < end
    t = new_end
    cut.finish(t)
    assert 1 < r2.gen < 200
    drive(cut, t)
    assert r2.finish == pytest.approx(r1.finish, rel=1e-12)
    assert cut.steps == one.steps == 200


def test_sharing_factor_scales_step_times() -> None:
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=1000)
    r = req(0, prompt=10, out=3)
    eng.enqueue(r)
    t = 0.0
    while (end := eng.plan(t, 2.0)) is not None:
        t = end
        eng.finish(t)
    assert r.finish == pytest.approx(2 * 0.053)


def test_admission_leaves_room_for_the_decoders_next_block() -> None:
    # pool 3 blocks of 4 tokens. A (prompt 4, 1 block) decodes and needs its 2nd block at
    # the next step; B (prompt 8, 2 blocks) arrives: admitting it would take that block.
    eng = Engine(TOY_COST, TOY_GPU, TOY_MODEL, pool_tokens=12)
    a = req(0, 4, 5)
    eng.enqueue(a)
    eng.finish(eng.plan(0.0, 1.0) or 0.0)  # A prefilled: ctx 4, 1 block
    b = req(1, 8, 2)
    eng.enqueue(b)
    end = eng.plan(0.004, 1.0)
    assert end is not None
    assert b in eng.waiting  # 1 (A) + 1 (A's growth) + 2 (B) > 3
    first = eng.finish(end)
    assert eng.used_blocks <= eng.pool_blocks
    _, left = drive(eng, end)
    assert {r.rid for r in first + left} == {0, 1} and a.status == b.status == "ok"
