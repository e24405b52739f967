"""What a real kube-apiserver v1.26 answered in tests/cluster/ (recorded as
tests/fixtures/k8s-wire/v1.26-*.json), checked against the manifests as they are now, so CI,
which has no control plane, still notices when a manifest drifts from what was verified:
the printer columns, the PodSecurity labels, and the calls outside each role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.captures import capture

ROOT = Path(__file__).resolve().parents[2]
WIRE = ROOT / "tests/fixtures/k8s-wire"
ROLES = {
    "extender": ("manifests/extender/rbac.yaml",),
    "collector": ("manifests/collector/base/rbac.yaml",),
    "router": ("manifests/router/rbac.yaml",),
    "adapter": ("manifests/metrics-adapter/rbac.yaml",),
}


def test_the_recorded_table_columns_are_the_crds_printer_columns() -> None:
    cap = capture("nodesignals-table")
    names = [c["name"] for c in cap["columnDefinitions"]]
    assert [n.upper() for n in names] == ["NAME", "MEASURED", "GPUS", "LARGEST-FREE-MIB", "AGE"]
    crd = yaml.safe_load((ROOT / "manifests/crds/nodesignals/nodesignals.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    assert names[1:] == [c["name"] for c in version["additionalPrinterColumns"]]
    assert cap["row"]["cells"][2:] == [1, 80920]  # one GPU, 81920 - 1000 MiB free


def test_the_recorded_podsecurity_answer_matches_the_namespace_labels() -> None:
    cap = capture("podsecurity-warnings")
    ours, control = cap.values()
    assert all(w == [] for w in ours.values()) and len(ours) == 3
    assert any("hostPID=true" in w for w in control)
    ns = yaml.safe_load((ROOT / "manifests/namespace/namespace.yaml").read_text())
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/warn"] == "privileged"


def scoped_grants(path: str) -> set[tuple[str, str, str, str]]:
    """(namespace, apiGroup, resource, verb) a manifest's roles grant; namespace "*" for a
    ClusterRole, the Role's own for a Role."""
    out = set()
    for doc in yaml.safe_load_all((ROOT / path).read_text()):
        if doc and doc["kind"] in ("ClusterRole", "Role"):
            ns = doc["metadata"].get("namespace", "*") if doc["kind"] == "Role" else "*"
            out |= {(ns, *g) for g in grants_of(doc)}
    return out


def grants_of(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in role.get("rules", [])
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def _needs(method: str, path: str) -> tuple[str, str, str, str]:
    """(namespace or "", apiGroup, resource, verb) of a request, as the API server's
    request info has it."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    ns = ""
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        ns, rest = rest[1], rest[2:]
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) == 2
    verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(
        method, "get" if named else "list"
    )
    return ns, group, resource, verb


def test_each_recorded_403_is_a_call_the_shipped_roles_do_not_grant() -> None:
    cap = capture("rbac-outside-roles")
    assert len(cap) == 14 and {a["as"] for a in cap} == set(ROLES)
    for a in cap:
        assert a["status"] == 403 and a["reason"] == "Forbidden", a
        method, path = a["call"].split(" ", 1)
        ns, *need = _needs(method, path)
        granted = set().union(*(scoped_grants(f) for f in ROLES[a["as"]]))
        assert ("*", *need) not in granted and (ns, *need) not in granted, a


def test_the_recorded_policy_decisions_are_the_cases_expectations() -> None:
    cases = [
        json.loads(line)
        for line in (WIRE / "nodesignals-admission-reviews.jsonl").read_text().splitlines()
        if line.strip()
    ]
    cap = capture("nodesignals-policy-decisions")
    assert [a["case"] for a in cap] == [c["case"] for c in cases]
    for a, c in zip(cap, cases, strict=True):
        assert a["expect"] == c["expect"]
        assert a["status"] in ((200, 201) if c["expect"] == "allow" else (403,)), a
        assert "resulted in error" not in a["message"], a


def test_a_126_pod_bound_token_carried_no_node_name() -> None:
    """Why docs/install.md says to apply the policy on 1.30+ only."""
    cap = capture("pod-bound-token")
    assert not any("node" in k for k in cap["tokenreview.status.user.extra keys"])
    assert cap["jwt kubernetes.io claim keys"] == ["namespace", "pod", "serviceaccount"]
    assert cap["own NodeSignals create with this token under the policy"]["status"] == 403


def test_the_recorded_refused_watch_stayed_within_the_backoff_bound() -> None:
    """Issue 26's "done means": at most 40 API requests in 30 s while the watch fails."""
    from kvspread.kube import Backoff

    cap = capture("refused-watch-requests")
    bound = Backoff().max_requests(cap["window_s"])
    assert cap["bound per reflector (Backoff.max_requests)"] == bound
    for part, reflectors in (("extender", 3), ("collector", 1)):
        got = cap["parts"][part]
        assert got["requests"] <= bound * reflectors <= 40, got
        assert got["by verb and status"]["watch 403"] >= reflectors
    ready = cap["collector readiness, source kubernetes"]
    assert ready["up"] is False and "pod watch failed" in ready["reason"]


def test_the_recorded_burst_was_booked_where_the_real_scheduler_bound_it() -> None:
    cap = capture("scheduler-burst")
    assert cap["ledger bindings"] == {"as_booked": cap["pods"], "elsewhere": 0}
    per_node = cap["pods per node"].values()
    assert sum(per_node) == cap["pods"] == 24 and len(per_node) == cap["nodes"]


def test_the_recorded_aggregator_answer_is_an_external_metric_value_list() -> None:
    cap = capture("external-metrics-through-aggregator")
    assert cap["APIService Available"] == "True" and cap["other user status"] == 403
    assert cap["answer"]["kind"] == "ExternalMetricValueList"
    apiservice = yaml.safe_load((ROOT / "manifests/metrics-adapter/apiservice.yaml").read_text())
    group_version = f"{apiservice['spec']['group']}/{apiservice['spec']['version']}"
    assert cap["answer"]["apiVersion"] == group_version


def test_the_recorded_aggregator_passes_the_adapters_connection_refusal_on() -> None:
    """Recorded with the adapter at max_connections 4: idle connections filling its port
    made room for the aggregator, busy ones kept it out and the aggregator answered the
    HPA with the adapter's own 503 and message; 200 again once they closed."""
    cap = capture("adapter-connection-bounds-through-aggregator")
    assert cap["with idle connections filling the port"] == 200
    assert cap["with busy connections filling the port"] == 503
    assert json.loads(cap["answer body"])["message"].startswith(
        f"the server holds {cap['max_connections']} connections, its limit (max_connections"
    )
    assert cap["after they closed"] == 200


def test_the_recorded_promql_overlay_reads_are_the_overlays_targets() -> None:
    """Recorded with the real HPA controller reading kvspread_slo_pressure from the adapter
    on the PromQL overlay's rules (tests/cluster/test_cluster_promql.py): the batch service's
    20 waiting requests over the overlay's batch queue target, the mixed service's 10 per
    replica over its default one. A changed target in the overlay makes this recording stale."""
    from tests.metrics_adapter.prom_testing import overlay_rules

    cap = capture("hpa-promql-overlay")
    (pressure,) = [r for r in overlay_rules() if r.get("aggregation") == "slo-pressure"]
    term = "kvspread_queue_depth_per_replica"
    batch = pressure["classes"]["batch"][term]
    assert cap["assistant (llm_qos=batch, 20 waiting) pressure the HPA read"] == 20 / batch
    mixed = cap["mixed (batch + realtime pods, 20 + 0 waiting) pressure the HPA read"]
    assert mixed == (20 + 0) / 2 / pressure["terms"][term]
    assert cap["overlay"] == "manifests/overlays/promql-adapter/adapter-promql.yaml"
