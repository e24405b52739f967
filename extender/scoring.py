"""Prioritize scoring (docs/design.md sections 4 and 5): pure functions, no I/O, no server.

Stable API (the extender server and the simulator both call it)::

    from extender.scoring import score_nodes, score_batch
    scores = score_nodes(pod, nodes, cfg, shapes)      # list[NodeScore], input order
    result = score_batch(pod, batch, cfg, shapes)      # BatchScores (numpy arrays)
    fits, value, chosen = node_values(pod, batch, cfg, shapes)  # before normalisation

- `pod` is a `PodShape`, `nodes` a sequence of `NodeState` (or `batch` a `NodeBatch`,
  the column form for many nodes: build it once, `take()` rows), `cfg` a
  `ScoringConfig`, `shapes` a `Shapes` snapshot of the target shape distribution
  (`ShapeDistribution.snapshot()`).
- Each `NodeScore` has `score` (int 0..10, what the scheduler gets), `value` (the
  unrounded weighted sum in [0,1] before candidate normalisation), `scaled` (the float
  that was rounded to `score`), `fits`, `terms` (the terms, each in [0,1]),
  `delta_f` (change of expected fragmentation in MiB, NaN where not computed), `rho`
  and `largest_free_mib`, `gpus_chosen` (GPU slots the pod would take) and `signals`.

Terms (each in [0,1], higher is better; one vectorised pure function per term over a
`NodeBatch` below, composed by `score_batch`; one node is a one-row batch):

    fragmentation  1 / (1 + exp(dF / D))     dF = F_n(after) - F_n(before), D = pod demand
    load           1 - load weight           (docs/design.md 4; GPU utilisation in its first part)
    spread         1 - r/(r+1) * (1 + 2 rho if rho > 0.35 else 1), clipped at 0
    modality       pool/modality affinity table, NVLink for multi-image and multi-GPU pods
    qos            realtime: mean(1 - p95/ceiling, 1 - streams/max_streams); others 0.5
    contention     1 - max(util_g, 1 if kvspread claims memory on g) for the GPU g the
                   device plugin will give the pod; one-GPU pods of `contention_qos` only

The value is the weighted mean of the terms (`combine`); contention counts only for the
pods it covers (its weight is added to the divisor for them alone), so every other pod's
value is that of the five terms. A node without fresh signals, or whose pods per GPU are
not tracked, gets 0.5 for contention.

A node without fresh signals gets 0.5 for fragmentation, load and qos (neutral) and is
counted by the caller; spread and modality come from labels and pods and still apply.
Such a node never wins against fresh data: while any node with fresh signals fits, every
candidate without them ranks below every fresh one (`rank_tiers`); it stays a candidate (and passes the filter) for when no fresh node fits or the cluster runs
no collectors at all.

Normalisation (`cfg.normalisation`):
- `absolute`: score = round(10 * value); a node's score depends on that node alone.
- `candidates` (default): values of the nodes that fit are min-max scaled over the
  candidate set (best 10, worst 0) before rounding; when all are equal the absolute
  value is used. Nodes the pod cannot fit on get 0 and take no part in the scaling.
  Before scaling, a stable per-node preference (`tie_break`) orders candidates that agree
  on every term but fragmentation (within TIE_EPSILON) and whose fragmentation terms differ
  by less than `cfg.tie_band` (0.1), so they resolve the same way every time; it never
  reorders candidates that differ in any other term. Only the best
  candidate(s) get 10: a node that merely rounds up to 10 gets 9, so the scheduler's random
  tie-break can never swap the extender's choice for a near miss. `value` and the terms
  stay as computed; `scaled` includes the preference.
  kube-scheduler multiplies an extender's 0..10 by its weight and adds it to its own
  plugins' normalised scores, so spreading the candidates over the full range makes the
  extender's preference count; the order of the nodes never matters.

Thread-safety: everything here is pure; inputs are never modified.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, NamedTuple, TypeVar

import numpy as np

from extender.batch import POOL_CODES, Keep, NodeBatch, patch_rows
from extender.config import ScoringConfig, TermWeights
from extender.fit import fewest_pods, fit_rows
from extender.model import SIGNAL_STATES, NodeState, PodShape
from extender.shapes import Shapes
from kvspread.gpumem import node_fragmentation

try:
    from numpy._core import umath as _umath
except ImportError:  # numpy 1.x
    from numpy.core import umath as _umath  # type: ignore[no-redef]

_clip: Any = _umath.clip  # type: ignore[attr-defined]
"""The clip ufunc itself: `np.clip` adds a Python wrapper of ~5 us a call (11 a request)."""

_T = TypeVar("_T")

__all__ = [
    "TERMS",
    "NEUTRAL",
    "TermValues",
    "NodeScore",
    "BatchScores",
    "node_preference",
    "TIE_EPSILON",
    "tie_break",
    "candidate_gpus",
    "expected_fragmentation",
    "placement_delta",
    "fragmentation_term",
    "load_term",
    "spread_term",
    "modality_term",
    "qos_term",
    "contention_term",
    "combine",
    "to_score",
    "explain",
    "score_nodes",
    "score_batch",
    "node_values",
    "warm_batch",
    "finish_scores",
    "rank_tiers",
    "TIER_SPREAD",
    "TIER_NO_SIGNALS",
    "SPREAD_SLACK",
    "MODALITY_AFFINITY",
]

TERMS = ("fragmentation", "load", "spread", "modality", "qos", "contention")
NEUTRAL = 0.5
"""The value of a term that has nothing to say about a node (missing or stale signals)."""

TIE_EPSILON = 1e-6
"""Candidates whose load, spread, modality, qos and contention terms all agree within this
(and only they) count as tied apart from fragmentation; the stable per-node preference may order them
(`tie_break`). It never reorders candidates that differ in any other term, however small
the difference: a real difference in pool, load, replicas or latency always decides."""

# The tie band (`ScoringConfig.tie_band`, default 0.1 of the fragmentation term's 0..1 range,
# i.e. 0.035 of the value with the default weights): within a tie group (TIE_EPSILON), the
# preference may override fragmentation terms closer than the band, never more; 0 confines it
# to exact ties. Why it exists: many placements change the expected fragmentation equally or
# nearly so (every empty node of a kind, every node with a whole GPU free), and kube-scheduler
# breaks ties at random, which scatters pods over empty nodes and leaves no node whole for
# large instances. A fixed order makes such candidates resolve the same way every time
# (first-fit), so partial placements concentrate on the same nodes; the FGD paper's published
# numbers rely on exactly such an order (its artifact scores int(100 x sigmoid), so near ties
# are exact ties, and picks the first node among them). Measured on the Alibaba trace (seed
# 42, docs/extender.md): exact ties only 5.73 % unallocated GPUs, a band of 0.1 4.42 %, FGD
# 4.68 %.


@lru_cache(maxsize=65536)
def node_preference(name: str) -> float:
    """Stable preference of a node in [0,1) from its name (CRC-32, the same in every
    process and on every restart, unlike Python's salted `hash`)."""
    return zlib.crc32(name.encode("utf-8")) / 2.0**32


@lru_cache(maxsize=8)
def _preferences(names: tuple[str, ...]) -> np.ndarray:
    """`node_preference` of each name, kept for the last few node lists (kube-scheduler
    sends the same list call after call)."""
    return _ro(np.fromiter(map(node_preference, names), float, len(names)))


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)  # cheaper than a.flags.writeable = False (no flags object)
    return a


_ROWS = Keep(patch_rows)
"""A row-wise value: patched along the first axis."""


def _of_batch(
    batch: NodeBatch,
    name: str | tuple[Hashable, ...],
    cfg: object,
    make: Callable[[NodeBatch], _T],
    keep: Keep | None = None,
) -> _T:
    """`make(batch)` (the batch and `cfg` alone, or with a pod shape named in `name`),
    once per batch and config (`NodeBatch.memo`: the node table hands out the same batch
    while its rows are unchanged, and one with a few rows changed carries it over as
    `keep` says; every value here is row-wise, patched along the first axis unless `keep`
    says otherwise). The config is kept with the value, so its id cannot be reused.

    A value already kept is read straight from the memo, without building the closure
    `memo` takes (the scorer asks for several such values per request)."""
    key = (name, id(cfg)) if isinstance(name, str) else (*name, id(cfg))
    got: tuple[object, _T] | None = batch.kept(key)
    if got is not None:
        return got[1]

    def pin(b: NodeBatch) -> tuple[object, _T]:
        return (cfg, make(b))

    got = batch.memo(key, pin, _pinned(keep or _ROWS))
    assert got is not None
    return got[1]


@cache
def _pinned(keep: Keep) -> Keep:
    """`keep` for the (config, value) pairs `_of_batch` stores: the value is patched, the
    config (the same object: its id is in the key) carried along. One per `Keep`."""
    patch = keep.patch
    if patch is None:
        return Keep(None, keep.reads, keep.limit)

    def repin(old: tuple[object, Any], rows: np.ndarray, new: tuple[object, Any]) -> Any:
        return (old[0], patch(old[1], rows, new[1]))

    return Keep(repin, keep.reads, keep.limit)


MODALITY_AFFINITY: Mapping[str, Mapping[str | None, float]] = {
    # pod modality -> node pool -> affinity. Vision pools hold the GPUs sized for image
    # encoders and long multimodal prompts; a text model there wastes them, an image model
    # on a language pool competes with short text requests (docs/design.md section 2).
    "text": {"language": 1.0, "mixed": 0.7, "vision": 0.3, None: 0.5},
    "image": {"language": 0.2, "mixed": 0.8, "vision": 1.0, None: 0.5},
    "multi-image": {"language": 0.1, "mixed": 0.7, "vision": 1.0, None: 0.5},
    "audio": {"language": 0.4, "mixed": 1.0, "vision": 0.6, None: 0.5},
}
MULTI_IMAGE_NVLINK_SHARE = 0.3
"""Share of the modality term that multi-image pods give to NVLink: tensor-parallel vision
encoders move image embeddings between GPUs, which NVLink makes cheap. Pods asking for
several GPUs (tensor parallel) give it too, whatever their modality: every layer ends in
an all-reduce between their GPUs, slower over PCIe."""


@dataclass(frozen=True, slots=True)
class TermValues:
    """The terms for one node, each in [0,1]; `contention` NaN for a pod it does not cover
    (left out of the value)."""

    fragmentation: float
    load: float
    spread: float
    modality: float
    qos: float
    contention: float = math.nan

    def as_dict(self) -> dict[str, float]:
        return {t: getattr(self, t) for t in TERMS}


@dataclass(frozen=True, slots=True)
class NodeScore:
    """One node's outcome for one pod; see the module docstring for the fields."""

    name: str
    score: int
    """What the scheduler gets, 0..10."""
    value: float
    scaled: float
    """`value` after candidate normalisation and the tie-break, before rounding."""
    fits: bool
    terms: TermValues
    delta_f: float
    """Change of the node's expected fragmentation in MiB (NaN: not computed)."""
    rho: float
    largest_free_mib: float
    gpus_chosen: tuple[int, ...]
    signals: str
    tier: int = 0
    """Rank tier (`rank_tiers`): TIER_NO_SIGNALS = fits without fresh signals, ranked below
    every fresh node the pod fits on; TIER_SPREAD = over the replica-spread bound."""
    signals_age_s: float = math.nan
    tie_break: float = 0.0
    """What the stable preference changed in `value` before scaling (`tie_break`)."""


# --- BatchScores ------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchScores:
    """Scores of one pod over a NodeBatch: (N,) arrays in the batch's row order."""

    names: tuple[str, ...]
    score: np.ndarray  # int
    value: np.ndarray
    scaled: np.ndarray
    fits: np.ndarray
    fragmentation: np.ndarray
    load: np.ndarray
    spread: np.ndarray
    modality: np.ndarray
    qos: np.ndarray
    contention: np.ndarray  # NaN where the term does not cover the pod
    delta_f: np.ndarray
    rho: np.ndarray
    largest_free: np.ndarray
    chosen: np.ndarray  # (N, G) bool: GPU slots the pod would take
    codes: np.ndarray  # (N,) int8 index into SIGNAL_STATES
    tier: np.ndarray  # (N,) int8 rank tier (`rank_tiers`): 0 ordinary, higher ranks below
    tie_break: np.ndarray  # (N,) the stable preference added before scaling (`tie_break`)
    age_s: np.ndarray  # (N,) age of the node's signals in seconds, NaN = unknown

    @property
    def signals(self) -> tuple[str, ...]:
        return tuple(SIGNAL_STATES[c] for c in self.codes)

    def node(self, i: int) -> NodeScore:
        """The i-th row as a NodeScore."""
        return NodeScore(
            name=self.names[i],
            score=int(self.score[i]),
            value=float(self.value[i]),
            scaled=float(self.scaled[i]),
            fits=bool(self.fits[i]),
            terms=TermValues(*(float(getattr(self, t)[i]) for t in TERMS)),
            delta_f=float(self.delta_f[i]),
            rho=float(self.rho[i]),
            largest_free_mib=float(self.largest_free[i]),
            gpus_chosen=tuple(int(j) for j in np.flatnonzero(self.chosen[i])),
            signals=SIGNAL_STATES[self.codes[i]],
            tier=int(self.tier[i]),
            tie_break=float(self.tie_break[i]),
            signals_age_s=float(self.age_s[i]),
        )

    def nodes(self) -> list[NodeScore]:
        return [self.node(i) for i in range(len(self.names))]


def explain(score: NodeScore) -> dict[str, Any]:
    """JSON-ready breakdown of one node's decision (/debug/explain, the debug log)."""

    def r(x: float) -> float | None:
        return None if not math.isfinite(x) else round(x, 4)

    return {
        "node": score.name,
        "score": score.score,
        "value": r(score.value),
        "scaled": r(score.scaled),
        "fits": score.fits,
        "signals": score.signals,
        "terms": {k: r(v) for k, v in score.terms.as_dict().items()},
        "delta_f_mib": r(score.delta_f),
        "rho": r(score.rho),
        "largest_free_mib": r(score.largest_free_mib),
        "gpus_chosen": list(score.gpus_chosen),
        "signals_age_s": r(score.signals_age_s),
        "tie_break": None if not math.isfinite(score.tie_break) else round(score.tie_break, 7),
        "note": _note(score),
    }


def _note(score: NodeScore) -> str | None:
    """Why a node ranks where it does when the terms alone do not say it."""
    if score.tier == TIER_NO_SIGNALS:
        age = f", {score.signals_age_s:.0f} s old" if math.isfinite(score.signals_age_s) else ""
        return (
            f"signals {score.signals}{age}: ranked below every node with fresh signals "
            "the pod fits on"
        )
    if score.tier == TIER_SPREAD:
        return (
            "holds SPREAD_SLACK or more replicas of the model above the least-loaded "
            "candidate: ranked below the nodes holding fewer"
        ).replace("SPREAD_SLACK", str(SPREAD_SLACK))
    if score.fits and score.signals != SIGNAL_STATES[0]:
        return f"signals {score.signals}: neutral terms (no node with fresh signals fits)"
    return None


# --- fit of the pod's GPUs ---------------------------------------------------------------


def candidate_gpus(
    pod: PodShape, batch: NodeBatch, cfg: ScoringConfig, fits: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """((N, G) GPU slots the pod may take, (N,) nodes it fits on).

    `fits` may pass a precomputed filter outcome (`fit_batch`); otherwise it is computed
    with the same rules. Where the device plugin picks the GPU (`gpu_assignment:
    fewest-pods`, a one-GPU pod, pod counts tracked), only the GPUs with the fewest pods
    are candidates and the node fits only when every one of them qualifies. Kept per batch
    and pod shape (row-wise: patched when a few rows change).
    """
    qual, own_fits, dp_ok = _of_batch(
        batch, ("candidates", pod.key), cfg, lambda b: _candidates(pod, b, cfg), _PER_POD
    )
    if fits is None:
        return qual, own_fits
    return qual, fits & dp_ok


_POD_MEMOS = 8
"""Pod shapes whose per-row values a batch keeps (a batch lives for a few requests; a
Deployment's replicas all have one shape)."""
_PER_POD = Keep(patch_rows, limit=_POD_MEMOS)


def _candidates(
    pod: PodShape, batch: NodeBatch, cfg: ScoringConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(qual, fits, dp_ok) of `candidate_gpus`: the filter's own predicate
    (`extender.fit.fit_rows`), with the device plugin's choice kept per batch."""
    rows = fit_rows(
        pod, batch, cfg, lambda b: _of_batch(b, "fewest-pods", None, fewest_pods, _FEWEST)
    )
    return _ro(rows.qual), _ro(rows.fits), _ro(rows.dp_ok)


# --- fragmentation -----------------------------------------------------------------------
#
# F_n = sum_m p_m F_n(m). The per-shape parts F_n(m) depend on the node and the shapes'
# geometry alone; the weights p change with every pod observed (extender/shapes.py), so the
# parts are kept per batch and pod shape (`_Placement`) and only the products with p are
# taken per request. Every part is computed row by row with reductions whose result does
# not depend on the other rows (numpy sums and einsum over a node's own GPUs; BLAS
# products only where they count 0/1 values, which is exact in any order), so that a
# batch that changed in a few rows patches them in bit for bit (`NodeBatch.memo`).


def _qual_shapes(free: np.ndarray, idle: np.ndarray, shapes: Shapes) -> np.ndarray:
    """(M, N, G) float 0/1: GPU g of node n can take one GPU of shape m.

    Shape-major layout: the reductions run over the contiguous last axis."""
    need = shapes.need[:, None, None]
    whole = shapes.whole[:, None, None]
    fits: np.ndarray = ((free[None] >= need) | (idle[None] & whole)).astype(np.float64)
    return fits


def _counts_sums(
    free: np.ndarray, idle: np.ndarray, shapes: Shapes
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(qf (M, N, G), qualifying GPUs per shape (M, N), their free memory (M, N), all
    free memory (N,)), each row from that node's GPUs alone."""
    qf = _qual_shapes(free, idle, shapes)
    q = qf @ np.ones(free.shape[1])  # counts of 0/1: exact in any summation order
    qsum = np.einsum("mng,ng->mn", qf, free)
    return qf, q, qsum, free.sum(axis=1)


def _frag_parts(free: np.ndarray, idle: np.ndarray, cpu: np.ndarray, shapes: Shapes) -> np.ndarray:
    """(M, N) F_n(m) for (N, G) free/idle and (N,) CPU; F_n = p @ this."""
    _, q, qsum, all_free = _counts_sums(free, idle, shapes)
    return _parts_of(q, qsum, all_free, cpu, shapes)


def _parts_of(
    q: np.ndarray, qsum: np.ndarray, all_free: np.ndarray, cpu: np.ndarray, shapes: Shapes
) -> np.ndarray:
    """(M, N) F_n(m) from `_counts_sums`' counts and sums: the free memory off the
    qualifying GPUs where shape m fits (k_m of them, and the CPU), else all of it."""
    fits = (q >= shapes.k[:, None]) & (cpu[None, :] >= shapes.cpu[:, None])
    parts: np.ndarray = np.where(fits, all_free[None, :] - qsum, all_free[None, :])
    return parts


def expected_fragmentation(batch: NodeBatch, shapes: Shapes, cfg: ScoringConfig) -> np.ndarray:
    """(N,) F_n = sum_m p_m F_n(m) (FGD; docs/design.md section 4), in MiB.

    F_n(m) = sum of free_g over GPUs that cannot take one GPU of shape m (free_g < g_m;
    for whole-GPU shapes: GPUs that are not idle) when m fits on the node (k_m such GPUs,
    and CPU where tracked), else the sum of all free_g.
    """
    parts = _frag_parts(batch.free(), batch.idle(cfg.idle_used_fraction), batch.cpu_free, shapes)
    f: np.ndarray = shapes.p @ parts
    return f


@dataclass(frozen=True)
class _Placement:
    """The p-free, row-wise part of `placement_delta` for one pod shape on every row.

    `before` (M, N): F_n(m) now. A one-GPU partial pod (`per_gpu`): `after` (G, M, N),
    F_n(m) after taking GPU slot g, and `busy` (G, N), the busy-GPU penalty of each slot
    (`chosen` None: the slot is picked per request). Otherwise `after` (M, N), F_n(m)
    after taking `chosen` (N, G); `busy` (G, N) always."""

    before: np.ndarray
    after: np.ndarray
    busy: np.ndarray
    chosen: np.ndarray | None
    per_gpu: bool

    def patched(self, rows: np.ndarray, new: _Placement) -> _Placement:
        """This with the entries of positions `rows` replaced by `new`'s (along the node
        axis: the last, or the first of `chosen`)."""

        def patch(old: np.ndarray | None, part: Any, axis: int = -1) -> Any:
            return None if old is None else patch_rows(old, rows, part, axis)

        return _Placement(
            patch(self.before, new.before),
            patch(self.after, new.after),
            patch(self.busy, new.busy),
            patch(self.chosen, new.chosen, 0),
            self.per_gpu,
        )


def _placement(
    pod: PodShape, batch: NodeBatch, qual: np.ndarray, cfg: ScoringConfig, shapes: Shapes
) -> _Placement:
    """`_Placement` of `pod` on every row of `batch` (`qual`: `candidate_gpus`' slots).

    A one-GPU partial pod tries every GPU slot; otherwise the k candidate GPUs with the
    least free memory are taken (best fit), ties by index (see `placement_delta`)."""
    free = batch.free()
    idle = batch.idle(cfg.idle_used_fraction)
    cpu = batch.cpu_free
    n, g = free.shape
    per_gpu = _term_demand(pod, batch) / max(1, pod.gpus)  # one number: the same products
    scale = per_gpu if isinstance(per_gpu, float) else per_gpu[:, None]
    busy = cfg.busy_gpu_penalty * _utilisation(batch) * scale  # (N, G)
    busy_t = _ro(busy.T)  # a view: only added and compared, never summed
    cpu_after = cpu - pod.cpu_milli
    need = pod.mem_per_gpu_mib
    if pod.gpus <= 0:
        before = _frag_parts(free, idle, cpu, shapes)
        after = _frag_parts(free, idle, cpu_after, shapes)
        none = _ro(np.zeros((n, g), dtype=bool))
        return _Placement(_ro(before), _ro(after), busy_t, none, False)
    if pod.gpus == 1 and need is not None:
        qf, q, qsum, all_free = _counts_sums(free, idle, shapes)
        k = shapes.k[:, None]
        before = _parts_of(q, qsum, all_free, cpu, shapes)
        cpu_fit = cpu_after[None, :] >= shapes.cpu[:, None]
        need_m = shapes.need[:, None]
        # every GPU slot j at once, GPU-major (G, M, N): only column j changes
        fT = free.T  # (G, N)
        fT2 = np.maximum(fT - need, 0.0)
        qT = qf.transpose(2, 0, 1)  # (G, M, N)
        qT2 = (fT2[:, None, :] >= need_m[None]).astype(np.float64)  # idle is lost once placed
        # q2 = q - qT + qT2, nonq2 = all2 - (qsum - qT fT + qT2 fT2), temporaries reused
        q2 = np.subtract(q[None], qT)
        q2 += qT2
        all2 = all_free[None] - (fT - fT2)  # (G, N)
        nonq2 = np.multiply(qT, fT[:, None, :])
        np.subtract(qsum[None], nonq2, out=nonq2)
        qT2 *= fT2[:, None, :]
        nonq2 += qT2
        np.subtract(all2[:, None, :], nonq2, out=nonq2)
        ok = q2 >= k[None]
        ok &= cpu_fit[None]
        after = np.ascontiguousarray(np.where(ok, nonq2, all2[:, None, :]))
        return _Placement(_ro(before), _ro(after), busy_t, None, True)
    # k GPUs (whole, or partial on several): best fit, least free first, ties by index.
    key = np.where(qual, free + busy, np.inf)
    order = np.argsort(key, axis=1, kind="stable")[:, : pod.gpus]
    chosen = np.zeros((n, g), dtype=bool)
    np.put_along_axis(chosen, order, True, axis=1)
    chosen &= qual
    if need is None:
        free2 = np.where(chosen, 0.0, free)
    else:
        free2 = np.where(chosen, np.maximum(free - need, 0.0), free)
    idle2 = idle & ~chosen
    before = _frag_parts(free, idle, cpu, shapes)
    after = _frag_parts(free2, idle2, cpu_after, shapes)
    return _Placement(_ro(before), _ro(after), busy_t, _ro(chosen), False)


def _demand(pod: PodShape, batch: NodeBatch) -> np.ndarray:
    """(N,) the pod's GPU-memory demand D in MiB (whole GPUs: the node's largest GPU)."""
    if pod.mem_per_gpu_mib is not None:
        return np.full(len(batch), max(1, pod.gpus) * pod.mem_per_gpu_mib)
    need: np.ndarray = max(1, pod.gpus) * batch.total.max(axis=1, initial=0.0)
    return need


def placement_delta(
    pod: PodShape,
    batch: NodeBatch,
    qual: np.ndarray,
    fits: np.ndarray,
    cfg: ScoringConfig,
    shapes: Shapes,
) -> tuple[np.ndarray, np.ndarray]:
    """((N,) dF, (N, G) GPUs chosen) for placing `pod` on each node; NaN and no GPUs where
    it does not fit or the node has no fresh signals. `qual`/`fits` from `candidate_gpus`.

    GPU choice: a one-GPU partial pod tries every candidate GPU and keeps the one with the
    smallest F after (FGD); otherwise the k candidate GPUs with the least free memory are
    taken (best fit), ties by index. Where the signals report GPU utilisation, a busy GPU
    costs `cfg.busy_gpu_penalty` x util x demand per GPU on top (in MiB, like F): an
    instance added to a GPU that already computes slows every process on it
    (time-slicing), so a busy GPU is taken only when it saves that much fragmentation.

    The p-free parts are kept per batch, pod shape and shape geometry (`_Placement`); `qual`
    must be what `candidate_gpus` gives for this pod and batch.
    """
    n = len(batch)
    delta = np.full(n, np.nan)
    can = fits & batch.fresh
    if not can.any():
        return delta, np.zeros(batch.total.shape, dtype=bool)
    pl = _placement_of(pod, batch, cfg, shapes)
    p = shapes.p
    if not pl.per_gpu:
        d = p @ pl.after - p @ pl.before
        assert pl.chosen is not None  # chosen per shape, not per request
        chosen = pl.chosen
    else:
        # F after for every GPU slot in one stacked product; the choice is sequential:
        # GPU j wins only when it costs at least 1e-9 less than the best so far. A GPU
        # that does not qualify costs inf (never below); `bar` holds best cost - 1e-9
        fa = p @ pl.after  # (G, N)
        cost_q = np.where(qual.T, fa + pl.busy, np.inf)
        choose = _scan_rows if n <= _SCAN_ROWS else _choose_slots
        best, best_i = choose(cost_q, fa)
        chosen = np.zeros(batch.total.shape, dtype=bool)
        chosen[np.arange(n), np.maximum(best_i, 0)] = True
        d = best - p @ pl.before
    delta[can] = d[can]
    return delta, chosen & can[:, None]


_SCAN_ROWS = 8
"""Up to this many rows the one-GPU choice runs in Python over each row's few GPU costs
(a batch of a node or two: the simulator re-scores the nodes that changed) instead of
three numpy calls per GPU slot."""


def _choose_slots(cost_q: np.ndarray, fa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(F after at the chosen slot, inf where none; the chosen slot, -1 where none) per
    row, from the (G, N) costs (inf: the slot does not qualify) and F after: GPU slot j
    wins only when it costs at least 1e-9 less than the best so far, three numpy calls a
    slot some row may win (costs below inf). `bars` holds each cost - 1e-9."""
    n = cost_q.shape[1]
    bars = cost_q - 1e-9
    bar = np.full(n, np.inf)
    best_i = np.full(n, -1, dtype=np.intp)
    for i in np.flatnonzero((cost_q < np.inf).any(axis=1)).tolist():  # a slot that may win
        better = cost_q[i] < bar
        np.copyto(bar, bars[i], where=better)
        np.copyto(best_i, i, where=better)
    best = np.where(best_i >= 0, fa[np.maximum(best_i, 0), np.arange(n)], np.inf)
    return best, best_i


def _scan_rows(cost_q: np.ndarray, fa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_choose_slots` on Python floats, row by row: the same comparisons and the same
    subtraction of 1e-9."""
    best: list[float] = []
    picks: list[int] = []
    for costs, after in zip(cost_q.T.tolist(), fa.T.tolist(), strict=True):
        bar = math.inf
        pick = -1
        for i, c in enumerate(costs):
            if c < bar:
                bar = c - 1e-9
                pick = i
        picks.append(pick)
        best.append(after[pick] if pick >= 0 else math.inf)
    return np.array(best), np.array(picks, dtype=np.intp)


def _placement_of(
    pod: PodShape, batch: NodeBatch, cfg: ScoringConfig, shapes: Shapes
) -> _Placement:
    """`_Placement` of `pod`, kept per batch, pod shape and shape geometry."""

    def make(b: NodeBatch) -> _Placement:
        return _placement(pod, b, candidate_gpus(pod, b, cfg)[0], cfg, shapes)

    pl: _Placement = _of_batch(
        batch,
        ("placement", pod.key, shapes.geometry),
        cfg,
        make,
        _PLACEMENT,
    )
    return pl


_PLACEMENT = Keep(_Placement.patched, limit=_POD_MEMOS)


def warm_batch(pod: PodShape, batch: NodeBatch, cfg: ScoringConfig, shapes: Shapes) -> None:
    """Compute what `score_batch` keeps with `batch` for a pod of `pod`'s shape (its GPU
    candidates and placement parts, and the pod-independent columns), without scoring:
    the extender runs it after answering, so that the next pod of a scaling Deployment
    finds them ready."""
    if not len(batch):
        return
    _, fits = candidate_gpus(pod, batch, cfg)
    if (fits & batch.fresh).any():
        _placement_of(pod, batch, cfg, shapes)
    _rho_of(batch)
    load_term(batch, cfg)
    qos_term(pod, batch, cfg)
    contention_term(pod, batch, cfg)


def _utilisation(batch: NodeBatch) -> np.ndarray:
    """(N, G) GPU utilisation clipped to [0,1], 0 where not measured (the busy penalty)."""

    def make(b: NodeBatch) -> np.ndarray:
        u = b.util  # NaN (not measured) -> 0; +-inf clip to 1 and 0 as nan_to_num's +-max
        return _ro(_clip(np.where(np.isnan(u), 0.0, u), 0.0, 1.0))

    return _of_batch(batch, "utilisation", None, make, _UTILISATION)


# --- the terms ---------------------------------------------------------------------------


def fragmentation_term(delta_f: np.ndarray, demand_mib: np.ndarray | float) -> np.ndarray:
    """(N,) fragmentation term in (0,1) from dF, the change of expected fragmentation.

    FGD (Weng et al., USENIX ATC'23; docs/design.md sections 4-5) places a pod where the
    expected fragmentation F_n grows least. term = 1 / (1 + exp(dF / D)) with D the pod's
    GPU-memory demand: 0.5 when dF = 0, towards 1 when the placement removes fragments,
    towards 0 when it creates them; strictly decreasing in dF, so it keeps FGD's order.
    NaN dF (not computed) is neutral. `demand_mib` is (N,) or one number for every node.
    """
    if isinstance(demand_mib, np.ndarray):
        d: np.ndarray | float = np.where(demand_mib > 0, demand_mib, 1.0)
    else:  # one demand for every node (a pod that names its GPU memory)
        d = demand_mib if demand_mib > 0 else 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        x = _clip(delta_f / d, -50.0, 50.0)
        return np.where(np.isnan(delta_f), NEUTRAL, 1.0 / (1.0 + np.exp(x)))


def _term_demand(pod: PodShape, batch: NodeBatch) -> np.ndarray | float:
    """`_demand`, as one number when it is the same on every node (the pod names its GPU
    memory): the fragmentation term then divides by it without an (N,) array."""
    if pod.mem_per_gpu_mib is not None:
        return max(1, pod.gpus) * pod.mem_per_gpu_mib
    return _demand(pod, batch)


def _weighted_parts(parts: Sequence[tuple[float, np.ndarray]], n: int) -> np.ndarray:
    """(N,) weighted mean of the parts present (not NaN) per row; NaN where none is."""
    num = np.zeros(n)
    den = np.zeros(n)
    for w, part in parts:  # every part is finite or NaN (clipped ratios)
        absent = np.isnan(part)
        if absent.all():
            continue  # it would add +0.0 to sums that are never -0.0: the same bits
        present = ~absent
        num += np.where(present, w * part, 0.0)
        den += np.where(present, w, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def load_term(batch: NodeBatch, cfg: ScoringConfig) -> np.ndarray:
    """(N,) 1 - load (`_load_term`), once per batch (read-only)."""
    return _of_batch(batch, "load", cfg, lambda b: _ro(_load_term(b, cfg)), _LOAD)


# the pod-independent kept values, each with every column it reads (NodeBatch.memo)
_LOAD = Keep(patch_rows, ("fresh", "valid", "total", "used", "util", "streams", "image_share"))
"""`_load_term` (claims in `alloc` are left out of load on purpose)."""
_FRAGMENTATION = Keep(patch_rows, ("total", "used", "alloc", "fresh"))
"""`_node_fragmentation` (through `NodeBatch.free`)."""
_QOS = Keep(patch_rows, ("p95", "streams", "fresh"))
_UTILISATION = Keep(patch_rows, ("util",))
_FEWEST = Keep(patch_rows, ("pods", "fresh", "valid"))
_CONTENTION = Keep(patch_rows, ("pods", "fresh", "valid", "util", "alloc"))


def _load_term(batch: NodeBatch, cfg: ScoringConfig) -> np.ndarray:
    """(N,) 1 - load, load = 0.4 busy + 0.3 streams/max_streams + 0.3 image share.

    busy = (1 - s) mem_used/mem_total + s util (s = `cfg.util_share`): measured memory
    (docs/design.md section 4) with the node's mean GPU utilisation folded in where the
    collector measured it; either alone where only one is measured. Claims count in fit
    and fragmentation through free = total - max(used, allocated); counting them here too
    would turn load into "prefer the least-claimed node" and undo the packing. Weights
    from `cfg.load_weights`. A part that was not measured is left out and the remaining
    weights renormalised (never zero-filled); nothing measured, or no fresh signals,
    gives the neutral 0.5.
    """
    n = len(batch)
    fresh = batch.fresh
    valid = batch.valid
    tot = np.where(valid, batch.total, 0.0).sum(axis=1)
    used = np.where(valid, batch.used, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mem = np.where(tot > 0, _clip(used / np.where(tot > 0, tot, 1.0), 0, 1), np.nan)
    u_valid = valid & ~np.isnan(batch.util)
    if u_valid.any():
        u_count = u_valid.sum(axis=1)
        u_mean = np.where(
            u_count > 0,
            _clip(np.where(u_valid, batch.util, 0.0), 0, 1).sum(axis=1) / np.maximum(u_count, 1),
            np.nan,
        )
        s = cfg.util_share
        both = (1.0 - s) * mem + s * u_mean
        busy = np.where(np.isnan(u_mean), mem, np.where(np.isnan(mem), u_mean, both))
    else:
        busy = mem  # no utilisation measured: the mean is NaN on every node
    lw = cfg.load_weights
    load = _weighted_parts(
        (
            (lw.memory, np.where(fresh, busy, np.nan)),
            (lw.streams, _clip(batch.streams / cfg.max_streams, 0, 1)),
            (lw.image, _clip(batch.image_share, 0, 1)),
        ),
        n,
    )
    return np.where(fresh & ~np.isnan(load), 1.0 - load, NEUTRAL)


def spread_term(replicas: np.ndarray, rho: np.ndarray, cfg: ScoringConfig) -> np.ndarray:
    """(N,) 1 - repulsion: fewer replicas of the same model on the node score higher.

    repulsion = r / (r + 1) for r replicas already there (bound or recently placed),
    multiplied by 1 + 2 rho when the node's fragmentation rho exceeds 0.35 (docs/design.md
    section 5; slope and threshold from cfg): a fragmented node holding a replica is
    a worse place for another. Clipped to [0,1].
    """
    rep = replicas / (replicas + 1.0)
    rep = np.where(rho > cfg.rho_threshold, rep * (1.0 + cfg.rho_repulsion * rho), rep)
    out: np.ndarray = _clip(1.0 - rep, 0.0, 1.0)
    return out


def modality_term(pod: PodShape, batch: NodeBatch) -> np.ndarray:
    """(N,) affinity of the pod's modality to each node's pool (`MODALITY_AFFINITY`).

    Multi-image pods and pods asking for several GPUs give 30 % of the term to NVLink
    (docs/design.md section 5). An unknown modality or pool is neutral.
    """
    lut = _modality_lut(pod.modality)
    if lut is None:
        return np.full(len(batch), NEUTRAL)
    out: np.ndarray = lut[batch.pool]
    if pod.modality == "multi-image" or pod.gpus > 1:
        out = (1 - MULTI_IMAGE_NVLINK_SHARE) * out + MULTI_IMAGE_NVLINK_SHARE * batch.nvlink
    return out


@lru_cache(maxsize=16)
def _modality_lut(modality: str) -> np.ndarray | None:
    """Affinity of `modality` to each pool code (`POOL_CODES`); None for an unknown one."""
    table = MODALITY_AFFINITY.get(modality)
    if table is None:
        return None
    pools = sorted(POOL_CODES.items(), key=lambda kv: kv[1])
    return _ro(np.array([table.get(p, NEUTRAL) for p, _ in pools]))


def qos_term(pod: PodShape, batch: NodeBatch, cfg: ScoringConfig) -> np.ndarray:
    """(N,) realtime pods prefer nodes with lower p95 latency and fewer streams.

    realtime: mean of (1 - min(1, p95 / qos_p95_ceiling_s)) and (1 - min(1, streams /
    max_streams)) over the parts measured (docs/design.md section 5). Batch and best-effort
    pods, and nodes with neither measurement or no fresh signals, get the neutral 0.5.
    """
    if pod.qos != "realtime":
        return np.full(len(batch), NEUTRAL)
    return _of_batch(batch, "qos", cfg, lambda b: _ro(_realtime_qos(b, cfg)), _QOS)


def _realtime_qos(batch: NodeBatch, cfg: ScoringConfig) -> np.ndarray:
    """`qos_term` of a realtime pod (it depends on nothing else of the pod)."""
    n = len(batch)
    qos = _weighted_parts(
        (
            (1.0, 1.0 - _clip(batch.p95 / cfg.qos_p95_ceiling_s, 0, 1)),
            (1.0, 1.0 - _clip(batch.streams / cfg.max_streams, 0, 1)),
        ),
        n,
    )
    return np.where(batch.fresh & ~np.isnan(qos), qos, NEUTRAL)


def combine(terms: Mapping[str, np.ndarray], weights: TermWeights) -> np.ndarray:
    """(N,) weighted mean of the terms (weights need not sum to 1), clipped to [0,1].

    `contention` counts when `terms` holds it (for a pod the term covers), else the mean
    is that of the five terms, bit for bit as before the term existed."""
    has = "contention" in terms
    value = sum(getattr(weights, t) * terms[t] for t in TERMS if has or t != "contention")
    clipped: np.ndarray = _clip(value / weights.total(has), 0.0, 1.0)
    return clipped


def covers(pod: PodShape, cfg: ScoringConfig) -> bool:
    """True when the contention term counts in `pod`'s value: a pod on one time-sliced GPU
    of a QoS class in `cfg.contention_qos`, with a contention weight above 0."""
    return pod.gpus == 1 and pod.qos in cfg.contention_qos and cfg.weights.contention > 0


def contention_term(
    pod: PodShape, batch: NodeBatch, cfg: ScoringConfig, chosen: np.ndarray | None = None
) -> np.ndarray:
    """(N,) 1 - contention of the GPU the device plugin will give `pod`; NaN on every row
    when the term does not cover the pod (`covers`).

    Time-slicing runs one CUDA context at a time: a replica on a GPU that another process
    computes on gets a share of each step. The plugin gives a one-GPU pod the GPU with the
    fewest pods, ties to the lower index (`extender.fit.fewest_pods`, the prediction the
    filter already makes); contention = max(its NVML utilisation, 1 where kvspread pods
    claim memory on it: an engine computes whenever it serves, idle or not at this
    instant). Measured utilisation alone was not enough in the serving simulation: engines
    still loading or between bursts read 0 and drew the next replica
    (docs/evaluation.md section 3). Neutral 0.5 where the pods per GPU are not tracked or
    the signals are not fresh (the prediction is unknown). Under `gpu_assignment: scored`
    the GPU is the one the scoring picks (`chosen`, (N, G), from `placement_delta`)."""
    if not covers(pod, cfg):
        return np.full(len(batch), np.nan)
    if cfg.gpu_assignment == "scored":
        if chosen is None:
            raise ValueError("gpu_assignment scored: pass the GPUs chosen (placement_delta)")
        return _contention_at(batch, batch.fresh, chosen)
    return _of_batch(batch, "contention", None, _contention, _CONTENTION)


def _contention(batch: NodeBatch) -> np.ndarray:
    """`contention_term` of a covered pod (it depends on nothing else of the pod)."""
    known, cand = _of_batch(batch, "fewest-pods", None, fewest_pods, _FEWEST)
    return _ro(_contention_at(batch, known, cand))


def _contention_at(batch: NodeBatch, known: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """(N,) 1 - contention of the first GPU marked in each row of `gpus` (N, G) (for the
    device plugin: its pick among those with the fewest pods), NaN-free; neutral where
    the row is not `known` or marks none."""
    n = len(batch)
    if not n or not gpus.shape[1]:
        return np.full(n, NEUTRAL)
    rows = np.arange(n)
    g = np.argmax(gpus, axis=1)
    busy = np.maximum(_utilisation(batch)[rows, g], (batch.alloc[rows, g] > 0.0).astype(float))
    out: np.ndarray = np.where(known & gpus.any(axis=1), 1.0 - busy, NEUTRAL)
    return out


def to_score(scaled: np.ndarray) -> np.ndarray:
    """[0,1] -> integer 0..10, rounding half up (deterministic, no banker's rounding)."""
    x = np.where(np.isfinite(scaled), scaled, 0.0)
    x *= 10.0  # in place: the same operations as floor(x * 10 + 0.5), no temporaries
    x += 0.5
    np.floor(x, out=x)
    score: np.ndarray = _clip(x, 0, 10, out=x).astype(np.int64)
    return score


# --- composition -------------------------------------------------------------------------


def score_batch(
    pod: PodShape,
    batch: NodeBatch,
    cfg: ScoringConfig,
    shapes: Shapes,
    *,
    fits: np.ndarray | None = None,
    now: float | None = None,
) -> BatchScores:
    """Score `pod` on every row of `batch` (see the module docstring).

    `fits` may pass a precomputed filter outcome (from `fit_batch`); otherwise it is
    computed with the same rules. `now` (wall seconds) gives the signals' age for explain.
    """
    age_s = np.full(len(batch), np.nan) if now is None else now - batch.sig_ts
    got = _weigh(pod, batch, cfg, shapes, fits)
    fits, terms, value, delta, chosen = got.fits, got.terms, got.value, got.delta, got.chosen
    replicas = got.replicas if pod.model else None
    tier = rank_tiers(fits, batch.fresh, replicas)
    w = cfg.weights
    covered = "contention" in terms  # `_weigh` adds it exactly where `covers(pod, cfg)`
    total = w.total(covered)
    rest = value - w.fragmentation * terms["fragmentation"] / total
    share = w.fragmentation / total  # `_fragmentation_share(pod, cfg)`
    scaled, score, tb = _finish(value, fits, cfg, batch.names, tier, rest, share=share)
    # the fields in their declared order (the terms in TERMS order)
    if not covered:
        terms = {**terms, "contention": np.full(len(batch), np.nan)}
    frag, load, spread, modality, qos, contention = (terms[t] for t in TERMS)
    node = (delta, got.rho, got.largest, chosen, batch.codes, tier, tb, age_s)
    return BatchScores(
        batch.names,
        score,
        value,
        scaled,
        fits,
        frag,
        load,
        spread,
        modality,
        qos,
        contention,
        *node,
    )


def _fragmentation_share(pod: PodShape | None, cfg: ScoringConfig) -> float:
    """The fragmentation term's weight over the weights in `pod`'s value (the tie band is
    measured in it); the five terms' for None."""
    w = cfg.weights
    return w.fragmentation / w.total(pod is not None and covers(pod, cfg))


def node_values(
    pod: PodShape,
    batch: NodeBatch,
    cfg: ScoringConfig,
    shapes: Shapes,
    *,
    fits: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """((N,) fits, (N,) value, (N, G) GPUs chosen): `score_batch`'s weighted values before
    any normalisation, bit for bit, without the finishing steps, for a caller that finishes
    them over another candidate set (`finish_scores`: the simulator keeps values per node
    and re-scores only the nodes that changed, a node or two at a time)."""
    got = _weigh(pod, batch, cfg, shapes, fits)
    return got.fits, got.value, got.chosen


class _Weighed(NamedTuple):
    """Everything of `score_batch` before the finishing steps (all (N,) but `chosen`)."""

    fits: np.ndarray
    terms: dict[str, np.ndarray]  # the terms by name (contention only where it covers the pod)
    value: np.ndarray
    delta: np.ndarray  # dF, MiB
    chosen: np.ndarray  # (N, G) GPUs chosen
    rho: np.ndarray
    largest: np.ndarray  # largest free extent
    replicas: np.ndarray  # of the pod's model


def _weigh(
    pod: PodShape,
    batch: NodeBatch,
    cfg: ScoringConfig,
    shapes: Shapes,
    fits: np.ndarray | None,
) -> _Weighed:
    """`score_batch`'s values before the finishing steps (`_Weighed`)."""
    qual, fits = candidate_gpus(pod, batch, cfg, fits)
    delta, chosen = placement_delta(pod, batch, qual, fits, cfg, shapes)
    rho, largest = _rho_of(batch)
    replicas = batch.replica_counts(pod.model)
    terms = {
        "fragmentation": np.where(fits, fragmentation_term(delta, _term_demand(pod, batch)), 0.0),
        "load": load_term(batch, cfg),
        "spread": spread_term(replicas, rho, cfg),
        "modality": modality_term(pod, batch),
        "qos": qos_term(pod, batch, cfg),
    }
    if covers(pod, cfg):
        terms["contention"] = contention_term(pod, batch, cfg, chosen)
    value = combine(terms, cfg.weights)
    return _Weighed(fits, terms, value, delta, chosen, rho, largest, replicas)


def _rho_of(batch: NodeBatch) -> tuple[np.ndarray, np.ndarray]:
    """(rho, largest free extent) per node (`_node_fragmentation`), once per batch."""
    got: tuple[np.ndarray, np.ndarray] = _of_batch(
        batch, "fragmentation", None, _node_fragmentation, _FRAGMENTATION
    )
    return got


def _node_fragmentation(batch: NodeBatch) -> tuple[np.ndarray, np.ndarray]:
    """(rho, largest free extent) of each node with fresh signals (0 and NaN without)."""
    rho, largest = node_fragmentation(batch.free())
    fresh = batch.fresh
    return _ro(np.where(fresh, rho, 0.0)), _ro(np.where(fresh, largest, np.nan))


TIER_SPREAD = 1
"""Rank tier of a candidate holding SPREAD_SLACK or more replicas of the pod's model above
the least-loaded candidate (see `rank_tiers`)."""
TIER_NO_SIGNALS = 2
"""Rank tier of a candidate without fresh signals while a node with fresh signals fits."""
SPREAD_SLACK = 2
"""A candidate holding r >= r_min + SPREAD_SLACK replicas of the pod's model (r_min: the
fewest on any node the pod fits on) ranks below those holding fewer. Placing only where
r <= r_min + 1 keeps every node at most r_min + 2 <= ceil(replicas / fitting nodes) + 1
(if r_min reached replicas / nodes, the total would exceed the replicas), whatever the
weights; below that bound fragmentation and the other terms decide as usual."""


def tie_break(
    value: np.ndarray,
    fits: np.ndarray,
    cfg: ScoringConfig,
    names: Sequence[str] | None,
    rest: np.ndarray | None = None,
    *,
    pod: PodShape | None = None,
) -> np.ndarray:
    """(N,) what the stable preference changes in each candidate's value before scaling.

    Candidates are grouped by `rest` (the value without the fragmentation term; None: one
    group) equal within TIE_EPSILON. Within a group they are ordered by value +
    `cfg.tie_band` x fragmentation share x `node_preference`, and each takes the value
    at its place in that order: the group's values are permuted among its members, never
    changed, so no candidate moves past one of another group, and the best value of the
    request stays the best. Exact ties left over (and every exact tie with `tie_band` 0) are
    ordered by the preference too (1e-9 x rank). The fragmentation share is that of the
    value of `pod` (None: a pod the contention term does not cover).
    0 under `absolute` normalisation, without names, or when every value is the same."""
    if cfg.normalisation == "absolute" or names is None:
        return np.zeros(len(value))
    share = _fragmentation_share(pod, cfg)
    return _tie_break(value, np.flatnonzero(fits), cfg, names, rest, share=share)


_SMALL_GROUPS = 32
"""Up to this many candidates in groups of two or more are permuted in Python (a sort of
a few tuples); more take the vectorised lexsort."""


def _tie_break(
    value: np.ndarray,
    c: np.ndarray,
    cfg: ScoringConfig,
    names: Sequence[str],
    rest: np.ndarray | None,
    preferences: np.ndarray | None = None,
    *,
    share: float,
) -> np.ndarray:
    """`tie_break` of the candidates at rows `c` (ascending), names given (and their
    `node_preference`s, when the caller holds them), `share` the fragmentation term's
    share of the value (`_fragmentation_share`).

    Typically every group but a few is a single candidate, and every key differs: then a
    sort of the groups finds nothing to permute, one argsort ranks the keys, and neither
    the lexsorts nor the stable argsort of the groups run."""
    out = np.zeros(len(value))
    if not len(c):
        return out
    v = value[c]
    if float(v.max()) - float(v.min()) <= 1e-9:
        return out
    pref = (_preferences_of(names) if preferences is None else preferences)[c]
    key = v + cfg.tie_band * share * pref
    ranked = v
    if len(c) > 1:
        if rest is None:
            ranked = _permute_groups(v, key, pref, np.zeros(len(c), dtype=np.int64), None)
        else:
            r = rest[c]  # a copy: floor(rest / TIE_EPSILON + 0.5) in place
            r /= TIE_EPSILON
            r += 0.5
            group = np.floor(r, out=r).astype(np.int64)
            sorted_groups = group.copy()
            sorted_groups.sort()
            same = sorted_groups[1:] == sorted_groups[:-1]
            if same.any():
                ranked = _permute_groups(v, key, pref, group, sorted_groups[1:][same])
    # exact ties left over (equal values) go by the same order, never by anything else
    by_order = key.argsort()
    s = key[by_order]
    if not _all_distinct(s):
        by_order = np.lexsort((pref, key))
    inc = np.empty(len(c))
    inc[by_order] = _tie_steps(len(c))
    if ranked is v and math.isfinite(s[0]) and math.isfinite(s[-1]):
        out[c] = inc  # every value finite: (v - v) + inc is inc, bit for bit
    else:
        out[c] = ranked - v + inc
    return out


@lru_cache(maxsize=64)
def _tie_steps(n: int) -> np.ndarray:
    """1e-9 x rank / n for ranks 0..n-1: the exact-tie order's share of the tie-break."""
    return _ro(1e-9 * (np.arange(n) / n))


def _permute_groups(
    v: np.ndarray, key: np.ndarray, pref: np.ndarray, group: np.ndarray, shared: np.ndarray | None
) -> np.ndarray:
    """`v` with each group's values permuted: the best key (then preference, then
    position) takes the group's best value (ties by position), and so on down.
    `shared` lists the groups of two or more candidates (repeats allowed; None: work them
    out)."""
    ranked = v.copy()
    found = None if shared is None else sorted(set(shared.tolist()))
    if found is None or len(found) > _FEW_GROUPS:
        by_group = group.argsort(kind="stable")
        gs = group[by_group]
        same = gs[1:] == gs[:-1]
        mask = np.zeros(len(v), dtype=bool)
        mask[1:] |= same
        mask[:-1] |= same
        m = by_group[mask]  # in group order, ascending position within a group
        members = [m]
    else:
        members = [(group == g).nonzero()[0] for g in found]  # ascending position
        m = np.concatenate(members) if len(members) > 1 else members[0]
    if len(m) > _SMALL_GROUPS:
        return _permute_lexsort(v, key, pref, group, m, ranked)
    kl = key[m].tolist()
    if any(k != k for k in kl):  # NaN: Python's comparisons would not sort it last
        return _permute_lexsort(v, key, pref, group, m, ranked)
    gl = group[m].tolist()
    pl = pref[m].tolist()
    vl = v[m].tolist()
    ml = m.tolist()
    start = 0
    while start < len(ml):
        end = start + 1
        while end < len(ml) and gl[end] == gl[start]:
            end += 1
        run = range(start, end)  # ascending position, as the stable lexsort keeps them
        by_key = sorted(run, key=lambda k: (-kl[k], -pl[k]))
        by_value = sorted(run, key=lambda k: -vl[k])
        for x, y in zip(by_key, by_value, strict=True):
            ranked[ml[x]] = vl[y]
        start = end
    return ranked


_FEW_GROUPS = 4
"""Up to this many groups of two or more are found one comparison each; more by a stable
argsort of the groups."""


def _permute_lexsort(
    v: np.ndarray,
    key: np.ndarray,
    pref: np.ndarray,
    group: np.ndarray,
    m: np.ndarray,
    ranked: np.ndarray,
) -> np.ndarray:
    """`_permute_groups` for many members (or NaN keys): two lexsorts, or, when every
    member is in one group (the simulator: nodes alike but for their fragmentation), a
    stable argsort of each key: the same order, since a stable sort keeps positions among
    equal keys as the lexsort does; the key order only when its keys are distinct (else
    the preference decides among equal ones)."""
    gm = group[m]
    if gm[0] == gm[-1]:  # members come in group order: one group
        neg_v = -v[m]
        if not np.isnan(neg_v).any():
            neg_key = -key[m]
            order = neg_key.argsort(kind="stable")
            if not _all_distinct(neg_key[order]):
                order = np.lexsort((-pref[m], neg_key))
            ranked[m[order]] = v[m[neg_v.argsort(kind="stable")]]
            return ranked
    by_key = m[np.lexsort((-pref[m], -key[m], gm))]  # within each group: best key first
    by_value = m[np.lexsort((-v[m], gm))]  # within each group: best value first
    ranked[by_key] = v[by_value]
    return ranked


_last_prefs: tuple[tuple[str, ...], np.ndarray] | None = None
"""The node names of the last request and their preferences (the same tuple object comes
back while the node table's layout is unchanged: no hashing of 5,000 names)."""


def _preferences_of(names: Sequence[str]) -> np.ndarray:
    """`_preferences(tuple(names))`, the last tuple recognised by identity."""
    global _last_prefs
    last = _last_prefs
    if last is not None and last[0] is names:
        return last[1]
    key = tuple(names)
    prefs = _preferences(key)
    _last_prefs = (key, prefs)
    return prefs


def _all_distinct(s: np.ndarray) -> bool:
    """True when no two entries of the sorted `s` are equal (then a plain sort orders it
    exactly as a lexsort with tie-breaking keys would, at a fraction of the cost)."""
    if s.dtype.kind == "f" and len(s) and math.isnan(s[-1]):  # NaN sorts last; never "distinct"
        return False
    return bool((s[1:] != s[:-1]).all())


def rank_tiers(
    fits: np.ndarray, fresh: np.ndarray | None = None, replicas: np.ndarray | None = None
) -> np.ndarray:
    """(N,) int8 rank tier of each candidate; a lower tier always ranks above a higher one.

    0: ordinary. TIER_SPREAD: over the replica-spread bound (`SPREAD_SLACK`; `replicas` is
    the per-node count of the pod's model, None for a pod without a model). TIER_NO_SIGNALS:
    no fresh signals (stale, missing, invalid) while at least one node with fresh signals
    fits; such a node stays a candidate for when none does."""
    tier = np.zeros(len(fits), dtype=np.int8)
    if not fits.any():
        return tier
    if replicas is not None:
        r_min = float(replicas[fits].min())
        over = replicas >= r_min + SPREAD_SLACK
        over &= fits
        tier[over] = TIER_SPREAD
    if fresh is not None:
        stale = fits & ~fresh
        if stale.any() and (fits & fresh).any():
            tier[stale] = TIER_NO_SIGNALS
    return tier


def finish_scores(
    value: np.ndarray,
    fits: np.ndarray,
    cfg: ScoringConfig,
    names: Sequence[str] | None = None,
    tier: np.ndarray | None = None,
    *,
    preferences: np.ndarray | None = None,
    pod: PodShape | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(scaled, score): the last step of `score_batch`, from the nodes' weighted values to
    what the scheduler gets: `cfg.normalisation` over the nodes that fit (with the stable
    node preference when `names` are given and the values differ), then rounding to
    integers 0..10 (half up), only the best candidate(s) keeping 10. With `tier`
    (`rank_tiers`), only the best tier present is scaled; with k lower tiers present its
    candidates get at least k and the lower tiers k-1 .. 0, best first (scaled 0). Public
    so that a caller holding values per node (the simulator caches them between pods)
    finishes exactly as the extender does. `preferences` may pass `node_preference` of
    each name when the caller holds them (a new subset of one node list every call: no
    name looked up again); `names` must still be given for the preference to apply.
    `pod`: the pod the values were weighed for, where the contention term covers it (its
    weight changes the fragmentation term's share, in which the tie band is measured)."""
    share = _fragmentation_share(pod, cfg)
    scaled, score, _ = _finish(value, fits, cfg, names, tier, preferences=preferences, share=share)
    return scaled, score


def _finish(
    value: np.ndarray,
    fits: np.ndarray,
    cfg: ScoringConfig,
    names: Sequence[str] | None,
    tier: np.ndarray | None,
    rest: np.ndarray | None = None,
    preferences: np.ndarray | None = None,
    *,
    share: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`finish_scores` plus the tie-break each node got. The candidates' rows (`c`) are
    found once and serve the tie-break, the scaling and the cap at 9."""
    lower: list[int] = []
    all_fits = fits
    c = fits.nonzero()[0]
    if tier is not None and len(c) and tier.any():
        present = np.flatnonzero(np.bincount(tier[c])).tolist()  # tiers in use, best first
        lower = present[1:]
        if lower:
            fits = fits & (tier == present[0])
            c = fits.nonzero()[0]
    absolute = cfg.normalisation == "absolute"
    if absolute or names is None:
        tb = np.zeros(len(value))
    else:
        tb = _tie_break(value, c, cfg, names, rest, preferences, share=share)
    ranked = value + tb
    scaled, top = _normalise(ranked, fits, cfg, c)
    score = to_score(scaled)
    if top is not None:
        below = ranked < top - 1e-12
        below &= fits
        np.minimum(score, 9, out=score, where=below)
    if lower and tier is not None:
        k = len(lower)
        score = np.where(fits, np.maximum(score, k), score)
        for rank, t in enumerate(lower):
            score = np.where(all_fits & (tier == t), k - 1 - rank, score)
    return scaled, score, tb


def _normalise(
    value: np.ndarray, fits: np.ndarray, cfg: ScoringConfig, c: np.ndarray
) -> tuple[np.ndarray, float | None]:
    """(scaled, the best candidate's value: None under `absolute` or without candidates);
    `c` the rows of `fits`."""
    if cfg.normalisation == "absolute" or not len(c):
        return np.where(fits, value, 0.0), None
    v = value[c]
    lo, hi = float(v.min()), float(v.max())
    if hi - lo <= 1e-9:
        return np.where(fits, value, 0.0), hi
    return np.where(fits, (value - lo) / (hi - lo), 0.0), hi


def score_nodes(
    pod: PodShape, nodes: Sequence[NodeState], cfg: ScoringConfig, shapes: Shapes
) -> list[NodeScore]:
    """Score `pod` on each node; results in input order (see the module docstring)."""
    return score_batch(pod, NodeBatch.from_states(nodes), cfg, shapes).nodes()
