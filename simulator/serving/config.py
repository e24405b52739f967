"""Parameters of the serving simulation, with the published numbers they rest on.

Every default below names its source (the full table with links is in
docs/serving-simulation.md). Where a value is an assumption of this simulator rather than a
measurement, the comment says so. A YAML file (`--config`) overrides any field by its
dotted path (`cost.prefill_tok_s: 20000`, `services.chat.max_replicas: 4`; `name: null`
removes an entry of models, kinds or services); unknown keys and wrong types are a
`ConfigError` naming the path and the value (the shared loader, kvspread.settings.load).

Units: memory in GB (1e9 bytes) where the sources quote GB and GiB where Kubernetes
quantities are meant (GPU memory requests, GPU size); cost constants in milliseconds;
durations in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.config import ScoringConfig
from kvspread.names import (
    SLI_KV_CACHE_USAGE,
    SLI_QUEUE_DEPTH_PER_REPLICA,
    SLI_REQUESTS_PER_SECOND,
    SLI_TPOT_P95,
    SLI_TTFT_P95,
)
from kvspread.settings import bounded, invalid, load
from metrics_adapter.guard import FRACTION as GUARD_FRACTION
from metrics_adapter.guard import MAX_WINDOW_S as GUARD_MAX_WINDOW_S
from metrics_adapter.guard import WINDOW_S as GUARD_WINDOW_S
from metrics_adapter.rules import (
    guard_doc,
    over_budget_terms,
    pressure_rule,
    step_doc,
    trend_doc,
)
from metrics_adapter.step import HOLD, MAX_STEP_PODS, MIN_RATIO, PODS
from metrics_adapter.trend import MAX_LEAD_S
from router.scoring import ScoringConfig as PickerScoringConfig
from simulator.serving.slis import sli_names

__all__ = [
    "GpuSpec",
    "CostModel",
    "ModelSpec",
    "KindSpec",
    "MetricTarget",
    "HpaBehavior",
    "SLO_BEHAVIOR",
    "PressureSpec",
    "ServiceSpec",
    "ClusterSpec",
    "BackgroundSpec",
    "ArrivalSpec",
    "SloSpec",
    "StartupSpec",
    "CacheSpec",
    "SessionSpec",
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
    """GPU model name (labels only)."""
    hbm_gib: float = 80.0
    """GPU memory, GiB."""
    bandwidth_tb_s: float = 2.04  # NVIDIA A100 datasheet (SXM 80GB); H100 SXM: 3.35
    """Memory bandwidth, TB/s (decode reads weights and KV cache at this rate)."""


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
    """Tokens per KV-cache block."""
    act_reserve_gb: float = 4.0  # activation/profile reserve (assumption, serving-model)
    """Memory kept for activations per engine, GB."""
    max_num_seqs: int = 256  # vLLM scheduler default (commonly cited)
    """Sequences one engine batches at once."""
    chunk_tokens: int = 2048  # chunked-prefill token budget per step (vLLM V1 online default)
    """Chunked-prefill token budget per step."""
    prefill_p0_ms: float = 8.0
    """Fixed prefill cost p0, ms."""
    prefill_tok_s: float = 16_000.0
    """Prefill throughput R_pf, tokens per second."""
    # Prefill attention: each prompt token attends to every token before it, so a chunk
    # of T tokens after s cached ones costs T (s + T/2) x this on top of the linear part
    # (FlashAttention's FLOPs are quadratic in the sequence). 0 in this simulator's fit
    # (its calibration points are short prompts); BLIS's trained-physics fit for
    # Llama-3.1-8B on H100: 4 x 32 layers x 32 heads x 128 FLOPs / 989.5 TFLOPS x beta1a
    # 0.152 = 0.0805 ns (defaults.yaml at f90a1e3a).
    prefill_attn_ns: float = 0.0
    """Prefill attention cost per prompt token per earlier token of its context, ns, of a compute_scale-1 model (0: none)."""
    # What a chunk's attention is charged against: `chunk` (the tokens before it, as
    # causal attention computes) or `prompt` (the whole prompt, as BLIS's trained-physics
    # basis does: T (S + T/2) with S the prompt length, for every chunk); `prompt` exists
    # to reproduce BLIS in bench/blis_crosscheck.py (docs/serving-simulation.md).
    prefill_attn_context: str = "chunk"
    """What a prefill chunk's attention is charged against: chunk (the tokens before it) or prompt (the whole prompt, BLIS's accounting)."""
    # In a chunked-prefill step the decoding sequences' tokens go through every GEMM with
    # the prompt tokens, one more row each (vLLM counts them in max_num_batched_tokens);
    # BLIS's fit gives decode compute no weight (beta2a 0). False reproduces that.
    mixed_decode_compute: bool = True
    """A mixed step computes its decode tokens like prompt tokens (false: they cost no compute, BLIS's fit)."""
    # When an engine takes a request's KV blocks: `step` (the default) takes blocks only
    # for the tokens each step schedules and makes a prompt's blocks findable as its
    # chunks compute, as vLLM V1 does (Scheduler.schedule ->
    # KVCacheManager.allocate_slots(request, num_new_tokens), which caches the full
    # blocks up to num_computed + num_new tokens) and BLIS too, so more long prompts run
    # at once and a pool that runs short preempts more; `prompt` reserves the whole
    # prompt at admission (this simulator's model before session 12; an admitted prompt
    # never runs short), kept to reproduce older results (docs/serving-simulation.md).
    kv_alloc: str = "step"
    """When an engine takes a request's KV blocks: prompt (all at admission) or step (each step's scheduled tokens, vLLM V1)."""
    decode_d0_ms: float = 2.0
    """Fixed cost of one decode step d0, ms."""
    eta: float = 0.85
    """Share of the memory bandwidth a decode step achieves."""
    # Reading the live KV cache (paged attention) may reach less of the bandwidth than
    # reading the weights; 0 keeps one eta for both (this simulator's fit). BLIS's
    # trained-physics fit for vLLM on H100 has KV reads 1.947 / 1.363 = 1.43x slower per
    # byte than weight reads (defaults.yaml beta2b, beta3 at f90a1e3a).
    kv_eta: float = 0.0
    """Share of the memory bandwidth reading the live KV cache achieves (0: the same as eta)."""
    # Per-request work of each step (scheduling, attention metadata); 0 in this
    # simulator's fit; BLIS's fit: 4.42 us per request (beta6).
    step_seq_us: float = 0.0
    """Cost of every sequence in a step, microseconds (0: none)."""
    encode_e0_ms: float = 5.0
    """Fixed cost of encoding one image e0, ms."""
    encode_ke_ms: float = 0.04
    """Linear image-encoding cost ke, ms per image token."""
    encode_qe_ms: float = 2e-5
    """Quadratic image-encoding cost qe, ms per image token squared."""
    # Time-slicing two CUDA contexts on one GPU roughly serialises their kernels: a step
    # takes (1 + sharing_slowdown * (busy occupants - 1)) times as long. Assumption; MPS
    # or MIG would be lower (0 = perfect isolation).
    sharing_slowdown: float = 1.0
    """Step slow-down per extra busy occupant of a time-sliced GPU (0: perfect isolation)."""
    # An engine that finds less memory than it was promised starts with a smaller pool
    # (SGLang, TRT-LLM's free_gpu_memory_fraction) and fails requests longer than the
    # pool: the OOM of the comparison table. vLLM V1 instead refuses to start when the
    # pool cannot hold one max_model_len sequence ("... KV cache is needed, which is
    # larger than the available KV cache memory"): set true for that behaviour.
    require_max_model_len_fits: bool = False
    """An engine whose KV pool cannot hold one max_model_len sequence refuses to start (vLLM V1) instead of starting smaller."""
    # Tensor parallelism: a TP-k engine's step takes the one-GPU time of the whole model
    # divided by k / (1 + c (k - 1)), c the all-reduce overhead per extra GPU. c over NVLink
    # is fitted to TensorRT-LLM's A100 FP16 first-token latencies (docs/source/performance.md
    # @138f96d, v0.5): LLaMA-7B TP1 133 ms @2,048 input, LLaMA-70B TP4 377 ms; 70B has
    # 10.2x the parameters, so TP4 runs 133 x 10.2 / 377 = 3.61x faster than one GPU
    # would, c = (4 / 3.61 - 1) / 3 = 0.036. Over PCIe (GPUs outside one NVLink island)
    # c is an assumption of this simulator (about 4x the NVLink cost).
    tp_overhead_nvlink: float = 0.036
    """All-reduce overhead per extra GPU of a tensor-parallel engine inside one NVLink island."""
    tp_overhead_pcie: float = 0.15
    """The same when the engine's GPUs are not all in one NVLink island (PCIe; an assumption)."""


@dataclass(frozen=True)
class ModelSpec:
    """A served model: weight bytes and KV bytes per token (2 x layers x kv_heads x
    head_dim x 2 bytes, from each model's HF config.json)."""

    weights_gb: float = 16.0
    """Weight bytes, GB."""
    kv_bytes_per_token: int = 131_072
    """KV-cache bytes per token."""
    max_model_len: int = 8192
    """Longest sequence, tokens."""
    multimodal: bool = False
    """A vision model (pays the multimodal start-up profile run)."""
    compute_scale: float = 1.0
    """Prefill FLOPs per token relative to the 7-8B models the prefill cost was fitted to (parameters / 8B)."""


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
    """Share of the arrivals of this kind."""
    text_median: float = 1020.0
    """Median prompt text tokens (lognormal)."""
    text_sigma: float = 0.77
    """Sigma of the prompt text lognormal; 0: uniform [text_lo, text_hi]."""
    text_lo: int = 0
    """Fewest prompt text tokens of the uniform case."""
    text_hi: int = 0
    """Most prompt text tokens of the uniform case."""
    images_min: int = 0
    """Fewest images per request."""
    images_max: int = 0
    """Most images per request (outside the tail)."""
    images_tail_p: float = 0.0
    """Probability of a heavy-tail request with more images."""
    images_tail_max: int = 0
    """Most images of a heavy-tail request."""
    image_tokens: tuple[int, ...] = ()
    """Tokens per image to choose from (empty: uniform [image_tok_lo, image_tok_hi])."""
    image_weights: tuple[float, ...] = ()
    """Probability of each image_tokens entry."""
    image_tok_lo: int = 256
    """Fewest tokens per image of the uniform case."""
    image_tok_hi: int = 1280
    """Most tokens per image of the uniform case."""
    out_median: float = 129.0
    """Median output tokens (lognormal)."""
    out_sigma: float = 0.93
    """Sigma of the output tokens lognormal."""


@dataclass(frozen=True)
class MetricTarget:
    """One HPA metric: an adapter SLI (external metric name) and its target.

    `type` is `Value` (compare the metric itself) or `AverageValue` (divide by the replica
    count first), as in autoscaling/v2 `MetricTarget`.
    """

    metric: str = "kvspread_requests_per_second"
    """The adapter SLI (external metric name)."""
    type: str = "AverageValue"
    """Value (compare the metric) or AverageValue (per replica)."""
    value: float = 5.0
    """The target."""


@dataclass(frozen=True)
class HpaBehavior:
    """autoscaling/v2 behaviour; the defaults are Kubernetes' own (HPA docs, 'Default
    Behavior'): scale up without stabilisation by max(100 %, 4 pods) per 15 s; scale down
    with a 300 s stabilisation window by at most 100 % per 15 s."""

    sync_period_s: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    tolerance: float = 0.1  # --horizontal-pod-autoscaler-tolerance
    scale_up_window_s: float = 0.0
    """Scale-up stabilisation window, seconds."""
    scale_up_percent: float = 100.0
    """Most growth per period, percent."""
    scale_up_pods: int = 4
    """Most pods added per period (the larger of the two limits applies)."""
    scale_up_period_s: float = 15.0
    """Scale-up policy period, seconds."""
    scale_down_window_s: float = 300.0
    """Scale-down stabilisation window, seconds."""
    scale_down_percent: float = 100.0
    """Most shrinkage per period, percent."""
    scale_down_period_s: float = 15.0
    """Scale-down policy period, seconds."""


SLO_BEHAVIOR = HpaBehavior(
    scale_up_window_s=0.0,
    scale_up_percent=50.0,
    scale_up_pods=2,
    scale_up_period_s=60.0,
    scale_down_window_s=120.0,
    scale_down_percent=10.0,
    scale_down_period_s=60.0,
)
"""The `slo` autoscaler's behaviour, the one in the example HPA and ScaledObject manifests
(manifests/metrics-adapter/examples; the reason for each number is written there and in
docs/evaluation.md, "SLO pressure autoscaling"): scale up at once but by at most 2 pods or
50 % a minute (a replica needs 45-140 s to start, and the pressure stays high until it
serves), scale down after a 120 s window by at most 10 % a minute (the adapter's scale-down
guard holds the counts a recent pressure over 1 showed too few, which is what Kubernetes'
300 s bought: with the guard 300 s cost 6 % more GPU-hours for +0.25 pp realtime SLO)."""


@dataclass(frozen=True)
class PressureSpec:
    """Targets of the adapter's `kvspread_slo_pressure` rule (docs/adapter.md, "SLO
    pressure") that the `slo` autoscaler scales on with a Value target of 1. Per SLO class
    (a service's `qos`; best-effort takes the realtime latency targets), and a service's own
    `ttft_target_s` / `tpot_target_s` replace its class's."""

    realtime_ttft_s: float = 2.0
    """TTFT p95 target of realtime services, seconds."""
    realtime_tpot_s: float = 0.05
    """TPOT p95 target of realtime services, seconds (docs/design.md section 2: 50 ms)."""
    batch_ttft_s: float = 10.0
    """TTFT p95 target of batch services, seconds."""
    batch_tpot_s: float = 0.12
    """TPOT p95 target of batch services, seconds (docs/design.md section 2: 120 ms)."""
    queue_per_replica: float = 4.0
    """Waiting requests per replica at pressure 1 (realtime; best-effort too)."""
    batch_queue_per_replica: float = 40.0
    """Waiting requests per replica at pressure 1 for batch services: the batch TTFT target
    times the requests/s one replica serves (10 s x 4, the batch service's request-rate
    target), the queue that one replica drains within the target (Little's law; the realtime
    4 is 2 s x 2)."""
    kv_usage: float = 0.9
    """Mean KV-cache usage at pressure 1."""
    trend_lead_s: float = 0.0
    """The predictive term's lead, seconds (metrics_adapter.trend; 0: off, the default,
    docs/evaluation.md section 3). Its capacity per replica is each service's
    request-rate target, the one the `request-rate` autoscaler divides by."""
    trend_max_growth: float = 2.0
    """The predicted rate is at most this times the current one (>= 1)."""
    trend_min_rise: float = 0.1
    """The term is left out unless the 1 min rate exceeds the 5 min one by this fraction."""
    latency_step: bool = False
    """TTFT and TPOT act by a bounded step, not proportionally (metrics_adapter.step): over
    target at most `step_pods` replicas more, from `step_hold` to 1 x target keep, below it
    left out to the queue and KV terms."""
    step_terms: tuple[str, ...] = ("ttft", "tpot")
    """The latency terms that step (`ttft`, `tpot`); the others stay proportional."""
    step_pods: int = PODS
    """Over target: at most this many replicas more per sync (1-10)."""
    step_min_ratio: float = MIN_RATIO
    """The step's smallest ratio, above the HPA's tolerance (in (1, 2])."""
    step_hold: float = HOLD
    """From this fraction of the target to the target a latency term keeps the replicas
    (TTFT's, and TPOT's unless `step_tpot_hold` differs)."""
    step_tpot_hold: float = HOLD
    """TPOT's hold (1: TPOT below its target is left out, for a TPOT with a floor)."""
    guard: bool = True
    """The scale-down guard (metrics_adapter.guard, on in the adapter's default rules): a
    pressure over 1 at n serving replicas refuses fewer replicas at as high a rate per
    replica for `guard_window_s`."""
    guard_window_s: float = GUARD_WINDOW_S
    """How long a violation refuses the counts under it, seconds (at most a day)."""
    guard_fraction: float = GUARD_FRACTION
    """In (0, 1]: a count is allowed again once its rate per replica is under this x the
    one that missed the SLO."""
    over_budget_share: float = 0.0
    """In [0, 1]: the over-budget terms' target (metrics_adapter.rules.OVER_BUDGET_TERMS),
    the share of a service's requests over its class's per-token budget (realtime 50 ms,
    batch 120 ms) at pressure 1; 0, the default as in the adapter's default rules: the
    terms are left out (`OVER_BUDGET_SHARE`, 0.05, measured no better, docs/evaluation.md)."""
    over_budget_hold_only: bool = True
    """The over-budget terms hold replicas only (`holdOnly`; false: they scale
    proportionally, share / target, like the other terms)."""


@dataclass(frozen=True)
class ServiceSpec:
    """A Deployment of one model for one request kind, with its HPA."""

    kind: str = "text"
    """Request kind the service serves."""
    model: str = "llama-3-8b"
    """Model it serves (a key of models)."""
    qos: str = "realtime"
    """realtime, batch or best-effort."""
    gpu_memory_gib: float = 32.0  # the kvspread.io/gpu-memory annotation
    min_replicas: int = 1
    """HPA minReplicas."""
    max_replicas: int = 8
    """HPA maxReplicas."""
    initial_replicas: int = 2
    """Replicas at the start."""
    metrics: tuple[MetricTarget, ...] = (MetricTarget(),)
    """HPA metrics and targets."""
    tensor_parallel: int = 1
    """GPUs per replica (the pod's `nvidia.com/gpu`, the engine's tensor-parallel degree); gpu_memory_gib is per GPU. Above 1 only on whole GPUs (slots_per_gpu 1)."""
    ttft_target_s: float = 0.0
    """This service's TTFT p95 target in the SLO pressure, seconds (0: its class's, `pressure`)."""
    tpot_target_s: float = 0.0
    """This service's TPOT p95 target in the SLO pressure, seconds (0: its class's)."""
    queue_target: float = 3.0
    """AverageValue target of the `queue-depth` autoscaler: waiting requests per replica (an assumption; GKE's guide has users pick it from a load test)."""


@dataclass(frozen=True)
class ClusterSpec:
    """Nodes of identical GPUs. `pools`/`nvlink` are cycled over the nodes.

    `slots_per_gpu` is the time-slicing replica count of the NVIDIA device plugin: how many
    pods may share one GPU (memory is not enforced by the device plugin)."""

    nodes: int = 3
    """Nodes."""
    gpus_per_node: int = 4
    """GPUs per node."""
    pools: tuple[str, ...] = ("language", "mixed", "vision", "mixed")
    """Node pool label of each node, cycled (language, vision, mixed)."""
    nvlink: tuple[bool, ...] = (False, True, True, False)
    """Whether each node has NVLink, cycled."""
    slots_per_gpu: int = 4
    """Pods that may share one GPU (time-slicing replicas)."""
    nvlink_island_gpus: tuple[int, ...] = (0,)
    """GPUs per NVLink island of each node, cycled (0: all GPUs of an NVLink node in one island, as on an NVSwitch board; on a node without NVLink every GPU is its own island)."""


@dataclass(frozen=True)
class BackgroundSpec:
    """Other tenants on the shared cluster (training, notebooks), placed before t=0.

    A fraction of GPUs holds one such pod of `mem_gib` (one value drawn per pod); a pod
    keeps its GPU busy (time-slicing contention) with probability `busy_p`. Assumption,
    shaped after the fractional-GPU pods of the Alibaba GPU trace (gpu_milli < 1000).
    """

    gpu_fraction: float = 0.5
    """Share of GPUs holding one background pod."""
    mem_gib: tuple[float, ...] = (8.0, 16.0, 24.0, 32.0)
    """Memory of a background pod, GiB (one value drawn per pod)."""
    busy_p: float = 0.5
    """Probability that a background pod keeps its GPU busy."""


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
    """Base request rate, requests per second."""
    cv: float = 2.5
    """Coefficient of variation of the inter-arrival gaps."""
    peak_extra: float = 1.0
    """Extra rate at the daily peak (rate x (1 + peak_extra sin^2))."""
    burst_factor: float = 5.0
    """Rate multiplier of the burst kinds inside a burst."""
    burst_kinds: tuple[str, ...] = ("image",)
    """Request kinds that burst."""
    burst_every_s: float = 900.0
    """Mean gap between burst starts, seconds."""
    burst_min_s: float = 45.0
    """Shortest burst, seconds."""
    burst_max_s: float = 120.0
    """Longest burst, seconds."""


@dataclass(frozen=True)
class SloSpec:
    """Per-token latency budget per QoS class (docs/design.md section 2: realtime < 50 ms per
    token step; batch 50-120 ms; best-effort above). A request meets its SLO when it
    completed and its end-to-end latency divided by its output tokens is at most the
    budget (the normalised latency of the vLLM paper)."""

    realtime_s: float = 0.050
    """Per-token latency budget of realtime requests, seconds."""
    batch_s: float = 0.120
    """Per-token latency budget of batch requests, seconds."""
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
    """Seconds from start to ready with the image and weights cached."""
    multimodal_extra_s: float = 20.0
    """Extra start seconds of a vision model."""
    # first start of a model on a node: image pull + weights from remote storage + init
    # (serving-model: 120 s cold; ServerlessLLM OSDI'24 load times). Nodes that ran the
    # model before keep image and weights cached.
    cold_load_s: float = 120.0
    """Seconds from start to ready on a node that never ran the model."""
    backoff_initial_s: float = 10.0
    """First CrashLoopBackOff delay, seconds."""
    backoff_max_s: float = 300.0
    """Longest CrashLoopBackOff delay, seconds."""
    grace_s: float = 30.0
    """Most seconds a deleted pod drains (terminationGracePeriodSeconds)."""
    schedule_retry_s: float = 10.0  # unschedulable pods are retried (kube-scheduler backoff)
    signals_period_s: float = 10.0  # collector sample period; it publishes at most this often
    # when NVML (and so the collector) first sees a starting engine's process: container
    # start + CUDA context + the first weights allocated. Assumption: vLLM allocates its
    # weights early in its 14-39 s init (PR #11005), so 15 s with the image cached; on a
    # node that never ran the model the image pull comes first (60 s, assumed to be most of
    # the extra cold-start time, 120 - 45 s). Until then the signals show neither the pod's
    # memory nor its model on any GPU.
    visible_s: float = 15.0
    """Seconds after start until NVML (and the collector) sees the engine's memory."""
    cold_visible_s: float = 60.0
    """The same on a node that never ran the model (image pull first)."""


@dataclass(frozen=True)
class CacheSpec:
    """The engine's prefix (KV) cache and image-encoder cache (simulator.serving.prefixcache,
    simulator.serving.encodercache). Both only act on requests that carry content ids
    (Mooncake hash ids, `--multi-turn` conversations); other requests share nothing, so
    results on workloads without ids are the same with the caches on or off."""

    prefix_caching: bool = True  # vLLM V1 enable_prefix_caching defaults to on
    """Automatic prefix caching: prefill skips the leading KV blocks the engine still holds (block size: cost.block_tokens)."""
    # vLLM: encoder_cache_size = max(scheduler encoder_cache_size (= max_num_batched_tokens),
    # largest item); 0 takes that default from cost.chunk_tokens
    encoder_cache_tokens: int = 0
    """Encoder-cache budget in image tokens; 0: vLLM's default, the step token budget (cost.chunk_tokens)."""
    encoder_caching: bool = True
    """An image this engine encoded recently (same id) is not encoded again."""


@dataclass(frozen=True)
class SessionSpec:
    """Multi-turn conversations over a trace without content ids (simulator.serving.sessions;
    `--multi-turn`). Off by default so that results stay comparable."""

    mean_turns: float = 0.0  # --multi-turn's default 2.0: LMSYS-Chat-1M (ICLR'24) table 1
    """Mean turns per conversation (geometric); 0: every request stands alone."""
    think_s: float = 60.0  # assumption: no published inter-turn distribution was found
    """Mean seconds (exponential) between a turn's arrival and the earliest next turn."""


def _default_models() -> dict[str, ModelSpec]:
    return {
        # Llama-3-8B: 32 layers x 8 KV heads x 128 x 2 x 2 B = 128 KiB/token; 16 GB BF16.
        "llama-3-8b": ModelSpec(16.0, 131_072, 8192, False),
        # Qwen2-VL-7B: 28 layers x 4 KV heads x 128 x 2 x 2 B = 56 KiB/token; 16.6 GB.
        "qwen2-vl-7b": ModelSpec(16.6, 57_344, 8192, True),
        # The same weights served with a 32k context for multi-image documents.
        "qwen2-vl-7b-32k": ModelSpec(16.6, 57_344, 32_768, True),
        # Llama-3-70B: 80 layers x 8 KV heads x 128 x 2 x 2 B = 320 KiB/token; 70.6 B
        # parameters, 141 GB BF16 (needs 2+ A100-80GB; TP-4 is the usual deployment);
        # 8.8x the parameters of Llama-3-8B, so 8.8x the prefill FLOPs per token.
        "llama-3-70b": ModelSpec(141.2, 327_680, 8192, False, 8.8),
        # Llama-3.1-8B: the same shapes as Llama-3-8B, 128k context (max_position_embeddings
        # 131,072 in its config.json): long prompts such as the Mooncake trace's (up to 126k)
        "llama-3.1-8b": ModelSpec(16.0, 131_072, 131_072, False),
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
    """One service per kind of traffic, each scaled by an HPA on requests per second per
    replica (AverageValue) and on p95 latency (Value), 1 to `max` replicas from 2."""
    rps = "kvspread_requests_per_second"
    p95 = "kvspread_request_latency_p95_seconds"
    table = (
        # name, kind, model, qos, GiB per GPU, max replicas, rps per replica, p95 target
        ("chat", "text", "llama-3-8b", "realtime", 24.0, 8, 2.5, 30.0),
        ("vision", "image", "qwen2-vl-7b", "realtime", 32.0, 8, 2.5, 20.0),
        ("docs", "multi-image", "qwen2-vl-7b-32k", "batch", 48.0, 10, 0.35, 120.0),
    )
    return {
        name: ServiceSpec(
            kind=kind,
            model=model,
            qos=qos,
            gpu_memory_gib=gib,
            metrics=(
                MetricTarget(rps, "AverageValue", per_replica),
                MetricTarget(p95, "Value", slo),
            ),
            min_replicas=1,
            max_replicas=top,
            initial_replicas=2,
        )
        for name, kind, model, qos, gib, top, per_replica, slo in table
    }


@dataclass(frozen=True)
class WorkloadSpec:
    """A real request mix driving one service (simulator.serving.workloads): a ServeGen
    client folder, an Azure-format CSV, a Mooncake trace or a bundled name (`azure-conv`,
    ...)."""

    path: str = ""
    """A bundled workload name (`azure-conv`, `servegen-mm-image`, `servegen-language`, `mooncake-conv`), a ServeGen client folder, an Azure-format CSV or a Mooncake trace (.jsonl, .jsonl.xz)."""


@dataclass(frozen=True)
class SimConfig:
    """The whole simulation: cluster, models, services, workload, HPA and SLOs."""

    duration_s: float = 3600.0
    """Simulated seconds per run after the warm-up."""
    warmup_s: float = 120.0  # not scored: the cluster starts empty of requests
    """Seconds simulated first and not scored (the cluster starts empty of requests)."""
    timeline_step_s: float = 10.0
    """Seconds between two rows of the timeline output."""
    gpu: GpuSpec = GpuSpec()
    """The GPU type of every node."""
    cost: CostModel = CostModel()
    """Engine timing and memory rules."""
    cluster: ClusterSpec = ClusterSpec()
    """Nodes, GPUs, pools and time-slicing."""
    background: BackgroundSpec = BackgroundSpec()
    """Other tenants on the shared cluster."""
    models: Mapping[str, ModelSpec] = field(default_factory=_default_models)
    """Served models by name."""
    kinds: Mapping[str, KindSpec] = field(default_factory=_default_kinds)
    """Request kinds (text, image, multi-image) by name."""
    services: Mapping[str, ServiceSpec] = field(default_factory=_default_services)
    """Deployments with their HPAs by name."""
    arrivals: ArrivalSpec = ArrivalSpec()
    """The request arrival process."""
    hpa: HpaBehavior = HpaBehavior()
    """HorizontalPodAutoscaler behaviour of the request-rate and queue-depth autoscalers (Kubernetes' defaults)."""
    slo_hpa: HpaBehavior = SLO_BEHAVIOR
    """HorizontalPodAutoscaler behaviour of the `slo` autoscaler (the example manifests')."""
    pressure: PressureSpec = PressureSpec()
    """SLO-pressure targets per class (the `slo` autoscaler's metric)."""
    slo: SloSpec = SloSpec()
    """Latency budgets per QoS class."""
    startup: StartupSpec = StartupSpec()
    """Pod start, restart and drain times."""
    cache: CacheSpec = CacheSpec()
    """The engines' prefix and image-encoder caches."""
    sessions: SessionSpec = SessionSpec()
    """Multi-turn conversations over traces without content ids (off unless asked for)."""
    workloads: Mapping[str, WorkloadSpec] = field(default_factory=dict)
    """Real workload per service (empty: the synthetic kinds and arrivals above)."""
    workload_start_s: float = 0.0
    """Simulated time 0 is this second of the workload traces (which part of the day runs)."""
    rate_scale: float = 1.0
    """Every workload rate is multiplied by this one factor (scales the trace to the cluster)."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    """The kvspread policy's scoring: the extender's `scoring:` section (extender.config)."""
    picker_scoring: PickerScoringConfig = field(default_factory=PickerScoringConfig)
    """The `kvspread` routing policy's scoring: the router's `scoring:` section (weights,
    norms, the cache and prefill terms; router.scoring), so a picker setting can be tried in
    the simulation before it goes into the router's ConfigMap."""

    def validate(self) -> SimConfig:
        """Cross-field checks; returns self so it chains."""
        bounded(self, "duration_s", above=0)
        bounded(self, "warmup_s", at_least=0)
        keys = ("cluster.nodes", "cluster.gpus_per_node", "cluster.slots_per_gpu")
        bounded(self, *keys, at_least=1, what="an integer")
        if any(k < 0 for k in self.cluster.nvlink_island_gpus):
            raise invalid(
                "cluster.nvlink_island_gpus",
                "GPU counts >= 0",
                list(self.cluster.nvlink_island_gpus),
            )
        for key in ("pools", "nvlink", "nvlink_island_gpus"):
            if not getattr(self.cluster, key):
                raise invalid(f"cluster.{key}", "a non-empty list", [])
        keys = ("cost.block_tokens", "cost.max_num_seqs", "cost.chunk_tokens")
        bounded(self, *keys, at_least=1, what="an integer")
        bounded(self, "cost.tp_overhead_nvlink", "cost.tp_overhead_pcie", at_least=0)
        bounded(self, "cache.encoder_cache_tokens", at_least=0, what="an integer")
        bounded(self, "sessions.think_s", at_least=0)
        if self.sessions.mean_turns != 0 and not self.sessions.mean_turns >= 1:
            raise invalid("sessions.mean_turns", "0 (off) or a mean >= 1", self.sessions.mean_turns)
        bounded(self, "cost.kv_eta", "cost.step_seq_us", "cost.prefill_attn_ns", at_least=0)
        if self.cost.prefill_attn_context not in ("chunk", "prompt"):
            raise invalid(
                "cost.prefill_attn_context", "chunk or prompt", self.cost.prefill_attn_context
            )
        if self.cost.kv_alloc not in ("prompt", "step"):
            raise invalid("cost.kv_alloc", "prompt or step", self.cost.kv_alloc)
        positive = ("cost.prefill_tok_s", "cost.eta", "gpu.hbm_gib", "gpu.bandwidth_tb_s")
        bounded(self, *positive, "arrivals.rate_rps", "arrivals.cv", above=0)
        if not self.services:
            raise invalid("services", "at least one service", {})
        for kind in self.kinds:
            if kind not in KINDS:
                raise invalid(f"kinds.{kind}", f"a request kind ({', '.join(KINDS)})", kind)
        for name, s in self.services.items():
            where = f"services.{name}"
            if s.kind not in self.kinds:
                raise invalid(f"{where}.kind", f"a kind of kinds ({', '.join(self.kinds)})", s.kind)
            if s.model not in self.models:
                raise invalid(
                    f"{where}.model", f"a model of models ({', '.join(self.models)})", s.model
                )
            if s.qos not in ("realtime", "batch", "best-effort"):
                raise invalid(f"{where}.qos", "realtime, batch or best-effort", s.qos)
            if not 1 <= s.min_replicas <= s.max_replicas:
                raise invalid(f"{where}.min_replicas", "1 <= min <= max_replicas", s.min_replicas)
            if not s.min_replicas <= s.initial_replicas <= s.max_replicas:
                raise invalid(
                    f"{where}.initial_replicas", "a count in [min, max]", s.initial_replicas
                )
            if s.gpu_memory_gib <= 0 or s.gpu_memory_gib > self.gpu.hbm_gib:
                raise invalid(
                    f"{where}.gpu_memory_gib",
                    f"a size in (0, {self.gpu.hbm_gib}]",
                    s.gpu_memory_gib,
                )
            if not 1 <= s.tensor_parallel <= self.cluster.gpus_per_node:
                raise invalid(
                    f"{where}.tensor_parallel",
                    f"a GPU count in [1, {self.cluster.gpus_per_node}] (cluster.gpus_per_node)",
                    s.tensor_parallel,
                )
            if s.tensor_parallel > 1 and self.cluster.slots_per_gpu != 1:
                raise invalid(
                    f"{where}.tensor_parallel",
                    "1 on time-sliced GPUs (a multi-GPU replica needs whole GPUs: "
                    "cluster.slots_per_gpu 1)",
                    s.tensor_parallel,
                )
            if not s.metrics:
                raise invalid(f"{where}.metrics", "at least one HPA metric", [])
            for i, m in enumerate(s.metrics):
                if m.type not in ("Value", "AverageValue"):
                    raise invalid(f"{where}.metrics[{i}].type", "Value or AverageValue", m.type)
                if m.value <= 0:
                    raise invalid(f"{where}.metrics[{i}].value", "a number > 0", m.value)
                if m.metric not in METRICS:
                    raise invalid(
                        f"{where}.metrics[{i}].metric", "one of " + ", ".join(METRICS), m.metric
                    )
        for hpa in ("hpa", "slo_hpa"):  # a period of 0 would never advance the sync clock
            periods = ("sync_period_s", "scale_up_period_s", "scale_down_period_s")
            bounded(self, *(f"{hpa}.{k}" for k in periods), above=0)
            windows = ("tolerance", "scale_up_window_s", "scale_down_window_s")
            bounded(self, *(f"{hpa}.{k}" for k in windows), at_least=0)
            bounded(self, f"{hpa}.scale_up_percent", f"{hpa}.scale_down_percent", above=0)
            bounded(self, f"{hpa}.scale_up_pods", at_least=1, what="an integer")
        trend_keys = ("trend_lead_s", "trend_min_rise")
        step_keys = ("latency_step", "step_terms", "step_pods", "step_min_ratio", "step_hold",
                     "step_tpot_hold", "guard", "guard_window_s", "guard_fraction",
                     "over_budget_share", "over_budget_hold_only")  # fmt: skip
        bounded(self, *(f"pressure.{f}" for f in vars(self.pressure)
                        if f not in trend_keys + step_keys), above=0)  # fmt: skip
        p = self.pressure
        if not isinstance(p.latency_step, bool):
            raise invalid("pressure.latency_step", "true or false", p.latency_step)
        if not isinstance(p.guard, bool):
            raise invalid("pressure.guard", "true or false", p.guard)
        if not 0 < p.guard_window_s <= GUARD_MAX_WINDOW_S:
            raise invalid("pressure.guard_window_s", f"a number in (0, {GUARD_MAX_WINDOW_S:g}]",
                          p.guard_window_s)  # fmt: skip
        if not 0 < p.guard_fraction <= 1:
            raise invalid("pressure.guard_fraction", "a number in (0, 1]", p.guard_fraction)
        if (
            isinstance(p.over_budget_share, bool)
            or not isinstance(p.over_budget_share, int | float)
            or not 0 <= p.over_budget_share <= 1
        ):
            raise invalid("pressure.over_budget_share", "a number in [0, 1]", p.over_budget_share)
        if not isinstance(p.over_budget_hold_only, bool):
            raise invalid("pressure.over_budget_hold_only", "true or false",
                          p.over_budget_hold_only)  # fmt: skip
        if (
            isinstance(p.step_pods, bool)
            or not isinstance(p.step_pods, int)
            or not (1 <= p.step_pods <= MAX_STEP_PODS)
        ):
            raise invalid("pressure.step_pods", f"a whole number in [1, {MAX_STEP_PODS}]",
                          p.step_pods)  # fmt: skip
        if not p.step_terms or set(p.step_terms) - set(_STEP_TERMS):
            raise invalid("pressure.step_terms", "a list of ttft, tpot", list(p.step_terms))
        if not 1 < p.step_min_ratio <= 2:
            raise invalid("pressure.step_min_ratio", "a number in (1, 2]", p.step_min_ratio)
        for hold in ("step_hold", "step_tpot_hold"):
            if not 0 <= getattr(p, hold) <= 1:
                raise invalid(f"pressure.{hold}", "a number in [0, 1]", getattr(p, hold))
        bounded(self, *(f"pressure.{f}" for f in trend_keys), at_least=0)
        bounded(self, "pressure.trend_max_growth", at_least=1)
        if self.pressure.trend_lead_s > MAX_LEAD_S:
            raise invalid(
                "pressure.trend_lead_s", f"at most {MAX_LEAD_S:g}", self.pressure.trend_lead_s
            )
        for name in self.services:
            bounded(self, f"services.{name}.ttft_target_s", f"services.{name}.tpot_target_s",
                    at_least=0)  # fmt: skip
        for name in self.workloads:
            if name not in self.services:
                raise invalid(
                    f"workloads.{name}", "one of the services " + ", ".join(self.services), name
                )
        if self.workloads and set(self.workloads) != set(self.services):
            missing = sorted(set(self.services) - set(self.workloads))
            raise invalid("workloads", "a workload for every service", missing)
        bounded(self, "rate_scale", above=0)
        bounded(self, "workload_start_s", at_least=0)
        served = {s.kind for s in self.services.values()}
        for kind, k in self.kinds.items():
            if k.share < 0:
                raise invalid(f"kinds.{kind}.share", "a number >= 0", k.share)
            if k.share > 0 and kind not in served and not self.workloads:
                raise invalid(f"kinds.{kind}.share", "0 (no service serves this kind)", k.share)
            if k.image_tokens and len(k.image_tokens) != len(k.image_weights):
                raise invalid(
                    f"kinds.{kind}.image_weights",
                    f"one weight per image_tokens entry ({len(k.image_tokens)})",
                    list(k.image_weights),
                )
        if sum(k.share for k in self.kinds.values()) <= 0 and not self.workloads:
            raise invalid("kinds", "request shares that sum to more than 0", 0)
        return self

    def pressure_rule(self) -> dict[str, Any]:
        """The adapter's `kvspread_slo_pressure` rule for these services (rules.pressure_rule)."""
        p = self.pressure
        share = p.over_budget_share
        over: tuple[tuple[str, float], ...] = ()
        batch_over: tuple[tuple[str, float], ...] = ()
        if share > 0:
            over, batch_over = over_budget_terms(share)
        classes = (
            ("realtime", ((SLI_TTFT_P95, p.realtime_ttft_s), (SLI_TPOT_P95, p.realtime_tpot_s))),
            (
                "batch",
                (
                    (SLI_TTFT_P95, p.batch_ttft_s),
                    (SLI_TPOT_P95, p.batch_tpot_s),
                    (SLI_QUEUE_DEPTH_PER_REPLICA, p.batch_queue_per_replica),
                    *batch_over,
                ),
            ),
        )
        terms = (
            (SLI_TTFT_P95, p.realtime_ttft_s),
            (SLI_TPOT_P95, p.realtime_tpot_s),
            (SLI_QUEUE_DEPTH_PER_REPLICA, p.queue_per_replica),
            (SLI_KV_CACHE_USAGE, p.kv_usage),
            *over,
        )
        services: dict[str, dict[str, Any]] = {}
        for name, spec in self.services.items():
            own: dict[str, Any] = {"class": spec.qos} if spec.qos in ("realtime", "batch") else {}
            if spec.ttft_target_s > 0:
                own[SLI_TTFT_P95] = spec.ttft_target_s
            if spec.tpot_target_s > 0:
                own[SLI_TPOT_P95] = spec.tpot_target_s
            if p.trend_lead_s > 0:
                rate = [m.value for m in spec.metrics if m.metric == SLI_REQUESTS_PER_SECOND]
                own["trendCapacity"] = rate[0] if rate else MetricTarget().value
            services[name] = own
        trend = (
            trend_doc(p.trend_lead_s, max_growth=p.trend_max_growth, min_rise=p.trend_min_rise)
            if p.trend_lead_s > 0
            else None
        )
        step = None
        if p.latency_step:
            step = step_doc(p.step_pods, p.step_min_ratio, p.step_hold, p.step_tpot_hold)
            step["terms"] = [_STEP_TERMS[t] for t in dict.fromkeys(p.step_terms)]
        guard = guard_doc(p.guard_window_s, p.guard_fraction) if p.guard else False
        hold_only = [t for t, _ in over] if p.over_budget_hold_only else []
        return pressure_rule(services, terms, classes, trend, step, guard, hold_only)

    def scoring_config(self) -> ScoringConfig:
        """The kvspread policy's `extender.config.ScoringConfig`."""
        return self.scoring


_STEP_TERMS = {"ttft": SLI_TTFT_P95, "tpot": SLI_TPOT_P95}
"""`pressure.step_terms` -> the adapter's term."""

METRICS = sli_names()
"""Adapter SLIs (docs/design.md section 6) an HPA metric may name."""


def default_config() -> SimConfig:
    """The documented default parameter set."""
    return SimConfig().validate()


def config_from_mapping(data: Mapping[str, Any] | None, base: SimConfig | None = None) -> SimConfig:
    """Defaults (or `base`) overridden by a YAML-shaped mapping, validated."""
    return load(SimConfig, data, base=base)
