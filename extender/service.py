"""The extender's decisions: filter and prioritize one ExtenderArgs, remember why.

`Extender` glues the pure parts (objects, fit, scoring) to the state (cache, ledger,
shape distribution) and to observability (metrics, explain store, the debug log). It
knows nothing of HTTP: `server.py` maps routes onto `filter()`, `prioritize()` and
`explain()`, which take parsed `ExtenderArgs` and return decision values
(extender/decisions.py) that `wire.py` encodes. The cluster state (a `NodeSource`:
the watch caches, or `StaticState` standalone) owns the ledger of placements.

Unknown nodes (names-only mode, not in the node cache, or no cache at all in
standalone mode) pass the filter and get the neutral score 5. A pod with invalid
kvspread labels or annotations fails every node with a reason naming the field, in
`FailedAndUnresolvableNodes` (preemption cannot help); nodes short of GPU memory go in
`FailedNodes` (evicting lower-priority pods could make room).

Thread-safe: the server may call from several threads.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from extender.batch import NodeBatch
from extender.cache import NodeSource
from extender.config import ExtenderConfig
from extender.decisions import FilterDecision, PrioritizeDecision
from extender.fit import Failure, FilterReason, exclude_stale, fit_batch
from extender.metrics import ExtenderMetrics
from extender.objects import PodInfo, parse_pod
from extender.scoring import (
    TERMS,
    BatchScores,
    explain,
    node_preference,
    score_batch,
    warm_batch,
)
from extender.shapes import ShapeDistribution
from extender.wire import ExtenderArgs
from kvspread.clock import Clock

__all__ = ["Extender", "NEUTRAL_SCORE"]

log = logging.getLogger("kvspread.extender")

NEUTRAL_SCORE = 5
"""Score for a node the extender knows nothing about: the middle of 0..10."""


@dataclass
class _Decision:
    verb: str
    at: float
    pod: PodInfo
    nodes: int
    """How many nodes the request named (not the names: a kept list of 5,000 names per
    decision would be walked by every garbage collection)."""
    unknown: list[str]
    scores: BatchScores | None
    failed: dict[str, Failure]
    passed: int


class Extender:
    """Filter/prioritize engine (see the module docstring)."""

    def __init__(
        self,
        cfg: ExtenderConfig,
        clock: Clock,
        state: NodeSource,
        metrics: ExtenderMetrics | None = None,
    ) -> None:
        self.cfg = cfg
        self.scoring = cfg.scoring
        self.clock = clock
        self.state = state
        self.shapes = ShapeDistribution(cfg.scoring)
        self.metrics = metrics or ExtenderMetrics(TERMS)
        self._lock = threading.Lock()
        self._seen_uids: OrderedDict[str, None] = OrderedDict()
        self._decisions: OrderedDict[str, dict[str, _Decision]] = OrderedDict()

    # --- helpers ------------------------------------------------------------------------
    def _observe(self, pod: PodInfo) -> None:
        uid = pod.uid or pod.key
        with self._lock:
            if uid in self._seen_uids:
                return
            self._seen_uids[uid] = None
            if len(self._seen_uids) > 10_000:
                self._seen_uids.popitem(last=False)
        self.shapes.observe(pod.shape)

    def _batch(
        self, args: ExtenderArgs, pod: PodInfo, model: str | None = None
    ) -> tuple[NodeBatch, np.ndarray, list[int]]:
        """(batch of known nodes, the position in args.names of each of its rows, unknown
        positions), as `pod` sees them: its own earlier placements left out. Names-only
        rows come in the cache's order (one node set in any order is one batch)."""
        ref = (pod.key, pod.uid)
        if args.nodes is not None:
            batch = self.state.batch_for(args.nodes, ref)
            return batch, np.arange(len(args.nodes)), []
        batch, pos, missing = self.state.take_unordered(args.names, model, ref)
        return batch, np.arange(len(args.names)) if pos is None else pos, missing

    def _remember(
        self,
        verb: str,
        pod: PodInfo,
        args: ExtenderArgs,
        unknown: list[int],
        scores: BatchScores | None,
        failed: dict[str, Failure],
        passed: int,
    ) -> None:
        """Keep a decision for /debug/explain (the last `explain.max_pods` pods)."""
        names = args.names
        d = _Decision(
            verb,
            self.clock.now(),
            pod,
            len(names),
            [names[i] for i in unknown],
            scores,
            failed,
            passed,
        )
        with self._lock:
            per = self._decisions.pop(pod.key, {})
            per[verb] = d
            self._decisions[pod.key] = per
            while len(self._decisions) > self.cfg.explain.max_pods:
                self._decisions.popitem(last=False)

    # --- verbs --------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> FilterDecision:
        pod = parse_pod(args.pod)
        n = len(args.names)
        if pod.error:
            reason = f"kvspread: pod {pod.key} cannot be placed: {pod.error}"
            failed = dict.fromkeys(args.names, Failure(FilterReason.INVALID_POD, reason))
            self._count_failures(failed)
            self.metrics.filter_decisions.labels("invalid_pod").inc()
            self._remember("filter", pod, args, [], None, failed, 0)
            # unresolvable: evicting other pods (preemption) cannot fix the pod's own spec
            return FilterDecision([False] * n, unresolvable=dict.fromkeys(args.names, reason))
        self._observe(pod)
        batch, known, unknown = self._batch(args, pod)
        ok, failed = fit_batch(pod.shape, batch, self.scoring)
        old, excluded = exclude_stale(
            pod.shape, batch, self.clock.now(), self.cfg.signals.exclude_after_s
        )
        if excluded:
            ok = ok & ~old
            failed.update(excluded)
        passed = np.ones(n, dtype=bool)
        passed[known] = ok
        self._count_failures(failed)
        self.metrics.child(
            self.metrics.filter_decisions, "passed" if passed.any() else "no_fit"
        ).inc()
        self.metrics.count_signals(batch.codes, len(unknown))
        self._remember("filter", pod, args, unknown, None, failed, int(passed.sum()))
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "filter decision",
                extra={
                    "kv": {
                        "pod": pod.key,
                        "nodes": n,
                        "passed": int(passed.sum()),
                        "failed": len(failed),
                        "unknown": len(unknown),
                        "mode": "names" if args.names_only else "nodelist",
                    }
                },
            )
        return FilterDecision(passed.tolist(), {k: f.message for k, f in failed.items()})

    def _count_failures(self, failed: dict[str, Failure]) -> None:
        counts: dict[FilterReason, int] = {}
        for f in failed.values():
            counts[f.reason] = counts.get(f.reason, 0) + 1
        for reason, c in counts.items():
            self.metrics.child(self.metrics.filter_failures, reason.value).inc(c)

    def prioritize(
        self, args: ExtenderArgs, later: list[Callable[[], None]] | None = None
    ) -> PrioritizeDecision:
        """Score every node for `args.pod`.

        What the answer does not need is appended to `later` when given, for the server to
        run once the answer is on the wire (the scheduler waits for the answer, not for the
        bookkeeping): first the pick's ledger entry, the metrics and the explain record
        (the next request on the event loop runs after them), then preparing the node batch
        and per-node values the next pod of this shape will read (speculative: a request
        that came in meanwhile may go first). Without `later` both run before returning."""
        pod = parse_pod(args.pod)
        n = len(args.names)
        if pod.error:
            self.metrics.prioritize_decisions.labels("invalid_pod").inc()
            return PrioritizeDecision([0] * n)
        self._observe(pod)
        batch, known, unknown = self._batch(args, pod, pod.shape.model)
        scores = score_batch(
            pod.shape, batch, self.scoring, self.shapes.snapshot(), now=self.clock.now()
        )
        out = np.full(n, NEUTRAL_SCORE, dtype=np.int64)
        out[known] = scores.score
        best = _best_row(scores)
        if best is not None:
            _single_top(out, known, int(known[best]))

        def bookkeeping() -> None:
            self._record_best(pod, scores, best)
            self.metrics.terms.observe_many({t: getattr(scores, t) for t in TERMS})
            self.metrics.count_signals(batch.codes, len(unknown))
            if best is None:
                outcome = "no_fit" if len(batch) else "no_gpu"
            else:
                outcome = "placed"
            self.metrics.child(self.metrics.prioritize_decisions, outcome).inc()
            self._remember("prioritize", pod, args, unknown, scores, {}, int(scores.fits.sum()))

        jobs = [bookkeeping]
        if best is not None and args.nodes is None:  # names-only: a kept batch to prepare
            jobs.append(lambda: self._warm(args, pod))
        if log.isEnabledFor(logging.DEBUG):  # before the answer: the line says what was sent
            self._log_prioritize(pod, n, len(unknown), scores, best)
        if later is None:
            for job in jobs:
                job()
        else:
            later += jobs
        return PrioritizeDecision(out.tolist())

    def _log_prioritize(
        self, pod: PodInfo, n: int, unknown: int, scores: BatchScores, best: int | None
    ) -> None:
        kv: dict[str, Any] = {
            "pod": pod.key,
            "nodes": n,
            "unknown": unknown,
            "shape": {
                "gpus": pod.shape.gpus,
                "mem_per_gpu_mib": pod.shape.mem_per_gpu_mib,
                "model": pod.shape.model,
                "modality": pod.shape.modality,
                "qos": pod.shape.qos,
            },
            "best": None if best is None else explain(scores.node(best)),
        }
        log.debug("prioritize decision", extra={"kv": kv})

    def _record_best(self, pod: PodInfo, scores: BatchScores, best: int | None) -> None:
        """Put the best fitting node (`_best_row`) into the ledger."""
        if best is None or (pod.shape.gpus <= 0 and not pod.shape.model):
            return
        chosen = tuple(scores.chosen[best].nonzero()[0].tolist())
        self.state.record_placement((pod.key, pod.uid), scores.names[best], pod.shape, chosen)

    def _warm(self, args: ExtenderArgs, pod: PodInfo) -> None:
        """Take the node batch as the next pod of a scaling Deployment will see it (this
        pick now in the ledger; a new pod has no entries of its own) and compute the values
        it keeps per batch (`warm_batch`), so that the next request finds them ready."""
        batch, _, _ = self.state.take_unordered(args.names, pod.shape.model, None)
        warm_batch(pod.shape, batch, self.scoring, self.shapes.snapshot())

    # --- explain ------------------------------------------------------------------------
    def explain(self, pod_key: str, top: int | None = None) -> dict[str, Any] | None:
        """The last filter/prioritize decision about `pod_key` ("ns/name"), or None."""
        with self._lock:
            per = self._decisions.get(pod_key)
            per = dict(per) if per else None
        if per is None:
            return None
        out: dict[str, Any] = {"pod": pod_key}
        wall = self.clock.now()
        for verb, d in per.items():
            entry: dict[str, Any] = {
                "at": round(d.at, 3),
                "age_s": round(wall - d.at, 3),
                "nodes": d.nodes,
                "passed": d.passed,
                "unknown_nodes": d.unknown,
                "pod_error": d.pod.error or None,
                "shape": {
                    "gpus": d.pod.shape.gpus,
                    "mem_per_gpu_mib": d.pod.shape.mem_per_gpu_mib,
                    "model": d.pod.shape.model,
                    "modality": d.pod.shape.modality,
                    "qos": d.pod.shape.qos,
                },
            }
            if verb == "filter":
                entry["failed"] = {k: f.message for k, f in d.failed.items()}
            sc = d.scores
            if sc is not None:
                rows = sorted(
                    range(len(sc.names)),
                    key=lambda i: (-int(sc.score[i]), -float(sc.value[i]), sc.names[i]),
                )
                if top is not None:
                    rows = rows[:top]
                entry["scores"] = [explain(sc.node(i)) for i in rows]
                for row in entry["scores"]:
                    row["signals_from"] = self.state.signals_source(row["node"])
                # the weights in this pod's values: contention's only where it covered the pod
                used = [t for t in TERMS if t != "contention" or not np.isnan(sc.contention).all()]
                entry["weights"] = {t: getattr(self.scoring.weights, t) for t in used}
                entry["contention_qos"] = list(self.scoring.contention_qos)
                entry["normalisation"] = self.scoring.normalisation
            out[verb] = entry
        out["shapes"] = self.shapes.snapshot().as_dicts()
        return out


def _best_row(scores: BatchScores) -> int | None:
    """The node the extender books for the pod: the highest scaled score that fits
    (scaled carries the candidate normalisation) in the best tier present; exact ties go
    to the highest `node_preference` (CRC-32 of the name, then the name), never to the
    request's order; None when nothing fits."""
    cand = scores.fits.nonzero()[0]
    if not len(cand):
        return None
    tiers = scores.tier[cand]
    if tiers.any():
        cand = cand[tiers == tiers.min()]
    scaled = scores.scaled[cand]
    top = cand[scaled >= scaled.max() - 1e-12]
    if len(top) == 1:
        return int(top[0])
    return int(max(top, key=lambda i: (node_preference(scores.names[i]), scores.names[i])))


def _single_top(out: np.ndarray, known: np.ndarray, best: int) -> None:
    """Make `best` the only node with the top score (issue 26, point 4): identical nodes
    all scored alike and kube-scheduler picked among them at random while the ledger
    booked one of them. Every other known node at the top goes one below (at 0, the best
    goes to 1); nodes unknown to the cache keep NEUTRAL_SCORE, and when the best equals it
    the best goes one above, so the scheduler's sum prefers the node the ledger holds."""
    top = out[best]
    tied = np.zeros(len(out), dtype=bool)
    tied[known] = out[known] >= top
    tied[best] = False
    if tied.any():
        if top > 0:
            out[tied] = top - 1
        else:
            out[best] = top = 1
    if top == NEUTRAL_SCORE and len(known) < len(out):
        out[best] = top + 1
