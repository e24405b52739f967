"""One request's decision with its bookkeeping: parse the body, look up what each endpoint
is expected to hold of it (context binding, prefix blocks: router/prefix.py, images:
router/images.py), score (router/scoring.py), record the pick in those indexes, count it,
keep the explanation, log it. The request's objective (router/objectives.py) comes from its
headers, its priority from the pool's InferenceObjectives (router/objectivewatch.py) or the
config: a sheddable one (priority < 0) is refused with 429 when no eligible endpoint is
fresh with room.

The gRPC layer (router/extproc.py) calls `Picker.pick` once per request, with the complete
body, the request headers and the gateway's subset hint.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from kvspread import names
from router.affinity import ContextAffinity
from router.cacheterms import NOTHING, NOTHING_RECORDED, CacheTerms, Lookup, Recorded
from router.config import RouterConfig
from router.conformance import SELECTION_HEADER, steered
from router.endpoints import EndpointSet
from router.llmdmetrics import LlmdMetrics
from router.metrics import RouterMetrics
from router.objectives import (
    DEFAULT,
    Objective,
    ObjectiveError,
    ObjectivesConfig,
    read_objective,
)
from router.request import BODILESS, RequestError, RequestInfo, parse_request
from router.scoring import Decision, EndpointView, choose

__all__ = ["Picker", "Outcome", "HEADER_CONTEXT", "HEADER_CHUNK_SEQ", "HEADER_REQUEST_ID"]

log = logging.getLogger("kvspread.router.picker")

HEADER_CONTEXT = "x-llm-context-id"
HEADER_CHUNK_SEQ = "x-chunk-seq"
HEADER_REQUEST_ID = "x-request-id"


@dataclass(frozen=True)
class Outcome:
    """The decision, or the reason the request is refused as bad (status 400)."""

    decision: Decision
    request: RequestInfo | None
    request_id: str
    objective: Objective = DEFAULT
    kv_tokens: int | None = None
    """The KV tokens counted at the chosen endpoint (record_pick), to move them if another
    endpoint serves."""
    found: Lookup = NOTHING
    """The request's keys into the cache indexes, to record them where it was served."""
    recorded: Recorded = NOTHING_RECORDED
    """What the pick added to the cache indexes at the chosen endpoint, to take back if
    another endpoint serves."""


EXPLAIN_MAX_BYTES: Final = 64 << 20
"""The decisions kept for /debug/explain, at most (estimated; `_Kept.size`): 64 MiB, a
sixteenth of the Deployment's 1 GiB limit. 10,000 decisions of 8 candidates take about
44 MB; of 1,000 endpoints each (420 KB), the last 150 fit."""

EXPLAIN_MAX_IMAGES: Final = 64
"""Images of one request listed in its explanation (`images_total` says how many it had)."""

MAX_ID_CHARS: Final = 256
"""A request or context id longer than this is kept under its digest (`id_key`), and
shown cut to this length: a header can be 60 KiB, and 10,000 of them 600 MB."""


def id_key(value: str) -> str:
    """The key a request or context id is kept under: itself, or `sha256:<hex>` past
    MAX_ID_CHARS (the affinity table's keys too: 100,000 contexts of 60 KiB ids would be
    6 GB)."""
    if len(value) <= MAX_ID_CHARS:
        return value
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def _clip(value: str | None) -> str | None:
    return value if value is None or len(value) <= MAX_ID_CHARS else value[:MAX_ID_CHARS] + "..."


@dataclass(frozen=True)
class _Kept:
    """One decision as /debug/explain shows it."""

    decision: Decision
    request: RequestInfo | None  # without its prompt and token ids
    prefix_blocks: int
    images_total: int
    context: str | None
    chunk_seq: str | None
    objective: Objective | str  # the one the pick used, or why it could not be read
    bound: str | None

    @property
    def size(self) -> int:
        """Bytes, estimated from what tracemalloc saw kept per decision
        (tests/router/test_router_request_memory.py): 1.3 KB with one candidate, 4.2 KB
        with 8, 28 KB with 64; an image estimate about 400 bytes."""
        d = self.decision
        images = len(self.request.images) if self.request is not None else 0
        return (
            1024
            + 420 * len(d.candidates)
            + 150 * len(d.excluded)
            + 400 * images
            + len(d.message)
            + len(self.context or "")
            + len(self.chunk_seq or "")
        )


class Picker:
    def __init__(
        self,
        cfg: RouterConfig,
        endpoints: EndpointSet,
        metrics: RouterMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        explain_entries: int = 10_000,
    ) -> None:
        self.cfg = cfg
        self.endpoints = endpoints
        self.metrics = metrics
        self.llmd = LlmdMetrics(metrics.registry, cfg.pool.name or "")
        """llm-d's `llm_d_epp_*` families beside kvspread's (router/llmdmetrics.py)."""
        self.affinity = ContextAffinity(cfg.affinity.ttl_s, cfg.affinity.max_entries)
        self.cache = CacheTerms(cfg.cache)
        self._generation = -1  # of the endpoint set the indexes were last pruned to
        self._clock = clock
        self._explain: OrderedDict[str, _Kept] = OrderedDict()
        self._explain_bytes = 0
        self._explain_max_bytes = EXPLAIN_MAX_BYTES
        self._explain_max = explain_entries
        self._served: OrderedDict[str, str] = (
            OrderedDict()
        )  # request id -> who served, if not the pick
        self._lock = threading.Lock()
        self.objective_priorities: Mapping[str, int] = {}
        """The watched InferenceObjectives' priorities (router/objectivewatch.py), replaced
        whole by `set_objective_priorities`, so a pick reads one mapping without a lock."""

    def set_objective_priorities(self, priorities: Mapping[str, int]) -> None:
        """The pool's InferenceObjectives changed: their priorities beat `objectives.classes`."""
        self.objective_priorities = priorities

    def pick(
        self,
        body: bytes,
        headers: Mapping[str, str],
        subset: list[str] | None,
        steer: str | None = None,
    ) -> Outcome:
        """Decide for one request. `steer`: the conformance suite's endpoint selection
        (router/conformance.py), which replaces the scoring."""
        started = time.perf_counter()
        rid = headers.get(HEADER_REQUEST_ID, "")
        objective = DEFAULT
        read: Objective | str = DEFAULT
        try:
            objective = read = read_objective(
                headers, self.cfg.objectives, self.objective_priorities
            )
            req = (
                BODILESS
                if not body
                else parse_request(body, self.cfg.request, self.cfg.cache.head_chars)
            )
        except (RequestError, ObjectiveError) as exc:
            self.metrics.bad.inc()
            self.llmd.refused("", objective, 400, None)
            decision = Decision(400, "bad-request", message=str(exc))
            if isinstance(exc, ObjectiveError):
                read = str(exc)
            self._remember(rid, decision, None, headers, read)
            return Outcome(decision, None, rid)
        choosing = time.perf_counter()
        now = self._clock()
        ctx = headers.get(HEADER_CONTEXT) or None
        seq = _int_or_none(headers.get(HEADER_CHUNK_SEQ))
        ctx_key = id_key(ctx) if ctx else None
        bound = self.affinity.lookup(ctx_key, now) if ctx_key else None
        views = self.endpoints.views()
        if self._generation != self.endpoints.generation:
            self._prune(views)
        found = self.cache.lookup(req)
        if steer is not None:
            decision = self._steered(steer, views)
        else:
            decision = choose(
                req,
                views,
                self.cfg.scoring,
                subset=subset,
                context_endpoint=bound.address if bound else None,
                hits=found.hits,
            )
            if decision.chosen and objective.sheddable and _saturated(decision):
                decision = _shed(decision, objective)
        chose_s = time.perf_counter() - choosing
        kv: int | None = None
        recorded = NOTHING_RECORDED
        if decision.chosen:
            kv = self.cache.kv_tokens(req, found, decision.chosen)
            self.endpoints.record_pick(decision.chosen, req, kv)
            if ctx_key:
                self.affinity.bind(ctx_key, decision.chosen, now, seq)
            if found.hashes or found.digests:
                view = next((v for v in views if v.address == decision.chosen), None)
                cap = view.kv_capacity_tokens if view is not None else None
                recorded = self.cache.record(decision.chosen, found, cap)
        elapsed = time.perf_counter() - started
        m = self.metrics
        m.pick_seconds.observe(elapsed)
        m.pick(decision.chosen or "", decision.reason).inc()
        if decision.status == 429:
            m.sheds.inc()
        if decision.chosen:
            ep = self.endpoints.endpoint(decision.chosen)
            self.llmd.routed(req.model, objective, decision.chosen, ep, chose_s)
        else:  # a 503 is a choice that found no endpoint; a 429 refuses before choosing
            tried = chose_s if decision.status == 503 else None
            self.llmd.refused(req.model, objective, decision.status, tried)
        self._remember(rid, decision, req, headers, objective, bound.address if bound else None)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "pick",
                extra={
                    "kv": {
                        "request_id": rid,
                        "status": decision.status,
                        "reason": decision.reason,
                        "endpoint": decision.destination,
                        "modality": req.modality,
                        "tokens": req.total_tokens,
                        "context": ctx,
                        "scores": {c.address: round(c.score, 3) for c in decision.candidates},
                    }
                },
            )
        return Outcome(decision, req, rid, objective, kv, found, recorded)

    def _steered(self, header: str, views: list[EndpointView]) -> Decision:
        """The conformance suite's choice: the header's endpoints in its order."""
        picked = steered(header, [v.address for v in views])
        if not picked:
            return Decision(
                503,
                "no-endpoint",
                message=f"no endpoint of the pool matches the {SELECTION_HEADER} header",
            )
        return Decision(
            200,
            "steered",
            chosen=picked[0],
            fallbacks=tuple(picked[1:][: self.cfg.scoring.fallbacks]),
        )

    def served(self, outcome: Outcome, address: str) -> bool:
        """Envoy reports that `address` served `outcome`'s request: when it is not the
        endpoint picked, move the pick's load there, and its prefix blocks and images in
        the cache indexes (its engine computed them). True when it moved."""
        chosen, req = outcome.decision.chosen, outcome.request
        if not chosen or req is None or _same(address, chosen):
            return False
        target = next(
            (e.address for e in self.endpoints.endpoints() if _same(e.address, address)), None
        )
        if target is None:
            return False  # served by something outside the pool (a FailOpen route)
        self.endpoints.move_pick(chosen, target, req, outcome.kv_tokens)
        found = outcome.found
        if found.hashes or found.digests:
            view = next((v for v in self.endpoints.views() if v.address == target), None)
            cap = view.kv_capacity_tokens if view is not None else None
            self.cache.move(chosen, target, found, outcome.recorded, cap)
        self.metrics.served_elsewhere.inc()
        with self._lock:
            key = id_key(outcome.request_id)
            kept = self._explain.get(key)
            if kept is not None:
                self._served[key] = target
                while len(self._served) > self._explain_max:
                    self._served.popitem(last=False)
        return True

    @property
    def served_elsewhere(self) -> int:
        """Requests served by another pool endpoint than the one picked (load moved): the
        value of kvspread_router_served_elsewhere_total."""
        value = self.metrics.registry.get_sample_value(names.ROUTER_SERVED_ELSEWHERE.prometheus)
        return int(value or 0)

    def _prune(self, views: list[EndpointView]) -> None:
        """Forget what the indexes hold of endpoints that left the set."""
        self._generation = self.endpoints.generation
        self.cache.keep_only({v.address for v in views})
        self.llmd.keep_only(v.address for v in views)

    def _remember(
        self,
        rid: str,
        d: Decision,
        req: RequestInfo | None,
        headers: Mapping[str, str],
        objective: Objective | str,
        bound: str | None = None,
    ) -> None:
        """Keep what /debug/explain shows of a decision, and no more: not the prompt, the
        token ids or the headers (a request's can be megabytes), at most
        `EXPLAIN_MAX_IMAGES` images; the oldest go past `explain_entries` decisions or past
        `EXPLAIN_MAX_BYTES` of them (each one's size estimated, `_Kept.size`)."""
        if not rid:
            return
        summary = None
        blocks = images = 0
        if req is not None:
            c = self.cfg.cache  # the prefix blocks the pick hashed (prompt_parts is cut there)
            blocks = min(sum(len(p) for p in req.prompt_parts), c.head_chars) // c.block_chars
            images = len(req.images)
            summary = replace(
                req, prompt_parts=(), token_ids=(), images=req.images[:EXPLAIN_MAX_IMAGES]
            )
        kept = _Kept(
            d,
            summary,
            blocks,
            images,
            _clip(headers.get(HEADER_CONTEXT)),
            _clip(headers.get(HEADER_CHUNK_SEQ)),
            objective,
            bound,
        )
        key = id_key(rid)
        with self._lock:
            old = self._explain.pop(key, None)
            if old is not None:
                self._explain_bytes -= old.size
            self._explain[key] = kept
            self._explain_bytes += kept.size
            while len(self._explain) > 1 and (
                len(self._explain) > self._explain_max
                or self._explain_bytes > self._explain_max_bytes
            ):
                self._explain_bytes -= self._explain.popitem(last=False)[1].size

    def _explanation(self, rid: str, k: _Kept) -> dict[str, Any]:
        d = k.decision
        doc: dict[str, Any] = {
            "request_id": rid,
            "status": d.status,
            "reason": d.reason,
            "destination": d.destination,
            "message": d.message,
            "context_id": k.context,
            "chunk_seq": k.chunk_seq,
            "context_bound_to": k.bound,
            "candidates": [c.as_dict() for c in d.candidates],
            "excluded": d.excluded,
            "served_by": self._served.get(id_key(rid), d.chosen),
        }
        o = k.objective
        if isinstance(o, str):
            doc["objective"] = {"error": o}
        else:
            doc["objective"] = {
                "name": o.name,
                "priority": o.priority,
                "priority_from": _priority_from(
                    o.name, self.cfg.objectives, self.objective_priorities
                ),
                "sheddable": o.sheddable,
                "ttft_ms": o.ttft_ms,
                "tpot_ms": o.tpot_ms,
                "fairness_id": o.fairness_id,
            }
        req = k.request
        if req is not None:
            doc["request"] = {
                "model": req.model,
                "modality": req.modality,
                "prefix_blocks": k.prefix_blocks,
                "images": [
                    {
                        "digest": f"{i.digest:016x}",
                        "bytes": i.encoded_bytes,
                        "width": i.width,
                        "height": i.height,
                        "tokens": i.tokens,
                    }
                    for i in req.images
                ],
                "images_total": k.images_total,
                "text_tokens_estimate": req.text_tokens,
                "image_tokens_estimate": req.image_tokens,
                "max_tokens": req.max_tokens,
            }
        return doc

    def explain(self, request_id: str) -> dict[str, Any] | None:
        """The decision for a request id, built when asked (picks only keep the objects)."""
        with self._lock:
            kept = self._explain.get(id_key(request_id))
        return None if kept is None else self._explanation(request_id, kept)

    @property
    def explain_bytes(self) -> int:
        """The estimated size of the decisions kept for /debug/explain."""
        return self._explain_bytes

    def recent_ids(self, n: int = 20) -> list[str]:
        with self._lock:
            return list(self._explain)[-n:]


def _priority_from(name: str, cfg: ObjectivesConfig, resources: Mapping[str, int]) -> str:
    """Where an objective's priority came from, for /debug/explain: "resource" (its
    InferenceObjective), "config" (`objectives.classes`) or "default"."""
    if name and name in resources:
        return "resource"
    return "config" if name and name in cfg.classes else "default"


def _saturated(d: Decision) -> bool:
    """No candidate is fresh with room (each is saturated or stale: scoring.TIERS 2, 3)."""
    return all(c.tier >= 2 for c in d.candidates)


def _shed(d: Decision, objective: Objective) -> Decision:
    """The 429 a sheddable objective gets from a saturated pool (GIE's sheddable rule)."""
    return replace(
        d,
        status=429,
        reason="shed",
        chosen=None,
        fallbacks=(),
        message=(
            f"every eligible endpoint is saturated or stale and objective "
            f"{objective.name or '(none)'!r} has priority {objective.priority} (sheddable)"
        ),
    )


def _same(a: str, b: str) -> bool:
    """Whether two `ip:port` name the same endpoint (IPv6 with or without brackets)."""
    return a == b or a.replace("[", "").replace("]", "") == b.replace("[", "").replace("]", "")


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None
