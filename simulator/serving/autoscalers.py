"""The autoscalers under comparison, as the metrics each gives the HPA.

All of them run the same HPA algorithm (simulator.serving.hpa) on the adapter's SLI code
(simulator.serving.slis); they differ only in what the HorizontalPodAutoscaler reads:

- `none`: no HPA; every service keeps `initial_replicas`.
- `fixed-peak`: no HPA; every service runs, the whole time, the replicas its peak needs
  (`peak_replicas`): the static fleet an operator sizes for the peak.
- `request-rate`: the service's request rate per replica (`kvspread_requests_per_second`,
  AverageValue), what a KEDA Prometheus trigger on a request-rate query does.
- `queue-depth`: requests waiting in the engines per replica (`kvspread_queue_depth`,
  vLLM's `num_requests_waiting` summed, AverageValue `queue_target`), the signal GKE's
  and llm-d's guides recommend.
- `slo`: the SLO pressure (`kvspread_slo_pressure`, Value 1: TTFT and TPOT p95 against the
  service's targets, queue per replica, KV usage), with the example manifests' behaviour
  (`SimConfig.slo_hpa`); the other HPAs keep Kubernetes' default behaviour (`SimConfig.hpa`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from kvspread.names import SLI_SLO_PRESSURE
from simulator.serving.config import MetricTarget, ServiceSpec, SimConfig
from simulator.serving.workload import Request

__all__ = [
    "AUTOSCALERS",
    "DEFAULT_AUTOSCALER",
    "FIXED_PEAK",
    "PEAK_WINDOW_S",
    "hpa_metrics",
    "parse_autoscalers",
    "peak_replicas",
    "sized_for_peak",
]

FIXED_PEAK = "fixed-peak"
AUTOSCALERS = ("none", FIXED_PEAK, "request-rate", "queue-depth", "slo")
DEFAULT_AUTOSCALER = "slo"
RPS = "kvspread_requests_per_second"
QUEUE = "kvspread_queue_depth"
PEAK_WINDOW_S = 60.0
"""The window the peak rate is measured over: the adapter's (and so the request-rate HPA's)."""


def hpa_metrics(autoscaler: str, spec: ServiceSpec) -> tuple[MetricTarget, ...] | None:
    """The HPA's metric list for `spec` under `autoscaler` (None: no HPA)."""
    if autoscaler in ("none", FIXED_PEAK):
        return None
    if autoscaler == "slo":
        return (MetricTarget(SLI_SLO_PRESSURE, "Value", 1.0),)
    if autoscaler == "request-rate":
        return (_rate_target(spec),)
    if autoscaler == "queue-depth":
        return (MetricTarget(QUEUE, "AverageValue", spec.queue_target),)
    raise ValueError(f"unknown autoscaler {autoscaler!r} (one of {', '.join(AUTOSCALERS)})")


def _rate_target(spec: ServiceSpec) -> MetricTarget:
    rate = [m for m in spec.metrics if m.metric == RPS]
    return rate[0] if rate else MetricTarget(RPS, "AverageValue", MetricTarget().value)


def peak_replicas(cfg: SimConfig, requests: Sequence[Request]) -> dict[str, int]:
    """Per service: ceil(the most requests arriving in any `PEAK_WINDOW_S` of the run / the
    window / its request-rate target per replica), within [min, max] replicas.

    That is the largest proposal the request-rate HPA would ever make, held for the whole
    run: the fleet an operator provisions from the peak rate and the per-replica capacity
    of a load test (the same target the request-rate autoscaler uses)."""
    out: dict[str, int] = {}
    by_service: dict[str, list[float]] = {s: [] for s in cfg.services}
    for r in requests:
        by_service[r.service].append(r.arrival)
    for name, spec in cfg.services.items():
        times = sorted(by_service[name])
        most, lo = 0, 0
        for hi, t in enumerate(times):
            while times[lo] <= t - PEAK_WINDOW_S:
                lo += 1
            most = max(most, hi - lo + 1)
        want = math.ceil(most / PEAK_WINDOW_S / _rate_target(spec).value)
        out[name] = max(spec.min_replicas, min(spec.max_replicas, want))
    return out


def sized_for_peak(cfg: SimConfig, requests: Sequence[Request]) -> SimConfig:
    """`cfg` with every service's `initial_replicas` set to `peak_replicas`."""
    peak: Mapping[str, int] = peak_replicas(cfg, requests)
    services = {s: replace(spec, initial_replicas=peak[s]) for s, spec in cfg.services.items()}
    return replace(cfg, services=services)


def parse_autoscalers(text: str | list[str] | tuple[str, ...]) -> list[str]:
    """'none,slo' -> ['none', 'slo']; ValueError naming the known ones."""
    names = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    names = [n for n in names if n]
    for n in names:
        if n not in AUTOSCALERS:
            raise ValueError(
                f"--autoscalers: unknown autoscaler {n!r} (one of {', '.join(AUTOSCALERS)})"
            )
    if not names:
        raise ValueError("--autoscalers: no autoscaler given")
    return list(dict.fromkeys(names))
