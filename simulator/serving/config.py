"""Parameters of the serving simulation, with the published numbers they rest on.

Every default below names its source (the full table with links is in
docs/serving-simulation.md). Where a value is an assumption of this simulator rather than a
measurement, the comment says so. A YAML file (`--config`) overrides any field by its
dotted path (`cost.prefill_tok_s: 20000`, `services.chat.max_replicas: 4`); unknown keys and
wrong types are a `ConfigError` naming the path and the value.

Units: memory in GB (1e9 bytes) where the sources quote GB and GiB where Kubernetes
quantities are meant (GPU memory requests, GPU size); cost constants in milliseconds;
durations in seconds.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvspread.settings import ConfigError

__all__ = [
    "GpuSpec",
    "CostModel",
    "ModelSpec",
    "KindSpec",
    "MetricTarget",
    "HpaBehavior",
    "ServiceSpec",
    "ClusterSpec",
    "BackgroundSpec",
    "ArrivalSpec",
    "SloSpec",
    "StartupSpec",
    "WorkloadSpec",
    "SimConfig",
    "default_config",
    "config_from_mapping",
    "KINDS",
]

KINDS = ("text", "image", "multi-image")
"""The three request kinds (docs/design.md section 7): text only, one image with short text,
several images with long context. They double as the `kvspread.io/modality` label."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type. A100-80GB: 80 GiB HBM2e (81,920 MiB as NVML reports), 2.04 TB/s."""

    name: str = "A100-80GB"
    hbm_gib: float = 80.0
    bandwidth_tb_s: float = 2.04  # NVIDIA A100 datasheet (SXM 80GB); H100 SXM: 3.35


@dataclass(frozen=True)
class CostModel:
    """Engine timing and memory rules (serving-model defaults, fitted to TRT-LLM/vLLM data).

    prefill(T) = p0 + T / R_pf: TRT-LLM v0.5 LLaMA-7B A100 FP16 TTFT 16 ms @128 and
    133 ms @2,048 input at batch 1 (NVIDIA/TensorRT-LLM docs/source/performance.md).
    decode_step = d0 + (W + sum KV bytes) / (eta * BW): decode reads the weights and every
    live KV byte once per step; eta and d0 fitted to TRT-LLM v0.6.1 A100 128/2048 at batch 60
    (about 31 ms per step, same file). encode = e0 + ke*tok + qe*tok^2 per image: FLOPs of a
    Qwen2-VL-style ViT (linear MLP + quadratic attention) at about 125 TFLOPS effective,
    cross-checked with FasterTransformer's ViT-L A100 timings (docs/vit_guide.md).
    """

    block_tokens: int = 16  # vLLM CacheConfig.DEFAULT_BLOCK_SIZE
    act_reserve_gb: float = 4.0  # activation/profile reserve (assumption, serving-model)
    max_num_seqs: int = 256  # vLLM scheduler default (commonly cited)
    chunk_tokens: int = 2048  # chunked-prefill token budget per step (vLLM V1 online default)
    prefill_p0_ms: float = 8.0
    prefill_tok_s: float = 16_000.0
    decode_d0_ms: float = 2.0
    eta: float = 0.85
    encode_e0_ms: float = 5.0
    encode_ke_ms: float = 0.04
    encode_qe_ms: float = 2e-5
    # Time-slicing two CUDA contexts on one GPU roughly serialises their kernels: a step
    # takes (1 + sharing_slowdown * (busy occupants - 1)) times as long. Assumption; MPS
    # or MIG would be lower (0 = perfect isolation).
    sharing_slowdown: float = 1.0
    # An engine that finds less memory than it was promised starts with a smaller pool
    # (SGLang, TRT-LLM's free_gpu_memory_fraction) and fails requests longer than the
    # pool: the OOM of the comparison table. vLLM V1 instead refuses to start when the
    # pool cannot hold one max_model_len sequence ("... KV cache is needed, which is
    # larger than the available KV cache memory"): set true for that behaviour.
    require_max_model_len_fits: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """A served model: weight bytes and KV bytes per token (2 x layers x kv_heads x
    head_dim x 2 bytes, from each model's HF config.json)."""

    weights_gb: float = 16.0
    kv_bytes_per_token: int = 131_072
    max_model_len: int = 8192
    multimodal: bool = False


@dataclass(frozen=True)
class KindSpec:
    """Token and image distributions of one request kind.

    Prompt text tokens: lognormal(median, sigma) when `text_sigma` > 0, else uniform
    [text_lo, text_hi]. Images per request: uniform [images_min, images_max]; with
    probability `images_tail_p` instead uniform (images_max, images_tail_max] (the heavy
    tail of the Azure LMM 2025 trace). Tokens per image: `image_tokens` with `image_weights`
    when given, else uniform [image_tok_lo, image_tok_hi] rounded to 4. Output tokens:
    lognormal(out_median, out_sigma).
    """

    share: float = 0.5
    text_median: float = 1020.0
    text_sigma: float = 0.77
    text_lo: int = 0
    text_hi: int = 0
    images_min: int = 0
    images_max: int = 0
    images_tail_p: float = 0.0
    images_tail_max: int = 0
    image_tokens: tuple[int, ...] = ()
    image_weights: tuple[float, ...] = ()
    image_tok_lo: int = 256
    image_tok_hi: int = 1280
    out_median: float = 129.0
    out_sigma: float = 0.93


@dataclass(frozen=True)
class MetricTarget:
    """One HPA metric: an adapter SLI (external metric name) and its target.

    `type` is `Value` (compare the metric itself) or `AverageValue` (divide by the replica
    count first), as in autoscaling/v2 `MetricTarget`.
    """

    metric: str = "kvspread_requests_per_second"
    type: str = "AverageValue"
    value: float = 5.0


@dataclass(frozen=True)
class HpaBehavior:
    """autoscaling/v2 behaviour; the defaults are Kubernetes' own (HPA docs, 'Default
    Behavior'): scale up without stabilisation by max(100 %, 4 pods) per 15 s; scale down
    with a 300 s stabilisation window by at most 100 % per 15 s."""

    sync_period_s: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    tolerance: float = 0.1  # --horizontal-pod-autoscaler-tolerance
    scale_up_window_s: float = 0.0
    scale_up_percent: float = 100.0
    scale_up_pods: int = 4
    scale_up_period_s: float = 15.0
    scale_down_window_s: float = 300.0
    scale_down_percent: float = 100.0
    scale_down_period_s: float = 15.0


@dataclass(frozen=True)
class ServiceSpec:
    """A Deployment of one model for one request kind, with its HPA."""

    kind: str = "text"
    model: str = "llama-3-8b"
    qos: str = "realtime"
    gpu_memory_gib: float = 32.0  # the kvspread.io/gpu-memory annotation
    min_replicas: int = 1
    max_replicas: int = 8
    initial_replicas: int = 2
    metrics: tuple[MetricTarget, ...] = (MetricTarget(),)
    # the `queue-depth` autoscaler's AverageValue target: waiting requests per replica
    # (assumption; GKE's guide has users pick it from a load test)
    queue_target: float = 3.0


@dataclass(frozen=True)
class ClusterSpec:
    """Nodes of identical GPUs. `pools`/`nvlink` are cycled over the nodes.

    `slots_per_gpu` is the time-slicing replica count of the NVIDIA device plugin: how many
    pods may share one GPU (memory is not enforced by the device plugin)."""

    nodes: int = 3
    gpus_per_node: int = 4
    pools: tuple[str, ...] = ("language", "mixed", "vision", "mixed")
    nvlink: tuple[bool, ...] = (False, True, True, False)
    slots_per_gpu: int = 4


@dataclass(frozen=True)
class BackgroundSpec:
    """Other tenants on the shared cluster (training, notebooks), placed before t=0.

    A fraction of GPUs holds one such pod of `mem_gib` (one value drawn per pod); a pod
    keeps its GPU busy (time-slicing contention) with probability `busy_p`. Assumption,
    shaped after the fractional-GPU pods of the Alibaba GPU trace (gpu_milli < 1000).
    """

    gpu_fraction: float = 0.5
    mem_gib: tuple[float, ...] = (8.0, 16.0, 24.0, 32.0)
    busy_p: float = 0.5


@dataclass(frozen=True)
class ArrivalSpec:
    """Bursty arrivals: Gamma inter-arrival gaps (shape 1/cv^2) scaled by the current rate.

    rate(t) = rate_rps * share(kind) * (1 + peak_extra * sin^2(pi t / duration)) and, for
    the kinds in `burst_kinds` inside a burst episode, times `burst_factor`. Episodes start as a Poisson
    process (mean gap `burst_every_s`) and last uniform [burst_min_s, burst_max_s].
    CV 2-3 and 5x image bursts: serving-model suggestions from BurstGPT and the Azure
    LMM 2025 plots (assumption in shape).
    """

    rate_rps: float = 4.0
    cv: float = 2.5
    peak_extra: float = 1.0
    burst_factor: float = 5.0
    burst_kinds: tuple[str, ...] = ("image",)
    burst_every_s: float = 900.0
    burst_min_s: float = 45.0
    burst_max_s: float = 120.0


@dataclass(frozen=True)
class SloSpec:
    """Per-token latency budget per QoS class (docs/design.md section 2: realtime < 50 ms per
    token step; batch 50-120 ms; best-effort above). A request meets its SLO when it
    completed and its end-to-end latency divided by its output tokens is at most the
    budget (the normalised latency of the vLLM paper)."""

    realtime_s: float = 0.050
    batch_s: float = 0.120
    good_threshold_s: float = 0.2  # good_requests_per_second threshold (docs/design.md sec. 6)


@dataclass(frozen=True)
class StartupSpec:
    """Pod start: ready after `load_s` (+ `multimodal_extra_s` for vision models: the
    dummy multimodal profile run), or `cold_load_s` (+ the same extra) on a node that has
    never run the model. 45 s with the image cached: vLLM issue #20264 (first
    response 59 s after start) and PR #11005 (14-39 s engine init). A failed start restarts
    with CrashLoopBackOff (10 s doubling to 300 s). Deleted pods drain for at most
    `grace_s` (terminationGracePeriodSeconds)."""

    load_s: float = 45.0
    multimodal_extra_s: float = 20.0
    # first start of a model on a node: image pull + weights from remote storage + init
    # (serving-model: 120 s cold; ServerlessLLM OSDI'24 load times). Nodes that ran the
    # model before keep image and weights cached.
    cold_load_s: float = 120.0
    backoff_initial_s: float = 10.0
    backoff_max_s: float = 300.0
    grace_s: float = 30.0
    schedule_retry_s: float = 10.0  # unschedulable pods are retried (kube-scheduler backoff)
    signals_period_s: float = 10.0  # collector sample period; it publishes at most this often
    # when NVML (and so the collector) first sees a starting engine's process: container
    # start + CUDA context + the first weights allocated. Assumption: vLLM allocates its
    # weights early in its 14-39 s init (PR #11005), so 15 s with the image cached; on a
    # node that never ran the model the image pull comes first (60 s, assumed to be most of
    # the extra cold-start time, 120 - 45 s). Until then the signals show neither the pod's
    # memory nor its model on any GPU.
    visible_s: float = 15.0
    cold_visible_s: float = 60.0


def _default_models() -> dict[str, ModelSpec]:
    return {
        # Llama-3-8B: 32 layers x 8 KV heads x 128 x 2 x 2 B = 128 KiB/token; 16 GB BF16.
        "llama-3-8b": ModelSpec(16.0, 131_072, 8192, False),
        # Qwen2-VL-7B: 28 layers x 4 KV heads x 128 x 2 x 2 B = 56 KiB/token; 16.6 GB.
        "qwen2-vl-7b": ModelSpec(16.6, 57_344, 8192, True),
        # The same weights served with a 32k context for multi-image documents.
        "qwen2-vl-7b-32k": ModelSpec(16.6, 57_344, 32_768, True),
    }


def _default_kinds() -> dict[str, KindSpec]:
    return {
        # Azure LLM inference trace 2023 (conversation): prompt median 1,020, output 129.
        "text": KindSpec(
            share=0.50, text_median=1020.0, text_sigma=0.77, out_median=129.0, out_sigma=0.93
        ),
        # One image with short text; Qwen2-VL 256-1,280 tokens per image, half/half
        # 1,024 / 256 (assumption); image outputs median about 90 (Azure LMM 2025).
        "image": KindSpec(
            share=0.33,
            text_median=800.0,
            text_sigma=0.77,
            images_min=1,
            images_max=1,
            image_tokens=(1024, 256),
            image_weights=(0.5, 0.5),
            out_median=90.0,
            out_sigma=0.9,
        ),
        # Several images with long context: 2k-8k text, 8-16 images, heavy tail.
        "multi-image": KindSpec(
            share=0.17,
            text_median=0.0,
            text_sigma=0.0,
            text_lo=2000,
            text_hi=8000,
            images_min=8,
            images_max=16,
            images_tail_p=0.1,
            images_tail_max=48,
            image_tok_lo=256,
            image_tok_hi=1280,
            out_median=200.0,
            out_sigma=0.9,
        ),
    }


def _default_services() -> dict[str, ServiceSpec]:
    rps = "kvspread_requests_per_second"
    p95 = "kvspread_request_latency_p95_seconds"
    return {
        "chat": ServiceSpec(
            kind="text",
            model="llama-3-8b",
            qos="realtime",
            gpu_memory_gib=24.0,
            min_replicas=1,
            max_replicas=8,
            initial_replicas=2,
            metrics=(MetricTarget(rps, "AverageValue", 2.5), MetricTarget(p95, "Value", 30.0)),
        ),
        "vision": ServiceSpec(
            kind="image",
            model="qwen2-vl-7b",
            qos="realtime",
            gpu_memory_gib=32.0,
            min_replicas=1,
            max_replicas=8,
            initial_replicas=2,
            metrics=(MetricTarget(rps, "AverageValue", 2.5), MetricTarget(p95, "Value", 20.0)),
        ),
        "docs": ServiceSpec(
            kind="multi-image",
            model="qwen2-vl-7b-32k",
            qos="batch",
            gpu_memory_gib=48.0,
            min_replicas=1,
            max_replicas=10,
            initial_replicas=2,
            metrics=(MetricTarget(rps, "AverageValue", 0.35), MetricTarget(p95, "Value", 120.0)),
        ),
    }


@dataclass(frozen=True)
class WorkloadSpec:
    """A real request mix driving one service (simulator.serving.workloads): a ServeGen
    client folder, an Azure-format CSV or a bundled name (`azure-conv`, ...)."""

    path: str = ""


@dataclass(frozen=True)
class SimConfig:
    """The whole simulation: cluster, models, services, workload, HPA and SLOs."""

    duration_s: float = 3600.0
    warmup_s: float = 120.0  # not scored: the cluster starts empty of requests
    timeline_step_s: float = 10.0
    gpu: GpuSpec = GpuSpec()
    cost: CostModel = CostModel()
    cluster: ClusterSpec = ClusterSpec()
    background: BackgroundSpec = BackgroundSpec()
    models: Mapping[str, ModelSpec] = field(default_factory=_default_models)
    kinds: Mapping[str, KindSpec] = field(default_factory=_default_kinds)
    services: Mapping[str, ServiceSpec] = field(default_factory=_default_services)
    arrivals: ArrivalSpec = ArrivalSpec()
    hpa: HpaBehavior = HpaBehavior()
    slo: SloSpec = SloSpec()
    startup: StartupSpec = StartupSpec()
    # real workloads per service (empty: the synthetic kinds/arrivals above); every rate
    # is multiplied by `rate_scale`, and sim time 0 is trace second `workload_start_s`
    workloads: Mapping[str, WorkloadSpec] = field(default_factory=dict)
    workload_start_s: float = 0.0
    rate_scale: float = 1.0
    # the extender's `scoring:` section, parsed by extender.config.ScoringConfig.from_mapping
    # (weights, load_weights, shape prior, normalisation ...); empty = the extender defaults
    scoring: Mapping[str, Any] = field(default_factory=dict)

    def validate(self) -> SimConfig:
        """Cross-field checks; returns self so it chains."""

        def bad(path: str, value: Any, why: str) -> ConfigError:
            return ConfigError(f"{path}: {value!r}: {why}")

        if self.duration_s <= 0:
            raise bad("duration_s", self.duration_s, "must be > 0")
        if self.warmup_s < 0:
            raise bad("warmup_s", self.warmup_s, "must be >= 0")
        if self.cluster.nodes < 1 or self.cluster.gpus_per_node < 1:
            raise bad("cluster", self.cluster, "needs at least one node with one GPU")
        if self.cluster.slots_per_gpu < 1:
            raise bad("cluster.slots_per_gpu", self.cluster.slots_per_gpu, "must be >= 1")
        if not self.cluster.pools or not self.cluster.nvlink:
            raise bad("cluster.pools", self.cluster.pools, "pools and nvlink must be non-empty")
        if self.cost.block_tokens < 1 or self.cost.max_num_seqs < 1 or self.cost.chunk_tokens < 1:
            raise bad("cost", self.cost, "block_tokens, max_num_seqs, chunk_tokens must be >= 1")
        for name in ("prefill_tok_s", "eta"):
            if getattr(self.cost, name) <= 0:
                raise bad(f"cost.{name}", getattr(self.cost, name), "must be > 0")
        if self.gpu.hbm_gib <= 0 or self.gpu.bandwidth_tb_s <= 0:
            raise bad("gpu", self.gpu, "hbm_gib and bandwidth_tb_s must be > 0")
        if self.arrivals.rate_rps <= 0 or self.arrivals.cv <= 0:
            raise bad("arrivals", self.arrivals, "rate_rps and cv must be > 0")
        if not self.services:
            raise bad("services", {}, "at least one service is needed")
        for kind in self.kinds:
            if kind not in KINDS:
                raise bad(f"kinds.{kind}", kind, f"unknown request kind (one of {KINDS})")
        for name, s in self.services.items():
            where = f"services.{name}"
            if s.kind not in self.kinds:
                raise bad(
                    f"{where}.kind", s.kind, f"no such request kind in kinds {list(self.kinds)}"
                )
            if s.model not in self.models:
                raise bad(f"{where}.model", s.model, f"no such model in models {list(self.models)}")
            if s.qos not in ("realtime", "batch", "best-effort"):
                raise bad(f"{where}.qos", s.qos, "must be realtime, batch or best-effort")
            if not 1 <= s.min_replicas <= s.max_replicas:
                raise bad(f"{where}.min_replicas", s.min_replicas, "need 1 <= min <= max")
            if not s.min_replicas <= s.initial_replicas <= s.max_replicas:
                raise bad(f"{where}.initial_replicas", s.initial_replicas, "must be in [min, max]")
            if s.gpu_memory_gib <= 0 or s.gpu_memory_gib > self.gpu.hbm_gib:
                raise bad(
                    f"{where}.gpu_memory_gib",
                    s.gpu_memory_gib,
                    f"must be in (0, {self.gpu.hbm_gib}]",
                )
            if not s.metrics:
                raise bad(f"{where}.metrics", s.metrics, "at least one HPA metric is needed")
            for i, m in enumerate(s.metrics):
                if m.type not in ("Value", "AverageValue"):
                    raise bad(f"{where}.metrics[{i}].type", m.type, "must be Value or AverageValue")
                if m.value <= 0:
                    raise bad(f"{where}.metrics[{i}].value", m.value, "must be > 0")
                if m.metric not in METRICS:
                    raise bad(f"{where}.metrics[{i}].metric", m.metric, f"one of {METRICS}")
        for name, w in self.workloads.items():
            if name not in self.services:
                raise bad(f"workloads.{name}", w.path, f"no such service {list(self.services)}")
        if self.workloads and set(self.workloads) != set(self.services):
            missing = sorted(set(self.services) - set(self.workloads))
            raise bad("workloads", missing, "services without a workload (give each one)")
        if self.rate_scale <= 0 or self.workload_start_s < 0:
            raise bad("rate_scale", self.rate_scale, "needs rate_scale > 0, workload_start_s >= 0")
        served = {s.kind for s in self.services.values()}
        for kind, k in self.kinds.items():
            if k.share < 0:
                raise bad(f"kinds.{kind}.share", k.share, "must be >= 0")
            if k.share > 0 and kind not in served and not self.workloads:
                raise bad(f"kinds.{kind}", kind, "has a share but no service serves it")
            if k.image_tokens and len(k.image_tokens) != len(k.image_weights):
                raise bad(
                    f"kinds.{kind}.image_weights",
                    k.image_weights,
                    "needs one weight per image_tokens entry",
                )
        if sum(k.share for k in self.kinds.values()) <= 0 and not self.workloads:
            raise bad("kinds", {}, "request shares sum to 0")
        self.scoring_config()  # raises ConfigError naming the bad scoring key
        return self

    def scoring_config(self) -> Any:
        """The kvspread policy's `extender.config.ScoringConfig`."""
        from extender.config import ScoringConfig

        return ScoringConfig.from_mapping(dict(self.scoring), where="scoring")


METRICS = (
    "kvspread_requests_per_second",
    "kvspread_good_requests_per_second",
    "kvspread_request_latency_p50_seconds",
    "kvspread_request_latency_p95_seconds",
    "kvspread_request_latency_p99_seconds",
    "kvspread_error_ratio",
    "kvspread_queue_depth",
    "kvspread_kv_cache_usage_ratio",
)
"""Adapter SLIs (docs/design.md section 6) an HPA metric may name."""


def default_config() -> SimConfig:
    """The documented default parameter set."""
    return SimConfig().validate()


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path, tp())  # type: ignore[arg-type]
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: {value!r}: expected true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: {value!r}: expected an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: {value!r}: expected a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: {value!r}: expected a string")
        return value
    if origin is tuple:
        (inner, _ellipsis) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path}: {value!r}: expected a list")
        return tuple(_convert(inner, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict) or origin is typing.get_origin(Mapping[str, int]):
        raise AssertionError("mappings are handled by _build")
    if isinstance(tp, types.UnionType):  # pragma: no cover - not used in the schema
        raise AssertionError(tp)
    raise AssertionError(f"unsupported config type {tp!r} at {path}")


def _build(cls: type, data: Any, path: str, base: Any) -> Any:
    """Override the fields of dataclass instance `base` from `data`, strictly."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'config'}: {data!r}: expected a mapping")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    changes: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise ConfigError(f"{where}: unknown key (known: {', '.join(sorted(names))})")
        tp = hints[key]
        if key == "scoring" and cls is SimConfig:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}: {value!r}: expected a mapping")
            changes[key] = dict(value)
        elif typing.get_origin(tp) is Mapping:
            value_tp = typing.get_args(tp)[1]
            current = dict(getattr(base, key))
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}: {value!r}: expected a mapping of names")
            for name, entry in value.items():
                if entry is None:  # `name: null` removes an entry
                    current.pop(name, None)
                    continue
                seed = current.get(name, value_tp())
                current[str(name)] = _build(value_tp, entry, f"{where}.{name}", seed)
            changes[key] = current
        elif dataclasses.is_dataclass(tp):
            changes[key] = _build(tp, value, where, getattr(base, key))  # type: ignore[arg-type]
        else:
            changes[key] = _convert(tp, value, where)
    return dataclasses.replace(base, **changes)


def config_from_mapping(data: Mapping[str, Any] | None, base: SimConfig | None = None) -> SimConfig:
    """Defaults (or `base`) overridden by a YAML-shaped mapping, validated."""
    cfg = base or SimConfig()
    if data:
        cfg = _build(SimConfig, data, "", cfg)
    return cfg.validate()
