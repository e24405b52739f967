"""Free memory per GPU and node fragmentation (kvspread.gpumem), the one definition the
collector publishes and the extender scores."""

from __future__ import annotations

import numpy as np
import pytest

from kvspread.gpumem import free_mib, node_fragmentation, node_fragmentation_of


@pytest.mark.parametrize(
    ("free", "rho", "largest"),
    [
        pytest.param([40000, 0, 0, 0], 0.0, 40000, id="all free on one GPU: rho 0"),
        pytest.param([0, 0], 0.0, 0.0, id="nothing free: rho 0"),
        pytest.param([10000, 10000], 0.5, 10000, id="two equal halves: rho 0.5"),
        pytest.param([10000] * 4, 0.75, 10000, id="four equal quarters: rho 0.75"),
        pytest.param([30000, 10000], 0.25, 30000, id="3:1 split: rho 0.25"),
        pytest.param([], 0.0, 0.0, id="no GPUs: rho 0"),
    ],
)
def test_node_fragmentation(free: list[float], rho: float, largest: float) -> None:
    got_rho, got_largest = node_fragmentation_of(free)
    assert got_rho == pytest.approx(rho)
    assert got_largest == pytest.approx(largest)


def test_node_fragmentation_is_row_wise() -> None:
    rho, largest = node_fragmentation(np.array([[40000.0, 0.0], [10000.0, 10000.0]]))
    assert rho.tolist() == pytest.approx([0.0, 0.5])
    assert largest.tolist() == [40000.0, 10000.0]


def test_free_memory_counts_the_larger_of_use_and_claims() -> None:
    assert float(free_mib(80000, 30000)) == 50000
    assert float(free_mib(80000, 30000, 60000)) == 20000
    assert float(free_mib(80000, 90000)) == 0
    got = free_mib(np.array([[80000.0, 80000.0]]), np.array([[1000.0, 0.0]]), 0.0)
    assert got.tolist() == [[79000.0, 80000.0]]
