"""The picker's configuration: one strict `RouterConfig.from_mapping` over the merged
flag > KVSPREAD_ROUTER_* > YAML mapping (kvspread/settings.py).

YAML shape (every key optional; defaults shown)::

    server:   {host: 127.0.0.1, grpc_port: 9002, http_port: 9090, tls_cert: null,
               tls_key: null, log_level: info, max_message_bytes: 67108864}
    endpoints: {static: "10.0.0.5:8000,10.0.0.6:8000", selector: null, target_port: null,
                namespace: null, metrics_port: null, metrics_path: /metrics}
    pool:     {name: null, namespace: default}        # watch this InferencePool
    kubernetes: {kubeconfig: null, api_server: null}
    metrics:  {interval_s: 0.5, stale_after_s: 2.0, timeout_s: 1.0,
               signals_stale_after_s: 60}        # node kvspread.io/signals
    scoring:  {w_load: 1.0, w_queue: 1.0, w_kv: 1.0, w_modality: 0.5, load_memory: 0.4,
               load_streams: 0.3, load_image: 0.3, max_streams: 64, queue_norm: 16,
               saturation_queue: 8, saturation_kv: 0.95, shed_queue: 0, fallbacks: 2}
    request:  {patch: 28, default_image_tokens: 1024, max_image_tokens: 16384,
               default_max_tokens: 256}
    affinity: {ttl_s: 600, max_entries: 100000}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvspread.logs import LEVELS
from kvspread.settings import ConfigError
from router.scoring import ScoringConfig

__all__ = ["RouterConfig", "DEFAULT_GRPC_PORT", "DEFAULT_HTTP_PORT", "parse_endpoints"]

DEFAULT_GRPC_PORT = 9002  # the port GIE's reference picker listens on
DEFAULT_HTTP_PORT = 9090
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


def parse_endpoints(text: str) -> list[str]:
    """`ip:port,ip:port` -> addresses; a malformed entry is a ConfigError naming it."""
    out = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"endpoints: {item!r} is not ip:port")
        out.append(item)
    if not out:
        raise ConfigError("endpoints: the list is empty (give ip:port,ip:port)")
    return out


@dataclass(frozen=True)
class RouterConfig:
    host: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT
    http_port: int = DEFAULT_HTTP_PORT
    tls_cert: str | None = None
    tls_key: str | None = None
    log_level: str = "info"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    static_endpoints: tuple[str, ...] = ()
    selector: str | None = None
    target_port: int | None = None
    namespace: str | None = None
    metrics_port: int | None = None
    metrics_path: str = "/metrics"
    pool_name: str | None = None
    pool_namespace: str = "default"
    kubeconfig: str | None = None
    api_server: str | None = None
    interval_s: float = 0.5
    stale_after_s: float = 2.0
    timeout_s: float = 1.0
    signals_stale_after_s: float = 60.0
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    patch: int = 28
    default_image_tokens: int = 1024
    max_image_tokens: int = 16384
    default_max_tokens: int = 256
    affinity_ttl_s: float = 600.0
    affinity_max_entries: int = 100_000

    @property
    def mode(self) -> str:
        """static | selector | pool: where the endpoints come from."""
        if self.pool_name:
            return "pool"
        if self.selector:
            return "selector"
        return "static"

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> RouterConfig:
        known = {
            "server",
            "endpoints",
            "pool",
            "kubernetes",
            "metrics",
            "scoring",
            "request",
            "affinity",
        }
        for k in doc:
            if k not in known:
                raise ConfigError(f"{k}: unknown section (known: {', '.join(sorted(known))})")
        kw: dict[str, Any] = {}

        def section(name: str, keys: dict[str, tuple[str, type]]) -> None:
            sec = doc.get(name) or {}
            if not isinstance(sec, Mapping):
                raise ConfigError(f"{name}: must be a mapping")
            for key, value in sec.items():
                if key not in keys:
                    raise ConfigError(
                        f"{name}.{key}: unknown key (known: {', '.join(sorted(keys))})"
                    )
                if value is None:
                    continue
                attr, typ = keys[key]
                kw[attr] = _typed(f"{name}.{key}", value, typ)

        section(
            "server",
            {
                "host": ("host", str),
                "grpc_port": ("grpc_port", int),
                "http_port": ("http_port", int),
                "tls_cert": ("tls_cert", str),
                "tls_key": ("tls_key", str),
                "log_level": ("log_level", str),
                "max_message_bytes": ("max_message_bytes", int),
            },
        )
        section(
            "endpoints",
            {
                "static": ("static_endpoints", str),
                "selector": ("selector", str),
                "target_port": ("target_port", int),
                "namespace": ("namespace", str),
                "metrics_port": ("metrics_port", int),
                "metrics_path": ("metrics_path", str),
            },
        )
        section("pool", {"name": ("pool_name", str), "namespace": ("pool_namespace", str)})
        section(
            "kubernetes",
            {"kubeconfig": ("kubeconfig", str), "api_server": ("api_server", str)},
        )
        section(
            "metrics",
            {
                "interval_s": ("interval_s", float),
                "stale_after_s": ("stale_after_s", float),
                "timeout_s": ("timeout_s", float),
                "signals_stale_after_s": ("signals_stale_after_s", float),
            },
        )
        section(
            "request",
            {
                "patch": ("patch", int),
                "default_image_tokens": ("default_image_tokens", int),
                "max_image_tokens": ("max_image_tokens", int),
                "default_max_tokens": ("default_max_tokens", int),
            },
        )
        section(
            "affinity",
            {"ttl_s": ("affinity_ttl_s", float), "max_entries": ("affinity_max_entries", int)},
        )
        scoring = doc.get("scoring") or {}
        if not isinstance(scoring, Mapping):
            raise ConfigError("scoring: must be a mapping")
        sfields = {f.name: f for f in dataclasses.fields(ScoringConfig)}
        skw: dict[str, Any] = {}
        for key, value in scoring.items():
            if key not in sfields:
                raise ConfigError(f"scoring.{key}: unknown key (known: {', '.join(sfields)})")
            typ = int if key == "fallbacks" else float
            v = _typed(f"scoring.{key}", value, typ)
            if v < 0:
                raise ConfigError(f"scoring.{key}: must be >= 0, got {value!r}")
            skw[key] = v
        kw["scoring"] = ScoringConfig(**skw)
        if isinstance(kw.get("static_endpoints"), str):
            kw["static_endpoints"] = tuple(parse_endpoints(kw["static_endpoints"]))
        cfg = cls(**kw)
        cfg._validate()
        return cfg

    def _validate(self) -> None:
        if self.log_level not in LEVELS:
            raise ConfigError(f"server.log_level: {self.log_level!r} is not one of {LEVELS}")
        for name in ("grpc_port", "http_port"):
            v = getattr(self, name)
            if not 0 <= v < 65536:
                raise ConfigError(f"server.{name}: {v} is not a port (0..65535)")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("server.tls_cert and server.tls_key: give both or neither")
        if self.max_message_bytes < 4 << 20:
            raise ConfigError("server.max_message_bytes: at least 4194304 (gRPC's default)")
        for name in ("interval_s", "stale_after_s", "timeout_s", "signals_stale_after_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"metrics.{name}: must be > 0")
        if self.stale_after_s < self.interval_s:
            raise ConfigError("metrics.stale_after_s: must be at least metrics.interval_s")
        sources = [bool(self.static_endpoints), bool(self.selector), bool(self.pool_name)]
        if sum(sources) != 1:
            raise ConfigError(
                "endpoints: give exactly one of --endpoints ip:port,..., "
                "--endpoint-selector LABELS (with --target-port) or --pool-name NAME"
            )
        if self.selector and self.target_port is None:
            raise ConfigError("endpoints.target_port: --endpoint-selector needs --target-port")
        if self.patch <= 0 or self.default_image_tokens < 0 or self.max_image_tokens <= 0:
            raise ConfigError("request: patch and max_image_tokens must be > 0")


def _typed(where: str, value: Any, typ: type) -> Any:
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: must be a string, got {value!r}")
        return value
    if isinstance(value, bool):
        raise ConfigError(f"{where}: must be a number, got {value!r}")
    try:
        if typ is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: must be {typ.__name__}, got {value!r}") from exc
