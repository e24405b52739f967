"""Static checks of the generated Grafana dashboards: every query reads a known metric, every
panel has a unit, the template variables exist, uids are unique."""

from __future__ import annotations

import re

import pytest

from observability import catalog, dashboards, rules

BUILT = dashboards.build_all()
QUERIES = dashboards.panel_queries(BUILT)

KNOWN = {"up"} | set(rules.recorded_names())
for _m in catalog.CATALOG:
    KNOWN.add(_m.name)
    if _m.type == "histogram":
        KNOWN |= {f"{_m.name}_bucket", f"{_m.name}_count", f"{_m.name}_sum"}

# Metric-looking tokens: names that start like ours, or any recorded-rule name; a token
# followed by a label matcher is a label (kvspread_gpu_memory_owner=""), not a metric.
METRIC = re.compile(
    r"\b(up(?=\{)|kvspread:[a-z0-9_:]+|kvspread_[a-z0-9_]+|http_server_[a-z0-9_]+|gen_ai_server_[a-z0-9_]+|kube_[a-z0-9_]+)\b(?!\s*(?:=~|!~|!=|=))"
)
LABEL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")


def test_seven_dashboards_with_unique_uids() -> None:
    assert len(BUILT) == 7
    uids = [d["uid"] for d in BUILT.values()]
    assert len(set(uids)) == len(uids)
    assert all(u.startswith(dashboards.UID_PREFIX) for u in uids)


@pytest.mark.parametrize("q", QUERIES, ids=lambda q: f"{q.dashboard}:{q.panel}:{q.ref}")
def test_query_reads_only_known_metrics(q: dashboards.PanelQuery) -> None:
    found = METRIC.findall(q.expr)
    assert found, f"no kvspread metric in {q.expr!r}"
    unknown = [name for name in found if name not in KNOWN]
    assert not unknown, f"{q.panel}: unknown metrics {unknown} in {q.expr!r}"


@pytest.mark.parametrize("q", QUERIES, ids=lambda q: f"{q.dashboard}:{q.panel}:{q.ref}")
def test_query_filters_only_by_catalogued_labels(q: dashboards.PanelQuery) -> None:
    allowed = {"le", "job", "instance", "slo", "slo_class", "horizontalpodautoscaler", "namespace"}
    allowed |= {"state", "code", "verb", "reason", catalog.NODE_FROM_SCRAPE}
    for m in catalog.CATALOG:
        allowed |= set(m.labels)
    used = set(LABEL.findall(q.expr))
    assert used <= allowed, f"{q.panel}: labels {used - allowed} are not in the catalogue"


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_panel_has_a_unit_and_description(name: str) -> None:
    for p in BUILT[name]["panels"]:
        if p["type"] == "row":
            continue
        assert p.get("description"), f"{name}: panel {p['title']!r} has no description"
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if p["type"] in ("timeseries", "stat", "table"):
            assert unit, f"{name}: panel {p['title']!r} has no unit"
        assert p["datasource"]["uid"] == "${datasource}"


def test_template_variables() -> None:
    def names(file: str) -> list[str]:
        return [v["name"] for v in BUILT[file]["templating"]["list"]]

    assert names("kvspread-slo.json") == ["datasource", "namespace", "service", "modality"]
    assert "node" in names("kvspread-gpu.json")
    assert "node" in names("kvspread-collector.json")
    for d in BUILT.values():
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                assert v["includeAll"] and v["multi"] and v["allValue"] == ".*"


def test_slo_dashboard_shows_both_qos_thresholds() -> None:
    slo = BUILT["kvspread-slo.json"]
    latency = next(p for p in slo["panels"] if p["title"] == "Latency p50 / p95 / p99")
    steps = latency["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 0.05, 0.12]
    assert latency["fieldConfig"]["defaults"]["unit"] == "s"


def test_fragmentation_heatmap_is_per_node_over_time() -> None:
    gpu = BUILT["kvspread-gpu.json"]
    heat = next(p for p in gpu["panels"] if p["type"] == "heatmap")
    assert heat["targets"][0]["expr"].startswith("kvspread_node_fragmentation_ratio{")
    assert heat["targets"][0]["legendFormat"] == "{{node}}"
    assert heat["options"]["calculate"] is False


def test_autoscaling_dashboard_reads_kube_state_metrics() -> None:
    exprs = [q.expr for q in QUERIES if q.dashboard == "kvspread-autoscaling.json"]
    assert any("kube_horizontalpodautoscaler_status_current_replicas" in e for e in exprs)
    assert any("kube_horizontalpodautoscaler_status_desired_replicas" in e for e in exprs)


def test_package_exports() -> None:
    import observability

    for name in observability.__all__:
        assert hasattr(observability, name), name
    assert observability.label("k8s.namespace.name") == "k8s_namespace_name"
    assert catalog.by_name("kvspread_node_fragmentation_ratio").unit == "1"
    with pytest.raises(KeyError, match="not in the kvspread catalogue"):
        catalog.by_name("nope")
