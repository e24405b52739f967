"""The filter on named cases, its wording, and the batch form agreeing with the scalar."""

from __future__ import annotations

import random

import pytest

from extender.batch import NodeBatch
from extender.config import ScoringConfig
from extender.fit import check_fit, fit_batch, format_mib
from extender.model import GpuState, NodeState, PodShape

CFG = ScoringConfig()
G80 = 81920.0


def node(*free: float, signals: str = "fresh", cpu: float | None = None) -> NodeState:
    return NodeState(
        "n",
        gpus=tuple(GpuState(G80, used_mib=G80 - f) for f in free) if signals == "fresh" else (),
        signals=signals,
        cpu_free_milli=cpu,
    )


@pytest.mark.parametrize(
    ("pod", "state", "fits"),
    [
        pytest.param(PodShape(1, 24576.0), node(30000), True, id="one GPU with enough free"),
        pytest.param(
            PodShape(1, 24576.0), node(20000, 20000), False, id="free memory split: fails"
        ),
        pytest.param(PodShape(1, 24576.0), node(24576.0), True, id="exactly enough: fits"),
        pytest.param(PodShape(2, 24576.0), node(30000, 10000, 30000), True, id="two of three GPUs"),
        pytest.param(PodShape(2, 24576.0), node(30000, 10000), False, id="only one GPU qualifies"),
        pytest.param(PodShape(1, None), node(G80, 0), True, id="whole GPU: one idle"),
        pytest.param(
            PodShape(1, None), node(G80 - 1, 40000), True, id="whole GPU: driver use tolerated"
        ),
        pytest.param(PodShape(1, None), node(60000, 60000), False, id="whole GPU: none idle"),
        pytest.param(PodShape(1, 24576.0), node(signals="stale"), True, id="stale signals pass"),
        pytest.param(
            PodShape(1, 24576.0), node(signals="missing"), True, id="missing signals pass"
        ),
        pytest.param(
            PodShape(1, 24576.0), node(signals="invalid"), True, id="invalid signals pass"
        ),
        pytest.param(PodShape(0), node(0), True, id="no-GPU pod passes a full node"),
        pytest.param(PodShape(0, cpu_milli=8000), node(0, cpu=4000), False, id="CPU short"),
    ],
)
def test_check_fit(pod: PodShape, state: NodeState, fits: bool) -> None:
    assert check_fit(pod, state, CFG).fits is fits
    ok, failed = fit_batch(pod, NodeBatch.from_states([state]), CFG)
    assert bool(ok[0]) is fits
    assert (state.name in failed) is (not fits)


def test_allocation_counts_even_before_the_memory_is_used() -> None:
    claimed = NodeState("n", gpus=(GpuState(G80, used_mib=1000, allocated_mib=70000),))
    assert not check_fit(PodShape(1, 24576.0), claimed, CFG).fits


def test_reason_is_written_for_kubectl_describe() -> None:
    res = check_fit(PodShape(2, 24576.0), node(30000, 10240), CFG)
    assert res.reason == (
        "kvspread: needs 2 GPUs with 24 GiB free each, node has 1 (largest free 29.3 GiB on one GPU)"
    )
    res = check_fit(PodShape(1, None), node(60000), CFG)
    assert res.reason.startswith("kvspread: needs 1 GPU that are entirely free, node has 0")


def test_batch_reasons_match_scalar_reasons() -> None:
    rng = random.Random(5)
    states = [
        NodeState(
            f"n{i}",
            gpus=tuple(GpuState(G80, used_mib=rng.choice([0, 30000, 70000])) for _ in range(4)),
        )
        for i in range(50)
    ]
    pod = PodShape(2, 40000.0)
    ok, failed = fit_batch(pod, NodeBatch.from_states(states), CFG)
    for s, passed in zip(states, ok, strict=True):
        res = check_fit(pod, s, CFG)
        assert res.fits is bool(passed)
        if not res.fits:
            assert failed[s.name].message == res.reason


@pytest.mark.parametrize(
    ("mib", "text"), [(24576, "24 GiB"), (10752, "10.5 GiB"), (512, "512 MiB"), (0, "0 MiB")]
)
def test_format_mib(mib: float, text: str) -> None:
    assert format_mib(mib) == text
