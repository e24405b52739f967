"""The HPA algorithm against the Kubernetes documentation's worked examples.

Source: kubernetes.io "Horizontal Pod Autoscaling" (algorithm details, stabilization
window, default behavior) and the controller's replica calculator for external metrics.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.serving.config import HpaBehavior
from simulator.serving.hpa import Hpa, replicas_for_average_value, replicas_for_value
from tests.cluster.captures import capture


@pytest.mark.parametrize(
    ("current", "metric", "target", "expect"),
    [
        (1, 0.200, 0.100, 2),  # docs: 200m vs 100m -> ratio 2.0, replicas doubled
        (4, 0.200, 0.100, 8),
        (4, 0.050, 0.100, 2),  # docs: 50m vs 100m -> ratio 0.5, replicas halved
        (4, 0.105, 0.100, 4),  # within tolerance 0.1: no change
        (4, 0.095, 0.100, 4),
        (4, 0.112, 0.100, 5),  # just outside: ceil(1.12 x 4) = 5
        (3, 0.150, 0.100, 5),  # ceil(1.5 x 3) = 4.5 -> 5
    ],
    ids=[
        "200m/100m doubles 1",
        "200m/100m doubles 4",
        "50m/100m halves",
        "5% over: tolerance",
        "5% under: tolerance",
        "10% + epsilon scales",
        "ceil",
    ],
)
def test_value_target(current: int, metric: float, target: float, expect: int) -> None:
    assert replicas_for_value(current, current, metric, target, 0.1) == expect


def test_value_target_counts_ready_pods() -> None:
    # the controller multiplies the ratio by the ready pod count
    assert replicas_for_value(4, 2, 0.3, 0.1, 0.1) == 6


@pytest.mark.parametrize(
    ("current", "metric", "target", "expect"),
    [
        (1, 42.0, 10.0, 5),  # ceil(42 / 10)
        (5, 42.0, 10.0, 5),  # 42 / (10 x 5) = 0.84 -> outside tolerance -> ceil(4.2) = 5
        (4, 42.0, 10.0, 4),  # 42 / 40 = 1.05 -> within tolerance
        (10, 42.0, 10.0, 5),
    ],
    ids=["42 vs 10 from 1 -> 5", "from 5 -> 5", "from 4 tolerance", "from 10 -> 5"],
)
def test_average_value_target(current: int, metric: float, target: float, expect: int) -> None:
    assert replicas_for_average_value(current, metric, target, 0.1) == expect


def _hpa(min_replicas: int = 1, max_replicas: int = 20, **behavior: float) -> Hpa:
    return Hpa(min_replicas, max_replicas, HpaBehavior(**behavior))


def test_step_doubles_with_default_behaviour() -> None:
    h = _hpa()
    d = h.step(0.0, 2, 2, [("Value", 0.2, 0.1)])
    assert (d.proposal, d.desired) == (4, 4)


def test_several_metrics_take_the_largest_proposal() -> None:
    h = _hpa()
    d = h.step(0.0, 2, 2, [("Value", 0.2, 0.1), ("AverageValue", 42.0, 10.0)])
    assert d.proposal == 5
    assert d.desired == 5


def test_missing_metric_is_skipped_and_no_metric_means_no_change() -> None:
    h = _hpa()
    assert h.step(0.0, 3, 3, [("Value", None, 0.1), ("AverageValue", 42.0, 10.0)]).desired == 5  # type: ignore[list-item]
    h2 = _hpa()
    assert h2.step(0.0, 3, 3, [("Value", None, 0.1)]).desired == 3  # type: ignore[list-item]


def test_scale_down_uses_the_highest_recommendation_in_the_window() -> None:
    # docs: "the highest recommendation from within that window" (default 300 s)
    h = _hpa()
    assert h.step(0.0, 8, 8, [("AverageValue", 80.0, 10.0)]).desired == 8
    assert h.step(15.0, 8, 8, [("AverageValue", 60.0, 10.0)]).desired == 8
    assert h.step(30.0, 8, 8, [("AverageValue", 20.0, 10.0)]).desired == 8
    # the 8 recommended at t=0 leaves the window after 300 s; 6 (t=15) is then the highest
    assert h.step(300.0, 8, 8, [("AverageValue", 20.0, 10.0)]).desired == 6
    assert h.step(316.0, 6, 6, [("AverageValue", 20.0, 10.0)]).desired == 2


def test_a_new_hpa_keeps_the_count_it_found_for_one_scale_down_window() -> None:
    # kube-controller-manager v1.26 records the replica count of its first reconcile as a
    # recommendation (recordInitialRecommendation): a metric asking for 1 of 4 replicas at
    # the first sync leaves 4 until that record falls out of the 300 s window
    h = _hpa()
    low = [("AverageValue", 5.0, 10.0)]
    assert h.step(15.0, 4, 4, low).desired == 4
    assert h.step(300.0, 4, 4, low).desired == 4
    assert h.step(315.0, 4, 4, low).desired == 1  # the record at t=15 is no longer After(cutoff)
    # scaling up is not held back by it
    h2 = _hpa()
    assert h2.step(15.0, 2, 2, [("AverageValue", 60.0, 10.0)]).desired == 6


def test_scale_up_is_not_stabilised_by_default() -> None:
    h = _hpa()
    h.step(0.0, 2, 2, [("AverageValue", 20.0, 10.0)])
    assert h.step(15.0, 2, 2, [("AverageValue", 40.0, 10.0)]).desired == 4


def test_scale_up_rate_limit_is_max_of_100_percent_and_4_pods_per_15_s() -> None:
    h = _hpa(max_replicas=100)
    # from 1 replica: 100 % -> 2, 4 pods -> 5; Max policy -> 5
    assert h.step(0.0, 1, 1, [("AverageValue", 1000.0, 10.0)]).desired == 5
    # 10 s later the period that started at 1 replica still limits to 5
    assert h.step(10.0, 5, 5, [("AverageValue", 1000.0, 10.0)]).desired == 5
    # after the period: from 5, 100 % -> 10 beats 4 pods -> 9
    assert h.step(16.0, 5, 5, [("AverageValue", 1000.0, 10.0)]).desired == 10


def test_rate_limits_count_the_period_start_from_both_kinds_of_event() -> None:
    # the controller's periodStartReplicas = current - added + deleted within the period, in
    # either direction: after 3 -> 2 at t=0, a scale-up at t=15 starts from 3 (2 pods or 50 %
    # a minute: max(3 + 2, ceil(3 x 1.5)) = 5), not from 2 (which would allow 4)
    h = _hpa(max_replicas=100, scale_down_window_s=0.0, scale_up_pods=2, scale_up_percent=50.0,
             scale_up_period_s=60.0, scale_down_period_s=60.0)  # fmt: skip
    assert h.step(0.0, 3, 3, [("AverageValue", 20.0, 10.0)]).desired == 2
    assert h.step(15.0, 2, 2, [("AverageValue", 1000.0, 10.0)]).desired == 5
    # and a scale-down right after a scale-up starts from the count before it
    h2 = _hpa(scale_down_window_s=0.0, scale_down_percent=50.0, scale_down_period_s=60.0)
    assert h2.step(0.0, 4, 4, [("AverageValue", 60.0, 10.0)]).desired == 6
    # from 4 (6 - 2 added): at most 50 % fewer -> 2; from 6 it would be 3
    assert h2.step(15.0, 6, 6, [("AverageValue", 10.0, 10.0)]).desired == 2


def test_min_and_max_replicas_clamp() -> None:
    h = _hpa(min_replicas=2, max_replicas=6)
    assert h.step(0.0, 3, 3, [("AverageValue", 1000.0, 10.0)]).desired == 6
    h2 = _hpa(min_replicas=2, max_replicas=6, scale_down_window_s=0.0)
    assert h2.step(0.0, 3, 3, [("AverageValue", 0.1, 10.0)]).desired == 2


def test_invalid_bounds_are_rejected() -> None:
    with pytest.raises(ValueError, match="minReplicas"):
        Hpa(min_replicas=3, max_replicas=2)


def test_the_example_manifests_run_the_slo_autoscalers_behaviour() -> None:
    """Issue 25: the `slo` autoscaler's behaviour is the example HPA's and ScaledObject's."""
    import yaml

    from simulator.serving.config import SLO_BEHAVIOR
    from simulator.serving.hpa import behavior_from_k8s

    root = Path(__file__).parents[3] / "manifests"
    hpa = yaml.safe_load((root / "metrics-adapter/examples/hpa-slo-pressure.yaml").read_text())
    keda = yaml.safe_load(
        (root / "overlays/keda/examples/scaledobject-slo-pressure.yaml").read_text()
    )
    assert hpa["spec"]["metrics"][0]["external"]["metric"]["name"] == "kvspread_slo_pressure"
    assert hpa["spec"]["metrics"][0]["external"]["target"] == {"type": "Value", "value": "1"}
    assert behavior_from_k8s(hpa["spec"]["behavior"]) == SLO_BEHAVIOR
    adv = keda["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior_from_k8s(adv) == SLO_BEHAVIOR
    with pytest.raises(ValueError, match="selectPolicy"):
        behavior_from_k8s({"scaleDown": {"selectPolicy": "Min"}})


def test_the_first_sync_hold_matches_the_real_controllers_recording() -> None:
    """tests/cluster/test_cluster_hpa.py recorded kube-controller-manager v1.26 holding a new
    HPA's 4 replicas under a pressure of 0 for its 20 s scale-down window, then scaling to
    minReplicas. The simulator's Hpa, synced at the recording's period from its first sync,
    scales down at the first sync past the window, where the real controller did (within
    one sync period either way), and to the same count."""
    cap = capture("hpa-first-sync-hold")
    window, sync = cap["scale-down window s"], cap["sync period s"]
    h = _hpa(max_replicas=8, scale_down_window_s=float(window), scale_down_percent=100.0,
             scale_down_period_s=15.0)  # fmt: skip
    pressure = [("Value", float(cap["pressure"]), 1.0)]
    t, replicas = 0.0, cap["replicas at creation"]
    while replicas == cap["replicas at creation"]:
        replicas = h.step(t, replicas, replicas, pressure).desired
        if replicas == cap["replicas at creation"]:
            t += sync
    assert replicas == cap["replicas after"]
    real_hold = cap["scaled down after creation s"] - cap["first status after creation s"]
    assert window <= t <= window + sync
    assert abs(real_hold - t) <= sync, (real_hold, t)
    assert "ScaleDownStabilized" in cap["AbleToScale reasons seen"]


def test_the_slo_behaviour_scales_up_as_the_real_controller_recorded() -> None:
    """tests/cluster/test_cluster_hpa.py ran the shipped example HPA (whose behaviour is
    SLO_BEHAVIOR) on kube-controller-manager v1.26: one ready replica at pressure 10 went
    1 -> 3 -> 5, the second step a minute after the first. The simulator's `slo` HPA,
    synced at the recording's period with the same one ready replica, does the same."""
    from simulator.serving.config import SLO_BEHAVIOR

    cap = capture("hpa-example-scale-up")
    h = Hpa(1, 8, SLO_BEHAVIOR)
    sync = cap["sync period s"]
    t, replicas, seen = 0.0, 1, [(0.0, 1)]
    while replicas < cap["replica counts"][-1]:
        t += sync
        replicas = h.step(t, replicas, cap["ready replicas"],
                          [("Value", float(cap["pressure"]), 1.0)]).desired  # fmt: skip
        if replicas != seen[-1][1]:
            seen.append((t, replicas))
    assert [r for _, r in seen] == cap["replica counts"]
    gap = seen[2][0] - seen[1][0]
    assert abs(gap - cap["seconds between the two scale-ups"]) <= sync, (gap, cap)


def test_the_guard_holds_as_the_real_controller_recorded() -> None:
    """tests/cluster/test_cluster_hpa.py ran the adapter's scale-down guard under
    kube-controller-manager v1.26: after a violation at 2 replicas it served 2.5 / 3 at
    3 ready replicas and the controller kept 3 for two scale-down windows, then, the rate
    halved, scaled to 2. The guard's own arithmetic gives that value, and the simulator's
    HPA at it keeps 3 for as long as the controller did."""
    from kvspread.quantity import parse_quantity
    from metrics_adapter.guard import guarded

    cap = capture("hpa-scale-down-guard")
    served = float(parse_quantity(cap["served while held"]))
    ready = cap["ready replicas"]
    assert guarded(0.485, float(ready), 2.0, [(0.0, 2.0, 1.0)], 0.8) == pytest.approx(served)
    behavior = HpaBehavior(scale_down_window_s=cap["scale-down window s"])
    h = Hpa(1, 8, behavior)
    t, replicas = 0.0, ready
    while t < cap["held for s"]:
        t += cap["sync period s"]
        replicas = h.step(t, replicas, ready, [("Value", served, 1.0)]).desired
        assert replicas == cap["replica counts"][0]
    assert cap["term while held"] == "guard"
