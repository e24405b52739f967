"""The over-budget shares (issue 25): the share of streamed requests whose end-to-end
latency per output token (the collector's kvspread.gen_ai.server.normalized_latency) is
over a per-token budget, served as `over-ratio` rules, refused where the budget is not a
bucket bound, and as `holdOnly` terms of an SLO pressure with `off` targets per class;
pushed by the real OTel SDK over real OTLP and read through the external metrics API."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from opentelemetry.metrics import Meter

from kvspread import names
from kvspread.quantity import parse_quantity
from kvspread.settings import ConfigError, load_yaml
from metrics_adapter import sli
from metrics_adapter.config import AdapterConfig
from metrics_adapter.rules import (
    DEFAULT_PRESSURE_CLASSES,
    DEFAULT_PRESSURE_TERMS,
    OFF,
    OVER_BUDGET_TERMS,
    default_rules,
    over_budget_terms,
    parse_rules,
    pressure_rule,
)
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_otel_helpers import push_once
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers

NS = "llm"
NORMALIZED = names.GEN_AI_SERVER_NORMALIZED_LATENCY.name
TTFT = names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name
WAITING = names.ENGINE_REQUESTS_WAITING.name
FAST, SLOW = names.SLI_OVER_50MS_PER_TOKEN, names.SLI_OVER_120MS_PER_TOKEN
BASE = "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + NS


def _push(port: int, service: str, per_token: list[float], qos: str = "",
          bounds: Sequence[float] | None = None, waiting: int = 0) -> None:  # fmt: skip
    """One pod's collector: the real SDK with the collector's normalized-latency bounds (or
    `bounds`), one observation per request, a TTFT of 0.1 s and a duration of 1 s each (the
    guard's request rate), and `waiting` queued (its replica count: one engine pod)."""
    res = {names.ATTR_SERVICE_NAME: service, names.ATTR_K8S_NAMESPACE: NS,
           names.ATTR_K8S_POD: f"{service}-0"}  # fmt: skip
    views = {
        NORMALIZED: bounds or names.NORMALIZED_LATENCY_BUCKETS,
        TTFT: names.GEN_AI_TTFT_BUCKETS,
    }

    def record(meter: Meter) -> None:
        h = meter.create_histogram(NORMALIZED, unit="s")
        t = meter.create_histogram(TTFT, unit="s")
        d = meter.create_histogram(names.HTTP_SERVER_REQUEST_DURATION.name, unit="s")
        attrs = {names.ATTR_QOS: qos} if qos else {}
        for x in per_token:
            h.record(x, attrs)
            t.record(0.1, attrs)
            d.record(1.0, attrs)
        meter.create_gauge(WAITING).set(waiting)

    push_once(port, res, views, record)


def _get(pki: Pki, a: AdapterThread, metric: str, service: str) -> httpx.Response:
    with api_client(pki, a) as c:
        return c.get(
            f"{BASE}/{metric}", params={"labelSelector": f"service={service}"},
            headers=hpa_headers(),
        )  # fmt: skip


def _value(r: httpx.Response) -> tuple[float, dict[str, str]]:
    assert r.status_code == 200, r.text
    (item,) = r.json()["items"]
    return float(parse_quantity(item["value"])), item["metricLabels"]


def _over_budget_rule(hold_only: bool = True) -> dict[str, object]:
    over, batch_over = over_budget_terms(0.05)
    classes = [(c, (*t, *batch_over) if c == "batch" else t) for c, t in DEFAULT_PRESSURE_CLASSES]
    return pressure_rule(
        None, (*DEFAULT_PRESSURE_TERMS, *over), classes,
        hold_only=OVER_BUDGET_TERMS if hold_only else (),
    )  # fmt: skip


# --- the arithmetic ----------------------------------------------------------------------


def test_share_above_a_bound_is_exact() -> None:
    h = sli.ExplicitHistogram((0.025, 0.05, 0.1), (50, 42, 6, 2))
    assert sli.share_above(0.05, h) == pytest.approx(8 / 100)
    assert sli.share_above(0.1, h) == pytest.approx(2 / 100)
    assert sli.share_above(0.025, h) == pytest.approx(50 / 100)
    # a bound written back with float noise is the same bound
    assert sli.is_bound(0.05000000000000001, h) and sli.share_above(0.05000000000000001, h)
    assert sli.share_above(0.05, sli.ExplicitHistogram((0.05,), (0, 0))) is None  # empty


def test_share_above_refuses_a_threshold_inside_a_bucket() -> None:
    h = sli.ExplicitHistogram((0.025, 0.1), (5, 5, 0))
    assert not sli.is_bound(0.05, h) and not sli.is_bound(math.inf, h)
    with pytest.raises(ValueError, match="0.05 is not a bucket bound"):
        sli.share_above(0.05, h)


# --- rules ---------------------------------------------------------------------------------


def test_the_default_rules_serve_both_shares_and_leave_them_out_of_the_pressure() -> None:
    rules = {r.name: r for r in default_rules()}
    for name, budget in ((FAST, 0.05), (SLOW, 0.12)):
        r = rules[name]
        assert (r.aggregation, r.metric, r.threshold, r.window) == (
            "over-ratio", NORMALIZED, budget, 120.0,
        )  # fmt: skip
        # the collector's bounds hold each budget, so its share is exact
        assert budget in names.NORMALIZED_LATENCY_BUCKETS
    p = rules[names.SLI_SLO_PRESSURE].pressure
    assert p is not None and p.hold_only == ()
    assert FAST not in dict(p.terms) and SLOW not in dict(p.terms)


def test_a_bare_off_in_a_rules_file_is_off(tmp_path: Path) -> None:
    """YAML 1.1 (PyYAML, the adapter's loader) reads a bare `off` as false: it is off."""
    f = tmp_path / "adapter.yaml"
    f.write_text(
        "rules:\n"
        f"  - {{name: q, metric: {NORMALIZED}, aggregation: over-ratio, threshold: 0.05}}\n"
        "  - name: p\n    aggregation: slo-pressure\n"
        "    terms: {q: 0.05}\n    classes: {batch: {q: off}}\n    holdOnly: [q]\n"
    )
    cfg = AdapterConfig.from_mapping(load_yaml(f))
    (p,) = [r.pressure for r in cfg.rules if r.pressure is not None]
    assert dict(p.classes)["batch"] == (("q", OFF),) and p.hold_only == ("q",)


def test_off_targets_and_hold_only_round_trip_through_yaml() -> None:
    doc = _over_budget_rule()
    assert doc["terms"][FAST] == 0.05 and doc["terms"][SLOW] == "off"  # type: ignore[index]
    assert doc["classes"]["batch"][FAST] == "off"  # type: ignore[index]
    assert doc["holdOnly"] == [FAST, SLOW]
    (p,) = [r.pressure for r in default_rules(pressure=doc) if r.pressure is not None]
    assert p.hold_only == (FAST, SLOW)
    assert p.targets_of("chat", "realtime")[SLOW] == OFF
    assert p.targets_of("docs", "batch")[FAST] == OFF
    assert p.targets_of("docs", "batch")[SLOW] == 0.05


@pytest.mark.parametrize(
    ("rule", "key"),
    [
        ({"aggregation": "over-ratio"}, r"rules\[0\]\.threshold: an over-ratio rule needs a"),
        ({"aggregation": "over-ratio", "threshold": -1}, r"rules\[0\]\.threshold: .* positive"),
        ({"aggregation": "over-ratio", "threshold": "soon"}, r"rules\[0\]\.threshold: 'soon'"),
        ({"aggregation": "rate", "threshold": 0.05},
         r"rules\[0\]\.threshold: only aggregations good-rate and over-ratio take"),
    ],
)  # fmt: skip
def test_bad_over_ratio_rules_name_the_key(rule: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_rules([{"name": "q", "metric": NORMALIZED, **rule}])


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"holdOnly": ["nope"]}, r"rules\[1\]\.holdOnly: 'nope' is not one of the rule's terms"),
        ({"holdOnly": "q"}, r"rules\[1\]\.holdOnly: want a list of the rule's terms"),
        ({"holdOnly": [{}]}, r"rules\[1\]\.holdOnly: \{\} is not one of the rule's terms"),
        ({"holdOnly": [["q"]]}, r"rules\[1\]\.holdOnly: \['q'\] is not one of the rule's"),
        ({"terms": {"q": True}}, r"rules\[1\]\.terms\.q: want a target > 0 or off, got True"),
        ({"terms": {"q": "of"}}, r"rules\[1\]\.terms\.q: want a target > 0 or off, got 'of'"),
        ({"terms": {"q": math.inf}}, r"rules\[1\]\.terms\.q: want a target > 0 or off"),
    ],
)
def test_bad_hold_only_and_off_name_the_key(change: dict[str, object], key: str) -> None:
    q = {"name": "q", "metric": NORMALIZED, "aggregation": "over-ratio", "threshold": 0.05}
    p = {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 0.05}, **change}
    with pytest.raises(ConfigError, match=key):
        parse_rules([q, p])


# --- over the real OTLP path -------------------------------------------------------------


def test_the_share_over_each_budget_is_served(pki: Pki, adapter: AdapterThread) -> None:
    # 100 requests: 80 at 30 ms per token, 12 at 80 ms, 8 at 0.4 s (a few tokens after a
    # long first one): 20 % over 50 ms, 8 % over 120 ms
    _push(adapter.adapter.otlp_port, "chat", [0.03] * 80 + [0.08] * 12 + [0.4] * 8)
    fast, labels = _value(_get(pki, adapter, FAST, "chat"))
    slow, _ = _value(_get(pki, adapter, SLOW, "chat"))
    assert fast == pytest.approx(0.20, abs=1e-3) and slow == pytest.approx(0.08, abs=1e-3)
    assert labels["service"] == "chat"


def test_a_budget_between_bounds_is_refused_with_the_fix(pki: Pki, adapter: AdapterThread) -> None:
    """The TPOT bounds of an SDK without the collector's view: 0.12 s is not a bound, so
    the 120 ms share would be a guess inside (0.1, 0.15]: 422, counted, with the fix; the
    50 ms share on the same histogram stays served."""
    tpot_bounds = list(names.GEN_AI_TPOT_BUCKETS)
    assert 0.12 not in tpot_bounds and 0.05 in tpot_bounds
    _push(adapter.adapter.otlp_port, "coarse", [0.03] * 90 + [0.11] * 10, bounds=tpot_bounds)
    r = _get(pki, adapter, SLOW, "coarse")
    assert r.status_code == 422, r.text
    msg = r.json()["message"]
    assert SLOW in msg and "0.12 is not one of them" in msg and "0.1, 0.15" in msg
    assert "docs/metrics.md" in msg and "threshold to one of its bounds" in msg
    assert adapter.adapter.provider.refused_reads == {(SLOW, "threshold_not_a_bound"): 1}
    fast, _ = _value(_get(pki, adapter, FAST, "coarse"))
    assert fast == pytest.approx(0.10, abs=1e-3)
    m = httpx.get(f"http://127.0.0.1:{adapter.adapter.otlp_port}/metrics").text
    assert (
        f'kvspread_adapter_refused_reads_total{{metric="{SLOW}",reason="threshold_not_a_bound"}}'
        " 1.0"
    ) in m
    # every over-ratio rule is listed from 0 with the one reason it can give
    assert (
        f'kvspread_adapter_refused_reads_total{{metric="{FAST}",reason="threshold_not_a_bound"}}'
        " 0.0"
    ) in m
    assert f'metric="{FAST}",reason="wide_bucket"' not in m


@pytest.mark.parametrize("hold_only", [True, False])
def test_a_hold_only_share_holds_but_never_adds(pki: Pki, hold_only: bool) -> None:
    """Realtime chat with 8 % over 50 ms (1.6 x the 5 % target) and nothing else pressing:
    hold-only, the pressure is 1 (the HPA keeps its replicas) and the guard records no
    violation; proportional, it is 1.6. Batch docs with the same requests: its 50 ms share
    is off, its 120 ms share is 0, so its pressure comes from its other terms."""
    cfg = replace(base_config(pki), rules=default_rules(pressure=_over_budget_rule(hold_only)))
    with AdapterThread(cfg) as a:
        requests = [0.03] * 92 + [0.08] * 8
        _push(a.adapter.otlp_port, "chat", requests, qos="realtime")
        _push(a.adapter.otlp_port, "docs", requests, qos="batch")
        chat, labels = _value(_get(pki, a, names.SLI_SLO_PRESSURE, "chat"))
        docs, docs_labels = _value(_get(pki, a, names.SLI_SLO_PRESSURE, "docs"))
        violations = dict(a.adapter.provider.guard_violations)
    assert labels["term"] == FAST and labels["class"] == "realtime"
    assert chat == pytest.approx(1.0 if hold_only else 1.6, abs=1e-3)
    assert violations == ({} if hold_only else {names.SLI_SLO_PRESSURE: 1})
    assert docs_labels["class"] == "batch" and docs_labels["term"] != FAST
    # TTFT 0.1 s in (0.08, 0.1]: p95 at most 0.1 / 10 s; the 120 ms share 0 / 0.05
    assert docs == pytest.approx(0.01, abs=1e-3)


def test_a_refused_share_that_is_off_leaves_the_pressure_served(pki: Pki) -> None:
    """Realtime chat on bounds without 0.12: its 120 ms share is refused, but that term is
    off for realtime, so the pressure is served from the others (the 50 ms share, exact)
    instead of refusing the HPA its metric; batch docs on the same bounds needs that share,
    so its pressure is refused."""
    cfg = replace(base_config(pki), rules=default_rules(pressure=_over_budget_rule()))
    bounds = list(names.GEN_AI_TPOT_BUCKETS)
    with AdapterThread(cfg) as a:
        _push(a.adapter.otlp_port, "chat", [0.03] * 98 + [0.08] * 2, "realtime", bounds)
        _push(a.adapter.otlp_port, "docs", [0.03] * 98 + [0.08] * 2, "batch", bounds)
        chat, labels = _value(_get(pki, a, names.SLI_SLO_PRESSURE, "chat"))
        docs = _get(pki, a, names.SLI_SLO_PRESSURE, "docs")
    assert chat == pytest.approx(0.02 / 0.05, abs=1e-3) and labels["term"] == FAST
    assert docs.status_code == 422 and SLOW in docs.json()["message"]
