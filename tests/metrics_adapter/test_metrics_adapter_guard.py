"""The SLO pressure's scale-down guard (metrics_adapter.guard): a count that recently missed
the SLO at as high a rate per replica is not asked for; the memory is bounded and expires;
config errors name the key; served over real OTLP and the external metrics API; the
simulator builds the same rule."""

from __future__ import annotations

import math

import pytest

from kvspread import names
from kvspread.clock import FakeClock
from kvspread.quantity import parse_quantity
from kvspread.settings import ConfigError
from metrics_adapter.guard import GuardMemory, guarded, refused
from metrics_adapter.rules import default_rules, guard_doc, parse_rules, pressure_rule
from metrics_adapter.selectors import parse_selector
from metrics_adapter.server import AdapterThread
from simulator.serving.config import config_from_mapping
from simulator.serving.slis import AdapterSlis, ServiceMetrics
from tests.metrics_adapter.adapter_otlp_payloads import gauge, histogram, post, request
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers

PRESSURE, WAITING = names.SLI_SLO_PRESSURE, names.ENGINE_REQUESTS_WAITING.name
TPOT = names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.name
DUR = names.HTTP_SERVER_REQUEST_DURATION.name


def test_a_count_that_missed_at_the_same_rate_per_replica_is_held() -> None:
    missed = [(0.0, 2.0, 1.0)]  # 2 replicas at 1 request/s each: pressure over 1
    # at 3 replicas and 2 requests/s the pressure 0.49 proposes 2: refused, hold 3
    assert guarded(0.49, 3.0, 2.0, missed, 0.8) == pytest.approx(2.5 / 3)
    assert math.ceil(3 * (2.5 / 3)) == 3
    # the rate fell: 2 replicas would carry 0.75 each, under 0.8 x 1.0: allowed
    assert guarded(0.49, 3.0, 1.5, missed, 0.8) is None
    # 1 replica at 1.5 requests/s carries more than 0.8 x 1.0: 1 refused, 2 allowed
    assert guarded(0.3, 3.0, 1.5, missed, 0.8) == pytest.approx(1.5 / 3)
    # the pressure's own proposal is the current count, or more: nothing to hold
    assert guarded(0.9, 3.0, 2.0, missed, 0.8) is None
    assert guarded(1.4, 3.0, 2.0, missed, 0.8) is None
    # one replica serving: nothing to let go
    assert guarded(0.2, 1.0, 2.0, missed, 0.8) is None
    assert guarded(0.2, 3.0, 2.0, [], 0.8) is None


def test_a_violation_refuses_fewer_replicas_not_more() -> None:
    missed = [(0.0, 2.0, 1.0)]
    assert refused(2, 2.0, missed, 0.8) and refused(1, 2.0, missed, 0.8)
    assert not refused(3, 30.0, missed, 0.8)  # more replicas than missed: never refused
    assert refused(1, 0.8, missed, 0.8) and not refused(1, 0.79, missed, 0.8)


@pytest.mark.parametrize("n", range(2, 41))
def test_the_hpa_proposal_is_the_least_count_the_guard_allows(n: int) -> None:
    # a violation at n - 1 replicas: n - 1 or fewer refused at the same rate, so hold n
    missed = [(0.0, float(n - 1), 1.0)]
    value = guarded(0.1, float(n), float(n - 1), missed, 1.0)
    assert value is not None and value < 1.0  # never asks for a scale-up
    assert math.ceil(n * value) == n
    # a violation at 1 replica refuses only 1
    value = guarded(0.01, float(n), 1.0, [(0.0, 1.0, 1.0)], 1.0)
    assert value is not None and math.ceil(n * value) == 2


def test_a_count_that_is_not_a_number_holds_nothing() -> None:
    for replicas in (math.nan, math.inf):
        assert guarded(0.4, replicas, 2.0, [(0.0, 1.0, 1.0)], 1.0) is None


def test_the_memory_keeps_what_refuses_most_and_is_bounded() -> None:
    m = GuardMemory(max_keys=2, max_violations=3)
    m.record("a", 0.0, 2.0, 2.0)
    m.record("a", 1.0, 3.0, 1.5)  # 3 at 0.5 each covers 2 at 1.0 each
    assert m.violations("a", 1.0, 60.0) == [(1.0, 3.0, 0.5)]
    m.record("a", 2.0, 1.0, 0.1)  # 1 at 0.1 is not covered by 3 at 0.5
    assert len(m.violations("a", 2.0, 60.0)) == 2
    for t in range(3, 10):  # each at more replicas and a higher rate: none covers another
        m.record("a", float(t), float(t), float(t * t))
    assert [v[0] for v in m.violations("a", 9.0, 60.0)] == [7.0, 8.0, 9.0]
    assert m.violations("a", 100.0, 60.0) == []  # expired
    # no arrivals, no replica, no number: nothing to learn
    for n, rate in (
        (2.0, 0.0),
        (0.0, 2.0),
        (2.0, math.nan),
        (2.0, math.inf),
        (math.nan, 2.0),
        (math.inf, 2.0),
    ):
        assert not m.record("b", 0.0, n, rate)
    assert m.violations("b", 0.0, 60.0) == []
    assert m.record("b", 0.0, 2.0, 1.0)
    m.record("c", 0.0, 2.0, 1.0)  # a third selector evicts the least recently read
    assert len(m) == 2 and m.violations("a", 0.0, 60.0) == []


def test_the_window_count_is_the_fewest_serving_its_reads_saw() -> None:
    m = GuardMemory(max_counts=3)
    assert m.least("a", 0.0, 1.0, 60.0) == 1.0
    assert m.least("a", 15.0, 2.0, 60.0) == 1.0  # the 1 still in the window
    assert m.least("a", 61.0, 3.0, 60.0) == 2.0  # the 1 is 61 s old: out of it
    assert m.least("a", 70.0, 2.0, 60.0) == 2.0  # fewer now: the 3 is never least again
    assert m.least("a", 75.0, 2.0, 5.0) == 2.0
    assert m.least("a", 200.0, 5.0, 60.0) == 5.0  # nothing else within the window
    assert math.isnan(m.least("a", 201.0, math.nan, 60.0))  # not a count: not noted
    for t, n in enumerate((6.0, 7.0, 8.0, 9.0), start=202):  # bounded: the newest 3 kept
        m.least("a", float(t), n, 60.0)
    assert m.least("a", 206.0, 10.0, 60.0) == 8.0
    assert len(m) == 1 and m.violations("a", 206.0, 60.0) == []


def test_on_in_the_default_rules() -> None:
    (p,) = [r.pressure for r in default_rules() if r.pressure is not None]
    assert p.guard is not None and p.guard.window_s == 1800.0 and p.guard.fraction == 0.8
    assert p.guard.replicas == names.SLI_ENGINE_REPLICAS
    assert p.guard.rate == names.SLI_REQUESTS_PER_SECOND
    assert "guard" not in pressure_rule(guard=False)


@pytest.mark.parametrize(
    ("guard", "key"),
    [
        ({"rate": "r"}, r"guard\.replicas: want a rule name"),
        ({"replicas": "n"}, r"guard\.rate: want a rule name"),
        ({"replicas": "nope", "rate": "r"}, r"guard\.replicas: no rule named 'nope'"),
        ({"replicas": "n", "rate": "p"}, r"guard\.rate: cannot be a pressure rule"),
        ({"replicas": "n", "rate": "q"}, r"guard\.rate: 'q' is not a rate rule"),
        ({"replicas": "n", "rate": "r", "window": 0}, r"guard\.window: 0 must be a positive"),
        ({"replicas": "n", "rate": "r", "window": "25h"}, r"guard\.window: want more than 0"),
        ({"replicas": "n", "rate": "r", "window": "soon"}, r"guard\.window"),
        ({"replicas": "n", "rate": "r", "fraction": 0}, r"guard\.fraction: want a number"),
        ({"replicas": "n", "rate": "r", "fraction": 1.5}, r"guard\.fraction: want a number"),
        ({"replicas": "n", "rate": "r", "fraction": True}, r"guard\.fraction: want a number"),
        ({"replicas": "n", "rate": "r", "x": 1}, r"guard\.x: unknown key"),
        ("yes", r"guard: want a mapping"),
    ],
)
def test_bad_guards_name_the_key(guard: object, key: str) -> None:
    docs = [
        {"name": "q", "metric": "m", "aggregation": "last"},
        {"name": "r", "metric": "m", "aggregation": "rate"},
        {"name": "n", "metric": "m", "aggregation": "last", "combine": "count"},
        {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 1}, "guard": guard},
    ]
    with pytest.raises(ConfigError, match=key):
        parse_rules(docs)


def test_only_a_pressure_rule_takes_a_guard() -> None:
    with pytest.raises(ConfigError, match=r"rules\[0\]\.guard: only aggregation slo-pressure"):
        parse_rules([{"name": "q", "metric": "m", "aggregation": "last", "guard": {}}])


def test_the_simulator_builds_the_same_rule_and_names_its_bad_keys() -> None:
    assert config_from_mapping({}).pressure_rule()["guard"] == guard_doc()
    cfg = config_from_mapping({"pressure": {"guard_window_s": 600, "guard_fraction": 0.9}})
    assert cfg.pressure_rule()["guard"] == guard_doc(600.0, 0.9)
    assert "guard" not in config_from_mapping({"pressure": {"guard": False}}).pressure_rule()
    for key, value in (("guard", 1), ("guard_window_s", 0), ("guard_window_s", 90000),
                       ("guard_fraction", 0), ("guard_fraction", 1.2)):  # fmt: skip
        with pytest.raises(ConfigError, match=rf"pressure\.{key}"):
            config_from_mapping({"pressure": {key: value}})


def _phase(
    m: ServiceMetrics, t0: int, t1: int, per_5s: int, tpot_s: float, pods: int, served: bool = True
) -> None:
    for t in range(t0, t1, 5):
        for _ in range(per_5s):
            if served:
                m.observe(1.0, True)
            m.observe_tpot(tpot_s)
        m.push(float(t), [(f"chat-{i}", 0.0, 0.1) for i in range(pods)])


def _read(a: AdapterSlis, t: float) -> tuple[float, str]:
    a.now = t
    (v,) = a.provider.read("sim", PRESSURE, parse_selector("service=chat"))
    return v.value, v.labels["term"]


def test_served_through_the_provider_it_holds_until_the_rate_falls() -> None:
    """The real store and provider, as the simulator reads them: a TPOT over target at
    2 engines and 2 requests/s, then 3 engines at the TPOT floor: the pressure's 0.49 would
    propose 2, which missed at that rate per replica, so the guard serves 2.5 / 3 (the HPA
    keeps 3); once the rate halves, 2 replicas would carry 0.5 each, and the pressure is
    served as it is."""
    a = AdapterSlis(pressure=pressure_rule())
    m = ServiceMetrics(a, "chat")
    _phase(m, 5, 65, 10, 0.15, 2)
    value, term = _read(a, 60.0)
    assert term == names.SLI_TPOT_P95 and value > 1  # recorded: 2 replicas at 1 request/s
    _phase(m, 65, 155, 10, 0.02, 3)
    value, term = _read(a, 150.0)
    assert term == "guard" and value == pytest.approx(2.5 / 3)
    _phase(m, 155, 245, 5, 0.02, 3)
    value, term = _read(a, 240.0)
    assert term == names.SLI_TPOT_P95 and value < 0.5
    off = AdapterSlis(pressure=pressure_rule(guard=False))
    m = ServiceMetrics(off, "chat")
    _phase(m, 5, 65, 10, 0.15, 2)
    _read(off, 60.0)
    _phase(m, 65, 155, 10, 0.02, 3)
    assert _read(off, 150.0)[1] == names.SLI_TPOT_P95  # off: the proportional pressure
    assert a.provider.guard_violations == {PRESSURE: 1}
    assert a.provider.guard_holds == {PRESSURE: 1}
    assert off.provider.guards == {} and off.provider.guard_holds == {}


def test_a_violation_read_just_after_a_scale_up_is_kept_at_the_fewest_serving() -> None:
    """A p95 over a 1 min window still holds the latencies 1 engine served after a second
    became ready: read then it says 1 replica is too few, not 2, so 3 engines at the TPOT
    floor may go to 2 (the pressure as it is); only a violation after 2 engines served the
    whole window holds 3."""
    a = AdapterSlis(pressure=pressure_rule())
    m = ServiceMetrics(a, "chat")
    _phase(m, 5, 65, 5, 0.15, 1)
    assert _read(a, 60.0)[0] > 1  # 1 engine at 0.5 requests/s missed
    _phase(m, 65, 80, 5, 0.15, 2)
    value, _ = _read(a, 75.0)
    assert value > 1  # 2 engines serving now, the window's latencies are the 1 engine's
    _phase(m, 80, 170, 5, 0.02, 3)
    value, term = _read(a, 165.0)
    assert term == names.SLI_TPOT_P95 and math.ceil(3 * value) == 2  # 2 is allowed
    (v,) = a.provider.guards[PRESSURE].violations("sim/service=chat", 165.0, 1800.0)
    assert v[1] == 1.0
    # the same rate per replica missed by 2 engines that served the whole window: held
    b = AdapterSlis(pressure=pressure_rule())
    m = ServiceMetrics(b, "chat")
    _phase(m, 5, 65, 5, 0.02, 2)
    assert _read(b, 60.0)[0] < 1
    _phase(m, 65, 140, 5, 0.15, 2)
    assert _read(b, 135.0)[0] > 1
    _phase(m, 140, 230, 5, 0.02, 3)
    value, term = _read(b, 225.0)
    assert term == "guard" and value == pytest.approx(2.5 / 3)


def test_without_a_request_rate_it_learns_nothing_and_holds_nothing() -> None:
    # TPOT streams but no finished request in the window: a rate of 0 says nothing of a
    # rate per replica, so the pressure over 1 is not kept and the later read is as is
    a = AdapterSlis(pressure=pressure_rule())
    m = ServiceMetrics(a, "chat")
    _phase(m, 5, 65, 10, 0.15, 2, served=False)
    assert _read(a, 60.0)[0] > 1
    _phase(m, 65, 155, 10, 0.02, 3, served=False)
    assert _read(a, 150.0)[1] == names.SLI_TPOT_P95
    assert a.provider.guards[PRESSURE].violations("sim/service=chat", 150.0, 1800.0) == []


def test_the_guard_is_served_over_otlp_and_the_external_metrics_api(pki: Pki) -> None:
    """Real OTLP protobuf into the running adapter, read back through the external metrics
    REST API as the HPA reads it: TPOT 3 x target at 2 engines, then at its floor on 3; the
    second read serves 2.5 / 3 with metricLabels.term guard."""
    import httpx

    t0 = 1_800_000_000.0
    rules = [
        {"name": names.SLI_TPOT_P95, "metric": TPOT, "aggregation": "quantile", "quantile": 0.95},
        {"name": names.SLI_REQUESTS_PER_SECOND, "metric": DUR, "aggregation": "rate"},
        {"name": names.SLI_ENGINE_REPLICAS, "metric": WAITING, "aggregation": "last",
         "combine": "count", "staleness": 30.0},
        pressure_rule(terms=((names.SLI_TPOT_P95, 0.05),), classes=()),
    ]  # fmt: skip
    clock = FakeClock(t=t0 + 60)
    res = {names.ATTR_K8S_NAMESPACE: "llm", names.ATTR_SERVICE_NAME: "chat"}
    tpot_bounds, dur_bounds = list(names.GEN_AI_TPOT_BUCKETS), [1.0]
    tpot = [0] * (len(tpot_bounds) + 1)
    dur = [0, 0]

    def push(t: float, until: float, slow: bool, pods: int) -> None:
        tpot_points, dur_points = [], []
        while t < until:
            t += 5
            tpot[tpot_bounds.index(0.15 if slow else 0.025)] += 10
            dur[0] += 10  # 2 requests/s
            tpot_points.append((t0, t, list(tpot), {}))
            dur_points.append((t0, t, list(dur), {}))
        for i in range(pods):
            own = [gauge(WAITING, [(until, 0.0, {})])]
            if i == 0:
                own += [histogram(TPOT, tpot_points, tpot_bounds),
                        histogram(DUR, dur_points, dur_bounds)]  # fmt: skip
            post(a.adapter.otlp_port, request({**res, names.ATTR_K8S_POD: f"chat-{i}"}, own))

    def read() -> dict[str, object]:
        with api_client(pki, a) as c:
            r = c.get(f"/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/{PRESSURE}",
                      params={"labelSelector": "service=chat"}, headers=hpa_headers())  # fmt: skip
        assert r.status_code == 200, r.text
        (item,) = r.json()["items"]
        return dict(item)

    with AdapterThread(base_config(pki, rules=rules), clock=clock) as a:
        push(t0, t0 + 60, True, 2)
        first = read()
        assert first["metricLabels"]["term"] == names.SLI_TPOT_P95  # type: ignore[index]
        assert float(parse_quantity(str(first["value"]))) > 1
        clock.t = t0 + 150
        push(t0 + 60, t0 + 150, False, 3)
        second = read()
        exposed = httpx.get(f"http://127.0.0.1:{a.adapter.otlp_port}/metrics").text
    # the operator's view: one read remembered, one held
    for family in ("guard_violations", "guard_holds"):
        assert f'kvspread_adapter_{family}_total{{metric="{PRESSURE}"}} 1.0' in exposed
    assert second["metricLabels"]["term"] == "guard"  # type: ignore[index]
    assert float(parse_quantity(str(second["value"]))) == pytest.approx(2.5 / 3, abs=1e-3)
