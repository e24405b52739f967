"""FGD's node fragmentation on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.replay.fragmentation import FragModel
from simulator.replay.workload import TargetShapes


def _model(shapes: list[tuple[int, int, int, float]]) -> FragModel:
    arr = np.array([s[:3] for s in shapes], dtype=np.int64)
    t = TargetShapes(
        cpu_milli=arr[:, 0],
        gpu_milli=arr[:, 1],
        num_gpu=arr[:, 2],
        spec_id=np.zeros(len(shapes), dtype=np.int64),
        weight=np.array([s[3] for s in shapes]),
    )
    return FragModel(t, np.ones((1, 1), dtype=bool), np.zeros(1, dtype=np.int64))


def _frag(m: FragModel, free: list[int], cpu: int) -> float:
    row = np.array([free + [0] * (8 - len(free))], dtype=np.int64)
    return float(m.fragmentation(row, np.array([cpu]), np.array([0]))[0])


@pytest.mark.parametrize(
    ("free", "cpu", "expected"),
    [
        # one shape: 1 GPU x 500 milli, 4 cores, p = 1
        pytest.param([1000, 1000], 8000, 0.0, id="empty node: nothing is a fragment"),
        pytest.param([300, 1000], 8000, 300.0, id="Q3: the 300 milli GPU is a fragment"),
        pytest.param([300, 400], 8000, 700.0, id="Q2: no GPU fits, all idle is fragment"),
        pytest.param([1000, 1000], 2000, 2000.0, id="Q4: CPU short, all idle is fragment"),
        pytest.param([0, 0], 8000, 0.0, id="full node: nothing idle"),
    ],
)
def test_single_shape(free: list[int], cpu: int, expected: float) -> None:
    assert _frag(_model([(4000, 500, 1, 1.0)]), free, cpu) == pytest.approx(expected)


def test_weighted_shapes_and_cpu_only_shapes() -> None:
    # 25 % CPU-only (always counts all idle GPU), 75 % one whole GPU
    m = _model([(1000, 0, 0, 0.25), (1000, 1000, 1, 0.75)])
    # free [1000, 600]: whole-GPU shape fits, the 600 GPU is a fragment for it
    assert _frag(m, [1000, 600], 4000) == pytest.approx(0.25 * 1600 + 0.75 * 600)
    # no whole GPU left: everything is a fragment for every shape
    assert _frag(m, [900, 600], 4000) == pytest.approx(1500.0)
