"""The arrival sequence and FGD's target workload, against the artifact's definitions."""

from __future__ import annotations

import numpy as np

from simulator.replay.placement import Trace
from simulator.replay.trace import load_pods
from simulator.replay.workload import arrival_sequence, target_shapes

CAPACITY = 6212 * 1000


def test_target_shapes_cover_95_percent_and_sum_to_one(default_trace: Trace) -> None:
    t = target_shapes(default_trace.pods)
    assert abs(t.weight.sum() - 1.0) < 1e-12
    # 35 most popular (CPU, share, count, model) shapes cover 95 % of the 8152 pods;
    # all of them use one GPU or none (each multi-GPU shape is rarer).
    assert len(t) == 35
    assert set(t.num_gpu.tolist()) == {0, 1}
    cpu_only = float(t.weight[t.num_gpu == 0].sum())
    assert 0.13 < cpu_only < 0.14  # why the published fragmentation ratio starts near 14 %


def test_tune_up_keeps_every_pod_then_draws_with_replacement(default_trace: Trace) -> None:
    pods = default_trace.pods
    order = arrival_sequence(pods, CAPACITY, np.random.default_rng(42))
    n = len(pods)
    assert sorted(order[:n].tolist()) == list(range(n))  # the whole trace, shuffled
    total = int(pods.total_gpu_milli[order].sum())
    assert 1.29 * CAPACITY < total <= 1.3 * CAPACITY + 8000  # last draw may pass by < 8 GPUs


def test_tune_down_drops_pods_at_random() -> None:
    pods = load_pods("multigpu50")  # 183 % of capacity before tuning
    order = arrival_sequence(pods, CAPACITY, np.random.default_rng(1))
    assert len(set(order.tolist())) == len(order) < len(pods)
    assert int(pods.total_gpu_milli[order].sum()) <= 1.3 * CAPACITY


def test_arrivals_are_deterministic_per_seed(default_trace: Trace) -> None:
    pods = default_trace.pods
    a = arrival_sequence(pods, CAPACITY, np.random.default_rng(7))
    b = arrival_sequence(pods, CAPACITY, np.random.default_rng(7))
    c = arrival_sequence(pods, CAPACITY, np.random.default_rng(8))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
