"""The ledger's indexes (by node, UID and age) answer exactly what a scan over every entry
answers, in the same order, over random records, forgets, expiries and clock steps (equal
times included, where the order of first recording breaks the tie)."""

from __future__ import annotations

import random

import pytest

from extender.ledger import Ledger, Placement, PodRef
from extender.model import PodShape
from kvspread.clock import FakeClock


class _ScanLedger:
    """The reference: one dict, every question a scan (the ledger before its indexes)."""

    def __init__(self, clock: FakeClock, ttl_s: float) -> None:
        self.clock, self.ttl = clock, ttl_s
        self.by_pod: dict[str, Placement] = {}

    def record(self, pod: str, node: str, uid: str) -> set[str]:
        changed = self.expire()
        old = self.by_pod.get(pod)
        if old is not None:
            changed.add(old.node)
        self.by_pod[pod] = Placement(pod, node, PodShape(1), (0,), self.clock.monotonic(), uid)
        return changed | {node}

    def forget(self, pod: str) -> str | None:
        old = self.by_pod.pop(pod, None)
        return old.node if old else None

    def expire(self) -> set[str]:
        cutoff = self.clock.monotonic() - self.ttl
        old = [k for k, p in self.by_pod.items() if p.at <= cutoff]
        return {self.by_pod.pop(k).node for k in old}

    def on_node(self, node: str, exclude: PodRef | None) -> list[Placement]:
        cutoff = self.clock.monotonic() - self.ttl
        live = [
            p
            for p in self.by_pod.values()
            if p.node == node and p.at > cutoff and not (exclude and p.belongs_to(exclude))
        ]
        return sorted(live, key=lambda p: p.at)

    def nodes_of(self, pod: PodRef) -> set[str]:
        cutoff = self.clock.monotonic() - self.ttl
        return {p.node for p in self.by_pod.values() if p.at > cutoff and p.belongs_to(pod)}


@pytest.mark.parametrize("seed", range(6))
def test_the_indexed_ledger_answers_as_a_scan_does(seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    ledger, ref = Ledger(clock, ttl_s=5.0), _ScanLedger(clock, 5.0)
    pods = [f"ns/p{i}" for i in range(12)]
    nodes = [f"n{i}" for i in range(4)]
    uids = ["", "u1", "u2", "u3"]
    for _ in range(400):
        op = rng.random()
        pod, node, uid = rng.choice(pods), rng.choice(nodes), rng.choice(uids)
        if op < 0.45:
            assert ledger.record(pod, node, PodShape(1), (0,), uid) == ref.record(pod, node, uid)
        elif op < 0.55:
            assert ledger.forget(pod) == ref.forget(pod)
        elif op < 0.6:
            assert ledger.expire() == ref.expire()
        else:
            clock.advance(rng.choice([0.0, 0.0, 0.5, 2.0]))  # equal times are common
        who: PodRef = (rng.choice(pods), rng.choice(uids))
        assert ledger.nodes_of(who) == ref.nodes_of(who)
        for n in nodes:
            exclude = who if rng.random() < 0.5 else None
            assert ledger.on_node(n, exclude) == ref.on_node(n, exclude)
        assert len(ledger) == len(ref.by_pod)
