"""The HPA's inputs come from the metrics adapter's own store, rules and provider."""

from __future__ import annotations

import pytest

from kvspread import names
from kvspread.settings import ConfigError
from metrics_adapter import sli
from metrics_adapter.rules import default_rules, pressure_rule
from simulator.serving.config import METRICS
from simulator.serving.slis import LATENCY_BOUNDS_S, AdapterSlis, ServiceMetrics


def filled() -> ServiceMetrics:
    m = ServiceMetrics(AdapterSlis(), "text")
    m.push(0.0, [("text-0", 0, 0.0)])
    for i in range(100):  # 100 requests: 0.1 s .. 10 s
        m.observe(0.1 * (i + 1), ok=True)
    m.observe(1.0, ok=False)
    m.push(10.0, [("text-0", 3, 0.25)])
    for _ in range(20):
        m.observe(0.15, ok=True)
    m.push(20.0, [("text-0", 2, 0.4), ("text-1", 3, 0.6)])
    return m


def test_p95_is_the_adapters_histogram_quantile() -> None:
    m = filled()
    counts = [0.0] * (len(LATENCY_BOUNDS_S) + 1)
    for lat in [0.1 * (i + 1) for i in range(100)] + [1.0] + [0.15] * 20:
        counts[sum(1 for b in LATENCY_BOUNDS_S if lat > b)] += 1
    expect = sli.histogram_quantile(0.95, sli.ExplicitHistogram(LATENCY_BOUNDS_S, tuple(counts)))
    assert m.value(names.SLI_LATENCY_P95, 20.0) == pytest.approx(expect)
    assert 5.0 < expect <= 10.0


def test_rates_and_ratios() -> None:
    m = filled()
    assert m.value(names.SLI_REQUESTS_PER_SECOND, 20.0) == pytest.approx(121 / 20)
    assert m.value(names.SLI_ERROR_RATIO, 20.0) == pytest.approx(1 / 121)
    # good = at most 0.2 s: the 0.1 and 0.2 s requests of the first batch and all 20 later
    assert m.value(names.SLI_GOOD_REQUESTS_PER_SECOND, 20.0) == pytest.approx(22 / 20)
    assert m.value(names.SLI_QUEUE_DEPTH, 20.0) == 5
    assert m.value(names.SLI_QUEUE_DEPTH_PER_REPLICA, 20.0) == 2.5
    assert m.value(names.SLI_KV_CACHE_USAGE, 20.0) == 0.5


def test_services_are_told_apart_by_selector() -> None:
    adapter = AdapterSlis()
    a, b = ServiceMetrics(adapter, "a"), ServiceMetrics(adapter, "b")
    a.push(0.0, [("a-0", 1, 0.0)])
    b.push(0.0, [("b-0", 7, 0.0)])
    assert a.value(names.SLI_QUEUE_DEPTH, 1.0) == 1
    assert b.value(names.SLI_QUEUE_DEPTH, 1.0) == 7


def test_window_excludes_old_observations() -> None:
    adapter = AdapterSlis(window_s=15.0)
    m = ServiceMetrics(adapter, "text")
    m.push(0.0, [])
    for i in range(100):
        m.observe(0.1 * (i + 1), ok=True)
    m.push(10.0, [])
    for _ in range(20):
        m.observe(0.15, ok=True)
    m.push(20.0, [])
    # window (5, 20]: only the pushes at 10 and 20 -> the 20 fast requests
    assert m.value(names.SLI_LATENCY_P95, 20.0) == pytest.approx(0.1 + 0.95 * 0.1, rel=1e-9)


def test_nothing_measured_is_none_not_zero() -> None:
    m = ServiceMetrics(AdapterSlis(), "text")
    assert m.value(names.SLI_LATENCY_P95, 10.0) is None
    assert m.value(names.SLI_REQUESTS_PER_SECOND, 10.0) is None
    m.push(0.0, [])
    m.push(10.0, [])
    assert m.value(names.SLI_LATENCY_P95, 10.0) is None
    assert m.value(names.SLI_KV_CACHE_USAGE, 10.0) is None
    assert m.value(names.SLI_TTFT_P95, 10.0) is None
    assert m.value(names.SLI_SLO_PRESSURE, 10.0) is None


def test_hpa_metrics_are_the_adapters_rules() -> None:
    assert METRICS == tuple(r.name for r in default_rules())


def test_good_threshold_is_a_bucket_bound() -> None:
    assert 0.2 in LATENCY_BOUNDS_S


def test_ttft_tpot_and_pressure_over_the_adapters_rules() -> None:
    """The `slo` autoscaler's metric: the adapter's pressure rule with the run's targets."""
    from simulator.serving.config import config_from_mapping

    cfg = config_from_mapping(
        {"pressure": {"realtime_ttft_s": 1.0}, "services": {"chat": {"tpot_target_s": 0.04}}}
    )
    adapter = AdapterSlis(pressure=cfg.pressure_rule())
    m = ServiceMetrics(adapter, "chat")
    m.push(0.0, [("chat-0", 0, 0.1)])
    for _ in range(50):
        m.observe_ttft(0.6)  # (0.5, 0.75]: p95 = 0.7375
        m.observe_tpot(0.03)  # (0.025, 0.05]: p95 = 0.04875
    m.push(10.0, [("chat-0", 2, 0.3), ("chat-1", 0, 0.5)])
    assert m.value(names.SLI_TTFT_P95, 10.0) == pytest.approx(0.7375)
    assert m.value(names.SLI_TPOT_P95, 10.0) == pytest.approx(0.04875)
    # TTFT 0.7375 / 1 s, TPOT 0.04875 / 0.04 s (chat's own), queue 1 / 4, KV 0.4 / 0.9
    assert m.value(names.SLI_SLO_PRESSURE, 10.0) == pytest.approx(0.04875 / 0.04)
    docs = ServiceMetrics(adapter, "docs")  # batch: TPOT 0.12 s
    docs.push(0.0, [])
    for _ in range(50):
        docs.observe_tpot(0.03)
    docs.push(10.0, [])
    assert docs.value(names.SLI_SLO_PRESSURE, 10.0) == pytest.approx(0.04875 / 0.12)


def test_token_histograms_have_the_collectors_bounds() -> None:
    """The simulated TTFT and TPOT histograms are bucketed as bpf.state's tables are (the
    semantic conventions' advised bounds), so a TTFT past 10 s lands in the +Inf bucket
    here as on a node, and the pressure reads its floor there (docs/adapter.md)."""
    from bpf.state import CollectorState

    state = CollectorState()
    adapter = AdapterSlis(pressure=pressure_rule())
    m = ServiceMetrics(adapter, "chat")
    m.push(0.0, [])
    m.observe_ttft(20.0)
    m.push(10.0, [])
    ttft = names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name
    tpot = names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.name
    assert [s.bounds for s in adapter.store.select(ttft, None)] == [state.ttft.bounds]
    assert [s.bounds for s in adapter.store.select(tpot, None)] == [state.tpot.bounds]
    assert m.value(names.SLI_TTFT_P95, 10.0) is None  # refused: the +Inf bucket
    assert m.value(names.SLI_SLO_PRESSURE, 10.0) == pytest.approx(10.0 / 2.0)


def test_batch_services_take_their_own_queue_target() -> None:
    """pressure.batch_queue_per_replica: the batch class's queue target in the adapter's
    rule (default 40, the adapter's own default), the realtime one stays queue_per_replica."""
    from metrics_adapter.rules import DEFAULT_PRESSURE_CLASSES
    from simulator.serving.config import config_from_mapping

    rule = config_from_mapping({}).pressure_rule()
    assert rule["classes"]["batch"][names.SLI_QUEUE_DEPTH_PER_REPLICA] == 40.0
    assert rule["classes"] == {c: dict(t) for c, t in DEFAULT_PRESSURE_CLASSES}
    assert rule["terms"][names.SLI_QUEUE_DEPTH_PER_REPLICA] == 4.0
    cfg = config_from_mapping({"pressure": {"batch_queue_per_replica": 12}})
    adapter = AdapterSlis(pressure=cfg.pressure_rule())
    m = ServiceMetrics(adapter, "docs")  # batch
    m.push(0.0, [("docs-0", 0, 0.1)])
    m.push(10.0, [("docs-0", 6, 0.1)])
    assert m.value(names.SLI_SLO_PRESSURE, 10.0) == pytest.approx(6 / 12)
    with pytest.raises(ConfigError, match="pressure.batch_queue_per_replica"):
        config_from_mapping({"pressure": {"batch_queue_per_replica": 0}})


def test_the_over_budget_shares_are_off_unless_a_share_is_given() -> None:
    """pressure.over_budget_share: 0 (the default, as the adapter's default rules) leaves
    the shares out of the pressure; a share adds realtime's 50 ms and batch's 120 ms share,
    each off for the other class, hold-only unless over_budget_hold_only is false. The
    simulated collector records end-to-end / output tokens on the collector's bounds."""
    from bpf.state import CollectorState
    from simulator.serving.config import config_from_mapping

    fast, slow = names.SLI_OVER_50MS_PER_TOKEN, names.SLI_OVER_120MS_PER_TOKEN
    rule = config_from_mapping({}).pressure_rule()
    assert fast not in rule["terms"] and "holdOnly" not in rule
    cfg = config_from_mapping({"pressure": {"over_budget_share": 0.05}})
    rule = cfg.pressure_rule()
    assert (rule["terms"][fast], rule["terms"][slow]) == (0.05, "off")
    assert (rule["classes"]["batch"][fast], rule["classes"]["batch"][slow]) == ("off", 0.05)
    assert rule["holdOnly"] == [fast, slow]
    prop = {"over_budget_share": 0.05, "over_budget_hold_only": False}
    assert "holdOnly" not in config_from_mapping({"pressure": prop}).pressure_rule()
    adapter = AdapterSlis(pressure=rule)
    m = ServiceMetrics(adapter, "chat")  # realtime
    m.push(0.0, [("chat-0", 0, 0.1)])
    for i in range(100):
        m.observe_normalized(0.08 if i < 8 else 0.03)
    m.push(10.0, [("chat-0", 0, 0.1)])
    normalized = names.GEN_AI_SERVER_NORMALIZED_LATENCY.name
    bounds = [s.bounds for s in adapter.store.select(normalized, None)]
    assert bounds == [CollectorState().normalized.bounds]
    assert m.value(fast, 10.0) == pytest.approx(0.08)
    assert m.value(names.SLI_SLO_PRESSURE, 10.0) == pytest.approx(1.0)  # 1.6, held at 1
    for bad in ({"over_budget_share": 1.5}, {"over_budget_share": -0.1},
                {"over_budget_hold_only": "yes"}):  # fmt: skip
        with pytest.raises(ConfigError, match=f"pressure.{next(iter(bad))}"):
            config_from_mapping({"pressure": bad})


def test_the_trend_term_is_off_unless_a_lead_is_given() -> None:
    """pressure.trend_lead_s (issue 25 point 4): 0 keeps the rule without `trend`; a lead
    adds it with each service's request-rate target as its capacity; bounds name the key."""
    from simulator.serving.config import config_from_mapping

    assert "trend" not in config_from_mapping({}).pressure_rule()
    rule = config_from_mapping({"pressure": {"trend_lead_s": 90}}).pressure_rule()
    assert rule["trend"]["lead"] == 90
    assert all("trendCapacity" in own for own in rule["services"].values())
    for bad in ({"trend_lead_s": 601}, {"trend_lead_s": -1}, {"trend_max_growth": 0.5}):
        with pytest.raises(ConfigError, match=f"pressure.{next(iter(bad))}"):
            config_from_mapping({"pressure": bad})


def test_the_class_stamped_on_the_series_picks_the_targets_without_a_services_entry() -> None:
    """As the collector does, a service's QoS class rides on its request and token
    histograms (llm.qos), not on the engine gauges; the adapter's default pressure rule with
    no `services:` then gives a batch service the batch queue target (40)."""
    from metrics_adapter.rules import pressure_rule

    adapter = AdapterSlis(pressure=pressure_rule())
    m = ServiceMetrics(adapter, "docs", qos="batch")
    plain = ServiceMetrics(adapter, "other")
    for s in (m, plain):
        s.push(0.0, [(f"{s.service}-0", 0, 0.1)])
        for _ in range(50):
            s.observe(0.5, ok=True)
            s.observe_ttft(0.3)
            s.observe_tpot(0.02)
        s.push(10.0, [(f"{s.service}-0", 10, 0.1)])
    stamped = {
        s.metric: dict(s.attrs).get(names.ATTR_QOS) for s in adapter.store if s.attrs and
        dict(s.attrs).get(names.ATTR_SERVICE_NAME) == "docs"
    }  # fmt: skip
    assert stamped[names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name] == "batch"
    assert stamped[names.HTTP_SERVER_REQUEST_DURATION.name] == "batch"
    assert stamped[names.ENGINE_REQUESTS_WAITING.name] is None
    assert m.value(names.SLI_SLO_PRESSURE, 10.0) == pytest.approx(10 / 40)
    assert plain.value(names.SLI_SLO_PRESSURE, 10.0) == pytest.approx(10 / 4)
