"""Wiring: build the store, receiver, provider and API shell from an `AdapterConfig`, and
run the HTTPS API and the OTLP receiver on one asyncio loop.

`Adapter` is the whole server (start/stop on a running loop); `AdapterThread` runs one in a
background thread (tests, benchmarks, the HA check); `run(config)` is what
`kvspread adapter serve` calls and returns on SIGTERM/SIGINT.

The OTLP port also answers `GET /metrics` (the adapter's own Prometheus metrics) and
`GET /healthz`, without authentication: it is meant for the cluster network only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import ssl
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from kvspread import __version__, names, preflight
from kvspread.clock import SYSTEM_CLOCK, Clock
from kvspread.settings import ConfigError
from metrics_adapter.apiserver import DURATION_BOUNDS, HEALTH_PATHS, ApiServer
from metrics_adapter.auth import (
    NO_CERTIFICATE,
    AllowListAuthorizer,
    AlwaysAllowAuthorizer,
    Authorizer,
    ClientCA,
    RequestHeaderAuthenticator,
    SubjectAccessReviewAuthorizer,
    holds_certificate,
    load_extension_apiserver_authentication,
    serving_context,
)
from metrics_adapter.certs import write_self_signed
from metrics_adapter.config import AdapterConfig
from metrics_adapter.errors import status_object
from metrics_adapter.httpserver import HttpServer, PortInUse, Request, Response
from metrics_adapter.keda.scaler import ExternalScaler, KedaServer
from metrics_adapter.provider import RuleProvider
from metrics_adapter.receiver import OtlpReceiver
from metrics_adapter.sli import QUANTILE_REFUSALS, THRESHOLD_REFUSAL
from metrics_adapter.sources.base import Source
from metrics_adapter.sources.otlp import OtlpSource
from metrics_adapter.sources.promql import HttpPromClient, PromClient, PromQLSource
from metrics_adapter.sources.store import SeriesStore

__all__ = ["Adapter", "AdapterThread", "run"]

log = logging.getLogger("kvspread.adapter")


_REASONS: Final = {
    400: "BadRequest",
    408: "Timeout",
    413: "RequestEntityTooLarge",
    429: "TooManyRequests",
    503: "ServiceUnavailable",
}


def _api_refusal(code: int, message: str, _content_type: str) -> Response:
    """The API port's answer to a request its HTTP layer refused before the handler (a body
    over 64 KiB, a malformed head, a deadline, the connection limit): a metav1.Status, as
    every other answer on that port, not the bare {"message": ...} of the HTTP layer."""
    doc = status_object(code, _REASONS.get(code, "InternalError"), message)
    return Response(code, json.dumps(doc).encode())


class _SelfMetrics:
    """Prometheus collector over the adapter's counters (collected at scrape time)."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter

    def collect(self) -> Any:
        a = self.adapter
        req = CounterMetricFamily(
            names.ADAPTER_REQUESTS.prometheus,
            names.ADAPTER_REQUESTS.help,
            labels=["kind", "code"],
        )
        for (kind, code), n in sorted(a.api.requests.items()):
            req.add_metric([kind, str(code)], n)
        yield req
        hist = HistogramMetricFamily(
            names.ADAPTER_REQUEST_DURATION.prometheus, names.ADAPTER_REQUEST_DURATION.help
        )
        acc, buckets = 0, []
        for le, n in zip((*DURATION_BOUNDS, float("inf")), a.api.duration_counts, strict=True):
            acc += n
            buckets.append(("+Inf" if le == float("inf") else repr(le), acc))
        hist.add_metric([], buckets, sum_value=a.api.duration_sum)
        yield hist
        yield GaugeMetricFamily(
            names.ADAPTER_SERIES.prometheus, names.ADAPTER_SERIES.help, value=len(a.store)
        )
        yield CounterMetricFamily(
            names.ADAPTER_SERIES_DROPPED.prometheus,
            names.ADAPTER_SERIES_DROPPED.help,
            value=a.store.dropped,
        )
        yield CounterMetricFamily(
            names.ADAPTER_OTLP_POINTS.prometheus,
            names.ADAPTER_OTLP_POINTS.help,
            value=a.store.points,
        )
        stale = CounterMetricFamily(
            names.ADAPTER_STALE_READS.prometheus,
            names.ADAPTER_STALE_READS.help,
            labels=["metric"],
        )
        stale_reads = a.provider.stale_reads
        for metric in sorted(set(a.provider.list_metrics()) | set(stale_reads)):
            stale.add_metric([metric], stale_reads.get(metric, 0))  # every rule, from 0
        yield stale
        refused = CounterMetricFamily(
            names.ADAPTER_REFUSED_READS.prometheus,
            names.ADAPTER_REFUSED_READS.help,
            labels=["metric", "reason"],
        )
        counts = dict.fromkeys(
            (
                (r.name, why)
                for r in a.config.rules
                if r.aggregation in ("quantile", "over-ratio")
                for why in (
                    QUANTILE_REFUSALS if r.aggregation == "quantile" else (THRESHOLD_REFUSAL,)
                )
            ),
            0,
        )
        # every quantile and over-ratio rule with each reason it can give, from 0
        counts.update(a.provider.refused_reads)
        for (metric, reason), n in sorted(counts.items()):
            refused.add_metric([metric, reason], n)
        yield refused
        guarded_rules = sorted(a.provider.guards)
        for desc, counts_by_rule in (
            (names.ADAPTER_GUARD_HOLDS, a.provider.guard_holds),
            (names.ADAPTER_GUARD_VIOLATIONS, a.provider.guard_violations),
        ):
            family = CounterMetricFamily(desc.prometheus, desc.help, labels=["metric"])
            for metric in guarded_rules:  # every guarded pressure rule, from 0
                family.add_metric([metric], counts_by_rule.get(metric, 0))
            yield family
        conns = GaugeMetricFamily(
            names.ADAPTER_CONNECTIONS.prometheus, names.ADAPTER_CONNECTIONS.help, labels=["port"]
        )
        conns_refused = CounterMetricFamily(
            names.ADAPTER_CONNECTIONS_REFUSED.prometheus,
            names.ADAPTER_CONNECTIONS_REFUSED.help,
            labels=["port"],
        )
        evicted = CounterMetricFamily(
            names.ADAPTER_CONNECTIONS_EVICTED.prometheus,
            names.ADAPTER_CONNECTIONS_EVICTED.help,
            labels=["port"],
        )
        for port, http in (("api", a.api_http), ("otlp", a.otlp_http)):
            conns.add_metric([port], http.connections)
            conns_refused.add_metric([port], http.refused_connections)
            evicted.add_metric([port], http.evicted_connections)
        yield conns
        yield conns_refused
        yield evicted


class Adapter:
    """The adapter server. Parameters let tests inject the clock, a Kubernetes API client
    and a Prometheus client; everything else comes from `config`."""

    def __init__(
        self,
        config: AdapterConfig,
        clock: Clock = SYSTEM_CLOCK,
        api_client: Any = None,
        prom_client: PromClient | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self._api_client = api_client
        self.store = SeriesStore(
            retention=config.retention(),
            max_series=config.max_series,
            idle_expiry=config.idle_expiry,
        )
        self.receiver = OtlpReceiver(self.store, clock.now, config.otlp_max_body_bytes)
        sources: dict[str, Source] = {"otlp": OtlpSource(self.store, clock.now)}
        if config.prometheus_url or prom_client is not None:
            client = prom_client or HttpPromClient(config.prometheus_url or "")
            sources["promql"] = PromQLSource(
                client, clock.now, config.prometheus_timeout, config.prometheus_cache_ttl
            )
        self.provider = RuleProvider(config.rules, sources)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        cert, key = config.tls_cert_file, config.tls_private_key_file
        if not cert or not key:
            self._tmp = tempfile.TemporaryDirectory(prefix="kvspread-adapter-")
            cert, key = write_self_signed(self._tmp.name)
            log.info("generated a self-signed serving certificate", extra={"kv": {"cert": cert}})
        loader = None
        if not config.requestheader_client_ca_file:
            loader = lambda: load_extension_apiserver_authentication(self.api_client())  # noqa: E731
        self.client_ca = ClientCA(cert, key, config.requestheader_client_ca_file, loader)
        self.authenticator = RequestHeaderAuthenticator()
        self.authorizer = self._authorizer()
        self._ready = False
        self.api = ApiServer(
            self.provider,
            self.authenticator,
            self.authorizer,
            lambda: self._ready and self.provider.ready(),
            f"v{__version__}",
        )
        otlp_ctx = None
        if config.otlp_tls_cert_file and config.otlp_tls_private_key_file:
            otlp_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            otlp_ctx.load_cert_chain(config.otlp_tls_cert_file, config.otlp_tls_private_key_file)
        self.api_http = HttpServer(
            self.api.handle,
            config.bind_address,
            config.secure_port,
            None,
            1 << 16,
            max_connections=config.max_connections,
            request_timeout=config.request_timeout,
            exempt=frozenset(HEALTH_PATHS),
            refusal=_api_refusal,
        )
        self.otlp_http = HttpServer(
            self._otlp_handle,
            config.otlp_bind_address,
            config.otlp_port,
            otlp_ctx,
            config.otlp_max_body_bytes,
            config.otlp_max_bodies_bytes,
            max_connections=config.otlp_max_connections,
            request_timeout=config.request_timeout,
            exempt=frozenset((*HEALTH_PATHS, "/metrics")),
            refusal=self.receiver.refusal,
        )
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_SelfMetrics(self))
        self.keda: KedaServer | None = None
        if config.keda_port:
            self.keda = KedaServer(
                ExternalScaler(self.provider),
                config.keda_bind_address,
                config.keda_port,
                _read_pair(config.keda_tls_cert_file, config.keda_tls_private_key_file),
                _read_ca(config.keda_client_ca_file, "--keda-client-ca-file"),
                max_connections=config.keda_max_connections,
                max_rpcs=config.keda_max_rpcs,
            )
        self._tasks: list[asyncio.Task[None]] = []
        self._ingest_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="otlp-ingest")

    def api_client(self) -> Any:
        if self._api_client is None:
            from kvspread.kube import api_client

            self._api_client = api_client(self.config.kubeconfig, self.config.kube_server)
        return self._api_client

    def _authorizer(self) -> Authorizer:
        mode = self.config.authorization_mode
        if mode == "AlwaysAllow":
            return AlwaysAllowAuthorizer()
        if mode == "AllowList":
            return AllowListAuthorizer(
                self.config.authorization_allow_users, self.config.authorization_allow_groups
            )
        ttl = self.config.authorization_cache_ttl
        return SubjectAccessReviewAuthorizer(_LazyClient(self), self.clock.monotonic, ttl, ttl)

    def _apply_requestheader(self) -> None:
        """Flags win; unset ones come from the ConfigMap (as kube's delegated authn does)."""
        cm = self.client_ca.config
        cfg = self.config
        self.authenticator.allowed_names = frozenset(
            cfg.requestheader_allowed_names
            if cfg.requestheader_allowed_names is not None
            else cm.allowed_names
        )
        self.authenticator.username_headers = (
            cfg.requestheader_username_headers or cm.username_headers
        )
        self.authenticator.group_headers = cfg.requestheader_group_headers or cm.group_headers

    async def _otlp_handle(self, req: Request) -> Response:
        if req.path == "/metrics" and req.method == "GET":
            return Response(
                200, generate_latest(self.registry), "text/plain; version=0.0.4; charset=utf-8"
            )
        if req.path in HEALTH_PATHS:
            return Response(200, b"ok", "text/plain")
        # decoding a large push takes a while: do it off the event loop so that API reads
        # stay responsive; one worker keeps pushes in arrival order
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._ingest_pool, self.receiver.handle_sync, req)

    async def start(self) -> None:
        try:
            serving_context(self.client_ca.cert_file, self.client_ca.key_file, None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"tls_cert_file / tls_private_key_file: cannot load the serving certificate "
                f"{self.client_ca.cert_file} with key {self.client_ca.key_file}: {exc} "
                "(give a PEM certificate and its matching private key)"
            ) from exc
        try:
            await asyncio.to_thread(self.client_ca.refresh)
        except Exception as exc:  # noqa: BLE001 - turned into a clear start-up error
            where = self.config.requestheader_client_ca_file or (
                "ConfigMap kube-system/extension-apiserver-authentication"
            )
            raise ConfigError(
                f"requestheader_client_ca_file: cannot load the request-header CA from {where}: "
                f"{str(exc)[:300]} (give --requestheader-client-ca-file, or a --kubeconfig that "
                "can read the ConfigMap)"
            ) from exc
        self._apply_requestheader()
        self.api_http.ssl_context = self.client_ca.context()
        if not self.client_ca.has_ca:
            log.warning("no request-header client CA: every API request will get 401")
        await self._listen(self.api_http, "--secure-port")
        try:
            await self._listen(self.otlp_http, "--otlp-port")
            if self.keda is not None:
                await self._listen(self.keda, "--keda-port")
        except ConfigError:
            await self.api_http.stop()
            await self.otlp_http.stop()
            raise
        self._tasks = [asyncio.create_task(self._housekeeping())]
        self._ready = True
        log.info(
            "adapter serving",
            extra={
                "kv": {
                    "secure_port": self.api_http.port,
                    "otlp_port": self.otlp_http.port,
                    "keda_port": self.keda.port if self.keda is not None else 0,
                    "rules": len(self.config.rules),
                }
            },
        )

    @staticmethod
    async def _listen(server: HttpServer | KedaServer, flag: str) -> None:
        try:
            await server.start()
        except PortInUse as exc:  # lost the race for the port after the start-up check
            raise ConfigError(
                preflight.bind_message(exc.host or "0.0.0.0", exc.port, flag, flag, exc)
            ) from None

    async def _housekeeping(self) -> None:
        last_ca = self.clock.monotonic()
        while True:
            await asyncio.sleep(min(30.0, self.config.ca_refresh_interval))
            self.store.expire(self.clock.now())
            if self.clock.monotonic() - last_ca >= self.config.ca_refresh_interval:
                last_ca = self.clock.monotonic()
                try:
                    if await asyncio.to_thread(self.client_ca.refresh):
                        self._apply_requestheader()
                        await self.api_http.set_ssl_context(self.client_ca.context())
                except Exception as exc:  # noqa: BLE001 - keep serving with the old CA
                    log.warning("client CA refresh failed", extra={"kv": {"error": str(exc)[:200]}})

    async def stop(self) -> None:
        self._ready = False
        for t in self._tasks:
            t.cancel()
        await self.api_http.stop()
        await self.otlp_http.stop()
        if self.keda is not None:
            await self.keda.stop()
        self._ingest_pool.shutdown(wait=False)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def api_port(self) -> int:
        return self.api_http.port

    @property
    def otlp_port(self) -> int:
        return self.otlp_http.port


def _read_file(path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def _read_ca(path: str | None, flag: str) -> bytes | None:
    """A CA file's PEM; one without a certificate (empty) is a ConfigError, since gRPC would
    start with it and then refuse every client certificate."""
    pem = _read_file(path)
    if pem is not None and not holds_certificate(pem):
        raise ConfigError(f"{flag} {path}: {NO_CERTIFICATE}")
    return pem


def _read_pair(cert: str | None, key: str | None) -> tuple[bytes, bytes] | None:
    c, k = _read_file(cert), _read_file(key)
    return (c, k) if c is not None and k is not None else None


class _LazyClient:
    """Defers building the Kubernetes client until the first SubjectAccessReview."""

    def __init__(self, adapter: Adapter) -> None:
        self._adapter = adapter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._adapter.api_client(), name)


class AdapterThread:
    """Run an `Adapter` on its own event loop in a daemon thread (tests, bench, HA).

    with AdapterThread(config) as a:
        a.adapter.api_port, a.adapter.otlp_port
    """

    def __init__(self, config: AdapterConfig, **kwargs: Any) -> None:
        self.adapter = Adapter(config, **kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="kvspread-adapter", daemon=True
        )

    def start(self) -> AdapterThread:
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.adapter.start(), self._loop).result(30)
        except BaseException:
            self.stop()
            raise
        return self

    def call(self, fn: Any, *args: Any) -> Any:
        """Run fn(*args) on the adapter's loop and return its result (thread-safe access)."""

        async def wrap() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(wrap(), self._loop).result(30)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.adapter.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> AdapterThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(config: AdapterConfig) -> int:
    """Serve until SIGTERM or SIGINT; returns the exit code."""

    async def main() -> None:
        adapter = Adapter(config)
        await adapter.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down")
        await adapter.stop()

    asyncio.run(main())
    return 0
