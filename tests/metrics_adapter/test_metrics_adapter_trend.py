"""The SLO pressure's predictive term (issue 25 point 4, metrics_adapter.trend): the request
rate extrapolated over the scale-up lead, per replica against a capacity; read through the
adapter's real series store, OTLP source and rule provider on simulated time."""

from __future__ import annotations

import pytest

from kvspread import names
from kvspread.clock import FakeClock
from kvspread.quantity import parse_quantity
from kvspread.settings import ConfigError
from metrics_adapter.rules import default_rules, parse_rules, pressure_rule, trend_doc
from metrics_adapter.server import AdapterThread
from metrics_adapter.trend import Trend, predicted_rate, trend_term
from simulator.serving.slis import AdapterSlis, ServiceMetrics
from tests.metrics_adapter.adapter_otlp_payloads import gauge, histogram
from tests.metrics_adapter.adapter_testing import Pki, base_config, two_pods_and_pressure

PRESSURE = names.SLI_SLO_PRESSURE
DUR = names.HTTP_SERVER_REQUEST_DURATION.name
WAITING = names.ENGINE_REQUESTS_WAITING.name
TREND = Trend("s", "l", "r", lead_s=120.0, capacity=2.0, max_growth=2.0, min_rise=0.1)


def test_prediction_extrapolates_a_rise_over_the_lead() -> None:
    # 1 min rate 3, 5 min rate 2: centres 120 s apart, slope 1/120 per s; from the short
    # window's centre (30 s ago) to 120 s ahead: 3 + 150/120 = 4.25
    assert predicted_rate(3.0, 2.0, 60.0, 300.0, TREND) == pytest.approx(4.25)


@pytest.mark.parametrize(("short", "long"), [(2.0, 2.0), (2.1, 2.0), (1.0, 2.0), (0.0, 0.0)])
def test_flat_falling_or_no_traffic_gives_no_prediction(short: float, long: float) -> None:
    assert predicted_rate(short, long, 60.0, 300.0, TREND) is None


def test_prediction_is_bounded_by_max_growth() -> None:
    assert predicted_rate(10.0, 0.1, 60.0, 300.0, TREND) == pytest.approx(20.0)


def test_no_window_ordering_or_no_replica_gives_no_term() -> None:
    assert predicted_rate(3.0, 2.0, 300.0, 60.0, TREND) is None
    assert trend_term(4.0, 0.0, 2.0) is None
    assert trend_term(None, 2.0, 2.0) is None
    assert trend_term(4.0, 2.0, 2.0) == pytest.approx(1.0)


def _run(rates: list[tuple[float, float]], trend: bool = True, pods: int = 2,
         capacity: float | None = None) -> tuple[AdapterSlis, ServiceMetrics]:  # fmt: skip
    """`rates`: (until t, requests/s) segments, each request 0.5 s with TTFT 0.3 s and TPOT
    20 ms (pressure terms about 0.49), pushed every 5 s with `pods` engines reporting an
    empty queue."""
    own = {"trendCapacity": capacity} if capacity is not None else {}
    rule = pressure_rule({"chat": own} if own else None,
                         trend=trend_doc(120.0) if trend else None)  # fmt: skip
    a = AdapterSlis(pressure=rule)
    m = ServiceMetrics(a, "chat")
    t, owed = 0.0, 0.0
    for until, rps in rates:
        while t < until:
            t += 5.0
            owed += rps * 5.0
            while owed >= 1.0:
                owed -= 1.0
                m.observe(0.5, True)
                m.observe_ttft(0.3)
                m.observe_tpot(0.02)
            m.push(t, [(f"chat-{i}", 0.0, 0.1) for i in range(pods)])
    a.now = t
    return a, m


def _pressure(a: AdapterSlis) -> tuple[float, str]:
    from metrics_adapter.selectors import parse_selector

    (v,) = a.provider.read("sim", PRESSURE, parse_selector("service=chat"))
    return v.value, v.labels["term"]


def test_the_term_rises_ahead_of_a_ramp_and_names_itself() -> None:
    # 1 req/s for 10 min, then 3 req/s for the last minute: 2 replicas x 2 req/s at pressure 1
    a, m = _run([(600.0, 1.0), (660.0, 3.0)])
    value, term = _pressure(a)
    assert term == "trend"
    # short 3, long (240 x 1 + 60 x 3) / 300 = 1.4: slope 1.6 / 120, predicted 5 -> 5 / 4
    assert value == pytest.approx(1.25, rel=0.05)
    assert m.value(names.SLI_ENGINE_REPLICAS, a.now) == 2.0
    # the same ramp without the trend: TTFT and TPOT (about 0.49) set it
    b, _ = _run([(600.0, 1.0), (660.0, 3.0)], trend=False)
    value_off, term_off = _pressure(b)
    assert term_off != "trend" and value_off < 0.6


def test_flat_traffic_leaves_the_term_out() -> None:
    a, _ = _run([(660.0, 3.0)])
    value, term = _pressure(a)
    assert term != "trend" and value < 0.6


def test_a_service_capacity_replaces_the_default() -> None:
    a, _ = _run([(600.0, 1.0), (660.0, 3.0)], capacity=3.0)
    value, term = _pressure(a)
    assert term == "trend" and value == pytest.approx(5.0 / 6.0, rel=0.05)


def test_the_term_is_bounded() -> None:
    # 0 -> 20 req/s: predicted at most 2 x 20 = 40 req/s over 2 x 2 req/s
    a, _ = _run([(600.0, 0.0), (660.0, 20.0)])
    value, term = _pressure(a)
    assert term == "trend" and value == pytest.approx(10.0, rel=0.05)


def test_missing_inputs_leave_the_term_out() -> None:
    # no engine reports a gauge: no replica count, so no trend term (the others decide)
    a, _ = _run([(600.0, 1.0), (660.0, 3.0)], pods=0)
    value, term = _pressure(a)
    assert term != "trend"
    # younger than the short window: both rates span the same points, so no rise
    b, _ = _run([(20.0, 3.0)])
    assert _pressure(b)[1] != "trend"


def test_off_by_default() -> None:
    (p,) = [r.pressure for r in default_rules() if r.pressure is not None]
    assert p.trend is None


@pytest.mark.parametrize(
    ("trend", "services", "key"),
    [
        ({"short": "rps"}, {}, r"trend\.long: want a rule name"),
        ({"short": "rps", "long": "rps5", "replicas": "n", "x": 1}, {}, r"trend\.x: unknown"),
        ({"short": "nope", "long": "rps5", "replicas": "n"}, {}, r"trend\.short: no rule"),
        ({"short": "n", "long": "rps5", "replicas": "n"}, {}, r"trend\.short: 'n' is not a rate"),
        ({"short": "rps5", "long": "rps", "replicas": "n"}, {}, r"trend\.long: .* longer window"),
        (
            {"short": "rps", "long": "rps5", "replicas": "n", "lead": "11m"},
            {},
            r"trend\.lead: at most 600",
        ),
        (
            {"short": "rps", "long": "rps5", "replicas": "n", "maxGrowth": 0.5},
            {},
            r"trend\.maxGrowth: want a number >= 1",
        ),
        (
            {"short": "rps", "long": "rps5", "replicas": "n", "capacity": 0},
            {},
            r"trend\.capacity: want a number > 0",
        ),
        (None, {"a": {"trendCapacity": 2}}, r"services\.a\.trendCapacity: the rule has no trend"),
    ],
)
def test_bad_trends_name_the_key(
    trend: dict[str, object] | None, services: dict[str, object], key: str
) -> None:
    docs = [
        {"name": "q", "metric": "m", "aggregation": "last"},
        {"name": "n", "metric": "m", "aggregation": "last", "combine": "count"},
        {"name": "rps", "metric": "d", "aggregation": "rate", "window": "1m"},
        {"name": "rps5", "metric": "d", "aggregation": "rate", "window": "5m"},
        {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 1}, "services": services,
         **({"trend": trend} if trend is not None else {})},
    ]  # fmt: skip
    with pytest.raises(ConfigError, match=key):
        parse_rules(docs)


def test_the_trend_is_served_over_otlp_and_the_external_metrics_api(pki: Pki) -> None:
    """Real OTLP protobuf (exact timestamps) into the running adapter, read back through
    the external metrics REST API: the same ramp as above, `metricLabels.term` = trend."""
    t0 = 1_800_000_000.0
    rules = [
        {"name": names.SLI_REQUESTS_PER_SECOND, "metric": DUR, "aggregation": "rate"},
        {"name": names.SLI_REQUESTS_PER_SECOND_LONG, "metric": DUR, "aggregation": "rate",
         "window": "5m"},
        {"name": names.SLI_ENGINE_REPLICAS, "metric": WAITING, "aggregation": "last",
         "combine": "count"},
        {"name": names.SLI_QUEUE_DEPTH_PER_REPLICA, "metric": WAITING, "aggregation": "last",
         "combine": "mean"},
        pressure_rule(terms=((names.SLI_QUEUE_DEPTH_PER_REPLICA, 4.0),), classes=(),
                      trend=trend_doc(120.0)),
    ]  # fmt: skip
    clock = FakeClock(t=t0 + 660)
    with AdapterThread(base_config(pki, rules=rules), clock=clock) as a:
        points, count = [], 0
        for i in range(1, 133):  # every 5 s: 1 req/s for 600 s, then 3 req/s
            count += 5 if i <= 120 else 15
            points.append((t0, t0 + 5 * i, [count, 0], {names.ATTR_HTTP_STATUS: 200}))
        r = two_pods_and_pressure(
            pki, a, [gauge(WAITING, [(t0 + 660, 0.0, {})])], histogram(DUR, points, [1.0]), PRESSURE
        )
    assert r.status_code == 200, r.text
    (item,) = r.json()["items"]
    assert item["metricLabels"]["term"] == "trend"
    assert float(parse_quantity(item["value"])) == pytest.approx(1.25, rel=0.05)
