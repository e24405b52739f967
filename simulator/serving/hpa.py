"""The Horizontal Pod Autoscaler's algorithm (autoscaling/v2), as a pure state machine.

Follows the Kubernetes documentation ("Horizontal Pod Autoscaling", algorithm details and
configurable scaling behaviour) and the controller's replica calculator for external
metrics:

- per metric: desiredReplicas = ceil(currentReplicas * currentMetricValue / desiredMetricValue),
  and no change while |ratio - 1| <= tolerance (0.1). For a `Value` target the ratio is
  metric / target and it multiplies the ready pod count; for an `AverageValue` target the
  ratio is metric / (target * currentReplicas) and the proposal is ceil(metric / target).
- several metrics: the largest proposal wins.
- stabilisation: the recommendation used for scaling down is the largest one made within
  the scale-down window (default 300 s); for scaling up, the smallest within the scale-up
  window (default 0 s). The first sync also records the replica count it found as a
  recommendation (the controller's `recordInitialRecommendation`), so a new HPA does not
  scale down within its first scale-down window.
- rate limits (`behavior.scaleUp/scaleDown.policies`): at most max(100 %, 4 pods) more per
  15 s when scaling up, at most 100 % fewer per 15 s when scaling down (selectPolicy Max),
  counted from the replica count at the start of the period.
- the result is clamped to [minReplicas, maxReplicas].

The controller acts every sync period (15 s); the caller drives `Hpa.step` at that cadence.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.serving.config import HpaBehavior

__all__ = [
    "behavior_from_k8s",
    "replicas_for_value",
    "replicas_for_average_value",
    "Hpa",
    "HpaDecision",
]


def replicas_for_value(
    current_replicas: int, ready_replicas: int, metric: float, target: float, tolerance: float
) -> int:
    """Proposal for a `Value` target (external metric compared as a whole).

    ratio = metric / target; within tolerance keep current_replicas, else
    ceil(ratio * ready_replicas) (the controller's getUsageRatioReplicaCount).
    """
    ratio = metric / target
    if current_replicas == 0:
        return math.ceil(ratio)
    if abs(ratio - 1.0) <= tolerance:
        return current_replicas
    return math.ceil(ratio * ready_replicas)


def replicas_for_average_value(
    current_replicas: int, metric: float, target: float, tolerance: float
) -> int:
    """Proposal for an `AverageValue` target: the metric is divided among the replicas.

    ratio = metric / (target * current_replicas); within tolerance keep current_replicas,
    else ceil(metric / target).
    """
    if current_replicas > 0:
        ratio = metric / (target * current_replicas)
        if abs(ratio - 1.0) <= tolerance:
            return current_replicas
    return math.ceil(metric / target)


def behavior_from_k8s(behavior: Mapping[str, Any]) -> HpaBehavior:
    """An HPA manifest's `spec.behavior` (or a ScaledObject's
    `advanced.horizontalPodAutoscalerConfig.behavior`) as the `HpaBehavior` this state
    machine runs, so that a manifest and a simulation can be checked to be the same.

    Takes what `HpaBehavior` models: scale-up Percent and Pods policies of one period with
    selectPolicy Max, scale-down one Percent policy; anything else is a ValueError naming it.
    """
    base = HpaBehavior()
    up = behavior.get("scaleUp", {})
    down = behavior.get("scaleDown", {})
    for side, rules in (("scaleUp", up), ("scaleDown", down)):
        if rules.get("selectPolicy", "Max") != "Max":
            raise ValueError(f"{side}.selectPolicy: only Max is modelled")
    kinds = {p["type"]: p for p in up.get("policies", ())}
    periods = {p["periodSeconds"] for p in kinds.values()}
    if len(periods) > 1 or set(kinds) - {"Percent", "Pods"}:
        raise ValueError("scaleUp.policies: one Percent and one Pods policy of one period")
    downs = down.get("policies", ())
    if len(downs) > 1 or any(p["type"] != "Percent" for p in downs):
        raise ValueError("scaleDown.policies: one Percent policy")
    return HpaBehavior(
        sync_period_s=base.sync_period_s,
        tolerance=base.tolerance,
        scale_up_window_s=float(up.get("stabilizationWindowSeconds", base.scale_up_window_s)),
        scale_up_percent=float(kinds.get("Percent", {}).get("value", 0)),
        scale_up_pods=int(kinds.get("Pods", {}).get("value", 0)),
        scale_up_period_s=float(periods.pop()) if periods else base.scale_up_period_s,
        scale_down_window_s=float(down.get("stabilizationWindowSeconds", base.scale_down_window_s)),
        scale_down_percent=float(downs[0]["value"]) if downs else base.scale_down_percent,
        scale_down_period_s=float(downs[0]["periodSeconds"]) if downs else base.scale_down_period_s,
    )


@dataclass(frozen=True)
class HpaDecision:
    """What one sync decided: the unclamped proposal, the stabilised recommendation and the
    replica count to set (after rate limits and min/max)."""

    proposal: int
    stabilised: int
    desired: int


@dataclass(eq=False)
class Hpa:
    """One HorizontalPodAutoscaler with its recommendation and scale-event history.

    Not thread-safe; time is whatever the caller passes (seconds, non-decreasing).
    """

    min_replicas: int
    max_replicas: int
    behavior: HpaBehavior = field(default_factory=HpaBehavior)
    """Tolerance, stabilisation windows and rate limits (autoscaling/v2 `behavior`)."""
    _recommendations: deque[tuple[float, int]] = field(
        default_factory=deque, init=False, repr=False
    )
    _events: deque[tuple[float, int]] = field(default_factory=deque, init=False, repr=False)
    """(time, replica change)."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(
                f"need 1 <= minReplicas ({self.min_replicas}) <= maxReplicas ({self.max_replicas})"
            )

    def propose(
        self,
        current_replicas: int,
        ready_replicas: int,
        metrics: list[tuple[str, float, float]],
    ) -> int | None:
        """Largest per-metric proposal; `metrics` is [(type, value, target)].

        Metrics whose value is missing (None/NaN) are skipped, as the controller does
        when it cannot fetch one; None when no metric has a value (no scaling).
        """
        best: int | None = None
        tolerance = self.behavior.tolerance
        for kind, value, target in metrics:
            if value is None or isinstance(value, float) and math.isnan(value):
                continue
            if kind == "Value":
                r = replicas_for_value(current_replicas, ready_replicas, value, target, tolerance)
            elif kind == "AverageValue":
                r = replicas_for_average_value(current_replicas, value, target, tolerance)
            else:
                raise ValueError(f"unknown metric target type {kind!r}")
            best = r if best is None else max(best, r)
        return best

    def _stabilise(self, now: float, proposal: int, current: int) -> int:
        b = self.behavior
        self._recommendations.append((now, proposal))
        horizon = max(b.scale_up_window_s, b.scale_down_window_s)
        while self._recommendations and self._recommendations[0][0] < now - horizon:
            self._recommendations.popleft()
        up_floor = proposal
        down_ceiling = proposal
        for t, r in self._recommendations:
            if t > now - b.scale_up_window_s:  # the controller's timestamp.After(cutoff)
                up_floor = min(up_floor, r)
            if t > now - b.scale_down_window_s:
                down_ceiling = max(down_ceiling, r)
        # the controller's stabilizeRecommendationWithBehaviors
        if current < up_floor:
            return up_floor
        if current > down_ceiling:
            return down_ceiling
        return current

    def _period_start(self, now: float, current: int, period_s: float) -> int:
        """The replica count at the start of the policy period: the current count less the
        pods added and plus the pods removed within it (the controller's
        periodStartReplicas, which counts both kinds of event for either direction)."""
        change = sum(d for t, d in self._events if t > now - period_s)
        return current - change

    def _limit(self, now: float, current: int, desired: int) -> int:
        b = self.behavior
        if desired > current:
            start = self._period_start(now, current, b.scale_up_period_s)
            by_percent = math.ceil(start * (1 + b.scale_up_percent / 100.0))
            by_pods = start + b.scale_up_pods
            return min(desired, max(current, by_percent, by_pods))
        if desired < current:
            start = self._period_start(now, current, b.scale_down_period_s)
            floor = math.floor(start * (1 - b.scale_down_percent / 100.0))
            return max(desired, min(current, floor))
        return desired

    def step(
        self,
        now: float,
        current_replicas: int,
        ready_replicas: int,
        metrics: list[tuple[str, float, float]],
    ) -> HpaDecision:
        """One sync: propose, stabilise, rate-limit, clamp; records the scale event."""
        if not self._recommendations:  # the first sync: every later one leaves its own
            # kube-controller-manager's recordInitialRecommendation (pkg/controller/
            # podautoscaler/horizontal.go, v1.26): the count found at the first reconcile is
            # a recommendation of the stabilisation window, kept for a whole window
            self._recommendations.append((now, current_replicas))
        proposal = self.propose(current_replicas, ready_replicas, metrics)
        if proposal is None:
            proposal = current_replicas
        stabilised = self._stabilise(now, proposal, current_replicas)
        desired = self._limit(now, current_replicas, stabilised)
        desired = max(self.min_replicas, min(self.max_replicas, desired))
        if desired != current_replicas:
            self._events.append((now, desired - current_replicas))
        horizon = max(self.behavior.scale_up_period_s, self.behavior.scale_down_period_s)
        while self._events and self._events[0][0] <= now - horizon:
            self._events.popleft()
        return HpaDecision(proposal, stabilised, desired)
