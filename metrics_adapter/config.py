"""The adapter's configuration: server, authentication, sources and rules.

One flat YAML mapping (`--config FILE`); every server key can also come from a flag or a
`KVSPREAD_ADAPTER_<KEY>` variable (precedence flag > env > file > default, see
kvspread.settings). Flag names follow Kubernetes' aggregated API servers
(`--secure-port`, `--tls-cert-file`, `--requestheader-client-ca-file`, ...). `rules:` lists
the external metrics (rules.py); without it the default rules serve docs/design.md section 6.
`from_mapping` is strict: an unknown key or a bad value is a ConfigError naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kvspread.settings import ConfigError, Setting
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
    Setting("secure_port", "HTTPS port of the external-metrics API (default 6443)", int),
    Setting("bind_address", "address the HTTPS API listens on (default 0.0.0.0)"),
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
        _csv,
    ),
    Setting(
        "requestheader_username_headers",
        "headers holding the user name (default X-Remote-User)",
        _csv,
    ),
    Setting("requestheader_group_headers", "headers holding groups (default X-Remote-Group)", _csv),
    Setting("authorization_mode", "SubjectAccessReview (default), AllowList or AlwaysAllow"),
    Setting("authorization_allow_users", "AllowList mode: users allowed, comma separated", _csv),
    Setting("authorization_allow_groups", "AllowList mode: groups allowed, comma separated", _csv),
    Setting("kubeconfig", "kubeconfig file (default: in-cluster, then ~/.kube/config)"),
    Setting(
        "kube_server",
        "Kubernetes API URL without credentials (kubectl proxy, tests)",
        flag="--kube-api-server",
    ),
    Setting("otlp_port", "OTLP/HTTP receiver port (default 4318)", int),
    Setting("otlp_bind_address", "address the OTLP receiver listens on (default 0.0.0.0)"),
    Setting("otlp_tls_cert_file", "serve OTLP over TLS with this certificate (default plain HTTP)"),
    Setting("otlp_tls_private_key_file", "private key for --otlp-tls-cert-file"),
    Setting("prometheus_url", "Prometheus base URL for source: promql rules"),
    Setting("log_level", "debug, info, warning or error (default info)"),
]

_DURATION_KEYS: Final = {
    "window": DEFAULT_WINDOW_S,
    "staleness": DEFAULT_STALENESS_S,
    "idle_expiry": 600.0,
    "authorization_cache_ttl": 10.0,
    "ca_refresh_interval": 60.0,
    "prometheus_timeout": 5.0,
    "prometheus_cache_ttl": 5.0,
}


@dataclass(frozen=True)
class AdapterConfig:
    """Every adapter option; defaults are the documented ones (docs/adapter.md)."""

    secure_port: int = 6443
    bind_address: str = "0.0.0.0"
    tls_cert_file: str | None = None
    tls_private_key_file: str | None = None
    requestheader_client_ca_file: str | None = None
    requestheader_allowed_names: tuple[str, ...] | None = None
    requestheader_username_headers: tuple[str, ...] | None = None
    requestheader_group_headers: tuple[str, ...] | None = None
    authorization_mode: str = "SubjectAccessReview"
    authorization_allow_users: tuple[str, ...] = ()
    authorization_allow_groups: tuple[str, ...] = ()
    authorization_cache_ttl: float = 10.0
    kubeconfig: str | None = None
    kube_server: str | None = None
    ca_refresh_interval: float = 60.0
    otlp_port: int = 4318
    otlp_bind_address: str = "0.0.0.0"
    otlp_tls_cert_file: str | None = None
    otlp_tls_private_key_file: str | None = None
    otlp_max_body_bytes: int = 4 * 1024 * 1024
    max_series: int = 200_000
    idle_expiry: float = 600.0
    prometheus_url: str | None = None
    prometheus_timeout: float = 5.0
    prometheus_cache_ttl: float = 5.0
    window: float = DEFAULT_WINDOW_S
    staleness: float = DEFAULT_STALENESS_S
    rules: tuple[Rule, ...] = ()
    log_level: str = "info"

    @property
    def username_headers(self) -> tuple[str, ...]:
        return self.requestheader_username_headers or DEFAULT_USERNAME_HEADERS

    @property
    def group_headers(self) -> tuple[str, ...]:
        return self.requestheader_group_headers or DEFAULT_GROUP_HEADERS

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> AdapterConfig:
        """Strictly build a config; ConfigError names the key and the bad value."""
        fields = cls.__dataclass_fields__
        unknown = sorted(k for k in doc if k not in fields)
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown key (known: {', '.join(sorted(fields))})")
        out: dict[str, Any] = {}
        for key, value in doc.items():
            if value is None:
                continue
            if key == "rules":
                continue
            if key in _DURATION_KEYS:
                out[key] = parse_duration(value, key)
            elif key in ("secure_port", "otlp_port"):
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
                    raise ConfigError(f"{key}: {value!r} is not a port number (0-65535)")
                out[key] = value
            elif key in ("otlp_max_body_bytes", "max_series"):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ConfigError(f"{key}: {value!r} must be a positive integer")
                out[key] = value
            elif key in (
                "requestheader_allowed_names",
                "requestheader_username_headers",
                "requestheader_group_headers",
                "authorization_allow_users",
                "authorization_allow_groups",
            ):
                items = _csv(value) if isinstance(value, str) else value
                if not isinstance(items, list | tuple) or not all(
                    isinstance(x, str) for x in items
                ):
                    raise ConfigError(f"{key}: want a list of strings, got {value!r}")
                out[key] = tuple(items)
            else:
                if not isinstance(value, str):
                    raise ConfigError(f"{key}: want a string, got {value!r}")
                out[key] = value
        mode = out.get("authorization_mode", cls.authorization_mode)
        if mode not in AUTHORIZATION_MODES:
            raise ConfigError(
                f"authorization_mode: {mode!r} is not one of {', '.join(AUTHORIZATION_MODES)}"
            )
        if mode == "AllowList" and not (
            out.get("authorization_allow_users") or out.get("authorization_allow_groups")
        ):
            raise ConfigError(
                "authorization_allow_users: AllowList mode needs at least one user or group"
            )
        if out.get("log_level", "info") not in ("debug", "info", "warning", "error"):
            raise ConfigError(
                f"log_level: {out['log_level']!r} is not one of debug, info, warning, error"
            )
        if bool(out.get("tls_cert_file")) != bool(out.get("tls_private_key_file")):
            raise ConfigError(
                "tls_cert_file: give both --tls-cert-file and --tls-private-key-file, or neither"
            )
        if bool(out.get("otlp_tls_cert_file")) != bool(out.get("otlp_tls_private_key_file")):
            raise ConfigError("otlp_tls_cert_file: give both OTLP TLS files, or neither")
        window = out.get("window", DEFAULT_WINDOW_S)
        staleness = out.get("staleness", DEFAULT_STALENESS_S)
        if doc.get("rules") is not None:
            rules = parse_rules(doc["rules"], window, staleness)
            if not rules:
                raise ConfigError(
                    "rules: the list is empty; remove the key to serve the default rules"
                )
        else:
            rules = default_rules(window, staleness)
        if any(r.source == "promql" for r in rules) and not out.get("prometheus_url"):
            bad = next(i for i, r in enumerate(rules) if r.source == "promql")
            raise ConfigError(
                f"rules[{bad}].source: promql rules need prometheus_url (--prometheus-url)"
            )
        out["rules"] = rules
        return cls(**out)

    def retention(self) -> float:
        """How long the store keeps points: the longest window plus 30 s, so that one point
        before the window start survives at push intervals up to 30 s."""
        return max((r.window for r in self.rules), default=self.window) + 30.0
