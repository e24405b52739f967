"""The PromQL overlay end to end on a real control plane: Debian's Prometheus scraping TTFT
histograms and queue gauges with the collector's labels, the adapter running the overlay's
rules as shipped (manifests/overlays/promql-adapter) behind the real kube-apiserver v1.26
aggregator, and the real HPA controller (kube-controller-manager v1.26) reading
kvspread_slo_pressure for three services:

- `assistant` (every pod llm_qos=batch, 20 waiting): the batch targets, 20 / 40 = 0.5;
- `mixed` (one batch pod with 20 waiting, one realtime with 0): no class, the default queue
  target, 10 per replica / 4 = 2.5;
- `coarse` (TTFT bounds [0.1, 10], every TTFT 0.8 s): refused, and the HPA shows why.

Before session 22 the overlay's aggregating queries returned samples without the service
label, which the adapter then filtered out: every HPA with a `service=` selector got no
metric at all."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from kvspread import names
from kvspread.quantity import parse_quantity
from tests.cluster.aggregated import NS, behind_the_aggregator, deployment, ready_pod
from tests.cluster.captures import record
from tests.cluster.controlplane import ControlPlane
from tests.metrics_adapter.prom_testing import Histograms, overlay_rules, scraping

SYNC_S = 2
DEADLINE_S = 120.0
SERVICES = ("assistant", "mixed", "coarse")


def _deployment_and_hpa(service: str) -> list[dict[str, Any]]:
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": service, "namespace": NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": service},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": names.SLI_SLO_PRESSURE,
                            "selector": {"matchLabels": {"service": service}},
                        },
                        "target": {"type": "Value", "value": "1"},
                    },
                }
            ],
        },
    }
    return [deployment(service, 1), hpa]


def _seen(status: dict[str, Any]) -> tuple[float | None, str | None]:
    """(the pressure the HPA read, the ScalingActive message when it is False)."""
    value = None
    for m in status.get("currentMetrics") or []:
        current = m.get("external", {}).get("current", {})
        if "value" in current:
            value = float(parse_quantity(current["value"]))
    message = None
    for c in status.get("conditions") or []:
        if c["type"] == "ScalingActive" and c["status"] == "False":
            message = c.get("message", "")
    return value, message


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")
def test_the_promql_overlay_drives_the_real_hpa_controller(
    cp: ControlPlane, tmp_path: Path
) -> None:
    cp.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cp.service_account(NS, "default")
    ready = 'rate(gen_ai_server_time_to_first_token_seconds_bucket{le="+Inf"}[1m])'
    with (
        scraping(Histograms, tmp_path, ready, len(Histograms.pods)) as (url, _),
        behind_the_aggregator(
            cp, rules=overlay_rules(), prometheus_url=url, prometheus_cache_ttl="1s"
        ),
        cp.controller_manager(
            "horizontalpodautoscaling",
            cp.kubeconfig_admin(),
            f"--horizontal-pod-autoscaler-sync-period={SYNC_S}s",
        ),
    ):
        for service in SERVICES:
            target, hpa = _deployment_and_hpa(service)
            cp.create(target)
            ready_pod(cp, 0, service)
            cp.create(hpa)
        read: dict[str, tuple[float | None, str | None]] = {}
        deadline = time.monotonic() + DEADLINE_S
        while True:
            for service in SERVICES:
                path = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/{service}"
                read[service] = _seen(cp.ok("GET", path).get("status", {}))
            if (
                read["assistant"][0] is not None
                and read["mixed"][0] is not None
                and read["coarse"][1]
            ):
                break
            assert time.monotonic() < deadline, read
            time.sleep(0.5)
    assert read["assistant"][0] == pytest.approx(0.5), read
    assert read["mixed"][0] == pytest.approx(2.5), read
    coarse = read["coarse"][1] or ""
    assert names.SLI_TTFT_P95 in coarse and "(0.1, 10]" in coarse, coarse
    record(
        "hpa-promql-overlay",
        {
            "overlay": "manifests/overlays/promql-adapter/adapter-promql.yaml",
            "metric": names.SLI_SLO_PRESSURE,
            "assistant (llm_qos=batch, 20 waiting) pressure the HPA read": read["assistant"][0],
            "mixed (batch + realtime pods, 20 + 0 waiting) pressure the HPA read": read["mixed"][0],
            "coarse ([0.1, 10] TTFT bounds) ScalingActive message names": [
                names.SLI_TTFT_P95,
                "(0.1, 10]",
            ],
        },
    )
