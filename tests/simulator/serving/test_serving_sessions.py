"""The multi-turn session model: which requests become later turns, what they re-send, and
what the engine's caches then find."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from kvspread.settings import ConfigError
from simulator.serving.cli import add_arguments, build_config
from simulator.serving.config import CostModel, GpuSpec, ModelSpec, default_config
from simulator.serving.engine import Engine
from simulator.serving.sessions import apply_sessions
from simulator.serving.workload import Request, generate_requests


def stream(n: int, gap: float = 10.0) -> list[Request]:
    return [Request(i, "svc", "image", gap * i, 100 + 50 + i, (50,), 20 + i) for i in range(n)]


def test_a_later_turn_resends_the_history_and_its_images() -> None:
    reqs = stream(2)
    # two turns for sure (mean 1e9 -> p ~ 0 -> geometric draws huge), no think time
    apply_sessions(reqs, np.random.default_rng(1), 1e9, 0.0, 100_000)
    first, second = reqs
    assert second.prompt == first.prompt + first.out + (151 - 50)  # its text only
    assert second.images == first.images and second.image_ids == first.image_ids
    assert len(first.image_ids) == 1
    assert second.block_hashes[: len(first.block_hashes)] == first.block_hashes
    assert second.block_hashes[len(first.block_hashes)] == first.reply_hash
    assert second.block_ends[len(first.block_ends)] == first.prompt + first.out - 1
    assert second.block_ends[-1] == second.prompt
    assert first.block_ends == (50, first.prompt)  # the image first, then the text


def test_about_one_arrival_in_mean_turns_starts_a_conversation() -> None:
    reqs = stream(4000, gap=1.0)
    convs = apply_sessions(reqs, np.random.default_rng(7), 2.0, 20.0, 10**9)
    assert convs / len(reqs) == pytest.approx(0.5, abs=0.05)


def test_a_turn_that_would_not_fit_the_context_starts_over() -> None:
    reqs = stream(3)
    apply_sessions(reqs, np.random.default_rng(1), 1e9, 0.0, 400)
    assert all(r.prompt + r.out <= 400 for r in reqs)
    assert reqs[2].block_hashes[0] != reqs[1].block_hashes[0]  # a new conversation


def test_the_next_turn_on_the_same_replica_prefills_only_its_new_message() -> None:
    reqs = stream(2)
    apply_sessions(reqs, np.random.default_rng(1), 1e9, 0.0, 100_000)
    cost = CostModel(block_tokens=16)
    eng = Engine(cost, GpuSpec(), ModelSpec(16.0, 131_072, 100_000, True), pool_tokens=100_000)
    t = 0.0
    for r in reqs:
        eng.enqueue(r)
        while (end := eng.plan(t, 1.0)) is not None:
            t = end
            eng.finish(t)
    first, second = reqs
    cached = (first.prompt + first.out - 1) // 16 * 16  # the answer's full blocks too
    assert second.prefix_hit_tokens == cached
    assert (second.images_prefix, second.images_encoded) == (1, 0)


def test_sessions_are_off_unless_asked_for() -> None:
    cfg = default_config()
    assert cfg.sessions.mean_turns == 0
    assert not any(r.block_hashes for r in generate_requests(cfg, 1))


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_multi_turn_flag_sets_the_session_model() -> None:
    cfg = build_config(args("--synthetic", "--multi-turn", "--duration", "300"))
    assert cfg.sessions.mean_turns == 2.0
    reqs = generate_requests(cfg, 1)
    assert reqs and all(r.block_hashes for r in reqs)
    conversations = {(r.service, r.block_hashes[0]) for r in reqs}
    assert len(conversations) < 0.7 * len(reqs)  # about half the requests are later turns
    assert build_config(args("--synthetic", "--multi-turn", "3.5")).sessions.mean_turns == 3.5
    with pytest.raises(ConfigError, match="--multi-turn: 0.5"):
        build_config(args("--synthetic", "--multi-turn", "0.5"))


def test_a_simulated_run_with_sessions_finds_its_history_in_the_caches() -> None:
    """The whole simulation: later turns hit their replica's prefix cache (round-robin
    still lands some on the replica holding their history), and turning the prefix cache
    off loses exactly that."""
    from simulator.serving.config import config_from_mapping
    from simulator.serving.report import summarise
    from simulator.serving.sim import simulate

    base = {"duration_s": 240.0, "warmup_s": 30.0, "sessions": {"mean_turns": 3.0}}
    rows = []
    for caching in (True, False):
        cfg = config_from_mapping({**base, "cache": {"prefix_caching": caching}})
        rows.append(summarise(simulate(cfg, "round-robin", 1, autoscaler="none")))
    on, off = rows
    assert on["requests"] == off["requests"] > 0
    assert 0.05 < on["prefix_hit_rate"] < 1.0
    assert on["images_in_cached_prefix"] > 0
    assert off["prefix_hit_rate"] == 0.0
    assert on["p50_ttft_s"] < off["p50_ttft_s"]
