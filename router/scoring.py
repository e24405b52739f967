"""The choice of one endpoint for one request. Pure: views and a request in, a `Decision`
out, no clock, no I/O (the endpoint set and the gRPC server do those).

Each eligible endpoint gets terms in [0, 1], lower is better:

    load      0.4 gpu_memory_share + 0.3 min(1, streams / max_streams) + 0.3 image_token_share
              (docs/design.md section 4, the design notes' dynamic load weight); streams are the
              engine's running + waiting requests plus the picks sent since its last scrape
    queue     min(1, queued / queue_norm); queued is the engine's waiting requests plus the
              picks since its last scrape began, less `absorb_picks` of them while the engine
              reports none waiting (its batch takes them: they run, they do not queue)
    kv        KV-cache usage after adding the request's estimated tokens (less those its
              prefix cache is expected to hold already); 1 when they do not fit
    modality  0 when the pod's modality serves the request's, up to 1 when it does not
    prefill   the endpoint's prefill backlog (router/endpoints.py: prompt tokens sent there
              and not expected cached, drained at `prefill_tokens_per_s`) in seconds, in
              the queue term's units as the bonus is (`queued_request_s` per queued
              request, `w_queue / queue_norm` each), up to 1: the wait behind prefills
              that a request count does not show (one running 30k-token prompt is seconds)

score = sum(weight * term) - bonus. A missing number counts as the worst value (1), so that
an endpoint that does not report something never beats one that does.

The bonus is what going there saves, traded against queueing in the queue term's units:
the prefill of the prompt tokens its prefix cache is expected to hold
(`CacheHit.saved_tokens` / `prefill_tokens_per_s`) plus the encoder time of the images it
was sent recently (`image_encode_s` each), in seconds, over `queued_request_s` (what one
more queued request costs a new one) times the queue term's weight per request
(`w_queue / queue_norm`), capped at `max_bonus`; an endpoint the request's context id is
bound to gets `context_bonus` more. So affinity is a cost: a cached endpoint keeps the
request until its extra queue costs more than the prefill it saves.

Endpoints are ranked in tiers first: fresh with room whose modality serves the request;
fresh with room whose modality does not (term 1: an image request on a text-only pod);
fresh but saturated; stale (metrics older than the staleness bound or never scraped). So
stale or missing metrics never rank an endpoint above a fresh one, and an image request
goes to a text-only pod only when no image pod is fresh with room. Saturated is the
engine's own state against its own capacity: at least `saturation_queue` requests
waiting, or KV usage (with the tokens of the picks since the scrape) at `saturation_kv`,
or the request not fitting its free KV; never the router's pick count alone. Shedding
(429): when every eligible endpoint is fresh and has at least `shed_queue` requests
waiting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kvspread.settings import bounded
from router.request import RequestInfo

__all__ = [
    "EndpointView",
    "ScoringConfig",
    "Decision",
    "Candidate",
    "CacheHit",
    "choose",
    "modality_term",
    "REASONS",
]

REASONS = ("context", "cache", "score", "saturated", "stale", "no-endpoint", "shed", "steered")
"""Why an endpoint was picked (or none): the `reason` label of the picks metric."""


@dataclass(frozen=True)
class EndpointView:
    """One endpoint as the scorer sees it. Absent numbers are None, never 0."""

    address: str  # ip:port
    name: str = ""
    modality: str | None = None  # kvspread.io/modality, or derived from the node pool
    fresh: bool = False
    stale_reason: str = "never scraped"
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None  # 0..1
    kv_capacity_tokens: int | None = None
    gpu_memory_share: float | None = None  # node signals: used / total GPU memory
    image_token_share: float | None = None
    picks_since_scrape: int = 0  # picks sent after the last scrape began
    pending_tokens: int = 0  # their prompt + output tokens
    prefill_tokens: int = 0  # prefill backlog: prompt tokens sent, not cached, not yet drained
    ignored: tuple[str, ...] = ()  # numbers the engine gave out of range (NaN, -1): absent


@dataclass(frozen=True)
class ScoringConfig:
    """Weights, norms and bounds of the choice (YAML `scoring:`); see the module docstring."""

    w_load: float = 1.0
    """Weight of the load term in the score."""
    w_queue: float = 1.0
    """Weight of the queue term."""
    w_kv: float = 1.0
    """Weight of the KV-cache term."""
    w_modality: float = 0.5
    """Weight of the modality term."""
    w_prefill: float = 1.0
    """Weight of the prefill-backlog term (1: its seconds weigh as the bonus's do)."""
    load_memory: float = 0.4
    """Share of the load term that is the node's GPU memory used / total (docs/design.md 4)."""
    load_streams: float = 0.3
    """Share of the load term that is streams / `max_streams`."""
    load_image: float = 0.3
    """Share of the load term that is the image-token share."""
    max_streams: float = 64.0
    """Streams (running + waiting + picks since the scrape) that count as full load."""
    queue_norm: float = 16.0
    """Waiting requests at which the queue term reaches 1."""
    saturation_queue: float = 8.0
    """Requests the engine reports waiting at which it counts as saturated."""
    saturation_kv: float = 0.95
    """KV-cache usage (0..1, with the picks since the scrape) at which it is saturated."""
    absorb_picks: float = 8.0
    """Picks since the scrape that count as running, not queued, while the engine reports
    no request waiting (its batch has room)."""
    prefill_tokens_per_s: float = 8000.0
    """Prompt tokens one engine prefills per second: turns cached tokens into seconds saved
    (set it to your engine's; 8000 is a 7-8B model on one H100 order of magnitude)."""
    image_encode_s: float = 0.05
    """Seconds the vision encoder spends on one image: what an encoder-cache hit saves."""
    queued_request_s: float = 0.1
    """Seconds one more queued request adds to a new request's wait: turns seconds saved
    into queue-term units (about one request's prefill)."""
    context_bonus: float = 0.5
    """Score bonus of the endpoint a context id is bound to (0.5: 8 queued requests)."""
    max_bonus: float = 1.0
    """Cap of the prefix and image bonus (1: one whole queue term)."""
    shed_queue: float = 0.0
    """Answer 429 when every eligible endpoint has this many requests waiting; 0: never."""
    fallbacks: int = 2
    """Fallback endpoints sent after the chosen one in the destination header."""

    def validate(self) -> None:
        bounded(self, *(f.name for f in fields(self)), at_least=0, finite=True)
        bounded(
            self, "max_streams", "queue_norm", "prefill_tokens_per_s", "queued_request_s", above=0
        )


TIERS = ("fresh", "mismatch", "saturated", "stale")


@dataclass(frozen=True)
class CacheHit:
    """What an endpoint is expected to hold of one request (router/prefix.py,
    router/images.py): the picker's input to the bonus."""

    prefix_share: float = 0.0  # of the prompt, 0..1
    saved_tokens: int = 0
    images: int = 0  # of the request's images it was sent recently


NO_HIT = CacheHit()


@dataclass(frozen=True)
class Candidate:
    """One eligible endpoint's terms, for the explanation."""

    address: str
    name: str
    tier: int  # 0 fresh with room, 1 fresh with room, modality mismatch, 2 saturated, 3 stale
    score: float
    terms: dict[str, float]
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "name": self.name,
            "tier": TIERS[self.tier],
            "score": round(self.score, 4),
            "terms": {k: round(v, 4) for k, v in self.terms.items()},
            "note": self.note,
        }


@dataclass(frozen=True)
class Decision:
    status: int  # 200 picked, 503 none eligible, 429 shed
    reason: str
    chosen: str | None = None
    fallbacks: tuple[str, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    excluded: dict[str, str] = field(default_factory=dict)
    message: str = ""

    @property
    def destination(self) -> str:
        """The header / metadata value: chosen endpoint then fallbacks, comma-separated."""
        return ",".join(((self.chosen,) if self.chosen else ()) + self.fallbacks)


# Request modality -> pod modality -> mismatch (0 serves it well, 1 does not fit).
_AFFINITY: dict[str, dict[str, float]] = {
    "text": {"text": 0.0, "mixed": 0.25, "image": 0.5, "multi-image": 0.5, "audio": 1.0},
    "image": {"image": 0.0, "multi-image": 0.0, "mixed": 0.25, "text": 1.0, "audio": 1.0},
    "multi-image": {"multi-image": 0.0, "image": 0.25, "mixed": 0.5, "text": 1.0, "audio": 1.0},
}


def modality_term(request_modality: str, pod_modality: str | None) -> float:
    """Mismatch of a pod's modality for a request; an unlabelled pod counts as text."""
    table = _AFFINITY.get(request_modality, _AFFINITY["text"])
    return table.get(pod_modality or "text", 1.0)


def _terms(
    ep: EndpointView, req: RequestInfo, cfg: ScoringConfig, total_tokens: int
) -> tuple[dict[str, float], bool, str]:
    """(terms, saturated, note) of one endpoint; `total_tokens` is req.total_tokens. It runs
    for every endpoint on every request, hence the locals and the inline clipping to [0, 1]."""
    notes: list[str] | None = None
    fresh = ep.fresh
    share = ep.gpu_memory_share
    if share is None:
        mem = 1.0
        notes = ["no GPU memory signal"]
    else:
        mem = 0.0 if share < 0.0 else 1.0 if share > 1.0 else share
    share = ep.image_token_share
    img = 1.0 if share is None else 0.0 if share < 0.0 else 1.0 if share > 1.0 else share
    waiting, picks = ep.waiting, ep.picks_since_scrape
    if fresh and ep.running is not None and waiting is not None:
        x = (ep.running + waiting + picks) / cfg.max_streams
        streams_term = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x
    else:
        streams_term = 1.0
    load = cfg.load_memory * mem + cfg.load_streams * streams_term + cfg.load_image * img
    if fresh and waiting is not None:
        queued = waiting + (picks if waiting > 0 else max(0.0, picks - cfg.absorb_picks))
        x = queued / cfg.queue_norm
        queue = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x
    else:
        queue = 1.0
    no_room = False
    usage: float | None
    if fresh and ep.kv_usage is not None:
        u = ep.kv_usage
        usage = 0.0 if u < 0.0 else 1.0 if u > 1.0 else u
        capacity = ep.kv_capacity_tokens
        if capacity:
            if ep.pending_tokens:
                usage = min(1.0, usage + ep.pending_tokens / capacity)
            free = (1.0 - usage) * capacity
            if total_tokens > free:
                no_room = True
                notes = (notes or []) + [f"{total_tokens} tokens do not fit {int(free)} free"]
                kv = 1.0
            else:
                x = usage + total_tokens / capacity
                kv = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x
        else:
            kv = usage
    else:
        usage, kv = None, 1.0
    mod = modality_term(req.modality, ep.modality)
    if fresh:
        x = ep.prefill_tokens / cfg.prefill_tokens_per_s * cfg.w_queue
        x /= cfg.queue_norm * cfg.queued_request_s
        prefill = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x
    else:
        prefill = 1.0
    saturated = (
        no_room
        or (fresh and waiting is not None and waiting >= cfg.saturation_queue)
        or (usage is not None and usage >= cfg.saturation_kv)
    )
    terms = {"load": load, "queue": queue, "kv": kv, "modality": mod, "prefill": prefill}
    return terms, saturated, "; ".join(notes) if notes else ""


def bonus(hit: CacheHit, cfg: ScoringConfig) -> tuple[float, float]:
    """(score bonus, seconds saved) of an expected cache hit; see the module docstring."""
    saved_s = hit.saved_tokens / cfg.prefill_tokens_per_s + hit.images * cfg.image_encode_s
    if saved_s <= 0.0:
        return 0.0, 0.0
    b = cfg.w_queue / cfg.queue_norm * saved_s / cfg.queued_request_s
    return min(cfg.max_bonus, b), saved_s


def choose(
    req: RequestInfo,
    endpoints: list[EndpointView],
    cfg: ScoringConfig,
    *,
    subset: list[str] | None = None,
    context_endpoint: str | None = None,
    hits: Mapping[str, CacheHit] | None = None,
) -> Decision:
    """Pick an endpoint (and fallbacks) for `req` among `endpoints`.

    `subset` is the gateway's hint: only those addresses are eligible (an empty list means
    no endpoint). `context_endpoint` is where the request's context id is bound; `hits`
    what each endpoint is expected to hold of the request (absent: nothing).
    """
    excluded: dict[str, str] = {}
    eligible = endpoints
    if subset is not None:
        allowed = set(subset)
        eligible = [e for e in endpoints if e.address in allowed]
        for e in endpoints:
            if e.address not in allowed:
                excluded[e.address] = "not in the gateway's subset hint"
    if not eligible:
        msg = (
            "no ready endpoint in the gateway's subset hint"
            if subset is not None
            else "no ready endpoint in the pool"
        )
        return Decision(503, "no-endpoint", excluded=excluded, message=msg)
    cands: list[Candidate] = []
    base: dict[str, float] = {}
    total_tokens = req.total_tokens
    for ep in eligible:
        hit = hits.get(ep.address) if hits else None
        # cached tokens are already in the endpoint's KV: only the rest needs room there
        need = total_tokens - hit.saved_tokens if hit is not None else total_tokens
        terms, saturated, note = _terms(ep, req, cfg, need)
        score = (
            cfg.w_load * terms["load"]
            + cfg.w_queue * terms["queue"]
            + cfg.w_kv * terms["kv"]
            + cfg.w_modality * terms["modality"]
            + cfg.w_prefill * terms["prefill"]
        )
        tier = 3 if not ep.fresh else 2 if saturated else 1 if terms["modality"] >= 1.0 else 0
        base[ep.address] = score
        if tier in (0, 3):  # never onto a saturated or modality-mismatched endpoint
            b, saved_s = bonus(hit, cfg) if hit is not None else (0.0, 0.0)
            if hit is not None and (b or hit.prefix_share):
                terms["prefix"] = hit.prefix_share
                terms["saved_tokens"] = hit.saved_tokens
                terms["images_cached"] = hit.images
                terms["saved_s"] = saved_s
            if ep.address == context_endpoint:
                b += cfg.context_bonus
            if b:
                terms["bonus"] = b
                score -= b
        if not ep.fresh:
            note = "; ".join(x for x in (ep.stale_reason, note) if x)
        cands.append(Candidate(ep.address, ep.name, tier, score, terms, note))
    cands.sort(key=lambda c: (c.tier, c.score, c.address))
    if cfg.shed_queue > 0 and all(
        e.fresh and e.waiting is not None and e.waiting >= cfg.shed_queue for e in eligible
    ):
        return Decision(
            429,
            "shed",
            candidates=tuple(cands),
            excluded=excluded,
            message=f"every endpoint has at least {cfg.shed_queue:g} requests waiting",
        )
    chosen = cands[0]
    reason = ("score", "score", "saturated", "stale")[chosen.tier]
    if chosen.terms.get("bonus"):
        rivals = [c for c in cands if c.tier == chosen.tier]
        unbonused = min(rivals, key=lambda c: (base[c.address], c.address))
        if unbonused.address != chosen.address:
            reason = "context" if chosen.address == context_endpoint else "cache"
    rest = [c.address for c in cands if c.address != chosen.address]
    return Decision(
        200,
        reason,
        chosen=chosen.address,
        fallbacks=tuple(rest[: max(0, cfg.fallbacks)]),
        candidates=tuple(cands),
        excluded=excluded,
    )
