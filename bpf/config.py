"""Collector configuration: a frozen dataclass with documented defaults and a strict
`from_mapping` (unknown keys and bad values are errors naming the dotted key).

YAML layout (every key optional)::

    port: 9435                  # /metrics, /signals, /healthz, /readyz
    listen: 0.0.0.0
    node_name: gpu-node-1       # default: $NODE_NAME (downward API)
    standalone: false           # no Kubernetes API: no annotation, no pod lookups
    http_ports: [8000, 8080]    # traced server ports; omit or [] for all
    otlp_endpoints: [http://adapter:4318]
    otlp_interval_s: 10
    routes: [/v1/chat/completions, /v1/models/{model}]   # replaces the defaults
    bpf: {enabled: true, tracefs: /sys/kernel/tracing, header_cache: /var/cache/kvspread/headers,
          capture_bytes: 512, max_conns: 65536, max_requests_per_s: 5000}
    nvml: {enabled: true}
    engines: {targets: [{url: http://127.0.0.1:8000/metrics, engine: vllm, model: m}],
              interval_s: 5, timeout_s: 2}
    signals: {interval_s: 5, window_s: 60, tokens_per_image: 576, text_tokens_per_request: 700,
              stream_idle_s: 1}
    publish: {min_interval_s: 10, max_interval_s: 30, mem_threshold_mib: 512}
    pods: {refresh_s: 30}
    proc_root: /proc
    nice: 10                    # CPU niceness (0..19): under contention the workload wins
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from bpf.http import DEFAULT_ROUTES
from bpf.publish import PublishConfig
from kvspread.settings import ConfigError

__all__ = ["EngineTarget", "CollectorConfig", "DEFAULT_PORT", "from_mapping"]

DEFAULT_PORT = 9435
DEFAULT_MAX_REQUESTS_PER_S = 5000
"""Requests per second handed to user space (the rest are counted, not timed): bounds the
collector's CPU at about a third of a core (docs/collector.md, Overhead); LLM inference
nodes serve far fewer."""
DEFAULT_TOKENS_PER_IMAGE = 576.0
"""LLaVA-1.5 (CLIP ViT-L/14 at 336 px): 24 x 24 patches, one crop (serving-model.md, sec. 1)."""
DEFAULT_TEXT_TOKENS = 700.0
"""Median text request length in the Azure LMM 2025 trace (serving-model.md)."""


@dataclass(frozen=True)
class EngineTarget:
    """One engine metrics endpoint given by config (pods annotated on the node add more)."""

    url: str
    engine: str | None = None
    model: str = ""
    pod_uid: str = ""
    pod_name: str = ""
    namespace: str = ""


@dataclass(frozen=True)
class CollectorConfig:
    port: int = DEFAULT_PORT
    listen: str = "0.0.0.0"
    node_name: str = ""
    standalone: bool = False
    kubeconfig: str | None = None
    kube_api_server: str | None = None
    log_level: str = "info"
    http_ports: tuple[int, ...] | None = None  # None: every port
    otlp_endpoints: tuple[str, ...] = ()
    otlp_interval_s: float = 10.0
    routes: tuple[str, ...] = DEFAULT_ROUTES
    max_routes: int = 64
    bpf_enabled: bool = True
    tracefs: Path = Path("/sys/kernel/tracing")
    header_cache: Path = Path("/var/cache/kvspread/headers")
    capture_bytes: int = 512
    max_conns: int = 65536
    max_requests_per_s: int = DEFAULT_MAX_REQUESTS_PER_S
    nvml_enabled: bool = True
    engine_targets: tuple[EngineTarget, ...] = ()
    engine_interval_s: float = 5.0
    engine_timeout_s: float = 2.0
    signals_interval_s: float = 5.0
    window_s: float = 60.0
    tokens_per_image: float = DEFAULT_TOKENS_PER_IMAGE
    text_tokens_per_request: float = DEFAULT_TEXT_TOKENS
    stream_idle_s: float = 1.0
    publish: PublishConfig = field(default_factory=PublishConfig)
    pods_refresh_s: float = 30.0
    proc_root: Path = Path("/proc")
    nice: int = 10  # CPU niceness of the collector: under contention the workload wins


def _csv(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list | tuple):
        out: list[str] = []
        for v in value:
            out.extend(_csv(v, key) if isinstance(v, str) else [str(v)])
        return out
    raise ConfigError(f"{key}: expected a list or comma-separated string, got {value!r}")


def _ports(value: Any, key: str) -> tuple[int, ...] | None:
    items = _csv(value, key)
    if not items or items == ["all"]:
        return None
    out = []
    for it in items:
        try:
            p = int(it)
        except ValueError:
            raise ConfigError(f"{key}: {it!r} is not a port number") from None
        if not 1 <= p <= 65535:
            raise ConfigError(f"{key}: port {p} out of range 1..65535")
        out.append(p)
    return tuple(sorted(set(out)))


def _num(value: Any, key: str, lo: float = 0.0, integer: bool = False) -> Any:
    try:
        v = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: {value!r} is not a number") from None
    if v < lo:
        raise ConfigError(f"{key}: must be >= {lo}, got {value!r}")
    return v


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    raise ConfigError(f"{key}: {value!r} is not a boolean")


def _section(m: Mapping[str, Any], key: str, allowed: set[str]) -> dict[str, Any]:
    sec = m.get(key) or {}
    if not isinstance(sec, Mapping):
        raise ConfigError(f"{key}: must be a mapping")
    unknown = set(sec) - allowed
    if unknown:
        raise ConfigError(
            f"{key}.{sorted(unknown)[0]}: unknown key (known: {', '.join(sorted(allowed))})"
        )
    return dict(sec)


_TOP = {
    "port",
    "listen",
    "node_name",
    "standalone",
    "kubeconfig",
    "kube_api_server",
    "log_level",
    "http_ports",
    "otlp_endpoints",
    "otlp_interval_s",
    "routes",
    "max_routes",
    "bpf",
    "nvml",
    "engines",
    "signals",
    "publish",
    "pods",
    "proc_root",
    "nice",
}


def from_mapping(m: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> CollectorConfig:
    """Validate a layered mapping into a CollectorConfig (strict)."""
    unknown = set(m) - _TOP
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown key (known: {', '.join(sorted(_TOP))})")
    c = CollectorConfig()
    kw: dict[str, Any] = {}
    if "port" in m:
        kw["port"] = _num(m["port"], "port", 0, True)
        if kw["port"] > 65535:
            raise ConfigError(f"port: {kw['port']} out of range")
    for k in ("listen", "node_name", "kubeconfig", "kube_api_server", "log_level"):
        if m.get(k) is not None:
            kw[k] = str(m[k])
    if "log_level" in kw and kw["log_level"].lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log_level: {kw['log_level']!r} is not debug|info|warning|error")
    if "standalone" in m:
        kw["standalone"] = _bool(m["standalone"], "standalone")
    if "http_ports" in m:
        kw["http_ports"] = _ports(m["http_ports"], "http_ports")
    if "otlp_endpoints" in m:
        eps = _csv(m["otlp_endpoints"], "otlp_endpoints")
        from kvspread.fanout import parse_endpoints

        try:
            parse_endpoints(",".join(eps)) if eps else None
        except ValueError as exc:
            raise ConfigError(f"otlp_endpoints: {exc}") from exc
        kw["otlp_endpoints"] = tuple(eps)
    if "otlp_interval_s" in m:
        kw["otlp_interval_s"] = _num(m["otlp_interval_s"], "otlp_interval_s", 0.1)
    if "routes" in m:
        routes = _csv(m["routes"], "routes")
        for r in routes:
            if not r.startswith("/"):
                raise ConfigError(f"routes: pattern {r!r} must start with '/'")
        kw["routes"] = tuple(routes)
    if "max_routes" in m:
        kw["max_routes"] = _num(m["max_routes"], "max_routes", 1, True)
    if "nice" in m:
        kw["nice"] = _num(m["nice"], "nice", 0, True)
        if kw["nice"] > 19:
            raise ConfigError(f"nice: must be 0..19, got {kw['nice']}")
    if "proc_root" in m:
        kw["proc_root"] = Path(str(m["proc_root"]))
    b = _section(
        m,
        "bpf",
        {"enabled", "tracefs", "header_cache", "capture_bytes", "max_conns", "max_requests_per_s"},
    )
    if "enabled" in b:
        kw["bpf_enabled"] = _bool(b["enabled"], "bpf.enabled")
    if "tracefs" in b:
        kw["tracefs"] = Path(str(b["tracefs"]))
    if "header_cache" in b:
        kw["header_cache"] = Path(str(b["header_cache"]))
    if "capture_bytes" in b:
        cap = _num(b["capture_bytes"], "bpf.capture_bytes", 64, True)
        if cap > 4096 or cap & (cap - 1):
            raise ConfigError(f"bpf.capture_bytes: must be a power of two in 64..4096, got {cap}")
        kw["capture_bytes"] = cap
    if "max_requests_per_s" in b:
        kw["max_requests_per_s"] = _num(b["max_requests_per_s"], "bpf.max_requests_per_s", 0, True)
    if "max_conns" in b:
        kw["max_conns"] = _num(b["max_conns"], "bpf.max_conns", 64, True)
    n = _section(m, "nvml", {"enabled"})
    if "enabled" in n:
        kw["nvml_enabled"] = _bool(n["enabled"], "nvml.enabled")
    e = _section(m, "engines", {"targets", "interval_s", "timeout_s"})
    if "targets" in e:
        targets = []
        for i, t in enumerate(e["targets"] or []):
            where = f"engines.targets[{i}]"
            if isinstance(t, str):
                t = {"url": t}
            if not isinstance(t, Mapping) or "url" not in t:
                raise ConfigError(f"{where}: needs a url")
            bad = set(t) - {"url", "engine", "model"}
            if bad:
                raise ConfigError(f"{where}.{sorted(bad)[0]}: unknown key")
            if not str(t["url"]).startswith(("http://", "https://")):
                raise ConfigError(f"{where}.url: {t['url']!r} is not an http(s) URL")
            targets.append(EngineTarget(str(t["url"]), t.get("engine"), str(t.get("model", ""))))
        kw["engine_targets"] = tuple(targets)
    if "interval_s" in e:
        kw["engine_interval_s"] = _num(e["interval_s"], "engines.interval_s", 0.1)
    if "timeout_s" in e:
        kw["engine_timeout_s"] = _num(e["timeout_s"], "engines.timeout_s", 0.1)
    s = _section(
        m,
        "signals",
        {"interval_s", "window_s", "tokens_per_image", "text_tokens_per_request", "stream_idle_s"},
    )
    for key, attr in (
        ("interval_s", "signals_interval_s"),
        ("window_s", "window_s"),
        ("tokens_per_image", "tokens_per_image"),
        ("text_tokens_per_request", "text_tokens_per_request"),
        ("stream_idle_s", "stream_idle_s"),
    ):
        if key in s:
            kw[attr] = _num(s[key], f"signals.{key}", 0.0)
    pub_fields = {f.name for f in fields(PublishConfig)}
    p = _section(m, "publish", pub_fields)
    if p:
        kw["publish"] = replace(
            PublishConfig(), **{k: _num(v, f"publish.{k}", 0.0) for k, v in p.items()}
        )
    pods = _section(m, "pods", {"refresh_s"})
    if "refresh_s" in pods:
        kw["pods_refresh_s"] = _num(pods["refresh_s"], "pods.refresh_s", 1.0)
    cfg = replace(c, **kw)
    if not cfg.node_name and environ is not None:
        cfg = replace(cfg, node_name=environ.get("NODE_NAME", ""))
    return cfg
