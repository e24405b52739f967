"""The SLO-pressure SLI (issue 25): max(term / target) over TTFT, TPOT, queue per replica and
KV usage, targets per service and SLO class, pushed by the real OTel SDK over real OTLP and
read through the external metrics API (docs/adapter.md, "SLO pressure")."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from opentelemetry.metrics import Meter

from kvspread import names
from kvspread.quantity import parse_quantity
from kvspread.settings import ConfigError
from metrics_adapter.rules import default_rules, parse_rules, pressure_rule
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_otel_helpers import push_once
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers

NS = "llm"
TTFT = names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name
TPOT = names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.name
WAITING = names.ENGINE_REQUESTS_WAITING.name
KV = names.KV_CACHE_USAGE.name
URL = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/{names.SLI_SLO_PRESSURE}"


def _push(port: int, service: str, pod: str, ttft: float, tpot: float, waiting: int,
          kv: float, ttft_bounds: list[float] | None = None,
          qos: str | None = None) -> None:  # fmt: skip
    """One pod's collector: the real SDK with the collector's bounds, its real exporter;
    `qos` is the `llm.qos` the collector stamps on its token histograms (not on the engine
    gauges), from the pod's kvspread.io/qos label."""
    res = {names.ATTR_SERVICE_NAME: service, names.ATTR_K8S_NAMESPACE: NS, names.ATTR_K8S_POD: pod}
    bounds = {TTFT: ttft_bounds or names.GEN_AI_TTFT_BUCKETS, TPOT: names.GEN_AI_TPOT_BUCKETS}

    def record(meter: Meter) -> None:
        h_ttft = meter.create_histogram(TTFT, unit="s")
        h_tpot = meter.create_histogram(TPOT, unit="s")
        attrs = {names.ATTR_QOS: qos} if qos else {}
        for _ in range(100):
            h_ttft.record(ttft, attrs)
            h_tpot.record(tpot, attrs)
        meter.create_gauge(WAITING).set(waiting)
        meter.create_gauge(KV).set(kv)

    push_once(port, res, bounds, record)


def _read(pki: Pki, a: AdapterThread, service: str, more: str = "") -> httpx.Response:
    with api_client(pki, a) as c:
        selector = f"service={service}" + (f",{more}" if more else "")
        return c.get(URL, params={"labelSelector": selector}, headers=hpa_headers())


def test_pressure_is_the_worst_term_over_its_target(pki: Pki, adapter: AdapterThread) -> None:
    port = adapter.adapter.otlp_port
    # chat: TTFT 0.8 s in (0.75, 1] (p95 ~0.99 s); TPOT 0.03 s in (0.025, 0.05] (p95 ~0.049 s);
    # 6 + 2 waiting over two pods: 4 per replica; KV 0.45 mean
    _push(port, "chat", "chat-0", 0.8, 0.03, 6, 0.4)
    _push(port, "chat", "chat-1", 0.8, 0.03, 2, 0.5)
    r = _read(pki, adapter, "chat")
    assert r.status_code == 200, r.text
    (item,) = r.json()["items"]
    # defaults: TTFT 2 s -> 0.49, TPOT 0.05 -> 0.98, queue 4/4 -> 1.0, KV 0.45/0.9 -> 0.5
    assert float(parse_quantity(item["value"])) == pytest.approx(1.0, abs=0.01)
    assert item["metricLabels"]["term"] == names.SLI_QUEUE_DEPTH_PER_REPLICA
    assert item["metricLabels"]["service"] == "chat"


def test_a_refused_term_refuses_the_pressure(pki: Pki, adapter: AdapterThread) -> None:
    """The issue's one-bucket case inside the pressure: TTFT on [0.1, 10] s bounds."""
    _push(adapter.adapter.otlp_port, "coarse", "coarse-0", 0.8, 0.03, 0, 0.1, [0.1, 10.0])
    r = _read(pki, adapter, "coarse")
    assert r.status_code == 422, r.text
    msg = r.json()["message"]
    assert names.SLI_SLO_PRESSURE in msg and names.SLI_TTFT_P95 in msg and "(0.1, 10]" in msg
    refused = adapter.adapter.provider.refused_reads
    assert refused[(names.SLI_SLO_PRESSURE, "wide_bucket")] == 1
    assert refused[(names.SLI_TTFT_P95, "wide_bucket")] == 1


def test_a_ttft_past_the_last_bound_presses_with_its_floor(pki: Pki) -> None:
    """TTFT 20 s, past the collector's last TTFT bound (10 s): the p95 itself is refused
    (the +Inf bucket), but it is at least 10 s, 5 times the realtime target, so the
    pressure serves 5 (the HPA scales up instead of holding while users wait); for a batch
    pod (target 10 s) the floor is 1.0. Only the term's read counts as refused."""
    cfg = replace(base_config(pki), rules=default_rules(pressure=pressure_rule()))
    with AdapterThread(cfg) as a:
        port = a.adapter.otlp_port
        _push(port, "chat", "chat-0", 20.0, 0.03, 0, 0.1, qos="realtime")
        _push(port, "assistant", "assistant-0", 20.0, 0.03, 0, 0.1, qos="batch")
        with api_client(pki, a) as c:
            ttft = c.get(
                f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/{names.SLI_TTFT_P95}",
                params={"labelSelector": "service=chat"},
                headers=hpa_headers(),
            )
        chat = _value(_read(pki, a, "chat"))
        batch = _value(_read(pki, a, "assistant"))
        refused = dict(a.adapter.provider.refused_reads)
    assert ttft.status_code == 422 and "the +Inf bucket" in ttft.json()["message"]
    assert chat[0] == pytest.approx(5.0)
    assert chat[1]["term"] == names.SLI_TTFT_P95 and chat[1]["class"] == "realtime"
    assert batch[0] == pytest.approx(1.0) and batch[1]["class"] == "batch"
    assert refused == {(names.SLI_TTFT_P95, "overflow_bucket"): 3}


def test_a_wide_bucket_wholly_over_the_target_presses_with_its_floor(
    pki: Pki, adapter: AdapterThread
) -> None:
    """TTFT bounds [3, 10] and every TTFT 5 s: (3, 10] is too wide to serve a p95 from, but
    the p95 is over 3 s whatever it is, so the pressure is at least 3 / 2."""
    _push(adapter.adapter.otlp_port, "wide", "wide-0", 5.0, 0.03, 0, 0.1, [3.0, 10.0])
    value, labels = _value(_read(pki, adapter, "wide"))
    assert value == pytest.approx(1.5) and labels["term"] == names.SLI_TTFT_P95


def test_a_tpot_under_the_first_bound_presses_with_its_ceiling(
    pki: Pki, adapter: AdapterThread
) -> None:
    """A fast engine: every TPOT 5 ms, in the collector's first TPOT bucket (0, 10 ms]. The
    p95 itself is refused (the bucket reaches down to 0), but it is at most 10 ms, 0.2 of
    the 50 ms target, so the pressure is served instead of refused (which held the HPA at
    its replicas however idle the service was): here 0.2, its largest term."""
    _push(adapter.adapter.otlp_port, "fast", "fast-0", 0.05, 0.005, 0, 0.1)
    value, labels = _value(_read(pki, adapter, "fast"))
    assert value == pytest.approx(0.2) and labels["term"] == names.SLI_TPOT_P95
    assert adapter.adapter.provider.refused_reads == {(names.SLI_TPOT_P95, "zero_bucket"): 1}


def test_nothing_pushed_is_an_empty_answer(pki: Pki, adapter: AdapterThread) -> None:
    r = _read(pki, adapter, "nobody")
    assert r.status_code == 200 and r.json()["items"] == []


def test_targets_per_service_and_class() -> None:
    rule = pressure_rule({"assistant": {"class": "batch"},
                          "chat": {"class": "realtime", names.SLI_TTFT_P95: 1.0}})  # fmt: skip
    (p,) = [r.pressure for r in default_rules(pressure=rule) if r.pressure is not None]
    assert p.targets_for("assistant")[names.SLI_TPOT_P95] == 0.12
    # a batch replica drains 40 waiting requests within its 10 s TTFT target at 4/s
    assert p.targets_for("assistant")[names.SLI_QUEUE_DEPTH_PER_REPLICA] == 40.0
    assert p.targets_for("chat")[names.SLI_QUEUE_DEPTH_PER_REPLICA] == 4.0
    assert p.targets_for("chat")[names.SLI_TTFT_P95] == 1.0
    assert p.targets_for("chat")[names.SLI_TPOT_P95] == 0.05
    assert p.targets_for(None) == p.targets_for("unlisted") == dict(p.terms)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"terms": {"nope": 1}}, r"rules\[1\]\.terms\.nope: no rule of that name"),
        ({"terms": {"p": 1}}, r"rules\[1\]\.terms\.p: a term cannot be a pressure rule"),
        ({"terms": {"q": 0}}, r"rules\[1\]\.terms\.q: want a target > 0"),
        ({"terms": {}}, r"rules\[1\]\.terms: want 1 to 16 terms"),
        ({"services": {"a": {"class": "gold"}}}, r"services\.a\.class: 'gold' is not one"),
        ({"services": {"a": {"other": 1}}}, r"services\.a\.other: not one of the rule's terms"),
        ({"metric": "m"}, r"rules\[1\]\.metric: not a key of an slo-pressure rule"),
    ],
)
def test_bad_pressure_rules_name_the_key(change: dict[str, object], key: str) -> None:
    q = {"name": "q", "metric": "m", "aggregation": "last"}
    p = {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 1}, **change}
    with pytest.raises(ConfigError, match=key):
        parse_rules([q, p])


def test_only_pressure_rules_take_terms() -> None:
    with pytest.raises(ConfigError, match=r"rules\[0\]\.terms: only aggregation slo-pressure"):
        parse_rules([{"name": "q", "metric": "m", "aggregation": "last", "terms": {"x": 1}}])


def test_a_batch_service_is_pressed_by_its_own_queue_target(pki: Pki) -> None:
    """The same queue over real OTLP, through the default rules: 20 waiting per replica is
    5x the realtime target (pressure 5) and half the batch one (pressure 0.5)."""
    rule = pressure_rule({"assistant": {"class": "batch"}, "chat": {"class": "realtime"}})
    cfg = replace(base_config(pki), rules=default_rules(pressure=rule))
    with AdapterThread(cfg) as a:
        port = a.adapter.otlp_port
        # TTFT 0.8 s (p95 ~0.99 s), TPOT 0.03 s (p95 ~0.049 s), 20 waiting on one pod, KV 0.3
        _push(port, "chat", "chat-0", 0.8, 0.03, 20, 0.3)
        _push(port, "assistant", "assistant-0", 0.8, 0.03, 20, 0.3)
        (chat,) = _read(pki, a, "chat").json()["items"]
        (batch,) = _read(pki, a, "assistant").json()["items"]
    assert float(parse_quantity(chat["value"])) == pytest.approx(20 / 4, abs=0.01)
    assert chat["metricLabels"]["term"] == names.SLI_QUEUE_DEPTH_PER_REPLICA
    # batch: queue 20 / 40 = 0.5 against TTFT ~0.99 / 10 and TPOT ~0.049 / 0.12 ~0.41
    assert float(parse_quantity(batch["value"])) == pytest.approx(0.5, abs=0.01)
    assert batch["metricLabels"]["term"] == names.SLI_QUEUE_DEPTH_PER_REPLICA


def _value(r: httpx.Response) -> tuple[float, dict[str, str]]:
    assert r.status_code == 200, r.text
    (item,) = r.json()["items"]
    return float(parse_quantity(item["value"])), item["metricLabels"]


def test_the_class_comes_from_the_series_without_a_rules_file(pki: Pki) -> None:
    """The default rules list no service; the collector's llm.qos on the token histograms
    names the class: the same 20 waiting requests press batch 0.5 (20 / 40) and realtime 5.
    A service whose pods disagree, or carry no class, takes the default targets."""
    cfg = replace(base_config(pki), rules=default_rules(pressure=pressure_rule()))
    with AdapterThread(cfg) as a:
        port = a.adapter.otlp_port
        _push(port, "assistant", "assistant-0", 0.8, 0.03, 20, 0.3, qos="batch")
        _push(port, "chat", "chat-0", 0.8, 0.03, 20, 0.3, qos="realtime")
        _push(port, "mixed", "mixed-0", 0.8, 0.03, 20, 0.3, qos="batch")
        _push(port, "mixed", "mixed-1", 0.8, 0.03, 0, 0.3, qos="realtime")
        _push(port, "plain", "plain-0", 0.8, 0.03, 20, 0.3)
        _push(port, "odd", "odd-0", 0.8, 0.03, 20, 0.3, qos="gold")
        batch = _value(_read(pki, a, "assistant"))
        chat = _value(_read(pki, a, "chat"))
        mixed = _value(_read(pki, a, "mixed"))
        plain = _value(_read(pki, a, "plain"))
        odd = _value(_read(pki, a, "odd"))
    assert batch[0] == pytest.approx(0.5, abs=0.01)
    assert batch[1]["class"] == "batch"
    assert batch[1]["term"] == names.SLI_QUEUE_DEPTH_PER_REPLICA
    assert chat[0] == pytest.approx(5.0, abs=0.01) and chat[1]["class"] == "realtime"
    # two pods, 20 + 0 waiting: 10 per replica over the default 4
    assert mixed[0] == pytest.approx(2.5, abs=0.01) and "class" not in mixed[1]
    assert plain[0] == pytest.approx(5.0, abs=0.01) and "class" not in plain[1]
    # a class the rule does not define is no class
    assert odd[0] == pytest.approx(5.0, abs=0.01) and "class" not in odd[1]


def test_the_selector_names_the_class_and_still_reads_the_engine_gauges(pki: Pki) -> None:
    """`qos=batch` in the HPA's selector picks the batch targets; the queue and KV gauges,
    which carry no llm.qos, are still read (the label does not filter the series)."""
    cfg = replace(base_config(pki), rules=default_rules(pressure=pressure_rule()))
    with AdapterThread(cfg) as a:
        _push(a.adapter.otlp_port, "assistant", "assistant-0", 0.8, 0.03, 20, 0.3)
        value, labels = _value(_read(pki, a, "assistant", "qos=batch"))
    assert value == pytest.approx(0.5, abs=0.01)
    assert labels["term"] == names.SLI_QUEUE_DEPTH_PER_REPLICA and labels["class"] == "batch"


def test_the_rules_files_class_beats_the_series_label(pki: Pki) -> None:
    rule = pressure_rule({"assistant": {"class": "realtime"}})
    cfg = replace(base_config(pki), rules=default_rules(pressure=rule))
    with AdapterThread(cfg) as a:
        _push(a.adapter.otlp_port, "assistant", "assistant-0", 0.8, 0.03, 20, 0.3, qos="batch")
        value, labels = _value(_read(pki, a, "assistant", "qos=batch"))
    assert value == pytest.approx(5.0, abs=0.01) and labels["class"] == "realtime"


def test_class_for_precedence() -> None:
    (p,) = [
        r.pressure
        for r in default_rules(pressure=pressure_rule({"a": {"class": "realtime"}, "b": {}}))
        if r.pressure is not None
    ]
    assert p.class_label == "qos"
    assert p.class_for("a", "batch") == "realtime"
    assert p.class_for("b", "batch") == p.class_for(None, "batch") == "batch"
    assert p.class_for("b", "gold") is None and p.class_for("b") is None
    assert p.targets_for("b", "batch") == p.targets_for("c", "batch")
    assert p.targets_for("b", "batch")[names.SLI_QUEUE_DEPTH_PER_REPLICA] == 40.0


@pytest.mark.parametrize(
    ("value", "why"),
    [("", "want a selector label name"), (3, "want a selector label name"),
     ("service", "want a selector label name other than serviceLabel, got .service.")],
)  # fmt: skip
def test_a_bad_class_label_names_the_key(value: object, why: str) -> None:
    q = {"name": "q", "metric": "m", "aggregation": "last"}
    p = {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 1}, "classLabel": value}
    with pytest.raises(ConfigError, match=rf"rules\[1\]\.classLabel: {why}"):
        parse_rules([q, p])
    with pytest.raises(ConfigError, match=r"rules\[0\]\.classLabel: only aggregation slo-pressure"):
        parse_rules([{**q, "classLabel": "qos"}])
