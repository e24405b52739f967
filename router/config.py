"""The picker's configuration: `RouterConfig`, one section per YAML mapping, read by the
shared strict loader (kvspread.settings.load) over the merged flag > KVSPREAD_ROUTER_* >
YAML mapping. Each field's docstring says what it means (docs/config.md is generated from
them); checks across keys (exactly one endpoint source, TLS pair, staleness bound) are in
the sections' `validate()`.

YAML shape (every key optional; defaults shown, except that exactly one of
`endpoints.static`, `endpoints.selector` and `pool.name` must be given)::

    server:   {host: 127.0.0.1, grpc_port: 9002, http_port: 9090, tls_cert: null,
               tls_key: null, log_level: info, max_message_bytes: 67108864,
               grpc_server: h2, max_body_bytes: 67108864, max_bodies_bytes: 268435456,
               max_connections: 1024, drain_timeout_s: 30}
    endpoints: {static: [10.0.0.5:8000, 10.0.0.6:8000], selector: null, target_port: null,
                namespace: null, metrics_port: null, metrics_path: /metrics}
    pool:     {name: null, namespace: default}        # watch this InferencePool
    kubernetes: {kubeconfig: null, api_server: null, node_signals: true}
    metrics:  {interval_s: 0.5, stale_after_s: 2.0, timeout_s: 1.0,
               signals_stale_after_s: 300}       # node signals
    scoring:  {w_load: 1.0, w_queue: 1.0, w_kv: 1.0, w_modality: 0.5, w_prefill: 1.0,
               load_memory: 0.4, load_streams: 0.3, load_image: 0.3, max_streams: 64,
               queue_norm: 16, saturation_queue: 8, saturation_kv: 0.95, absorb_picks: 8,
               prefill_tokens_per_s: 8000, image_encode_s: 0.05, queued_request_s: 0.1,
               context_bonus: 0.5, max_bonus: 1.0, shed_queue: 0, fallbacks: 2}
    request:  {patch: 28, default_image_tokens: 1024, max_image_tokens: 16384,
               default_max_tokens: 256}
    affinity: {ttl_s: 600, max_entries: 100000}
    objectives: {classes: {}, default_priority: 0,   # e.g. classes: {premium: 10, batch: -1}
                 resources: auto, max_resources: 1000}
    cache:    {prefix: true, block_tokens: 64, chars_per_token: 4, max_blocks: 256,
               capacity_blocks: 0, default_capacity_blocks: 7812, memory_mib: 64,
               images: true, max_images: 100000, kv_events_port: 0,
               kv_events_topic: "", kv_events_max_blocks: 65536}

`endpoints.static` is a list, or one string `ip:port,ip:port` as the `--endpoints` flag takes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from kvspread.logs import LogLevel
from kvspread.names import DNS_LABEL, DNS_SUBDOMAIN
from kvspread.settings import KubeAccess, Parse, bounded, invalid, load, paired, ports
from kvspread.signals import STALE_AFTER_S
from router.bodybudget import DEFAULT_MAX_BODIES_BYTES, DEFAULT_MAX_BODY_BYTES
from router.objectives import ObjectivesConfig
from router.prefix import CacheConfig
from router.request import RequestConfig
from router.scoring import ScoringConfig

__all__ = [
    "RouterConfig",
    "ServerConfig",
    "EndpointsConfig",
    "PoolConfig",
    "KubernetesConfig",
    "MetricsConfig",
    "RequestConfig",
    "AffinityConfig",
    "ScoringConfig",
    "CacheConfig",
    "ObjectivesConfig",
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "GRPC_SERVERS",
    "MIN_MESSAGE_BYTES",
    "parse_endpoints",
]

DEFAULT_GRPC_PORT: Final = 9002
"""The port GIE's reference endpoint picker listens on (InferencePool examples use it)."""
DEFAULT_HTTP_PORT: Final = 9090
"""/metrics, /debug/explain, /healthz."""
GRPC_SERVERS: Final = ("grpcio", "h2")
"""`server.grpc_server` values (router/h2grpc.py, or grpcio's asyncio server)."""
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 << 20
"""64 MiB: a chat request with several base64 images fits in one buffered body."""
MIN_MESSAGE_BYTES: Final = 4 << 20
"""gRPC's own default limit (4 MiB); a smaller one would refuse ordinary bodies."""
_NAMESPACE: Final = "a Kubernetes namespace (lowercase letters, digits and '-', at most 63)"


def parse_endpoints(value: Any) -> tuple[str, ...]:
    """A list of addresses, or comma-separated text (`ip:port,ip:port`), as a tuple.

    Only the shape is read here; `EndpointsConfig.validate` checks each is ip:port."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(v.strip() for v in value)
    raise ValueError(value)


ADDRESSES: Final = Parse(parse_endpoints, "a list of ip:port (or ip:port,ip:port)", "list[ip:port]")


def address_problem(item: str) -> str:
    """What `item` should be when it is not an endpoint address (the text after
    "expected"), or "" when it is one.

    An endpoint is `a.b.c.d:port` or `[ipv6]:port` (port 1..65535), never a host name:
    the picker hands it to Envoy in the destination header, and Envoy's ORIGINAL_DST
    cluster connects to that address as it is, without resolving names."""
    host, sep, port = item.rpartition(":")
    if not sep or not host:
        return "ip:port"
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return "ip:port with a port 1..65535"
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "ip:port with an IPv6 address inside the brackets"
        return ""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        if re.fullmatch(r"[0-9.]+", host):
            return "ip:port with an IPv4 address (four numbers 0..255)"
        return (
            "ip:port with an IP address, not a host name (Envoy's ORIGINAL_DST cluster "
            "connects to the address as given; IPv6 as [addr]:port)"
        )
    return ""


@dataclass(frozen=True)
class ServerConfig:
    """How the picker serves Envoy and its HTTP endpoints (YAML `server:`)."""

    host: str = "127.0.0.1"
    """Address to listen on (0.0.0.0 in a pod behind a Service)."""
    grpc_port: int = DEFAULT_GRPC_PORT
    """Port of the ext_proc gRPC server Envoy calls (0: any free port)."""
    http_port: int = DEFAULT_HTTP_PORT
    """Port of /metrics, /debug/explain, /debug/endpoints and /healthz (0: any free port)."""
    tls_cert: str | None = None
    """PEM certificate: serve gRPC over TLS (with `tls_key`); unset: plaintext HTTP/2."""
    tls_key: str | None = None
    """PEM private key of `tls_cert`."""
    log_level: LogLevel = "info"
    """debug, info, warning or error; debug logs one JSON line per pick."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """Largest gRPC message received or sent, so large base64 bodies pass (>= 4194304); the
    `grpcio` server receives at most 12 MiB (it copies each message twice)."""
    grpc_server: str = "h2"
    """gRPC server: `h2`, the picker's own HTTP/2 server on one event loop (the default: about
    a quarter of grpcio's CPU per stream), or `grpcio` (grpcio's asyncio server)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest request body the picker holds (FULL_DUPLEX_STREAMED): past it the request gets
    413 with an OpenAI-style error (default 64 MiB: several base64 images)."""
    drain_timeout_s: float = 30.0
    """Seconds the streams in flight (uploads, response-phase SSE) get to finish after SIGTERM;
    readiness turns NOT_SERVING at once (llm-d's picker drains 30 s too)."""
    max_bodies_bytes: int = DEFAULT_MAX_BODIES_BYTES
    """Request body bytes held over all requests at once: a body that would pass it gets 429
    (retry later); default 256 MiB, a quarter of the Deployment's memory limit. The `h2`
    server holds at most as much again of partial gRPC messages and frames over all
    connections (a stream past it ends with RESOURCE_EXHAUSTED; one alone always fits)."""
    max_connections: int = 1024
    """gRPC connections served at once (Envoy opens a few per worker thread). `h2`: at the
    limit the one idle longest gets GOAWAY to make room; with none idle the new one gets
    GOAWAY (NO_ERROR, no stream taken: Envoy retries on another connection). `grpcio`: more
    are closed at accept."""
    conformance_hooks: bool = False
    """Serve the GIE conformance suite's test-only hooks (router/conformance.py): the request
    header `test-epp-endpoint-selection` steers the pick, the response gets
    `x-conformance-test-served-endpoint`. Off: the header is ignored (a client must not be
    able to bypass the scoring)."""

    def validate(self) -> None:
        ports(self, "grpc_port", "http_port")
        if self.grpc_port == self.http_port != 0:
            raise invalid("http_port", "a port other than grpc_port", self.http_port)
        paired(self, "tls_cert", "tls_key", "a PEM certificate and its private key")
        if self.grpc_server not in GRPC_SERVERS:
            raise invalid("grpc_server", "one of " + ", ".join(GRPC_SERVERS), self.grpc_server)
        bounded(self, "max_body_bytes", "max_connections", at_least=1, what="an integer")
        bounded(self, "drain_timeout_s", at_least=0, finite=True)
        if self.max_bodies_bytes < self.max_body_bytes:
            raise invalid(
                "max_bodies_bytes",
                f"an integer >= server.max_body_bytes ({self.max_body_bytes})",
                self.max_bodies_bytes,
            )
        if not MIN_MESSAGE_BYTES <= self.max_message_bytes < 2**31:
            raise invalid(
                "max_message_bytes",
                f"an integer from {MIN_MESSAGE_BYTES} (gRPC's default) to 2147483647 (a gRPC "
                "message length is at most 2 GiB - 1)",
                self.max_message_bytes,
            )


@dataclass(frozen=True)
class EndpointsConfig:
    """Endpoints without an InferencePool: fixed addresses or pods by label (YAML
    `endpoints:`); also where their engines' metrics are."""

    static: Annotated[tuple[str, ...], ADDRESSES] = ()
    """Fixed endpoints `ip:port` (a list, or `ip:port,ip:port`); no cluster needed. An IPv4
    address or a bracketed IPv6 one (`[fd00::5]:8000`), never a host name (Envoy's
    ORIGINAL_DST cluster connects to the address as given)."""
    selector: str | None = None
    """Pods by label selector (`a=b,c=d`), without Gateway API; needs `target_port`."""
    target_port: int | None = None
    """Port of the pods `selector` picks."""
    namespace: str | None = None
    """Namespace of the `selector` pods; unset: all namespaces."""
    metrics_port: int | None = None
    """Port of the engines' /metrics; unset: the pod's `kvspread.io/metrics-port`
    annotation, else the endpoint's own port."""
    metrics_path: str = "/metrics"
    """Path of the engines' metrics (a pod's `kvspread.io/metrics-path` wins)."""

    def validate(self) -> None:
        for n, item in enumerate(self.static):
            problem = address_problem(item)
            if problem:
                raise invalid(f"static[{n}]", problem, item)
        ports(self, "target_port", "metrics_port", lowest=1)
        if self.selector and self.target_port is None:
            raise invalid("target_port", "a port with selector (--target-port)", None)
        if not self.metrics_path.startswith("/"):
            raise invalid("metrics_path", "a path starting with /", self.metrics_path)
        if self.namespace is not None and not DNS_LABEL.fullmatch(self.namespace):
            raise invalid("namespace", _NAMESPACE, self.namespace)


@dataclass(frozen=True)
class PoolConfig:
    """The InferencePool (inference.networking.k8s.io/v1) whose Ready pods are the
    endpoints (YAML `pool:`)."""

    name: str | None = None
    """Name of the InferencePool to watch; unset: no pool."""
    namespace: str = "default"
    """Namespace of the InferencePool (and of its pods)."""

    def validate(self) -> None:
        if not DNS_LABEL.fullmatch(self.namespace):
            raise invalid("namespace", _NAMESPACE, self.namespace)
        if self.name is not None and not DNS_SUBDOMAIN.fullmatch(self.name):
            raise invalid(
                "name",
                "a Kubernetes object name (lowercase letters, digits, '-' and '.')",
                self.name,
            )


@dataclass(frozen=True)
class KubernetesConfig(KubeAccess):
    """How the picker reaches the API server for pools, pods and nodes (YAML
    `kubernetes:`)."""


@dataclass(frozen=True)
class MetricsConfig:
    """Scraping the engines' /metrics and reading the nodes' signals (YAML `metrics:`)."""

    interval_s: float = 0.5
    """Seconds between two scrapes of one endpoint's /metrics."""
    stale_after_s: float = 2.0
    """Metrics older than this rank the endpoint after every fresh one (>= `interval_s`)."""
    timeout_s: float = 1.0
    """Timeout of one scrape, seconds."""
    signals_stale_after_s: float = STALE_AFTER_S
    """A node's signals (its NodeSignals, else its annotation) older than this count as
    absent (the extender's `scoring.stale_after_s`: two collector heartbeats of 120 s and a
    cycle)."""

    def validate(self) -> None:
        keys = ("interval_s", "stale_after_s", "timeout_s", "signals_stale_after_s")
        bounded(self, *keys, above=0, finite=True)
        if self.stale_after_s < self.interval_s:
            raise invalid(
                "stale_after_s",
                f"a number >= metrics.interval_s ({self.interval_s:g})",
                self.stale_after_s,
            )


@dataclass(frozen=True)
class AffinityConfig:
    """Context affinity: a context id stays on its endpoint (YAML `affinity:`)."""

    ttl_s: float = 600.0
    """Seconds a context binding lasts after its last request."""
    max_entries: int = 100_000
    """Bindings kept (the least recently used are dropped)."""

    def validate(self) -> None:
        bounded(self, "ttl_s", above=0, finite=True)
        bounded(self, "max_entries", at_least=1, what="an integer")


SOURCES: Final = (
    "--endpoints ip:port,... (endpoints.static), "
    "--endpoint-selector LABELS (endpoints.selector) or --pool-name NAME (pool.name)"
)


@dataclass(frozen=True)
class RouterConfig:
    """The whole `kvspread router serve` configuration: one field per YAML section."""

    server: ServerConfig = ServerConfig()
    """Listening addresses, TLS, log level, message size."""
    endpoints: EndpointsConfig = EndpointsConfig()
    """Fixed endpoints or pods by label, and where their metrics are."""
    pool: PoolConfig = PoolConfig()
    """The InferencePool to watch."""
    kubernetes: KubernetesConfig = KubernetesConfig()
    """API server access."""
    metrics: MetricsConfig = MetricsConfig()
    """Scrape timing and staleness bounds."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    """Weights, norms and saturation bounds of the choice."""
    request: RequestConfig = RequestConfig()
    """Token estimates of request bodies."""
    affinity: AffinityConfig = AffinityConfig()
    """Context affinity bindings."""
    cache: CacheConfig = CacheConfig()
    """Prefix and image indexes of the cache-aware bonus."""
    objectives: ObjectivesConfig = field(default_factory=ObjectivesConfig)
    """Priorities of the objectives requests name (llm-d's x-llm-d-inference-objective)."""

    @property
    def mode(self) -> str:
        """static | selector | pool: where the endpoints come from."""
        if self.pool.name:
            return "pool"
        if self.endpoints.selector:
            return "selector"
        return "static"

    def validate(self) -> None:
        given = [
            key
            for key, value in (
                ("endpoints.static", self.endpoints.static),
                ("endpoints.selector", self.endpoints.selector),
                ("pool.name", self.pool.name),
            )
            if value
        ]
        if len(given) != 1:
            raise invalid("endpoints", f"exactly one of {SOURCES}", given)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> RouterConfig:
        """Strict parse of the layered mapping; ConfigError names the dotted key."""
        return load(cls, data)
