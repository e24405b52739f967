"""BLIS's least-loaded rule as a router of the serving simulation (`--ll-load blis`).

BLIS's least-loaded policy picks the instance with the smallest EffectiveLoad =
QueueDepth + BatchSize + InFlightRequests (sim/routing.go at f90a1e3a), ties at random.
InFlightRequests counts every request routed there and not yet finished
(sim/cluster/cluster.go increments it at the routing decision), while QueueDepth and
BatchSize count it only once it has reached the instance, alpha0 (15.6 ms of API
overhead) later. So a request counts once for alpha0 after its dispatch and twice from
then on, which favours an instance that has just been sent requests over one that holds
as many for longer. This simulation's least-request router counts each request in the
engine once and breaks ties by a fixed per-pod value.

The crosscheck already delays every request by alpha0 before our router sees it, so our
dispatch times are BLIS's plus alpha0 and BLIS's in-flight-only requests are exactly those
we dispatched in the last alpha0 seconds: EffectiveLoad = 2 x (running + waiting) - those.
Used only by bench/blis_crosscheck.py, to compare like with like.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from simulator.serving.cluster import Pod
from simulator.serving.routing import LeastRequest
from simulator.serving.workload import Request

__all__ = ["BlisLeastLoaded"]


class BlisLeastLoaded(LeastRequest):
    """Least EffectiveLoad as BLIS counts it (module docstring); random ties.

    Bounded: per pod it keeps only the dispatch times of the last `alpha0_s` seconds.
    """

    def __init__(self, alpha0_s: float, seed: int) -> None:
        self._alpha0 = alpha0_s
        self._rng = np.random.default_rng([seed, 4242])
        self._sent: dict[str, deque[float]] = {}

    def effective_load(self, pod: Pod, now: float) -> int:
        """BLIS's EffectiveLoad of `pod` at our time `now`."""
        sent = self._sent.setdefault(pod.pid, deque())
        while sent and now - sent[0] >= self._alpha0:
            sent.popleft()
        assert pod.engine is not None, "only ready replicas are routed to"
        return max(0, 2 * pod.engine.load - len(sent))

    def pick(self, req: Request, pods: Sequence[Pod], now: float) -> Pod:
        loads = [self.effective_load(p, now) for p in pods]
        best = min(loads)
        tied = [p for p, x in zip(pods, loads, strict=True) if x == best]
        chosen = tied[int(self._rng.integers(len(tied)))] if len(tied) > 1 else tied[0]
        self._sent.setdefault(chosen.pid, deque()).append(now)
        return chosen
