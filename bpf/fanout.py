"""An OTel metric exporter that pushes every export to several OTLP/HTTP endpoints.

Why: the external-metrics adapter keeps its windows in memory, so two adapter replicas
serve the same values only if both receive every data point. The collector therefore
pushes each export to *every* replica -- the endpoints of a headless Service, re-resolved
on each export so that replicas that come and go are followed -- instead of to a
load-balanced Service that would give each replica half the points.

Endpoints are strings:

- ``http://host:4318`` or ``https://host:4318/v1/metrics``: one fixed URL (the path
  defaults to ``/v1/metrics``);
- ``dns:///name.namespace.svc:4318`` (also ``dns://name:port``): every A/AAAA record of
  the name, resolved again at each export, each as ``http://ADDRESS:PORT/v1/metrics``;
  ``dns+https:///name:port`` for TLS.

Usage::

    exporter = FanoutMetricExporter(["dns:///kvspread-adapter-otlp.kvspread.svc:4318"])
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=10_000)
    MeterProvider(metric_readers=[reader])

Failure behaviour: `export` never raises. Each endpoint is exported to in parallel by a
real `OTLPMetricExporter`; an endpoint that fails is logged once when it starts failing
(and once when it recovers) and counted in `failures`; the export reports SUCCESS when at
least one endpoint took the data, FAILURE when none did (or nothing resolved).
Thread-safety: `export`, `force_flush` and `shutdown` may be called from any thread.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

__all__ = [
    "FanoutMetricExporter",
    "Endpoint",
    "parse_endpoints",
    "resolve_endpoints",
    "DEFAULT_METRICS_PATH",
]

log = logging.getLogger("bpf.fanout")

DEFAULT_METRICS_PATH = "/v1/metrics"
"""OTLP/HTTP path for metrics."""

Resolver = Callable[[str, int], list[str]]
"""(host, port) -> addresses; the default uses socket.getaddrinfo (A and AAAA)."""


@dataclass(frozen=True)
class Endpoint:
    """One configured target: a fixed URL, or a DNS name expanded at each export."""

    url: str | None = None
    dns_host: str | None = None
    dns_port: int = 4318
    scheme: str = "http"
    path: str = DEFAULT_METRICS_PATH


def parse_endpoints(spec: str | Iterable[str]) -> list[Endpoint]:
    """Parse endpoint strings (a list, or one comma-separated string).

    Raises ValueError naming the bad entry.
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[Endpoint] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        parts = urlsplit(item)
        if parts.scheme in ("dns", "dns+http", "dns+https"):
            hostport = parts.path.lstrip("/") if not parts.netloc else parts.netloc
            host, sep, port = hostport.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"endpoint {item!r}: want dns:///NAME:PORT")
            scheme = "https" if parts.scheme == "dns+https" else "http"
            out.append(Endpoint(dns_host=host.strip("[]"), dns_port=int(port), scheme=scheme))
        elif parts.scheme in ("http", "https") and parts.netloc:
            path = parts.path if parts.path not in ("", "/") else DEFAULT_METRICS_PATH
            out.append(Endpoint(url=f"{parts.scheme}://{parts.netloc}{path}"))
        else:
            raise ValueError(
                f"endpoint {item!r}: want http(s)://HOST:PORT[/path] or dns:///NAME:PORT"
            )
    if not out:
        raise ValueError("no OTLP endpoint given")
    return out


def _getaddrinfo(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            seen[str(sockaddr[0])] = None
    return sorted(seen)


def _host_in_url(address: str) -> str:
    try:
        if isinstance(ipaddress.ip_address(address), ipaddress.IPv6Address):
            return f"[{address}]"
    except ValueError:
        pass
    return address


def resolve_endpoints(
    endpoints: Sequence[Endpoint], resolver: Resolver = _getaddrinfo
) -> list[str]:
    """The URLs to export to now: fixed URLs plus one per address of each DNS name.

    A name that does not resolve contributes nothing (logged by the caller).
    """
    urls: dict[str, None] = {}
    for ep in endpoints:
        if ep.url:
            urls[ep.url] = None
            continue
        assert ep.dns_host is not None
        for addr in resolver(ep.dns_host, ep.dns_port):
            urls[f"{ep.scheme}://{_host_in_url(addr)}:{ep.dns_port}{ep.path}"] = None
    return list(urls)


def _default_factory(url: str, options: Mapping[str, Any]) -> MetricExporter:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=url, **options)


class FanoutMetricExporter(MetricExporter):
    """Push each export to every endpoint (see the module docstring).

    Parameters:
        endpoints: endpoint strings or parsed `Endpoint`s.
        timeout: seconds per endpoint export (also passed to each OTLPMetricExporter).
        exporter_options: extra keyword arguments for each `OTLPMetricExporter`
            (headers, compression, certificate_file, ...).
        resolver: (host, port) -> addresses; default getaddrinfo.
        exporter_factory: (url, options) -> MetricExporter; default OTLPMetricExporter.
    """

    def __init__(
        self,
        endpoints: Sequence[str | Endpoint] | str,
        *,
        timeout: float = 10.0,
        exporter_options: Mapping[str, Any] | None = None,
        preferred_temporality: dict[type, Any] | None = None,
        preferred_aggregation: dict[type, Any] | None = None,
        resolver: Resolver = _getaddrinfo,
        exporter_factory: Callable[[str, Mapping[str, Any]], MetricExporter] = _default_factory,
    ) -> None:
        if isinstance(endpoints, str):
            parsed = parse_endpoints(endpoints)
        else:
            parsed = [e if isinstance(e, Endpoint) else parse_endpoints([e])[0] for e in endpoints]
        self._endpoints = parsed
        self._timeout = timeout
        self._options: dict[str, Any] = dict(exporter_options or {})
        self._options.setdefault("timeout", timeout)
        if preferred_temporality is not None:
            self._options["preferred_temporality"] = preferred_temporality
        if preferred_aggregation is not None:
            self._options["preferred_aggregation"] = preferred_aggregation
        self._resolver = resolver
        self._factory = exporter_factory
        # The reader asks *this* exporter for temporality/aggregation; take them from a
        # child built with the same options so that both always agree (env vars included).
        template = exporter_factory("http://127.0.0.1:4318/v1/metrics", self._options)
        super().__init__(
            preferred_temporality=dict(template._preferred_temporality or {}),
            preferred_aggregation=dict(template._preferred_aggregation or {}),
        )
        template.shutdown()
        self._children: dict[str, MetricExporter] = {}
        self._failing: set[str] = set()
        self._resolve_failing = False
        self.failures: dict[str, int] = {}
        """Failed exports per endpoint URL ("dns:NAME" for names that did not resolve)."""
        self.exports = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="otlp-fanout")
        self._closed = False

    def _count_failure(self, key: str, reason: str) -> None:
        self.failures[key] = self.failures.get(key, 0) + 1
        if key not in self._failing:
            self._failing.add(key)
            log.warning("otlp endpoint failing", extra={"kv": {"endpoint": key, "error": reason}})

    def _mark_ok(self, key: str) -> None:
        if key in self._failing:
            self._failing.discard(key)
            log.info("otlp endpoint recovered", extra={"kv": {"endpoint": key}})

    def _current_urls(self) -> list[str]:
        urls: list[str] = []
        for ep in self._endpoints:
            key = ep.url or f"dns:{ep.dns_host}:{ep.dns_port}"
            try:
                got = resolve_endpoints([ep], self._resolver)
            except OSError as exc:
                self._count_failure(key, f"resolve: {exc}")
                continue
            if not got:
                self._count_failure(key, "resolved to no address")
                continue
            if ep.dns_host:
                self._mark_ok(key)
            urls.extend(u for u in got if u not in urls)
        return urls

    def _child(self, url: str) -> MetricExporter:
        child = self._children.get(url)
        if child is None:
            child = self._factory(url, self._options)
            self._children[url] = child
        return child

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Export to every endpoint in parallel; never raises."""
        with self._lock:
            if self._closed:
                return MetricExportResult.FAILURE
            self.exports += 1
            urls = self._current_urls()
            gone = [u for u in self._children if u not in urls]
            for u in gone:  # a replica left the headless Service
                self._pool.submit(self._children.pop(u).shutdown)
            children = {u: self._child(u) for u in urls}
        if not children:
            return MetricExportResult.FAILURE
        futures = {
            u: self._pool.submit(c.export, metrics_data, timeout_millis=timeout_millis)
            for u, c in children.items()
        }
        ok = 0
        wait = max(timeout_millis / 1000.0, self._timeout) + 1.0
        for url, fut in futures.items():
            try:
                result = fut.result(timeout=wait)
                err = None if result == MetricExportResult.SUCCESS else "export failed"
            except FutureTimeout:
                err = "timed out"
            except Exception as exc:  # noqa: BLE001 - an exporter must never raise into the SDK
                err = f"{type(exc).__name__}: {exc}"
            with self._lock:
                if err is None:
                    ok += 1
                    self._mark_ok(url)
                else:
                    self._count_failure(url, err)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Shut every child down; calling it twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            children = list(self._children.values())
            self._children.clear()
        for c in children:
            try:
                c.shutdown()
            except Exception:  # noqa: BLE001
                log.debug("child exporter shutdown failed", exc_info=True)
        self._pool.shutdown(wait=False)
