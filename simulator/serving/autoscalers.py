"""The four autoscalers under comparison, as the metrics each gives the HPA.

All four run the same HPA algorithm (simulator.serving.hpa) on the adapter's SLI code
(simulator.serving.slis); they differ only in what the HorizontalPodAutoscaler reads:

- `none`: no HPA; every service keeps `initial_replicas`.
- `request-rate`: the service's request rate per replica (`kvspread_requests_per_second`,
  AverageValue), what a KEDA Prometheus trigger on a request-rate query does.
- `queue-depth`: requests waiting in the engines per replica (`kvspread_queue_depth`,
  vLLM's `num_requests_waiting` summed, AverageValue `queue_target`), the signal GKE's
  and llm-d's guides recommend.
- `slo`: kvspread's configured SLI set (the service's `metrics`: by default the request
  rate and the p95 latency against its target; the largest proposal wins). The adapter
  serves no TTFT SLI, so none is used.
"""

from __future__ import annotations

from simulator.serving.config import MetricTarget, ServiceSpec

__all__ = ["AUTOSCALERS", "DEFAULT_AUTOSCALER", "hpa_metrics", "parse_autoscalers"]

AUTOSCALERS = ("none", "request-rate", "queue-depth", "slo")
DEFAULT_AUTOSCALER = "slo"
RPS = "kvspread_requests_per_second"
QUEUE = "kvspread_queue_depth"


def hpa_metrics(autoscaler: str, spec: ServiceSpec) -> tuple[MetricTarget, ...] | None:
    """The HPA's metric list for `spec` under `autoscaler` (None: no HPA)."""
    if autoscaler == "none":
        return None
    if autoscaler == "slo":
        return spec.metrics
    if autoscaler == "request-rate":
        rate = [m for m in spec.metrics if m.metric == RPS]
        return tuple(rate) or (MetricTarget(RPS, "AverageValue", MetricTarget().value),)
    if autoscaler == "queue-depth":
        return (MetricTarget(QUEUE, "AverageValue", spec.queue_target),)
    raise ValueError(f"unknown autoscaler {autoscaler!r} (one of {', '.join(AUTOSCALERS)})")


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
