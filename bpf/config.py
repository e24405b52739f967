"""Collector configuration: frozen dataclasses whose fields are the YAML keys (a nested
section is a nested class), read by the shared strict loader (kvspread.settings.load):
unknown keys and bad values are errors naming the dotted key.

YAML layout (every key optional)::

    port: 9435                  # /metrics, /signals, /healthz, /readyz
    listen: 127.0.0.1           # 0.0.0.0 in a pod (the DaemonSet sets it)
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
    publish: {channel: nodesignals, min_interval_s: 10, max_interval_s: 120, writes_per_100s: 1,
              write_burst: 2, mem_threshold_mib: 512}
    pods: {refresh_s: 30}
    proc_root: /proc
    nice: 10                    # CPU niceness (0..19): under contention the workload wins
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final

from bpf.http import DEFAULT_ROUTES
from bpf.publish import PublishConfig
from kvspread.logs import LogLevel
from kvspread.settings import INTERNAL, ConfigError, Parse, http_urls, invalid, load, ports

__all__ = [
    "EngineTarget",
    "CollectorConfig",
    "BpfConfig",
    "NvmlConfig",
    "EnginesConfig",
    "SignalsConfig",
    "PodsConfig",
    "DEFAULT_PORT",
    "from_mapping",
]

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
    """One engine metrics endpoint given by config (pods annotated on the node add more).
    A plain string stands for `{url: STRING}`."""

    shorthand: ClassVar[str] = "url"

    url: str
    """The engine's Prometheus /metrics URL (http or https)."""
    engine: str | None = None
    """vllm, sglang or tensorrt-llm; unset: recognised from the metric names."""
    model: str = ""
    """The served model's name, for the engine's metrics."""
    pod_uid: str = field(default="", metadata=INTERNAL)
    pod_name: str = field(default="", metadata=INTERNAL)
    namespace: str = field(default="", metadata=INTERNAL)

    def validate(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise invalid("url", "an http(s) URL", self.url)


def _ports(value: Any) -> tuple[int, ...] | None:
    """A list of ports, or comma-separated text; empty or `all`: every port (None)."""
    if value is None:
        return None
    if isinstance(value, str):
        items: list[Any] = [v.strip() for v in value.split(",") if v.strip()]
        if items == ["all"]:
            return None
        items = [int(v) for v in items]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ValueError(value)
    if not all(isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535 for p in items):
        raise ValueError(value)
    return tuple(sorted(set(items))) or None


PORTS: Final = Parse(_ports, "a list of ports 1..65535, or all (also [] or unset)", "ports")


def _at_least(key: str, value: float, lo: float) -> None:
    if not value >= lo:
        raise invalid(key, f"a number >= {lo:g}", value)


@dataclass(frozen=True)
class BpfConfig:
    """eBPF tracing of the inference servers' HTTP and TCP (YAML `bpf:`)."""

    enabled: bool = True
    """Load the BPF programs (false, or --no-bpf: no HTTP or TCP metrics)."""
    tracefs: Path = Path("/sys/kernel/tracing")
    """tracefs mount point (tracepoint detection)."""
    header_cache: Path = Path("/var/cache/kvspread/headers")
    """Folder of the kernel header tree built from BTF, kept between restarts."""
    capture_bytes: int = 512
    """Bytes of each request and response captured for parsing (power of two, 64..4096)."""
    max_conns: int = 65536
    """Connections tracked at once (BPF map size)."""
    max_requests_per_s: int = DEFAULT_MAX_REQUESTS_PER_S
    """Requests per second timed in user space (the rest are counted); 0: no limit."""

    def validate(self) -> None:
        cap = self.capture_bytes
        if not 64 <= cap <= 4096 or cap & (cap - 1):
            raise invalid("capture_bytes", "a power of two in 64..4096", cap)
        _at_least("max_conns", self.max_conns, 64)
        _at_least("max_requests_per_s", self.max_requests_per_s, 0)


@dataclass(frozen=True)
class NvmlConfig:
    """GPU memory and utilisation from NVML (YAML `nvml:`)."""

    enabled: bool = True
    """Read NVML (false, or --no-nvml: GPU signals are absent)."""


@dataclass(frozen=True)
class EnginesConfig:
    """Scrapes of the inference engines' own /metrics (YAML `engines:`)."""

    targets: tuple[EngineTarget, ...] = ()
    """Endpoints to scrape besides the annotated pods on this node."""
    interval_s: float = 5.0
    """Seconds between scrapes."""
    timeout_s: float = 2.0
    """Timeout of one scrape, seconds."""

    def validate(self) -> None:
        _at_least("interval_s", self.interval_s, 0.1)
        _at_least("timeout_s", self.timeout_s, 0.1)


@dataclass(frozen=True)
class SignalsConfig:
    """The node signals computed from the measurements (YAML `signals:`)."""

    interval_s: float = 5.0
    """Seconds between signal computations."""
    window_s: float = 60.0
    """Sliding window of the latency percentiles and the image share, seconds."""
    tokens_per_image: float = DEFAULT_TOKENS_PER_IMAGE
    """Tokens one image stands for in the image-token share."""
    text_tokens_per_request: float = DEFAULT_TEXT_TOKENS
    """Text tokens one request stands for in the image-token share."""
    stream_idle_s: float = 1.0
    """A connection silent this long no longer counts as an active stream, seconds."""

    def validate(self) -> None:
        for f in fields(self):
            _at_least(f.name, getattr(self, f.name), 0.0)


@dataclass(frozen=True)
class PodsConfig:
    """Lookups of the pods on this node (YAML `pods:`)."""

    refresh_s: float = 30.0
    """Longest a watch of this node's pods runs before it is renewed, seconds (the pods are
    listed once, then followed by watch events)."""

    def validate(self) -> None:
        _at_least("refresh_s", self.refresh_s, 1.0)


@dataclass(frozen=True)
class CollectorConfig:
    """The whole `kvspread collector run` configuration."""

    port: int = DEFAULT_PORT
    """Port of /metrics, /signals, /healthz and /readyz (0: any free port)."""
    listen: str = "127.0.0.1"
    """Address those endpoints listen on: loopback unless told (the DaemonSet says 0.0.0.0),
    as /metrics shows every traced server's routes, other tenants' too."""
    node_name: str = ""
    """This node's name; unset: $NODE_NAME (the downward API)."""
    standalone: bool = False
    """No Kubernetes API: no signals publishing, no pod lookups."""
    kubeconfig: str | None = None
    """kubeconfig file; unset: in-cluster service account, then ~/.kube/config."""
    kube_api_server: str | None = None
    """API server URL without credentials (kubectl proxy, tests)."""
    log_level: LogLevel = "info"
    """debug, info, warning or error."""
    http_ports: Annotated[tuple[int, ...] | None, PORTS] = None
    """Server ports to trace; unset or []: every listening port."""
    otlp_endpoints: tuple[str, ...] = ()
    """OTLP/HTTP endpoints to push metrics to; dns:///name:port pushes to every address."""
    otlp_interval_s: float = 10.0
    """Seconds between OTLP pushes."""
    routes: tuple[str, ...] = DEFAULT_ROUTES
    """URL route templates that label requests (replace the defaults; `{name}` is a segment)."""
    max_routes: int = 64
    """Distinct routes labelled; more are counted as `other`."""
    bpf: BpfConfig = BpfConfig()
    """eBPF tracing."""
    nvml: NvmlConfig = NvmlConfig()
    """NVML GPU readings."""
    engines: EnginesConfig = EnginesConfig()
    """Engine /metrics scrapes."""
    signals: SignalsConfig = SignalsConfig()
    """Node signal computation."""
    publish: PublishConfig = field(default_factory=PublishConfig)
    """Where and when the node signals are written."""
    pods: PodsConfig = PodsConfig()
    """Pod lookups."""
    proc_root: Path = Path("/proc")
    """procfs of the host (/host/proc in the DaemonSet), for process-to-pod attribution."""
    nice: int = 10
    """CPU niceness of the collector (0..19): under contention the workload wins."""

    def validate(self) -> None:
        ports(self, "port")
        http_urls(self, "kube_api_server")
        from bpf.fanout import parse_endpoints

        try:
            if self.otlp_endpoints:
                parse_endpoints(list(self.otlp_endpoints))
        except ValueError as exc:
            raise invalid(
                "otlp_endpoints", f"OTLP endpoint URLs ({exc})", list(self.otlp_endpoints)
            ) from None
        _at_least("otlp_interval_s", self.otlp_interval_s, 0.1)
        for i, r in enumerate(self.routes):
            if not r.startswith("/"):
                raise invalid(f"routes[{i}]", "a route starting with '/'", r)
        _at_least("max_routes", self.max_routes, 1)
        if not 0 <= self.nice <= 19:
            raise invalid("nice", "an integer 0..19", self.nice)

    def check_node_name(self) -> None:
        """Outside standalone mode the collector watches and publishes for its node by
        name: without one, a configuration error before anything starts."""
        if not self.standalone and not self.node_name:
            raise ConfigError(
                "unknown: set NODE_NAME (the downward API) or --node-name, or run with "
                "--standalone (no Kubernetes API)",
                key="node_name",
            )


def from_mapping(m: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> CollectorConfig:
    """Validate a layered mapping into a CollectorConfig (strict); `node_name` defaults to
    $NODE_NAME from `environ`."""
    cfg = load(CollectorConfig, m)
    if not cfg.node_name and environ is not None:
        cfg = replace(cfg, node_name=environ.get("NODE_NAME", ""))
    return cfg
