"""The Mooncake trace format and the bundled trace: reading it, its reuse, and one replica's
prefix cache finding that reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.serving.config import CostModel, GpuSpec, ModelSpec
from simulator.serving.engine import Engine
from simulator.serving.mooncake import (
    MOONCAKE_BLOCK_TOKENS,
    MooncakeWorkload,
    block_ends,
    reuse_bound,
)
from simulator.serving.workloads import BUNDLED, WorkloadError, load_workload, workload_requests


def trace(tmp_path: Path, rows: list[object], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def row(ts: int, n: int, out: int, ids: list[int]) -> dict[str, object]:
    return {"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids}


def test_a_mooncake_trace_becomes_requests_with_chained_block_ids(tmp_path: Path) -> None:
    p = trace(tmp_path, [row(0, 1000, 5, [0, 1]), row(1500, 700, 3, [0, 2]), ""])
    wl = load_workload(p)
    assert isinstance(wl, MooncakeWorkload)
    reqs = workload_requests(wl, "m", "text", 1, 0, 0.0, wl.span_s, 1.0)
    a, b = sorted(reqs, key=lambda r: r.arrival)
    assert (a.arrival, a.prompt, a.out, b.arrival) == (0.0, 1000, 5, 1.5)
    assert a.block_ends == (512, 1000) and b.block_ends == (512, 700)
    # the shared first block has one hash, the different second ones do not
    assert a.block_hashes[0] == b.block_hashes[0] and a.block_hashes[1] != b.block_hashes[1]
    assert reuse_bound(reqs) == (pytest.approx(1 / 4), pytest.approx(512 / 1700))


def test_a_chain_shares_nothing_after_a_different_block(tmp_path: Path) -> None:
    """Block ids are chained: an equal id after a different one is not a shared prefix."""
    p = trace(tmp_path, [row(0, 1024, 1, [7, 1]), row(1, 1024, 1, [8, 1])])
    wl = load_workload(p)
    a, b = workload_requests(wl, "m", "text", 1, 0, 0.0, wl.span_s, 1.0)
    assert not set(a.block_hashes) & set(b.block_hashes)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        (json.dumps({"timestamp": 0, "input_length": 5}), "needs timestamp"),
        (json.dumps(row(0, 5, 1, ["a"])), "hash_ids must be a list of integers"),
        (json.dumps(row(0, -5, 1, [1])), r"input_length must be in 0\.\.10,000,000, got -5"),
        # too large for an int64 (was an OverflowError: "internal error", exit 1)
        (json.dumps(row(0, 1e308, 1, [1])), r"input_length must be in 0\.\.10,000,000"),
        (json.dumps(row(0, 5, 10**30, [1])), "output_length must be in"),
        (json.dumps(row(1e300, 5, 1, [1])), "timestamp must be in"),
        (
            '{"timestamp": 0, "input_length": NaN, "output_length": 1, "hash_ids": [1]}',
            "input_length must be a number, got nan",
        ),
    ],
)
def test_a_bad_line_is_one_error_naming_it(tmp_path: Path, line: str, message: str) -> None:
    p = trace(tmp_path, [row(0, 10, 1, [1]), line])
    with pytest.raises(WorkloadError, match=rf"t\.jsonl:2: .*{message}"):
        load_workload(p)


def test_copies_of_the_trace_invent_no_reuse(tmp_path: Path) -> None:
    """rate_scale 2 superposes a shifted copy whose prompts are another tenant's."""
    p = trace(tmp_path, [row(1000 * i, 1024, 1, [i, 100 + i]) for i in range(20)])
    wl = load_workload(p)
    one = workload_requests(wl, "m", "text", 1, 0, 0.0, 40.0, 1.0)  # two laps
    two = workload_requests(wl, "m", "text", 1, 0, 0.0, 40.0, 2.0)
    assert len(two) > len(one)
    assert reuse_bound(one)[0] == 0.0 and reuse_bound(two)[0] == 0.0


def test_the_bundled_trace_repeats_about_37_percent_of_its_blocks() -> None:
    wl = load_workload("mooncake-conv")
    assert isinstance(wl, MooncakeWorkload)
    assert BUNDLED["mooncake-conv"].stat().st_size < 512 * 1024  # small enough to ship
    assert len(wl.t_s) == 12_031
    reqs = workload_requests(wl, "m", "text", 1, 0, 0.0, wl.span_s, 1.0)
    assert len(reqs) == 12_031
    blocks, tokens = reuse_bound(reqs)
    assert blocks == pytest.approx(0.366, abs=0.001)  # the trace README: about 37 %
    assert tokens == pytest.approx(0.374, abs=0.001)


def test_one_replica_replaying_the_trace_hits_its_reuse_bound() -> None:
    """Every request of the bundled trace, in arrival order, through one engine whose pool
    holds everything (so nothing reusable is evicted): the prefix cache finds the
    trace's reuse, short only by vLLM's last-token rule."""
    wl = load_workload("mooncake-conv")
    reqs = sorted(
        workload_requests(wl, "m", "text", 1, 0, 0.0, wl.span_s, 1.0), key=lambda r: r.arrival
    )
    _, bound = reuse_bound(reqs)
    cost = CostModel(chunk_tokens=1 << 20)  # one step per prompt: fast
    model = ModelSpec(16.0, 131_072, 1 << 20, False)
    eng = Engine(cost, GpuSpec(), model, pool_tokens=1 << 30)
    t = 0.0
    for r in reqs:
        r.out = 1  # the answer does not matter for what the next prompt finds
        eng.enqueue(r)
        while (end := eng.plan(t, 1.0)) is not None:
            t = end
            eng.finish(t)
    hit = sum(r.prefix_hit_tokens for r in reqs) / sum(r.prefix_query_tokens for r in reqs)
    assert bound - 0.002 <= hit <= bound
    assert hit == pytest.approx(0.37, abs=0.01)
    assert eng.prefix is not None and eng.prefix.evicted == 0


def test_block_ends_cover_the_prompt() -> None:
    assert block_ends(3, 1100) == (512, 1024, 1100)
    assert MOONCAKE_BLOCK_TOKENS == 512


def test_a_service_only_a_mooncake_workload_names_gets_a_long_context_model() -> None:
    import argparse

    from simulator.serving.cli import add_arguments, build_config

    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(p.parse_args(["--workload", "mc=mooncake-conv"]))
    spec = cfg.services["mc"]
    assert spec.model == "llama-3.1-8b" and spec.gpu_memory_gib == 80.0
    assert cfg.models[spec.model].max_model_len >= int(
        load_workload("mooncake-conv").input_len.max()
    )


def test_the_config_sets_its_own_keys_of_such_a_service(tmp_path: Path) -> None:
    import argparse

    from simulator.serving.cli import add_arguments, build_config

    yaml = tmp_path / "mc.yaml"
    yaml.write_text("services:\n  mc: {initial_replicas: 4, max_replicas: 4}\n")
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(p.parse_args(["--workload", "mc=mooncake-conv", "--config", str(yaml)]))
    spec = cfg.services["mc"]
    assert (spec.model, spec.gpu_memory_gib, spec.initial_replicas) == ("llama-3.1-8b", 80.0, 4)
