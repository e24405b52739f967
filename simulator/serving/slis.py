"""The SLIs the HPA scales on, served by the metrics adapter's own store and provider.

The simulated collector keeps, per service, what a real instrumented service exports over
OTLP: a cumulative `http.server.request.duration` histogram (explicit buckets) per status
code (200 for served requests, 500 for failed ones), the `gen_ai.server.time_to_first_token`
and `gen_ai.server.time_per_output_token` histograms and the per-request
`kvspread.gen_ai.server.normalized_latency` on the collector's own bounds
(`kvspread.names.GEN_AI_TTFT_BUCKETS`, `GEN_AI_TPOT_BUCKETS`, `NORMALIZED_LATENCY_BUCKETS`,
as `bpf.state`), and per engine pod the queue-depth and KV-usage gauges
(`k8s.pod.name` set, as the collector exports them). Every push period it writes those points into a real `SeriesStore`; at each HPA
sync the simulator asks the real `RuleProvider` with the adapter's default rules
(`metrics_adapter.rules.default_rules`, the SLO-pressure rule with the run's targets per
service), exactly as the HPA reads the external metrics API. Nothing here lists an SLI or computes a quantile or a rate.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

from kvspread import names
from metrics_adapter.errors import AdapterError
from metrics_adapter.provider import RuleProvider
from metrics_adapter.rules import DEFAULT_GOOD_THRESHOLD_S, DEFAULT_WINDOW_S, default_rules
from metrics_adapter.selectors import parse_selector
from metrics_adapter.sources.otlp import OtlpSource
from metrics_adapter.sources.store import GAUGE, HISTOGRAM, Point, SeriesStore

__all__ = ["LATENCY_BOUNDS_S", "NAMESPACE", "AdapterSlis", "ServiceMetrics", "sli_names"]

LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    3.0,
    5.0,
    8.0,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
)
"""End-to-end request latency buckets (seconds). LLM requests take seconds, so the OTel
HTTP defaults (which stop at 10 s) would put most of them in +Inf; 0.2 s is a bound so
that the good-request rate at the design's 0.2 s threshold is exact."""

NAMESPACE = "sim"
"""The Kubernetes namespace every simulated service runs in."""

_EVERYTHING = parse_selector(None)


def sli_names() -> tuple[str, ...]:
    """The external metrics an HPA may name: those of the adapter's default rules."""
    return tuple(r.name for r in default_rules())


class AdapterSlis:
    """A real series store and rule provider on simulated time (one per simulation)."""

    def __init__(
        self,
        window_s: float = DEFAULT_WINDOW_S,
        good_threshold_s: float = DEFAULT_GOOD_THRESHOLD_S,
        pressure: Mapping[str, Any] | None = None,
    ) -> None:
        self.now = 0.0
        rules = default_rules(window_s, good_threshold=good_threshold_s, pressure=pressure)
        # as the adapter's Config.retention: the longest window (the 5 min rate) plus 30 s
        retention = max(r.window for r in rules) + 30.0
        self.store = SeriesStore(retention=retention, max_series=1_000_000)
        self.provider = RuleProvider(rules, {"otlp": OtlpSource(self.store, lambda: self.now)})

    def push(self, points: list[Point], t: float) -> None:
        self.now = max(self.now, t)
        self.store.add(points, t)

    def value(self, metric: str, service: str, now: float) -> float | None:
        """The value the external metrics API serves for `service` at `now`; None where it
        serves none (no fresh data, or a refusal), so the HPA skips the metric."""
        self.now = now
        selector = parse_selector(f"service={service}") if service else _EVERYTHING
        try:
            values = self.provider.read(NAMESPACE, metric, selector)
        except AdapterError:
            return None
        return values[0].value if values else None


class ServiceMetrics:
    """One service's collector-side instruments, pushed into the adapter's store."""

    def __init__(
        self,
        adapter: AdapterSlis,
        service: str,
        bounds: tuple[float, ...] = LATENCY_BOUNDS_S,
        qos: str = "",
    ) -> None:
        self.adapter = adapter
        self.service = service
        self.bounds = bounds
        self._counts = {200: [0] * (len(bounds) + 1), 500: [0] * (len(bounds) + 1)}
        base = ((names.ATTR_K8S_NAMESPACE, NAMESPACE), (names.ATTR_SERVICE_NAME, service))
        # the collector stamps the pod's QoS class on its request and token histograms
        # (bpf.export.REQUEST_ATTRS), not on the engine gauges; "" is left out, as over OTLP
        served = (*base, (names.ATTR_QOS, qos)) if qos else base
        self._attrs = {
            code: tuple(sorted((*served, (names.ATTR_HTTP_STATUS, str(code)))))
            for code in self._counts
        }
        self._base = base
        self._service_attrs = tuple(sorted(served))
        # the collector's bounds for these two (bpf.state): the semantic conventions'
        # advised boundaries, TTFT up to 10 s, TPOT up to 2.5 s
        self._ttft_bounds = names.GEN_AI_TTFT_BUCKETS
        self._tpot_bounds = names.GEN_AI_TPOT_BUCKETS
        self._ttft = [0] * (len(self._ttft_bounds) + 1)
        self._tpot = [0] * (len(self._tpot_bounds) + 1)
        self._norm_bounds = names.NORMALIZED_LATENCY_BUCKETS
        self._norm = [0] * (len(self._norm_bounds) + 1)

    @property
    def requests(self) -> int:
        """Requests observed so far (served and failed)."""
        return sum(sum(c) for c in self._counts.values())

    def observe(self, latency_s: float, ok: bool) -> None:
        """One finished request: served (status 200) or failed (status 500)."""
        i = 0
        n = len(self.bounds)
        while i < n and latency_s > self.bounds[i]:
            i += 1
        self._counts[200 if ok else 500][i] += 1

    def observe_ttft(self, seconds: float) -> None:
        """A first token written `seconds` after the request arrived (the collector records
        it then, not at the end of the stream)."""
        self._ttft[bisect_left(self._ttft_bounds, seconds)] += 1

    def observe_tpot(self, seconds: float) -> None:
        """A finished stream of two tokens or more: its mean time per output token."""
        self._tpot[bisect_left(self._tpot_bounds, seconds)] += 1

    def observe_normalized(self, seconds: float) -> None:
        """A finished stream of one token or more: its duration / output tokens."""
        self._norm[bisect_left(self._norm_bounds, seconds)] += 1

    def push(self, t: float, engines: Sequence[tuple[str, float, float]]) -> None:
        """What an OTLP push carries at time t, stored as the receiver stores it.

        `engines` is (pod name, requests waiting, KV-cache usage) of every pod running an
        engine; requests that wait for a first ready replica are in no engine's queue."""
        dur = names.HTTP_SERVER_REQUEST_DURATION.name
        points = [
            Point(dur, HISTOGRAM, self._attrs[code], t, 0.0, tuple(map(float, counts)),
                  False, True, self.bounds)
            for code, counts in self._counts.items()
        ]  # fmt: skip
        for metric, counts, bounds in (
            (names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name, self._ttft, self._ttft_bounds),
            (names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.name, self._tpot, self._tpot_bounds),
            (names.GEN_AI_SERVER_NORMALIZED_LATENCY.name, self._norm, self._norm_bounds),
        ):
            points.append(
                Point(metric, HISTOGRAM, self._service_attrs, t, 0.0, tuple(map(float, counts)),
                      False, True, bounds)
            )  # fmt: skip
        for pod, waiting, kv in engines:
            attrs = tuple(sorted((*self._base, (names.ATTR_K8S_POD, pod))))
            points.append(
                Point(names.ENGINE_REQUESTS_WAITING.name, GAUGE, attrs, t, 0.0, (float(waiting),))
            )
            points.append(Point(names.KV_CACHE_USAGE.name, GAUGE, attrs, t, 0.0, (float(kv),)))
        self.adapter.push(points, t)

    def value(self, metric: str, now: float) -> float | None:
        """The external metric `metric` of this service at `now` (None: not served)."""
        return self.adapter.value(metric, self.service, now)
