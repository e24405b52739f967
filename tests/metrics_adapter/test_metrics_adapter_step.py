"""The SLO pressure's step rule for latency terms (metrics_adapter.step): bounded steps up,
hold near target, the latency term left out below it; config errors name the key; served
over real OTLP and the external metrics REST API; the simulator builds the same rule."""

from __future__ import annotations

import math

import pytest

from kvspread import names
from kvspread.clock import FakeClock
from kvspread.quantity import parse_quantity
from kvspread.settings import ConfigError
from metrics_adapter.rules import default_rules, parse_rules, pressure_rule, step_doc
from metrics_adapter.selectors import parse_selector
from metrics_adapter.server import AdapterThread
from metrics_adapter.step import Step, step_value
from simulator.serving.config import config_from_mapping
from simulator.serving.slis import AdapterSlis, ServiceMetrics
from tests.metrics_adapter.adapter_otlp_payloads import gauge, histogram
from tests.metrics_adapter.adapter_testing import Pki, base_config, two_pods_and_pressure

PRESSURE, WAITING = names.SLI_SLO_PRESSURE, names.ENGINE_REQUESTS_WAITING.name
TPOT = names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.name
STEP = Step(("t",), "n", pods=1, min_ratio=1.12, hold=0.8)


def test_over_target_asks_for_at_most_one_replica_more() -> None:
    assert step_value(3.0, 2.0, STEP) == pytest.approx(1.5)
    assert step_value(1.2, 2.0, STEP) == pytest.approx(1.2)  # under the bound: the ratio
    assert step_value(3.0, None, STEP) == pytest.approx(2.0)  # no count: one replica
    assert step_value(3.0, 2.0, Step(("t",), "n", pods=2)) == pytest.approx(2.0)


@pytest.mark.parametrize("n", range(1, 65))
def test_the_hpa_proposal_is_n_plus_one_or_just_past_its_tolerance(n: int) -> None:
    value = step_value(50.0, float(n), STEP)
    assert value is not None and value > 1.1  # outside the HPA's default tolerance
    assert math.ceil(n * value) == max(n + 1, math.ceil(n * 1.12))


def test_near_target_holds_and_below_hold_is_left_out() -> None:
    assert step_value(1.0, 3.0, STEP) == 1.0
    assert step_value(0.8, 3.0, STEP) == 1.0
    assert step_value(0.79, 3.0, STEP) is None
    assert step_value(0.0, 3.0, Step(("t",), "n", hold=0.0)) == 1.0
    own = Step(("t", "u"), "n", hold=0.6, holds=(("u", 1.0),))
    assert step_value(0.7, 3.0, own, "t") == 1.0
    assert step_value(0.99, 3.0, own, "u") is None


def _pressure(tpot_s: float, step: bool, waiting: float = 0.0, pods: int = 2) -> tuple[float, str]:
    """One service with every stream at `tpot_s` per token, `pods` engines each with
    `waiting` requests, read through the real provider (TPOT target 50 ms, queue 4)."""
    rule = pressure_rule(step=step_doc() if step else None)
    a = AdapterSlis(pressure=rule)
    m = ServiceMetrics(a, "chat")
    for t in range(5, 65, 5):
        for _ in range(5):
            m.observe_tpot(tpot_s)
        m.push(float(t), [(f"chat-{i}", waiting, 0.1) for i in range(pods)])
    (v,) = a.provider.read("sim", PRESSURE, parse_selector("service=chat"))
    return v.value, v.labels["term"]


def test_a_tpot_three_times_its_target_adds_one_replica_not_four() -> None:
    # every stream at 0.15 s per token: in the collector's (0.1, 0.15] TPOT bucket, p95
    # 0.1475 s, 2.95 x the 50 ms target
    assert _pressure(0.15, step=False) == (pytest.approx(2.95), names.SLI_TPOT_P95)
    assert _pressure(0.15, step=True) == (pytest.approx(1.5), names.SLI_TPOT_P95)
    assert _pressure(0.15, step=True, pods=4)[0] == pytest.approx(1.25)


def test_near_target_the_pressure_is_exactly_one() -> None:
    # 45 ms per token: p95 48.75 ms, 0.975 x target; proportional rounds 2 x 0.975 up to 2
    assert _pressure(0.045, step=True) == (1.0, names.SLI_TPOT_P95)


def test_below_hold_the_queue_decides() -> None:
    # 20 ms per token (p95 0.485 x target) and 1 waiting per engine (0.25 x 4)
    assert _pressure(0.02, step=False, waiting=1.0)[1] == names.SLI_TPOT_P95
    value, term = _pressure(0.02, step=True, waiting=1.0)
    assert term == names.SLI_QUEUE_DEPTH_PER_REPLICA and value == pytest.approx(0.25)


def test_off_by_default() -> None:
    (p,) = [r.pressure for r in default_rules() if r.pressure is not None]
    assert p.step is None


@pytest.mark.parametrize(
    ("step", "key"),
    [
        ({"terms": "q", "replicas": "n"}, r"step\.terms: want a list"),
        ({"terms": [], "replicas": "n"}, r"step\.terms: want a list"),
        ({"terms": ["x"], "replicas": "n"}, r"step\.terms: 'x' is not one of the rule's terms"),
        ({"terms": ["q"]}, r"step\.replicas: want a rule name"),
        ({"terms": ["q"], "replicas": "nope"}, r"step\.replicas: no rule named 'nope'"),
        ({"terms": ["q"], "replicas": "p"}, r"step\.replicas: cannot be a pressure rule"),
        ({"terms": ["q"], "replicas": "n", "pods": 0}, r"step\.pods: want a whole number"),
        ({"terms": ["q"], "replicas": "n", "pods": 1.5}, r"step\.pods: want a whole number"),
        ({"terms": ["q"], "replicas": "n", "minRatio": 1}, r"step\.minRatio: want a number"),
        ({"terms": ["q"], "replicas": "n", "hold": 1.5}, r"step\.hold: want a number in"),
        ({"terms": ["q"], "replicas": "n", "hold": {"q": -1}}, r"step\.hold\.q: want a number"),
        ({"terms": ["q"], "replicas": "n", "hold": {"x": 1}}, r"step\.hold\.x: not one of step"),
        ({"terms": ["q"], "replicas": "n", "x": 1}, r"step\.x: unknown key"),
        ("yes", r"step: want a mapping"),
    ],
)
def test_bad_steps_name_the_key(step: object, key: str) -> None:
    docs = [
        {"name": "q", "metric": "m", "aggregation": "last"},
        {"name": "n", "metric": "m", "aggregation": "last", "combine": "count"},
        {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 1}, "step": step},
    ]
    with pytest.raises(ConfigError, match=key):
        parse_rules(docs)


def test_only_a_pressure_rule_takes_a_step() -> None:
    with pytest.raises(ConfigError, match=r"rules\[0\]\.step: only aggregation slo-pressure"):
        parse_rules([{"name": "q", "metric": "m", "aggregation": "last", "step": {}}])


def test_the_simulator_builds_the_same_rule_and_names_its_bad_keys() -> None:
    both = {"latency_step": True, "step_hold": 0.7, "step_tpot_hold": 0.7}
    cfg = config_from_mapping({"pressure": both})
    assert cfg.pressure_rule()["step"] == step_doc(hold=0.7)
    assert "step" not in config_from_mapping({}).pressure_rule()
    tpot = config_from_mapping({"pressure": {"latency_step": True, "step_terms": ["tpot"]}})
    assert tpot.pressure_rule()["step"]["terms"] == [names.SLI_TPOT_P95]
    two = config_from_mapping({"pressure": {"latency_step": True, "step_tpot_hold": 1.0}})
    (rule,) = [r for r in default_rules(pressure=two.pressure_rule()) if r.pressure]
    assert rule.pressure is not None and rule.pressure.step is not None
    assert rule.pressure.step.hold_for(names.SLI_TPOT_P95) == 1.0
    assert rule.pressure.step.hold_for(names.SLI_TTFT_P95) == 0.8
    for key, value in (("step_pods", 0), ("step_min_ratio", 1.0), ("step_hold", -0.1), ("step_tpot_hold", 2),
                       ("step_terms", ["queue"]), ("step_terms", [])):  # fmt: skip
        with pytest.raises(ConfigError, match=rf"pressure\.{key}"):
            config_from_mapping({"pressure": {"latency_step": True, key: value}})


def test_the_step_is_served_over_otlp_and_the_external_metrics_api(pki: Pki) -> None:
    """Real OTLP protobuf into the running adapter, read back through the external metrics
    REST API: TPOT 3.9 x target on 2 engines serves 1.5 (one replica more), not 3.9."""
    t0 = 1_800_000_000.0
    rules = [
        {"name": names.SLI_TPOT_P95, "metric": TPOT, "aggregation": "quantile", "quantile": 0.95},
        {"name": names.SLI_ENGINE_REPLICAS, "metric": WAITING, "aggregation": "last",
         "combine": "count"},
        {"name": names.SLI_QUEUE_DEPTH_PER_REPLICA, "metric": WAITING, "aggregation": "last",
         "combine": "mean"},
        pressure_rule(terms=((names.SLI_TPOT_P95, 0.05), (names.SLI_QUEUE_DEPTH_PER_REPLICA, 4.0)),
                      classes=(), step={**step_doc(), "terms": [names.SLI_TPOT_P95]}, guard=False),
    ]  # fmt: skip
    clock = FakeClock(t=t0 + 60)
    with AdapterThread(base_config(pki, rules=rules), clock=clock) as a:
        bounds = list(names.LATENCY_BUCKETS)
        counts = [0] * (len(bounds) + 1)
        points = []
        for i in range(1, 13):  # every 5 s, 5 more streams at 0.15 s per token
            counts[bounds.index(0.2)] += 5
            points.append((t0, t0 + 5 * i, list(counts), {}))
        r = two_pods_and_pressure(
            pki,
            a,
            [gauge(WAITING, [(t0 + 60, 0.0, {})])],
            histogram(TPOT, points, bounds),
            PRESSURE,
        )
    assert r.status_code == 200, r.text
    (item,) = r.json()["items"]
    assert item["metricLabels"]["term"] == names.SLI_TPOT_P95
    assert float(parse_quantity(item["value"])) == pytest.approx(1.5)
