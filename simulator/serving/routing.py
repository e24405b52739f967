"""Request routing in the serving simulation: which ready replica of a service gets a request.

The placement policy decides where replicas run and the autoscaler how many there are; the
router decides, per request, which ready replica serves it. Policies (`--routing`):

- `round-robin`: what a Kubernetes Service does (kube-proxy IPVS `rr`; the iptables and
  nftables modes pick at random, which has the same mean share per endpoint): the next
  ready replica in turn, blind to load.
- `least-request`: the fewest requests in flight (running + waiting), counted by the load
  balancer itself as Envoy's LEAST_REQUEST does, so it is exact at every instant and needs
  no scrape. The simulator's behaviour before routing policies existed, hence the default.
- `kv-queue`: llm-d's default endpoint-picker profile without its prefix-cache scorer
  (simulated requests carry no prompt text to match): queue-scorer weight 2 +
  kv-cache-utilization-scorer weight 2, each normalised as the Gateway API Inference
  Extension scorers do, queue score 1 - (q - qmin) / (qmax - qmin) (1 for all when every
  queue is equal), KV score 1 - KV-cache usage; the highest weighted sum wins, ties at
  random. It reads the last scrape and nothing else: between two scrapes every request
  sees the same numbers. A replica not yet scraped scores as the picker's zero-initialised
  metrics do (queue 0, KV 0).
- `llm-d`: llm-d's inference-scheduling profile: queue-scorer 2, kv-cache-utilization-scorer
  2, prefix-cache-scorer 3 (llm-d/llm-d guides/inference-scheduling/scheduler/
  inference-scheduling.values.yaml), the first two as `kv-queue`, the prefix scorer the
  Gateway API Inference Extension's approximate one: the share of the request's leading
  64-character blocks last sent to the replica (an LRU of 31,250 blocks per replica, its
  lruCapacityPerServer), run on `router.prefix.PrefixIndex` with those parameters.
- `kvspread`: kvspread's own endpoint picker, the real code: `router.request.parse_request`
  reads a request body built from the simulated request, `router.endpoints.EndpointSet`
  holds the endpoints (scraped through the collector's engine parser, picks since the
  scrape counted, staleness tiers, node signals), `router.cacheterms.CacheTerms` says what
  each replica is expected to hold of it (prefix blocks, images), `router.scoring.choose`
  picks.

A request that carries content ids (`block_hashes`, `image_ids`: simulator.serving.workload)
has them in its body, so the prefix and image indexes see what a client's repeated prompt
and images would show them: each content block is text made from its hash (the chain entry
stands for the prefix up to it, so equal prefixes give equal text), each image a PNG whose
bytes carry its id.

Metrics, as the engine's /metrics would expose them: every `interval_s` (the router's
default, `router.config.MetricsConfig`) each ready replica's vLLM metrics are rendered as
Prometheus text (`vllm:num_requests_waiting`, `vllm:num_requests_running`,
`vllm:kv_cache_usage_perc`, `vllm:cache_config_info`) and parsed by `kvspread.engine`, the
parser the router and the collector use. A metrics-reading policy therefore sees numbers up
to one interval old, never the live engine state; both metric pickers scrape at the same
interval so that neither gets fresher data than the other.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import orjson

from kvspread.engine import EngineSample
from kvspread.signals import NodeSignals
from router.cacheterms import NOTHING, CacheTerms
from router.config import MetricsConfig, RequestConfig
from router.endpoints import Endpoint, EndpointSet, summarise_samples
from router.prefix import CacheConfig, PrefixIndex
from router.request import RequestInfo, parse_request
from router.scoring import ScoringConfig, choose
from simulator.serving.cluster import Pod
from simulator.serving.engine import Engine
from simulator.serving.workload import Request

__all__ = [
    "ROUTINGS",
    "DEFAULT_ROUTING",
    "BASELINE_ROUTING",
    "Router",
    "RoundRobin",
    "LeastRequest",
    "KvQueue",
    "KvspreadPicker",
    "LlmD",
    "make_router",
    "parse_routings",
    "vllm_metrics_text",
    "engine_sample",
    "request_body",
    "kv_queue_scores",
]

ROUTINGS = ("round-robin", "least-request", "kv-queue", "llm-d", "kvspread")
DEFAULT_ROUTING = "least-request"
"""The routing of every run before routing policies existed: results stay as they were."""
BASELINE_ROUTING = "round-robin"
"""What the routing comparison is against: a Kubernetes Service."""

KV_QUEUE_WEIGHTS = (2.0, 2.0)  # (queue-scorer, kv-cache-utilization-scorer), llm-d default
LLM_D_PREFIX_WEIGHT = 3.0
"""prefix-cache-scorer's weight in llm-d's inference-scheduling guide (module docstring)."""
LLM_D_PREFIX = CacheConfig(
    block_tokens=16, max_blocks=256, capacity_blocks=31_250, memory_mib=1024, images=False
)
"""The inference extension's prefix plugin defaults: 64-character blocks (16 tokens of 4
characters), 256 blocks matched, 31,250 blocks per server; memory not the bound here."""


class Router(Protocol):
    """One simulation's request router. `interval_s` is None when it reads no metrics."""

    interval_s: float | None

    def pick(self, req: Request, pods: Sequence[Pod], now: float) -> Pod:
        """The replica among `pods` (ready, non-empty) that serves `req`."""
        ...

    def scrape(self, ready: dict[str, list[Pod]], nodes: dict[int, str], now: float) -> None:
        """Scrape every ready replica's /metrics (called every `interval_s`)."""
        ...

    def node_signals(self, signals: dict[str, NodeSignals]) -> None:
        """The nodes' latest published kvspread signals, by node name."""
        ...

    def close(self) -> None:
        """Release what the router holds (threads) at the end of the run."""
        ...


def parse_routings(text: str | Sequence[str]) -> list[str]:
    """`--routing` value: comma list of ROUTINGS, each at most once, order kept."""
    names = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    names = list(dict.fromkeys(n for n in names if n))
    for n in names:
        if n not in ROUTINGS:
            raise ValueError(f"--routing: unknown policy {n!r} (one of {', '.join(ROUTINGS)})")
    if not names:
        raise ValueError(f"--routing: no policy given (one of {', '.join(ROUTINGS)})")
    return names


def _engine(pod: Pod) -> Engine:
    assert pod.engine is not None, "only ready replicas are routed to"
    return pod.engine


class _Blind:
    """Routers that read no metrics."""

    interval_s: float | None = None

    def scrape(self, ready: dict[str, list[Pod]], nodes: dict[int, str], now: float) -> None:
        return None

    def node_signals(self, signals: dict[str, NodeSignals]) -> None:
        return None

    def close(self) -> None:
        return None


class RoundRobin(_Blind):
    """The next ready replica in turn, per service."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def pick(self, req: Request, pods: Sequence[Pod], now: float) -> Pod:
        k = self._next.get(req.service, 0)
        self._next[req.service] = k + 1
        return pods[k % len(pods)]


class LeastRequest(_Blind):
    """Fewest requests in flight (the balancer's own exact count); ties by the pod's
    random tie-break value."""

    def pick(self, req: Request, pods: Sequence[Pod], now: float) -> Pod:
        return min(pods, key=lambda p: (_engine(p).load, p.tiebreak))


def vllm_metrics_text(model: str, eng: Engine) -> str:
    """The gauges of vLLM's /metrics (v0.10+ names) the pickers read, for one engine."""
    label = f'model_name="{model}"'
    usage = eng.kv_usage
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{label}}} {len(eng.running)}.0\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{label}}} {len(eng.waiting)}.0\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{label}}} {usage!r}\n"
        "# TYPE vllm:cache_config_info gauge\n"
        f'vllm:cache_config_info{{block_size="{eng.block}",num_gpu_blocks="{eng.pool_blocks}"}}'
        " 1.0\n"
    )


def engine_sample(model: str, eng: Engine) -> EngineSample:
    """What `kvspread.engine.parse_engine_metrics` reads from `vllm_metrics_text(model, eng)`,
    built without the text round trip (tests/simulator/serving/test_serving_routing.py
    checks the two are equal): the Prometheus text parser would cost more than the rest
    of a run."""
    usage = eng.kv_usage
    return EngineSample(
        engine="vllm",
        model=model,
        kv_usage=usage,
        kv_blocks_total=eng.pool_blocks,
        kv_blocks_used=round(usage * eng.pool_blocks),
        block_size=eng.block,
        running=float(len(eng.running)),
        waiting=float(len(eng.waiting)),
    )


def _scrape_pod(pod: Pod, model: str) -> list[EngineSample]:
    return [engine_sample(model, _engine(pod))]


class KvQueue:
    """llm-d's default profile (queue 2 + KV cache 2) on the last scrape."""

    def __init__(self, models: dict[str, str], rng: np.random.Generator, interval_s: float):
        self.interval_s: float | None = interval_s
        self._models = models  # service -> model name
        self._rng = rng
        self._seen: dict[str, tuple[float, float]] = {}  # pid -> (waiting, kv usage)

    def scrape(self, ready: dict[str, list[Pod]], nodes: dict[int, str], now: float) -> None:
        seen: dict[str, tuple[float, float]] = {}
        for service, pods in ready.items():
            for pod in pods:
                m = summarise_samples(_scrape_pod(pod, self._models[service]))
                seen[pod.pid] = (m.waiting or 0.0, m.kv_usage or 0.0)
        self._seen = seen

    def node_signals(self, signals: dict[str, NodeSignals]) -> None:
        return None

    def close(self) -> None:
        return None

    def pick(self, req: Request, pods: Sequence[Pod], now: float) -> Pod:
        scores = kv_queue_scores([self._seen.get(p.pid, (0.0, 0.0)) for p in pods])
        best = max(scores)
        tied = [p for p, s in zip(pods, scores, strict=True) if s == best]
        return tied[int(self._rng.integers(len(tied)))] if len(tied) > 1 else tied[0]


def kv_queue_scores(seen: Sequence[tuple[float, float]]) -> list[float]:
    """Weighted sums of the queue and KV-cache scorers for (waiting, kv usage) per pod."""
    wq, wkv = KV_QUEUE_WEIGHTS
    queues = [q for q, _ in seen]
    lo, hi = min(queues), max(queues)
    out = []
    for q, kv in seen:
        queue = 1.0 if hi == lo else 1.0 - (q - lo) / (hi - lo)
        out.append(wq * queue + wkv * (1.0 - kv))
    return out


def _has_ids(req: Request) -> bool:
    """Whether the request carries content ids: without them nothing is shared with any
    other request, so no cache index is asked (and runs without ids cost what they did)."""
    return bool(getattr(req, "block_hashes", ()) or getattr(req, "image_ids", ()))


class LlmD(KvQueue):
    """llm-d's inference-scheduling profile (module docstring): `kv-queue`'s two scorers on
    the last scrape plus the approximate prefix-cache scorer on the request's body."""

    def __init__(
        self, models: dict[str, str], rng: np.random.Generator, interval_s: float, patch: int
    ) -> None:
        super().__init__(models, rng, interval_s)
        self._patch = patch
        self._prefix = {service: PrefixIndex(LLM_D_PREFIX) for service in models}

    def pick(self, req: Request, pods: Sequence[Pod], now: float) -> Pod:
        if not _has_ids(req):  # nothing shared: the prefix scorer gives every replica 0
            return super().pick(req, pods, now)
        info = parse_request(request_body(req, self._models[req.service], self._patch))
        index = self._prefix[req.service]
        hashes = index.hashes(info)
        held = index.match(hashes, info) if hashes else {}
        base = kv_queue_scores([self._seen.get(p.pid, (0.0, 0.0)) for p in pods])
        scores = [
            b + LLM_D_PREFIX_WEIGHT * (held[p.pid].blocks / len(hashes) if p.pid in held else 0.0)
            for p, b in zip(pods, base, strict=True)
        ]
        best = max(scores)
        tied = [p for p, s in zip(pods, scores, strict=True) if s == best]
        chosen = tied[int(self._rng.integers(len(tied)))] if len(tied) > 1 else tied[0]
        index.record(chosen.pid, hashes, None)
        return chosen


def _png_header(width: int, height: int) -> bytes:
    """The first 24 bytes of a PNG: what the router reads an image's size from."""
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height)


def request_body(req: Request, model: str, patch: int) -> bytes:
    """An OpenAI chat/completions body for a simulated request, as a client sends it: the
    text (4 characters per token, the router's estimate), one base64 PNG per image sized so
    that the router's patch estimate gives the image's tokens, no `max_tokens` (the traces
    do not say what clients asked for, so the router's default applies). Content ids, where
    the request has them, shape the images' bytes and the text (module docstring); the
    images come first, as the simulator places them."""
    image_ids: tuple[int, ...] = getattr(req, "image_ids", ())
    content: list[dict[str, object]] = []
    for k, tokens in enumerate(req.images):
        tail = image_ids[k].to_bytes(8, "little", signed=True) if k < len(image_ids) else b""
        data = base64.b64encode(_png_header(max(1, tokens) * patch, patch) + tail).decode()
        content.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}})
    content.append({"type": "text", "text": _prompt_text(req)})
    doc = {"model": model, "messages": [{"role": "user", "content": content}]}
    return orjson.dumps(doc)


def _prompt_text(req: Request) -> str:
    """The prompt's text: per content block, text made from its chain hash, as long as the
    block's text tokens; then filler for the tokens no block covers."""
    text_tokens = max(0, req.prompt - req.image_tokens)
    hashes: tuple[int, ...] = getattr(req, "block_hashes", ())
    ends: tuple[int, ...] = getattr(req, "block_ends", ())
    if not hashes or len(ends) != len(hashes):
        return "word" * text_tokens  # no ids: nothing shared (and never looked up)
    parts: list[str] = []
    start = req.image_tokens  # the images sit at the prompt's start
    covered = 0
    for h, end in zip(hashes, ends, strict=True):
        n = max(0, min(end, req.prompt) - max(start, req.image_tokens))
        start = max(start, end)
        if n:
            stamp = f"{h & 0xFFFFFFFFFFFFFFFF:016x}"
            parts.append((stamp * (n * 4 // 16 + 1))[: n * 4])
            covered += n
    parts.append("word" * max(0, text_tokens - covered))
    return "".join(parts)


class KvspreadPicker:
    """kvspread's endpoint picker, one real `EndpointSet` per service (an InferencePool)."""

    def __init__(
        self,
        models: dict[str, str],
        modalities: dict[str, str],
        metrics: MetricsConfig | None = None,
        scoring: ScoringConfig | None = None,
        request: RequestConfig | None = None,
    ) -> None:
        self.metrics = metrics or MetricsConfig()
        self.scoring = scoring or ScoringConfig()
        self.request = request or RequestConfig()
        self.interval_s: float | None = self.metrics.interval_s
        self._models = models
        self._modalities = modalities
        self._now = 0.0
        self._pods: dict[str, Pod] = {}
        self._nodes: dict[int, str] = {}
        self._members: dict[str, tuple[str, ...]] = {}
        self.sets: dict[str, EndpointSet] = {}
        self.cache = {service: CacheTerms(CacheConfig()) for service in models}
        for service in models:
            self.sets[service] = EndpointSet(
                self.metrics,
                clock=self._clock,
                wall_clock=self._clock,  # node signals carry simulated time stamps
                scraper=self._scrape,
                prefill_tokens_per_s=self.scoring.prefill_tokens_per_s,
            )

    def _clock(self) -> float:
        return self._now

    def _scrape(self, ep: Endpoint) -> list[EngineSample]:
        """The scraper EndpointSet calls: the replica's vLLM metrics."""
        pod = self._pods[ep.address]
        return _scrape_pod(pod, self._models[pod.service])

    def _sync(self, service: str, pods: Sequence[Pod], nodes: dict[int, str]) -> None:
        """The pool's Ready pods, as the watch would list them."""
        members = tuple(p.pid for p in pods)
        if self._members.get(service) == members:
            return
        self._members[service] = members
        for p in pods:
            self._pods[p.pid] = p
        self.sets[service].replace(
            [
                Endpoint(
                    address=p.pid,
                    metrics_url=f"sim://{p.pid}/metrics",
                    name=p.pid,
                    node=nodes.get(p.node, ""),
                    modality=self._modalities[service],
                    engine="vllm",
                )
                for p in pods
            ]
        )

    def scrape(self, ready: dict[str, list[Pod]], nodes: dict[int, str], now: float) -> None:
        self._now = now
        self._nodes = nodes
        for service, pods in ready.items():
            self._sync(service, pods, nodes)
            es = self.sets[service]
            # EndpointSet's own per-endpoint scrape, one after the other: scrape_all runs
            # the same calls on a thread pool, which only adds thread switches here
            for ep in es.endpoints():
                es._scrape_one(ep)

    def node_signals(self, signals: dict[str, NodeSignals]) -> None:
        for es in self.sets.values():
            es.set_node_signals(signals)

    def info(self, req: Request) -> RequestInfo:
        body = request_body(req, self._models[req.service], self.request.patch)
        return parse_request(body, self.request)

    def pick(self, req: Request, pods: Sequence[Pod], now: float) -> Pod:
        self._now = now
        self._sync(req.service, pods, self._nodes)
        es = self.sets[req.service]
        info = self.info(req)
        cache = self.cache[req.service]
        found = cache.lookup(info) if _has_ids(req) else NOTHING
        views = es.views()
        decision = choose(info, views, self.scoring, hits=found.hits)
        if decision.chosen is None:  # only 503 (no endpoint) or 429 (shedding, off here)
            raise RuntimeError(f"router refused a request: {decision.message}")
        es.record_pick(decision.chosen, info, cache.kv_tokens(info, found, decision.chosen))
        if found.hashes or found.digests:
            cap = next(v.kv_capacity_tokens for v in views if v.address == decision.chosen)
            cache.record(decision.chosen, found, cap)
        return self._pods[decision.chosen]

    def close(self) -> None:
        for es in self.sets.values():
            es.stop()


def make_router(
    name: str,
    models: dict[str, str],
    modalities: dict[str, str],
    rng: np.random.Generator,
    scoring: ScoringConfig | None = None,
) -> Router:
    """The router `name` for services with these models (service -> model name) and
    request kinds (service -> modality); `scoring` is the `kvspread` picker's (the router's
    defaults when None)."""
    interval = MetricsConfig().interval_s
    if name == "round-robin":
        return RoundRobin()
    if name == "least-request":
        return LeastRequest()
    if name == "kv-queue":
        return KvQueue(models, rng, interval)
    if name == "llm-d":
        return LlmD(models, rng, interval, RequestConfig().patch)
    if name == "kvspread":
        return KvspreadPicker(models, modalities, scoring=scoring)
    raise ValueError(f"unknown routing policy {name!r} (one of {', '.join(ROUTINGS)})")
