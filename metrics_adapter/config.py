"""The adapter's configuration: server, authentication, sources and rules.

One flat YAML mapping (`--config FILE`) whose keys are `AdapterConfig`'s fields, read by the
shared strict loader (kvspread.settings.load); most keys can also come from a flag or a
`KVSPREAD_ADAPTER_<KEY>` variable (precedence flag > env > file > default). Flag names follow
Kubernetes' aggregated API servers (`--secure-port`, `--tls-cert-file`,
`--requestheader-client-ca-file`, ...). Durations are seconds or text such as `30s`, `1m30s`,
`500ms`. `rules:` lists the external metrics (rules.py); without it the default rules serve
docs/design.md section 6. An unknown key or a bad value is a ConfigError naming the key.

    secure_port: 6443
    authorization_mode: SubjectAccessReview
    window: 1m
    staleness: 2m
    rules: [...]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Final

from kvspread.logs import LogLevel
from kvspread.settings import (
    ConfigError,
    Layered,
    Parse,
    Setting,
    bounded,
    http_urls,
    invalid,
    load,
    paired,
    ports,
)
from metrics_adapter.auth import DEFAULT_GROUP_HEADERS, DEFAULT_USERNAME_HEADERS
from metrics_adapter.rules import (
    DEFAULT_STALENESS_S,
    DEFAULT_WINDOW_S,
    Rule,
    default_rules,
    parse_duration,
    parse_rules,
)

__all__ = ["AdapterConfig", "SETTINGS", "AUTHORIZATION_MODES"]

AUTHORIZATION_MODES: Final = ("SubjectAccessReview", "AllowList", "AlwaysAllow")


def _csv(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


SETTINGS: Final = [
    Setting("secure_port", "HTTPS port of the external-metrics API (default 6443)"),
    Setting(
        "bind_address",
        "address the HTTPS API listens on (default 127.0.0.1; 0.0.0.0: every address)",
    ),
    Setting(
        "tls_cert_file", "serving certificate (PEM); a self-signed pair is generated when unset"
    ),
    Setting("tls_private_key_file", "serving private key (PEM)"),
    Setting(
        "requestheader_client_ca_file",
        "CA that signs the aggregator's front-proxy client certificate; unset: read from "
        "ConfigMap kube-system/extension-apiserver-authentication",
    ),
    Setting(
        "requestheader_allowed_names",
        "allowed client certificate CNs, comma separated (empty: any)",
    ),
    Setting(
        "requestheader_username_headers",
        "headers holding the user name (default X-Remote-User)",
    ),
    Setting("requestheader_group_headers", "headers holding groups (default X-Remote-Group)"),
    Setting("authorization_mode", "SubjectAccessReview (default), AllowList or AlwaysAllow"),
    Setting("authorization_allow_users", "AllowList mode: users allowed, comma separated"),
    Setting("authorization_allow_groups", "AllowList mode: groups allowed, comma separated"),
    Setting("kubeconfig", "kubeconfig file (default: in-cluster, then ~/.kube/config)"),
    Setting(
        "kube_server",
        "Kubernetes API URL without credentials (kubectl proxy, tests)",
        flag="--kube-api-server",
    ),
    Setting("otlp_port", "OTLP/HTTP receiver port (default 4318)"),
    Setting(
        "otlp_bind_address",
        "address the OTLP receiver listens on (default 127.0.0.1; it takes unauthenticated pushes)",
    ),
    Setting("otlp_tls_cert_file", "serve OTLP over TLS with this certificate (default plain HTTP)"),
    Setting("otlp_tls_private_key_file", "private key for --otlp-tls-cert-file"),
    Setting("keda_port", "KEDA external scaler gRPC port (default 0: off)", int),
    Setting("keda_bind_address", "address the KEDA scaler listens on (default 127.0.0.1)"),
    Setting("keda_tls_cert_file", "serve the KEDA scaler over TLS (default plaintext)"),
    Setting("keda_tls_private_key_file", "private key for --keda-tls-cert-file"),
    Setting("keda_client_ca_file", "require KEDA client certificates signed by this CA"),
    Setting("prometheus_url", "Prometheus base URL for source: promql rules"),
    Setting("log_level", "debug, info, warning or error (default info)"),
]

DURATION: Final = Parse(
    lambda v: parse_duration(v, "duration"),
    "a duration > 0 (seconds, or 30s, 1m30s, 500ms, 2h)",
    "duration",
)

Names = tuple[str, ...]


@dataclass(frozen=True)
class AdapterConfig:
    """Every adapter option; defaults are the documented ones (docs/adapter.md)."""

    secure_port: int = 6443
    """HTTPS port of the external-metrics API (0: any free port)."""
    bind_address: str = "127.0.0.1"
    """Address the HTTPS API listens on: loopback unless told, as the extender and the router
    (the Deployment says 0.0.0.0)."""
    max_connections: int = 1024
    """Connections the HTTPS API serves at once; one more gets 503 with Retry-After: 1 (the
    aggregator proxies it; the HPA retries on its next sync)."""
    request_timeout: Annotated[float, DURATION] = 60.0
    """On the API and OTLP ports: how long a request has to arrive whole (head and body) from
    its first byte, else 408; and how long its answer may take to be written."""
    tls_cert_file: str | None = None
    """Serving certificate (PEM); unset: a self-signed pair is generated at start."""
    tls_private_key_file: str | None = None
    """Private key of `tls_cert_file` (PEM)."""
    requestheader_client_ca_file: str | None = None
    """CA of the aggregator's front-proxy client certificate; unset: read from ConfigMap
    kube-system/extension-apiserver-authentication."""
    requestheader_allowed_names: Names | None = None
    """Client certificate CNs allowed to send requests (unset or empty: any the CA signed)."""
    requestheader_username_headers: Names | None = None
    """Headers holding the user name (unset: X-Remote-User)."""
    requestheader_group_headers: Names | None = None
    """Headers holding the groups (unset: X-Remote-Group)."""
    authorization_mode: str = "SubjectAccessReview"
    """SubjectAccessReview (ask the API server), AllowList or AlwaysAllow."""
    authorization_allow_users: Names = ()
    """AllowList mode: users allowed."""
    authorization_allow_groups: Names = ()
    """AllowList mode: groups allowed."""
    authorization_cache_ttl: Annotated[float, DURATION] = 10.0
    """How long a SubjectAccessReview answer is reused."""
    kubeconfig: str | None = None
    """kubeconfig file; unset: in-cluster service account, then ~/.kube/config."""
    kube_server: str | None = None
    """Kubernetes API URL without credentials (kubectl proxy, tests)."""
    ca_refresh_interval: Annotated[float, DURATION] = 60.0
    """How often the front-proxy CA is re-read (file or ConfigMap)."""
    otlp_port: int = 4318
    """OTLP/HTTP receiver port (0: any free port)."""
    otlp_bind_address: str = "127.0.0.1"
    """Address the OTLP receiver listens on: loopback unless told, as it takes pushes from
    anyone who reaches it (the Deployment says 0.0.0.0, behind its NetworkPolicy)."""
    otlp_tls_cert_file: str | None = None
    """Serve OTLP over TLS with this certificate (PEM); unset: plain HTTP."""
    otlp_tls_private_key_file: str | None = None
    """Private key of `otlp_tls_cert_file` (PEM)."""
    otlp_max_body_bytes: int = 4 * 1024 * 1024
    """Largest OTLP request body accepted (413 above)."""
    otlp_max_bodies_bytes: int = 64 * 1024 * 1024
    """OTLP request bytes (heads and bodies) held over all connections at once, counted as
    they arrive; a push past it gets 429 with Retry-After (exporters retry it), a push alone
    always fits. At least `otlp_max_body_bytes`."""
    otlp_max_connections: int = 4096
    """Connections the OTLP receiver serves at once; one more gets 503 with Retry-After: 1
    (exporters retry it). Each pushing node keeps one or two: keep it above your node count."""
    keda_port: int = 0
    """Port of the KEDA external scaler gRPC server (`externalscaler.ExternalScaler`); 0 turns it off."""
    keda_bind_address: str = "127.0.0.1"
    """Address the KEDA gRPC server listens on (loopback unless told; the KEDA overlay says
    0.0.0.0)."""
    keda_tls_cert_file: str | None = None
    """Serving certificate of the KEDA gRPC server (PEM); without it the server is plaintext."""
    keda_tls_private_key_file: str | None = None
    """Private key of `keda_tls_cert_file` (PEM)."""
    keda_client_ca_file: str | None = None
    """CA that KEDA's client certificates must chain to (`tlsClientCert`); set, a client certificate is required."""
    keda_max_connections: int = 1024
    """Connections the KEDA gRPC server serves at once (KEDA keeps one per scaler address);
    more are closed at accept. Connections without a call for 60 s get GOAWAY (KEDA
    reconnects at its next poll; `KedaServer.idle_s`)."""
    keda_max_rpcs: int = 4096
    """Calls in progress at once on the KEDA server, StreamIsActive streams included (one
    per ScaledObject that uses external-push); more get RESOURCE_EXHAUSTED."""
    max_series: int = 200_000
    """Series kept in memory; a new series beyond it is stored and the least recently
    pushed series is evicted and counted (kvspread_adapter_series_dropped_total)."""
    idle_expiry: Annotated[float, DURATION] = 600.0
    """A series without points for this long is dropped."""
    prometheus_url: str | None = None
    """Prometheus base URL for `source: promql` rules."""
    prometheus_timeout: Annotated[float, DURATION] = 5.0
    """Timeout of one Prometheus query."""
    prometheus_cache_ttl: Annotated[float, DURATION] = 5.0
    """How long a Prometheus answer is reused."""
    window: Annotated[float, DURATION] = DEFAULT_WINDOW_S
    """Default sliding window of the rules."""
    staleness: Annotated[float, DURATION] = DEFAULT_STALENESS_S
    """Default staleness of the rules: no value is served from data older than this."""
    rules: tuple[Rule, ...] = field(default=(), metadata={"doc_expand": False})
    """The external metrics served, one rule each (keys: the rules section below); unset:
    the default SLIs of docs/design.md section 6."""
    log_level: LogLevel = "info"
    """debug, info, warning or error."""

    @property
    def username_headers(self) -> tuple[str, ...]:
        return self.requestheader_username_headers or DEFAULT_USERNAME_HEADERS

    @property
    def group_headers(self) -> tuple[str, ...]:
        return self.requestheader_group_headers or DEFAULT_GROUP_HEADERS

    def validate(self) -> None:
        ports(self, "secure_port", "otlp_port", "keda_port")
        http_urls(self, "kube_server", "prometheus_url")
        bounded(
            self,
            "otlp_max_body_bytes",
            "max_series",
            "max_connections",
            "otlp_max_connections",
            "keda_max_connections",
            "keda_max_rpcs",
            at_least=1,
            what="an integer",
        )
        if self.otlp_max_bodies_bytes < self.otlp_max_body_bytes:
            raise invalid(
                "otlp_max_bodies_bytes",
                f"an integer >= otlp_max_body_bytes ({self.otlp_max_body_bytes})",
                self.otlp_max_bodies_bytes,
            )
        if self.authorization_mode not in AUTHORIZATION_MODES:
            raise invalid(
                "authorization_mode",
                "one of " + ", ".join(AUTHORIZATION_MODES),
                self.authorization_mode,
            )
        if self.authorization_mode == "AllowList" and not (
            self.authorization_allow_users or self.authorization_allow_groups
        ):
            raise invalid(
                "authorization_allow_users",
                "at least one user or group in AllowList mode",
                list(self.authorization_allow_users),
            )
        for cert, key in (
            ("tls_cert_file", "tls_private_key_file"),
            ("otlp_tls_cert_file", "otlp_tls_private_key_file"),
            ("keda_tls_cert_file", "keda_tls_private_key_file"),
        ):
            paired(self, cert, key, "a PEM certificate and its private key")
        if self.keda_client_ca_file and not self.keda_tls_cert_file:
            raise invalid(
                "keda_client_ca_file",
                "keda_tls_cert_file as well (client certificates need TLS)",
                self.keda_client_ca_file,
            )

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> AdapterConfig:
        """Strictly build a config; ConfigError names the key and the bad value."""
        rest = {k: v for k, v in doc.items() if k != "rules"}
        if isinstance(doc, Layered):
            rest = Layered(rest, doc.file, doc.origins)
        cfg = load(cls, rest)
        try:
            rules = cls._rules(doc, cfg)
        except ConfigError as exc:  # the rules come from the file: name it, as load() does
            file = doc.file if isinstance(doc, Layered) else None
            raise (exc.at(file) if file and exc.origin is None else exc) from None
        return replace(cfg, rules=rules)

    @staticmethod
    def _rules(doc: Mapping[str, Any], cfg: AdapterConfig) -> tuple[Rule, ...]:
        if doc.get("rules") is not None:
            rules = parse_rules(doc["rules"], cfg.window, cfg.staleness)
            if not rules:
                raise invalid("rules", "at least one rule (remove the key for the defaults)", [])
        else:
            rules = default_rules(cfg.window, cfg.staleness)
        if any(r.source == "promql" for r in rules) and not cfg.prometheus_url:
            bad = next(i for i, r in enumerate(rules) if r.source == "promql")
            raise invalid(
                f"rules[{bad}].source",
                "prometheus_url (--prometheus-url) for promql rules",
                "promql",
            )
        return tuple(rules)

    def retention(self) -> float:
        """How long the store keeps points: the longest window plus 30 s, so that one point
        before the window start survives at push intervals up to 30 s."""
        return max((r.window for r in self.rules), default=self.window) + 30.0
