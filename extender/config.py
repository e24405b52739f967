"""Scoring configuration of the extender: weights, thresholds and the shape prior.

`ScoringConfig` is the reference: each field says what it means and where its default
comes from. `ScoringConfig.from_mapping()` parses the `scoring:` section of the YAML
config strictly (an unknown key is an error naming its dotted path) and `validate()`
rejects values out of range, naming the field and the bad value.

    scoring:
      weights: {fragmentation: 0.35, load: 0.25, spread: 0.15, modality: 0.15, qos: 0.10}
      load_weights: {memory: 0.4, streams: 0.3, image: 0.3}
      util_share: 0.5
      busy_gpu_penalty: 1.0
      gpu_assignment: fewest-pods
      rho_threshold: 0.35
      rho_repulsion: 2.0
      stale_after_s: 60
      max_streams: 256
      normalisation: candidates
      shape_prior:
        - {gpus: 1, memory: whole, weight: 1}
        - {gpus: 1, memory: 24Gi, weight: 1}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, Literal

from kvspread.quantity import QUANTITY_FORMAT_HELP, QuantityError, parse_quantity
from kvspread.settings import ConfigError

__all__ = [
    "ScoringConfig",
    "TermWeights",
    "LoadWeights",
    "PriorShape",
    "Normalisation",
    "GpuAssignment",
    "DEFAULT_GPU_ASSIGNMENT",
    "DEFAULT_TERM_WEIGHTS",
    "DEFAULT_LOAD_WEIGHTS",
    "DEFAULT_UTIL_SHARE",
    "DEFAULT_BUSY_GPU_PENALTY",
    "DEFAULT_RHO_THRESHOLD",
    "DEFAULT_RHO_REPULSION",
    "DEFAULT_STALE_AFTER_S",
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_QOS_P95_CEILING_S",
    "DEFAULT_IDLE_USED_FRACTION",
    "DEFAULT_SHAPE_PRIOR",
    "DEFAULT_SHAPE_PRIOR_WEIGHT",
    "DEFAULT_SHAPE_HALF_LIFE_PODS",
    "DEFAULT_MAX_SHAPES",
    "DEFAULT_NORMALISATION",
    "MIB",
    "ExtenderConfig",
    "DEFAULT_LEDGER_TTL_S",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
]

MIB: Final = 2**20

Normalisation = Literal["candidates", "absolute"]
GpuAssignment = Literal["fewest-pods", "scored"]


@dataclass(frozen=True)
class TermWeights:
    """Weights of the prioritize terms (DESIGN.md section 5). Only ratios matter."""

    fragmentation: float
    load: float
    spread: float
    modality: float
    qos: float

    def total(self) -> float:
        return self.fragmentation + self.load + self.spread + self.modality + self.qos


@dataclass(frozen=True)
class LoadWeights:
    """Weights of the load weight's parts (DESIGN.md section 4)."""

    memory: float
    streams: float
    image: float


@dataclass(frozen=True)
class PriorShape:
    """One instance shape of the prior target distribution (DESIGN.md section 4).

    `mem_per_gpu_mib` None means whole GPUs (a pod without `kvspread.io/gpu-memory`).
    """

    gpus: int
    mem_per_gpu_mib: float | None
    weight: float
    cpu_milli: float = 0.0


DEFAULT_TERM_WEIGHTS: Final = TermWeights(
    fragmentation=0.35, load=0.25, spread=0.15, modality=0.15, qos=0.10
)
"""Fragmentation first: it is the term with measured value (FGD, Weng et al., USENIX ATC'23,
cuts unallocated GPUs from 7-9 % to 4.8 % against packing heuristics); load second because
the source design notes rank memory pressure as the main interference; spread, modality and
QoS break ties between nodes that pack equally well. Tuned on the simulator (docs/extender.md)."""

DEFAULT_LOAD_WEIGHTS: Final = LoadWeights(memory=0.4, streams=0.3, image=0.3)
"""load = 0.4 busy + 0.3 streams/max_streams + 0.3 image share: the weights of the design
notes this project grew from (DESIGN.md section 4), whose first part is mem_used/mem_total.
Here that part also carries GPU utilisation where the collector measured it (`util_share`)."""

DEFAULT_UTIL_SHARE: Final = 0.5
"""Share of the load's first part that is GPU utilisation when NVML reports it: busy =
(1 - 0.5) mem_used/mem_total + 0.5 mean_g util_g. Memory use says how much of the GPU is
promised, not whether its SMs are taken: an engine holding 30 % of the memory can keep a
time-sliced GPU busy all the time, and every process added to it slows each step (time-slicing
runs one context at a time). Half and half because neither signal alone describes the
interference; without utilisation the part is memory alone, as in the design notes."""

DEFAULT_BUSY_GPU_PENALTY: Final = 1.0
"""Cost of a busy GPU when the extender picks a node's GPU slot, in units of the pod's demand:
the slot minimises dF + penalty x util_g x demand, so a fully busy GPU must save as much
expected fragmentation as the pod's whole memory before it is preferred to an idle one.
No effect where utilisation is not measured (the Alibaba trace replay)."""

DEFAULT_RHO_THRESHOLD: Final = 0.35
"""Node fragmentation above which replicas of one model repel harder (DESIGN.md section 5)."""

DEFAULT_RHO_REPULSION: Final = 2.0
"""Repulsion multiplier slope: repulsion x (1 + 2 rho) above the threshold (DESIGN.md 5)."""

DEFAULT_STALE_AFTER_S: Final = 60.0
"""Signals older than this are stale: neutral score, never filtered (DESIGN.md section 3)."""

DEFAULT_MAX_STREAMS: Final = 256
"""Streams at which a node counts as fully loaded: vLLM's default `--max-num-seqs` (256),
the number of sequences one engine batches at once."""

DEFAULT_QOS_P95_CEILING_S: Final = 0.120
"""p95 latency at which the QoS term reaches 0 for realtime pods: the upper bound of the
`batch` class (50-120 ms, DESIGN.md section 2); beyond it a node serves no realtime work."""

DEFAULT_IDLE_USED_FRACTION: Final = 0.05
"""A GPU with no kvspread allocation counts as idle (can take a whole-GPU pod) while NVML
shows at most this share of its memory used: the CUDA context and driver reserve a few
hundred MiB on an otherwise empty GPU (about 0.3-0.6 GiB, under 5 % of a 16 GiB card)."""

DEFAULT_SHAPE_PRIOR: Final = (PriorShape(gpus=1, mem_per_gpu_mib=None, weight=1.0),)
"""Until pods are seen, assume whole single-GPU instances (DESIGN.md section 2: a GPU pod
without the memory annotation needs whole GPUs); this makes the fragmentation term prefer
keeping GPUs entirely free, i.e. pack partial instances together."""

DEFAULT_SHAPE_PRIOR_WEIGHT: Final = 10.0
"""Pseudo-count of the prior: after ~10 observed pods the learned shapes dominate."""

DEFAULT_SHAPE_HALF_LIFE_PODS: Final = 1000.0
"""Observed shape counts halve every this many pods, so the distribution follows drift."""

DEFAULT_MAX_SHAPES: Final = 32
"""At most this many distinct shapes are kept (the lightest are dropped): bounds scoring cost."""

DEFAULT_NORMALISATION: Final[Normalisation] = "candidates"
"""`candidates`: the combined score is min-max scaled over the nodes of one request (best 10,
worst 0), as kube-scheduler's own NormalizeScore does; `absolute`: a node's score depends on
that node alone (weighted sum x 10)."""

DEFAULT_GPU_ASSIGNMENT: Final[GpuAssignment] = "fewest-pods"
"""Who picks the GPU inside the chosen node, as far as scoring is concerned. kube-scheduler
binds a pod to a node; the kubelet's device manager asks the device plugin which device to
give it. `fewest-pods`: the NVIDIA device plugin's distributed allocation for time-sliced
replicas (k8s-device-plugin `distributedAlloc`: the GPU with the fewest allocated replicas
first); it ignores GPU memory, so a one-GPU pod fits a node only when every GPU the plugin
may pick (those with the fewest pods) has room, and the fragmentation and busy costs are
those of such a GPU. Applies where the per-GPU pod counts are known (`GpuState.pods`, built
from the signals). `scored`: the GPU slot the scoring picks, for clusters whose device
plugin honours a scheduler's GPU choice (kvspread ships none) and for the trace replay."""

_WEIGHT_KEYS = ("fragmentation", "load", "spread", "modality", "qos")
_LOAD_KEYS = ("memory", "streams", "image")


@dataclass(frozen=True)
class ScoringConfig:
    """Everything the pure scoring and fit code reads. Frozen; build variants with `with_()`.

    Thread-safe (immutable). Units: seconds, MiB, milli-CPU.
    """

    weights: TermWeights = DEFAULT_TERM_WEIGHTS
    """Weights of the five prioritize terms."""
    load_weights: LoadWeights = DEFAULT_LOAD_WEIGHTS
    """Weights inside the load term."""
    util_share: float = DEFAULT_UTIL_SHARE
    """Share of the load's memory part taken by measured GPU utilisation (0 = memory only)."""
    busy_gpu_penalty: float = DEFAULT_BUSY_GPU_PENALTY
    """Weight of a GPU's utilisation when choosing the GPU slot (0 = fragmentation only)."""
    gpu_assignment: GpuAssignment = DEFAULT_GPU_ASSIGNMENT
    """How the GPU inside a node is picked: `fewest-pods` (device plugin) or `scored`."""
    rho_threshold: float = DEFAULT_RHO_THRESHOLD
    """rho above which the spread repulsion is multiplied by 1 + rho_repulsion * rho."""
    rho_repulsion: float = DEFAULT_RHO_REPULSION
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    """Age beyond which a node's signals are stale."""
    max_streams: float = DEFAULT_MAX_STREAMS
    """Active streams that count as full load (load and QoS terms)."""
    qos_p95_ceiling_s: float = DEFAULT_QOS_P95_CEILING_S
    idle_used_fraction: float = DEFAULT_IDLE_USED_FRACTION
    shape_prior: tuple[PriorShape, ...] = DEFAULT_SHAPE_PRIOR
    shape_prior_weight: float = DEFAULT_SHAPE_PRIOR_WEIGHT
    shape_half_life_pods: float = DEFAULT_SHAPE_HALF_LIFE_PODS
    max_shapes: int = DEFAULT_MAX_SHAPES
    normalisation: Normalisation = DEFAULT_NORMALISATION

    def with_(self, **changes: Any) -> ScoringConfig:
        """A validated copy with some fields replaced."""
        cfg = replace(self, **changes)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raise ConfigError naming the field path and the bad value."""
        for k in _WEIGHT_KEYS:
            _non_negative(f"scoring.weights.{k}", getattr(self.weights, k))
        if self.weights.total() <= 0:
            raise ConfigError("scoring.weights: at least one weight must be > 0")
        for k in _LOAD_KEYS:
            _non_negative(f"scoring.load_weights.{k}", getattr(self.load_weights, k))
        lw = self.load_weights
        if lw.memory + lw.streams + lw.image <= 0:
            raise ConfigError("scoring.load_weights: at least one weight must be > 0")
        _in_range("scoring.rho_threshold", self.rho_threshold, 0.0, 1.0)
        _in_range("scoring.util_share", self.util_share, 0.0, 1.0)
        _non_negative("scoring.busy_gpu_penalty", self.busy_gpu_penalty)
        _non_negative("scoring.rho_repulsion", self.rho_repulsion)
        _positive("scoring.stale_after_s", self.stale_after_s)
        _positive("scoring.max_streams", self.max_streams)
        _positive("scoring.qos_p95_ceiling_s", self.qos_p95_ceiling_s)
        _in_range("scoring.idle_used_fraction", self.idle_used_fraction, 0.0, 1.0)
        _non_negative("scoring.shape_prior_weight", self.shape_prior_weight)
        _positive("scoring.shape_half_life_pods", self.shape_half_life_pods)
        if not isinstance(self.max_shapes, int) or self.max_shapes < 1:
            raise ConfigError(
                f"scoring.max_shapes: must be an integer >= 1, got {self.max_shapes!r}"
            )
        if self.gpu_assignment not in ("fewest-pods", "scored"):
            raise ConfigError(
                f"scoring.gpu_assignment: must be 'fewest-pods' or 'scored', "
                f"got {self.gpu_assignment!r}"
            )
        if self.normalisation not in ("candidates", "absolute"):
            raise ConfigError(
                f"scoring.normalisation: must be 'candidates' or 'absolute', "
                f"got {self.normalisation!r}"
            )
        if not self.shape_prior:
            raise ConfigError("scoring.shape_prior: must hold at least one shape")
        for n, s in enumerate(self.shape_prior):
            where = f"scoring.shape_prior[{n}]"
            if not isinstance(s.gpus, int) or s.gpus < 1:
                raise ConfigError(f"{where}.gpus: must be an integer >= 1, got {s.gpus!r}")
            if s.mem_per_gpu_mib is not None:
                _positive(f"{where}.memory", s.mem_per_gpu_mib)
            _positive(f"{where}.weight", s.weight)
            _non_negative(f"{where}.cpu", s.cpu_milli)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, where: str = "scoring") -> ScoringConfig:
        """Parse the `scoring:` mapping strictly; missing keys take the defaults.

        Raises ConfigError for an unknown key (naming its dotted path), a value of the
        wrong type, or a value out of range.
        """
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(known))})")
        kw: dict[str, Any] = {}
        if "weights" in data:
            kw["weights"] = TermWeights(
                **_sub(data["weights"], f"{where}.weights", _WEIGHT_KEYS, DEFAULT_TERM_WEIGHTS)
            )
        if "load_weights" in data:
            kw["load_weights"] = LoadWeights(
                **_sub(
                    data["load_weights"], f"{where}.load_weights", _LOAD_KEYS, DEFAULT_LOAD_WEIGHTS
                )
            )
        for key in (
            "rho_threshold",
            "rho_repulsion",
            "util_share",
            "busy_gpu_penalty",
            "stale_after_s",
            "max_streams",
            "qos_p95_ceiling_s",
            "idle_used_fraction",
            "shape_prior_weight",
            "shape_half_life_pods",
        ):
            if key in data:
                kw[key] = _number(data[key], f"{where}.{key}")
        if "max_shapes" in data:
            v = data["max_shapes"]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"{where}.max_shapes: must be an integer, got {v!r}")
            kw["max_shapes"] = v
        if "normalisation" in data:
            kw["normalisation"] = data["normalisation"]
        if "gpu_assignment" in data:
            kw["gpu_assignment"] = data["gpu_assignment"]
        if "shape_prior" in data:
            kw["shape_prior"] = _prior(data["shape_prior"], f"{where}.shape_prior")
        cfg = cls(**kw)
        cfg.validate()
        return cfg


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: must be finite, got {value!r}")
    return float(value)


def _non_negative(where: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ConfigError(f"{where}: must be a finite number >= 0, got {value!r}")


def _positive(where: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{where}: must be a finite number > 0, got {value!r}")


def _in_range(where: str, value: float, lo: float, hi: float) -> None:
    if not (isinstance(value, int | float) and lo <= value <= hi):
        raise ConfigError(f"{where}: must be between {lo} and {hi}, got {value!r}")


def _sub(data: Any, where: str, keys: tuple[str, ...], default: Any) -> dict[str, float]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: must be a mapping, got {data!r}")
    out = {k: float(getattr(default, k)) for k in keys}
    for k, v in data.items():
        if k not in keys:
            raise ConfigError(f"{where}.{k}: unknown key (known: {', '.join(keys)})")
        out[k] = _number(v, f"{where}.{k}")
    return out


def _prior(data: Any, where: str) -> tuple[PriorShape, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"{where}: must be a list of shapes, got {data!r}")
    out = []
    for n, item in enumerate(data):
        w = f"{where}[{n}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{w}: must be a mapping with gpus, memory, weight; got {item!r}")
        for k in item:
            if k not in ("gpus", "memory", "weight", "cpu"):
                raise ConfigError(f"{w}.{k}: unknown key (known: cpu, gpus, memory, weight)")
        gpus = item.get("gpus", 1)
        if isinstance(gpus, bool) or not isinstance(gpus, int):
            raise ConfigError(f"{w}.gpus: must be an integer, got {gpus!r}")
        mem_raw = item.get("memory", "whole")
        mem: float | None
        if mem_raw == "whole" or mem_raw is None:
            mem = None
        else:
            try:
                mem = float(parse_quantity(mem_raw)) / MIB
            except QuantityError as exc:
                raise ConfigError(
                    f"{w}.memory: {mem_raw!r} is neither 'whole' nor {QUANTITY_FORMAT_HELP}"
                ) from exc
        weight = _number(item.get("weight", 1.0), f"{w}.weight")
        cpu = 0.0
        if "cpu" in item:
            try:
                cpu = float(parse_quantity(item["cpu"])) * 1000.0
            except QuantityError as exc:
                raise ConfigError(f"{w}.cpu: {exc}") from exc
        out.append(PriorShape(gpus=gpus, mem_per_gpu_mib=mem, weight=weight, cpu_milli=cpu))
    return tuple(out)


DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback by default: safe for a laptop and for the sidecar layout; pods on a Service
pass --host 0.0.0.0."""
DEFAULT_PORT: Final = 8888
"""The port kube-scheduler extender examples use (urlPrefix http://127.0.0.1:8888)."""
DEFAULT_WATCH_TIMEOUT_S: Final = 300
"""Server-side watch timeout; client-go's reflector picks 5-10 min, a renewal is cheap."""
DEFAULT_BACKOFF_BASE_S: Final = 0.2
DEFAULT_BACKOFF_MAX_S: Final = 30.0
"""Reconnect backoff: 0.2 s doubling to 30 s with jitter (client-go's reflector backs off
from 800 ms to 30 s)."""
DEFAULT_LEDGER_TTL_S: Final = 30.0
"""How long a recent placement counts before the pod shows up bound: long enough for
kube-scheduler to bind and the pod watch to deliver it (normally well under a second; 30 s
covers a slow API server), short enough that a pod placed elsewhere does not hold phantom
memory for long."""
DEFAULT_MAX_BODY_BYTES: Final = 256 * 1024 * 1024
"""Largest request body accepted (413 above): a full NodeList of 15,000 nodes at up to
~17 KiB per node (the kubelet's 50 image entries, conditions, labels and the <= 4 KiB
kvspread.io/signals annotation) is ~250 MiB. Names-only requests are a few hundred KiB."""
DEFAULT_EXPLAIN_PODS: Final = 256
"""Decisions kept for /debug/explain (least recently decided pods are dropped)."""

_SECTIONS: Final = {
    "server": (
        "host",
        "port",
        "tls_cert",
        "tls_key",
        "log_level",
        "standalone",
        "filter_verb",
        "prioritize_verb",
        "max_body_bytes",
    ),
    "kubernetes": (
        "kubeconfig",
        "api_server",
        "watch_timeout_s",
        "backoff_base_s",
        "backoff_max_s",
    ),
    "ledger": ("ttl_s",),
    "explain": ("max_pods",),
    "signals": ("exclude_after_s",),
}


@dataclass(frozen=True)
class ExtenderConfig:
    """The whole `kvspread extender serve` configuration (YAML sections server,
    kubernetes, ledger, explain, signals, scoring; see docs/extender.md)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    tls_cert: str | None = None
    tls_key: str | None = None
    log_level: str = "info"
    standalone: bool = False
    """No cluster: no watches; full-NodeList requests are scored from the body alone."""
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """YAML `server.max_body_bytes`: larger request bodies get 413 before being buffered."""
    kubeconfig: str | None = None
    api_server: str | None = None
    """A plain API URL without credentials (kubectl proxy, tests' FakeKubeApi)."""
    watch_timeout_s: int = DEFAULT_WATCH_TIMEOUT_S
    backoff_base_s: float = DEFAULT_BACKOFF_BASE_S
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S
    ledger_ttl_s: float = DEFAULT_LEDGER_TTL_S
    explain_max_pods: int = DEFAULT_EXPLAIN_PODS
    signals_exclude_after_s: float | None = None
    """YAML `signals.exclude_after_s`: past this age a node's signals fail the filter for
    GPU pods (reason names the age); None (default) = never, such nodes only rank below
    every fresh node that fits."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> ExtenderConfig:
        """Strict parse of the layered mapping; ConfigError names the dotted key."""
        data = dict(data or {})
        known = set(_SECTIONS) | {"scoring"}
        for key in data:
            if key not in known:
                raise ConfigError(f"{key}: unknown section (known: {', '.join(sorted(known))})")
        kw: dict[str, Any] = {}
        for section, keys in _SECTIONS.items():
            sub = data.get(section) or {}
            if not isinstance(sub, Mapping):
                raise ConfigError(f"{section}: must be a mapping, got {sub!r}")
            for k, v in sub.items():
                if k not in keys:
                    raise ConfigError(
                        f"{section}.{k}: unknown key (known: {', '.join(sorted(keys))})"
                    )
                attr = {
                    ("ledger", "ttl_s"): "ledger_ttl_s",
                    ("explain", "max_pods"): "explain_max_pods",
                    ("signals", "exclude_after_s"): "signals_exclude_after_s",
                }.get((section, k), k)
                kw[attr] = _typed(attr, v, f"{section}.{k}")
        kw["scoring"] = ScoringConfig.from_mapping(data.get("scoring"))
        cfg = cls(**kw)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if not (0 <= self.port <= 65535):
            raise ConfigError(f"server.port: must be 0..65535, got {self.port!r}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("server.tls_cert and server.tls_key must be given together")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigError(
                f"server.log_level: must be debug, info, warning or error, got {self.log_level!r}"
            )
        for where, verb in (
            ("filter_verb", self.filter_verb),
            ("prioritize_verb", self.prioritize_verb),
        ):
            if (
                not verb
                or not all(c.isalnum() or c in "-_./" for c in verb)
                or verb.startswith("/")
            ):
                raise ConfigError(
                    f"server.{where}: must be a URL path segment like 'filter', got {verb!r}"
                )
        if self.filter_verb == self.prioritize_verb:
            raise ConfigError("server.filter_verb and server.prioritize_verb must differ")
        _positive("server.max_body_bytes", self.max_body_bytes)
        _positive("kubernetes.watch_timeout_s", self.watch_timeout_s)
        _positive("kubernetes.backoff_base_s", self.backoff_base_s)
        _positive("kubernetes.backoff_max_s", self.backoff_max_s)
        _positive("ledger.ttl_s", self.ledger_ttl_s)
        if self.signals_exclude_after_s is not None:
            _positive("signals.exclude_after_s", self.signals_exclude_after_s)
        if self.explain_max_pods < 1:
            raise ConfigError(f"explain.max_pods: must be >= 1, got {self.explain_max_pods!r}")


_TYPES: Final = {
    "host": str,
    "port": int,
    "tls_cert": str,
    "tls_key": str,
    "log_level": str,
    "standalone": bool,
    "filter_verb": str,
    "prioritize_verb": str,
    "max_body_bytes": int,
    "kubeconfig": str,
    "api_server": str,
    "watch_timeout_s": int,
    "backoff_base_s": float,
    "backoff_max_s": float,
    "ledger_ttl_s": float,
    "explain_max_pods": int,
    "signals_exclude_after_s": float,
}


def _typed(attr: str, value: Any, where: str) -> Any:
    t = _TYPES[attr]
    if value is None and attr in (
        "tls_cert",
        "tls_key",
        "kubeconfig",
        "api_server",
        "signals_exclude_after_s",
    ):
        return None
    if t is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: must be true or false, got {value!r}")
    if t is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                return int(value)
            raise ConfigError(f"{where}: must be an integer, got {value!r}")
        return value
    if t is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError as exc:
                raise ConfigError(f"{where}: must be a number, got {value!r}") from exc
        return _number(value, where)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: must be a string, got {value!r}")
    return value
