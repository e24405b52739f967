"""The replay engine: determinism, invariants and the published baselines."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.replay.placement import Trace, run_replay
from simulator.replay.report import published_unallocated

# A reduced run that fits CI time: 3 seeds (42..44), stopped just past 100 % arrived (the
# published column we compare), instead of 10 seeds to 130 %. The median of 3 seeds has more
# sampling noise than the published median of 10: the published per-seed spread at 100 % is up
# to 0.9 pp (Random) and 0.3 pp (FGD), so the tolerance is 0.75 pp here; the full run
# (docs/simulator.md) meets the 0.5 pp.
SEEDS = (42, 43, 44)
TOLERANCE_PP = 0.75
BASELINES = ("random", "dotproduct", "gpuclustering", "gpupacking", "bestfit", "fgd")
PUBLISHED = {
    "random": 13.75,
    "dotproduct": 9.44,
    "gpuclustering": 8.42,
    "gpupacking": 8.19,
    "bestfit": 7.09,
    "fgd": 4.77,
}


def test_published_medians_are_the_papers() -> None:
    pub = published_unallocated()
    for policy, value in PUBLISHED.items():
        assert pub[("openb_pod_list_default", policy)][0] == pytest.approx(value, abs=0.011)


@pytest.mark.parametrize("policy", BASELINES)
def test_baseline_reproduces_the_published_median(default_trace: Trace, policy: str) -> None:
    unalloc = [
        100.0 - run_replay(default_trace, policy, s, stop_at_percent=101).allocation_columns()[100]
        for s in SEEDS
    ]
    median = float(np.median(unalloc))
    assert abs(median - PUBLISHED[policy]) <= TOLERANCE_PP, (policy, unalloc)


def test_same_seed_same_result_other_seed_other_result(default_trace: Trace) -> None:
    a = run_replay(default_trace, "gpupacking", 42, stop_at_percent=40)
    b = run_replay(default_trace, "gpupacking", 42, stop_at_percent=40)
    c = run_replay(default_trace, "gpupacking", 43, stop_at_percent=40)
    assert np.array_equal(a.used_milli, b.used_milli)
    assert np.array_equal(a.frag_milli, b.frag_milli)
    assert not np.array_equal(a.arrived_milli[:500], c.arrived_milli[:500])


@pytest.mark.parametrize("policy", ["random", "fgd", "kvspread"])
def test_invariants_hold_after_every_pod(default_trace: Trace, policy: str) -> None:
    # invariants=True checks after every pod: no GPU beyond 1000 milli or below 0, no node
    # beyond its CPU or memory, allocated == sum of placements <= arrived.
    r = run_replay(default_trace, policy, 5, stop_at_percent=25, invariants=True)
    assert (r.used_milli <= r.arrived_milli).all()
    assert r.pods > 1000


def test_allocation_columns_follow_arrived_demand(default_trace: Trace) -> None:
    r = run_replay(default_trace, "bestfit", 42, stop_at_percent=60)
    cols = r.allocation_columns()
    # nothing fails at low load: allocation tracks arrival within rounding
    assert cols[10] == pytest.approx(10, abs=0.6)
    assert cols[50] == pytest.approx(50, abs=0.6)
    assert np.isnan(cols[100])  # the run stopped before
    frag = r.frag_ratio_columns()
    assert 13.0 < frag[0] < 15.0  # CPU-only share of the target workload, as published
