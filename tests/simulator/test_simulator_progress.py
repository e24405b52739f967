"""Progress weighted by work: a slow kind of run weighs what it costs, so the share shown
follows the work done and not the count of runs; runs start interleaved by seed."""

from __future__ import annotations

import io

from simulator.progress import WorkProgress, interleaved


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_interleaved_starts_one_run_of_every_kind_per_seed() -> None:
    seeds = [1, 2, 3, 1, 2, 3]  # policy-major: a1 a2 a3 b1 b2 b3
    assert interleaved(seeds) == [0, 3, 1, 4, 2, 5]


def test_a_slow_kind_weighs_its_measured_cost() -> None:
    clock = Clock()
    kinds = ["fast", "slow"] * 3
    p = WorkProgress(kinds, io.StringIO(), "placement", clock)
    clock.now = 10.0
    p.finished("fast", 1.0)
    p.finished("slow", 9.0)
    # 2 of 6 runs (33 %) but 10 of 30 expected seconds of work
    assert abs(p.fraction() - 10 / 30) < 1e-9
    for _ in range(2):
        p.finished("fast", 1.0)
    assert abs(p.fraction() - 12 / 30) < 1e-9  # 4 of 6 runs, not 67 % of the work
    line = p.line()
    assert line.startswith("placement: 40% of the work (4/6 runs, 10 s elapsed, eta 15 s)")


def test_a_serial_run_in_progress_counts_its_share() -> None:
    p = WorkProgress(["a", "a"], None, "serving", Clock())
    p.finished("a", 2.0)
    p.running("a", 0.5)
    assert abs(p.fraction() - 0.75) < 1e-9
    p.finished("a", 2.0)
    assert p.fraction() == 1.0


def test_before_any_run_finishes_the_eta_is_unknown() -> None:
    p = WorkProgress(["a"], None, "serving", Clock())
    assert p.fraction() == 0.0 and "eta ?" in p.line()
