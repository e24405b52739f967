"""Prioritize scoring (docs/design.md sections 4 and 5): pure functions, no I/O, no server.

Stable API (the extender server and the simulator both call it)::

    from extender.scoring import score_nodes, score_batch
    scores = score_nodes(pod, nodes, cfg, shapes)      # list[NodeScore], input order
    result = score_batch(pod, batch, cfg, shapes)      # BatchScores (numpy arrays)

- `pod` is a `PodShape`, `nodes` a sequence of `NodeState` (or `batch` a `NodeBatch`,
  the column form for many nodes: build it once, `take()` rows), `cfg` a
  `ScoringConfig`, `shapes` a `Shapes` snapshot of the target shape distribution
  (`ShapeDistribution.snapshot()`).
- Each `NodeScore` has `score` (int 0..10, what the scheduler gets), `value` (the
  unrounded weighted sum in [0,1] before candidate normalisation), `scaled` (the float
  that was rounded to `score`), `fits`, `terms` (the five terms, each in [0,1]),
  `delta_f` (change of expected fragmentation in MiB, NaN where not computed), `rho`
  and `largest_free_mib`, `gpus_chosen` (GPU slots the pod would take) and `signals`.

Terms (each in [0,1], higher is better; one pure scalar function per term below, and the
same maths vectorised in `score_batch`):

    fragmentation  1 / (1 + exp(dF / D))     dF = F_n(after) - F_n(before), D = pod demand
    load           1 - load weight           (docs/design.md 4; GPU utilisation in its first part)
    spread         1 - r/(r+1) * (1 + 2 rho if rho > 0.35 else 1), clipped at 0
    modality       pool/modality affinity table, NVLink for multi-image
    qos            realtime: mean(1 - p95/ceiling, 1 - streams/max_streams); others 0.5

A node without fresh signals gets 0.5 for fragmentation, load and qos (neutral) and is
counted by the caller; spread and modality come from labels and pods and still apply.

Normalisation (`cfg.normalisation`):
- `absolute`: score = round(10 * value); a node's score depends on that node alone.
- `candidates` (default): values of the nodes that fit are min-max scaled over the
  candidate set (best 10, worst 0) before rounding; when all are equal the absolute
  value is used. Nodes the pod cannot fit on get 0 and take no part in the scaling.
  Before scaling, each candidate's value gets a stable per-node preference
  (`node_preference`, at most STABLE_PREFERENCE_SHARE of the fragmentation weight), so that
  candidates the terms cannot tell apart resolve the same way every time. Only the best
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from extender.batch import POOL_CODES, NodeBatch
from extender.config import ScoringConfig, TermWeights
from extender.fit import gpu_qualifies, qualifying_gpus
from extender.model import SIGNAL_STATES, GpuState, NodeState, PodShape
from extender.shapes import Shapes

__all__ = [
    "TERMS",
    "NEUTRAL",
    "TermValues",
    "NodeScore",
    "BatchScores",
    "fragmentation_term",
    "node_preference",
    "STABLE_PREFERENCE_SHARE",
    "load_term",
    "busy_part",
    "spread_term",
    "modality_term",
    "qos_term",
    "node_fragmentation",
    "expected_fragmentation",
    "placement_delta",
    "device_plugin_candidates",
    "combine",
    "to_score",
    "explain",
    "score_nodes",
    "score_batch",
    "finish_scores",
    "MODALITY_AFFINITY",
]

TERMS = ("fragmentation", "load", "spread", "modality", "qos")
NEUTRAL = 0.5
"""The value of a term that has nothing to say about a node (missing or stale signals)."""

STABLE_PREFERENCE_SHARE = 0.1
"""Weight of the stable per-node preference (`node_preference`) in candidate normalisation,
as a share of the fragmentation weight.

Why: many placements change the expected fragmentation equally (every empty node of a kind,
every node with a whole GPU free), and kube-scheduler breaks ties at random, which scatters
pods over empty nodes and leaves no node whole for large instances. A fixed preference order
makes equal candidates resolve the same way every time (first-fit), so partial placements
concentrate on the same nodes. The FGD paper's published numbers rely on exactly such an
order (its simulator picks the first node by name among ties); on the Alibaba trace this share
brings kvspread below FGD (docs/simulator.md). 0.1 is small enough that a real difference in
fragmentation still decides."""


@lru_cache(maxsize=65536)
def node_preference(name: str) -> float:
    """Stable preference of a node in [0,1) from its name (CRC-32, the same in every
    process and on every restart, unlike Python's salted `hash`)."""
    return zlib.crc32(name.encode("utf-8")) / 2.0**32


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
encoders move image embeddings between GPUs, which NVLink makes cheap."""


@dataclass(frozen=True, slots=True)
class TermValues:
    """The five terms for one node, each in [0,1]."""

    fragmentation: float
    load: float
    spread: float
    modality: float
    qos: float

    def as_dict(self) -> dict[str, float]:
        return {t: getattr(self, t) for t in TERMS}


@dataclass(frozen=True, slots=True)
class NodeScore:
    """One node's outcome for one pod; see the module docstring for the fields."""

    name: str
    score: int
    value: float
    scaled: float
    fits: bool
    terms: TermValues
    delta_f: float
    rho: float
    largest_free_mib: float
    gpus_chosen: tuple[int, ...]
    signals: str


# --- scalar terms ----------------------------------------------------------------------


def fragmentation_term(delta_f: float, demand_mib: float) -> float:
    """Fragmentation term in (0,1) from dF, the change of expected fragmentation.

    FGD (Weng et al., USENIX ATC'23; docs/design.md sections 4-5) places a pod where the
    expected fragmentation F_n grows least. term = 1 / (1 + exp(dF / D)) with D the pod's
    GPU-memory demand: 0.5 when dF = 0, towards 1 when the placement removes fragments,
    towards 0 when it creates them; strictly decreasing in dF, so it keeps FGD's order.
    """
    if math.isnan(delta_f):
        return NEUTRAL
    d = demand_mib if demand_mib > 0 else 1.0
    x = delta_f / d
    if x > 50:
        return 0.0
    if x < -50:
        return 1.0
    return 1.0 / (1.0 + math.exp(x))


def busy_part(mem_frac: float | None, util: float | None, cfg: ScoringConfig) -> float | None:
    """The load's first part: memory in use, and GPU utilisation where measured.

    (1 - s) mem_used/mem_total + s util with s = `cfg.util_share`; memory alone without a
    utilisation reading (docs/design.md section 4's original part), utilisation alone without a
    memory reading; None when neither was measured.
    """
    if util is None:
        return mem_frac
    u = min(1.0, max(0.0, util))
    if mem_frac is None:
        return u
    return (1.0 - cfg.util_share) * mem_frac + cfg.util_share * u


def load_term(
    mem_used_mib: float | None,
    mem_total_mib: float | None,
    streams: float | None,
    image_token_share: float | None,
    cfg: ScoringConfig,
    util: float | None = None,
) -> float:
    """1 - load, load = 0.4 busy + 0.3 streams/max_streams + 0.3 image share.

    busy = `busy_part`: mem_used/mem_total (docs/design.md section 4), with the node's mean GPU
    utilisation `util` folded in where the collector measured it. Weights from
    `cfg.load_weights`. A part that was not measured is left out and the remaining weights
    renormalised (never zero-filled); nothing measured gives the neutral 0.5.
    """
    lw = cfg.load_weights
    parts: list[tuple[float, float]] = []
    mem_frac = None
    if mem_used_mib is not None and mem_total_mib:
        mem_frac = min(1.0, max(0.0, mem_used_mib / mem_total_mib))
    busy = busy_part(mem_frac, util, cfg)
    if busy is not None:
        parts.append((lw.memory, busy))
    if streams is not None:
        parts.append((lw.streams, min(1.0, max(0.0, streams / cfg.max_streams))))
    if image_token_share is not None:
        parts.append((lw.image, min(1.0, max(0.0, image_token_share))))
    wsum = sum(w for w, _ in parts)
    if wsum <= 0:
        return NEUTRAL
    return 1.0 - sum(w * v for w, v in parts) / wsum


def spread_term(replicas: float, rho: float, cfg: ScoringConfig) -> float:
    """1 - repulsion: fewer replicas of the same model on the node score higher.

    repulsion = r / (r + 1) for r replicas already there (bound or recently placed),
    multiplied by 1 + 2 rho when the node's fragmentation rho exceeds 0.35 (docs/design.md
    section 5; slope and threshold from cfg): a fragmented node holding a replica is
    a worse place for another. Clipped to [0,1].
    """
    if replicas <= 0:
        return 1.0
    rep = replicas / (replicas + 1.0)
    if rho > cfg.rho_threshold:
        rep *= 1.0 + cfg.rho_repulsion * rho
    return max(0.0, min(1.0, 1.0 - rep))


def modality_term(modality: str, pool: str | None, nvlink: bool) -> float:
    """Affinity of the pod's modality to the node's pool (`MODALITY_AFFINITY`).

    Multi-image pods give 30 % of the term to NVLink (docs/design.md section 5). An unknown
    modality or pool is neutral.
    """
    table = MODALITY_AFFINITY.get(modality)
    if table is None:
        return NEUTRAL
    base = table.get(pool if pool in POOL_CODES else None, NEUTRAL)
    if modality == "multi-image":
        return (1 - MULTI_IMAGE_NVLINK_SHARE) * base + MULTI_IMAGE_NVLINK_SHARE * float(nvlink)
    return base


def qos_term(
    qos: str | None, p95_s: float | None, streams: float | None, cfg: ScoringConfig
) -> float:
    """Realtime pods prefer nodes with lower p95 latency and fewer streams.

    realtime: mean of (1 - min(1, p95 / qos_p95_ceiling_s)) and (1 - min(1, streams /
    max_streams)) over the parts measured (docs/design.md section 5). Batch and best-effort
    pods, and nodes with neither measurement, get the neutral 0.5.
    """
    if qos != "realtime":
        return NEUTRAL
    parts = []
    if p95_s is not None:
        parts.append(1.0 - min(1.0, max(0.0, p95_s / cfg.qos_p95_ceiling_s)))
    if streams is not None:
        parts.append(1.0 - min(1.0, max(0.0, streams / cfg.max_streams)))
    return sum(parts) / len(parts) if parts else NEUTRAL


def node_fragmentation(free_mib: Sequence[float]) -> tuple[float, float]:
    """(rho, largest free extent): rho = 1 - max_g free_g / sum_g free_g (docs/design.md 4).

    0 when all free memory sits on one GPU, and 0 when nothing is free.
    """
    total = float(sum(free_mib))
    if total <= 0:
        return 0.0, 0.0
    largest = float(max(free_mib))
    return 1.0 - largest / total, largest


def _shape_qualifies(gpu_free: float, gpu_idle: bool, need: float | None) -> bool:
    return gpu_idle if need is None else gpu_free >= need


def expected_fragmentation(
    gpus: Sequence[GpuState],
    shapes: Shapes,
    cfg: ScoringConfig,
    cpu_free_milli: float | None = None,
) -> float:
    """F_n = sum_m p_m F_n(m) (FGD; docs/design.md section 4), in MiB.

    F_n(m) = sum of free_g over GPUs that cannot take one GPU of shape m (free_g < g_m;
    for whole-GPU shapes: GPUs that are not idle) when m fits on the node (k_m such GPUs,
    and CPU where tracked), else the sum of all free_g.
    """
    free = [g.free_mib for g in gpus]
    idle = [g.is_idle(cfg.idle_used_fraction) for g in gpus]
    cpu = math.inf if cpu_free_milli is None else cpu_free_milli
    return _expected_fragmentation(free, idle, cpu, shapes)


def _expected_fragmentation(
    free: Sequence[float], idle: Sequence[bool], cpu: float, shapes: Shapes
) -> float:
    all_free = sum(free)
    out = 0.0
    for s in shapes.items:
        qual = [_shape_qualifies(f, i, s.mem_per_gpu_mib) for f, i in zip(free, idle, strict=True)]
        fits = sum(qual) >= s.gpus and cpu >= s.cpu_milli
        fm = sum(f for f, q in zip(free, qual, strict=True) if not q) if fits else all_free
        out += s.p * fm
    return out


def device_plugin_candidates(
    gpus: Sequence[GpuState], pod: PodShape, cfg: ScoringConfig
) -> list[int] | None:
    """The GPUs the device plugin may give a one-GPU pod (`gpu_assignment: fewest-pods`):
    those with the fewest pods. None where this does not apply (`scored`, a pod of other
    than one GPU, pod counts not tracked); then the scoring picks the slot itself."""
    if cfg.gpu_assignment != "fewest-pods" or pod.gpus != 1 or not gpus:
        return None
    counts = [g.pods for g in gpus]
    if any(c is None for c in counts):
        return None
    low = min(c for c in counts if c is not None)
    return [j for j, c in enumerate(counts) if c == low]


def placement_delta(
    pod: PodShape, node: NodeState, shapes: Shapes, cfg: ScoringConfig
) -> tuple[float, tuple[int, ...]]:
    """(dF, GPUs chosen) for placing `pod` on `node`; (nan, ()) when it does not fit.

    Where the device plugin picks the GPU (`device_plugin_candidates`), the pod fits only
    when every GPU it may be given qualifies, and the choice below runs among those.
    GPU choice: a one-GPU partial pod tries every qualifying GPU and keeps the one with
    the smallest F after (FGD); otherwise the k qualifying GPUs with the least free
    memory are taken (best fit), ties by index. Where the signals report GPU utilisation,
    a busy GPU costs `cfg.busy_gpu_penalty` x util x demand on top (in MiB, like F): an
    instance added to a GPU that already computes slows every process on it (time-slicing),
    so a busy GPU is taken only when it saves that much fragmentation.
    """
    free = [g.free_mib for g in node.gpus]
    idle = [g.is_idle(cfg.idle_used_fraction) for g in node.gpus]
    cpu = math.inf if node.cpu_free_milli is None else node.cpu_free_milli
    if cpu < pod.cpu_milli:
        return math.nan, ()
    before = _expected_fragmentation(free, idle, cpu, shapes)
    if pod.gpus <= 0:
        return _expected_fragmentation(free, idle, cpu - pod.cpu_milli, shapes) - before, ()
    qual = [i for i, g in enumerate(node.gpus) if gpu_qualifies(g, pod, cfg)]
    cands = device_plugin_candidates(node.gpus, pod, cfg)
    if cands is not None:
        if any(j not in qual for j in cands):
            return math.nan, ()
        qual = cands
    if len(qual) < pod.gpus:
        return math.nan, ()
    per_gpu = _demand(pod, [g.total_mib for g in node.gpus]) / max(1, pod.gpus)
    busy = [
        0.0 if g.util is None else cfg.busy_gpu_penalty * min(1.0, max(0.0, g.util)) * per_gpu
        for g in node.gpus
    ]

    def after(chosen: Sequence[int]) -> float:
        f2, i2 = list(free), list(idle)
        for j in chosen:
            f2[j] = 0.0 if pod.mem_per_gpu_mib is None else max(0.0, f2[j] - pod.mem_per_gpu_mib)
            i2[j] = False
        return _expected_fragmentation(f2, i2, cpu - pod.cpu_milli, shapes)

    if pod.gpus == 1 and pod.mem_per_gpu_mib is not None:
        best_j, best_f, best_cost = qual[0], math.inf, math.inf
        for j in qual:
            fa = after([j])
            if fa + busy[j] < best_cost - 1e-9:
                best_j, best_f, best_cost = j, fa, fa + busy[j]
        return best_f - before, (best_j,)
    chosen = tuple(sorted(sorted(qual, key=lambda j: (free[j] + busy[j], j))[: pod.gpus]))
    return after(chosen) - before, chosen


def _demand(pod: PodShape, gpu_totals: Sequence[float]) -> float:
    if pod.mem_per_gpu_mib is not None:
        return pod.gpus * pod.mem_per_gpu_mib
    per = max(gpu_totals, default=0.0)
    return max(1, pod.gpus) * per


def combine(terms: TermValues, weights: TermWeights) -> float:
    """Weighted mean of the terms, in [0,1] (weights need not sum to 1)."""
    total = weights.total()
    return (
        weights.fragmentation * terms.fragmentation
        + weights.load * terms.load
        + weights.spread * terms.spread
        + weights.modality * terms.modality
        + weights.qos * terms.qos
    ) / total


def to_score(x: float) -> int:
    """[0,1] -> integer 0..10, rounding half up (deterministic, no banker's rounding)."""
    if not math.isfinite(x):
        return 0
    return max(0, min(10, int(math.floor(x * 10.0 + 0.5))))


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
    }


# --- vectorised scoring ----------------------------------------------------------------


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
    delta_f: np.ndarray
    rho: np.ndarray
    largest_free: np.ndarray
    chosen: np.ndarray  # (N, G) bool: GPU slots the pod would take
    codes: np.ndarray  # (N,) int8 index into SIGNAL_STATES

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
            terms=TermValues(
                float(self.fragmentation[i]),
                float(self.load[i]),
                float(self.spread[i]),
                float(self.modality[i]),
                float(self.qos[i]),
            ),
            delta_f=float(self.delta_f[i]),
            rho=float(self.rho[i]),
            largest_free_mib=float(self.largest_free[i]),
            gpus_chosen=tuple(int(j) for j in np.flatnonzero(self.chosen[i])),
            signals=SIGNAL_STATES[self.codes[i]],
        )

    def nodes(self) -> list[NodeScore]:
        return [self.node(i) for i in range(len(self.names))]


def _qual_shapes(free: np.ndarray, idle: np.ndarray, shapes: Shapes) -> np.ndarray:
    """(M, N, G) float 0/1: GPU g of node n can take one GPU of shape m.

    Shape-major layout: reductions run over the contiguous last axis as matrix
    products, several times faster than numpy's strided sums over a short axis.
    """
    need = shapes.need[:, None, None]
    whole = shapes.whole[:, None, None]
    return ((free[None] >= need) | (idle[None] & whole)).astype(np.float64)


def _frag_vec(free: np.ndarray, idle: np.ndarray, cpu: np.ndarray, shapes: Shapes) -> np.ndarray:
    """(N,) expected fragmentation F_n for (N, G) free/idle and (N,) CPU."""
    ones = np.ones(free.shape[1])
    qf = _qual_shapes(free, idle, shapes)
    q = qf @ ones  # (M, N) qualifying GPUs per shape
    qsum = np.einsum("mng,ng->mn", qf, free)  # free memory on qualifying GPUs
    all_free = free @ ones
    fits = (q >= shapes.k[:, None]) & (cpu[None, :] >= shapes.cpu[:, None])
    return shapes.p @ np.where(fits, all_free[None, :] - qsum, all_free[None, :])


def _delta_batch(
    pod: PodShape,
    free: np.ndarray,
    idle: np.ndarray,
    qual_pod: np.ndarray,
    ok: np.ndarray,
    cpu: np.ndarray,
    shapes: Shapes,
    busy: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(dF (N,), chosen (N, G)); NaN / no GPUs where the pod does not fit (ok False).

    `busy` (N, G) is the MiB cost of each GPU's utilisation in the slot choice (see
    `placement_delta`); None or zeros: fragmentation alone."""
    if busy is None:
        busy = np.zeros(free.shape)
    n, g = free.shape
    cpu_after = cpu - pod.cpu_milli
    chosen = np.zeros((n, g), dtype=bool)
    if pod.gpus <= 0:
        delta = _frag_vec(free, idle, cpu_after, shapes) - _frag_vec(free, idle, cpu, shapes)
        return np.where(ok, delta, np.nan), chosen
    need = pod.mem_per_gpu_mib
    if pod.gpus == 1 and need is not None:
        # Try every qualifying GPU j; update F incrementally (only column j changes).
        ones = np.ones(g)
        qf = _qual_shapes(free, idle, shapes)
        q = qf @ ones
        qsum = np.einsum("mng,ng->mn", qf, free)
        all_free = free @ ones
        k = shapes.k[:, None]
        fits0 = (q >= k) & (cpu[None, :] >= shapes.cpu[:, None])
        before = shapes.p @ np.where(fits0, all_free[None, :] - qsum, all_free[None, :])
        cpu_fit = cpu_after[None, :] >= shapes.cpu[:, None]
        need_m = shapes.need[:, None]
        best = np.full(n, np.inf)
        best_cost = np.full(n, np.inf)
        best_j = np.zeros(n, dtype=np.intp)
        for j in range(g):
            cand = qual_pod[:, j]
            if not cand.any():
                continue
            fj = free[:, j]
            fj2 = np.maximum(fj - need, 0.0)
            qj = qf[:, :, j]
            qj2 = (fj2[None, :] >= need_m).astype(np.float64)  # idle is lost once placed
            q2 = q - qj + qj2
            all2 = all_free - (fj - fj2)
            nonq2 = all2[None, :] - (qsum - qj * fj[None, :] + qj2 * fj2[None, :])
            fa = shapes.p @ np.where((q2 >= k) & cpu_fit, nonq2, all2[None, :])
            cost = fa + busy[:, j]
            better = cand & (cost < best_cost - 1e-9)
            best = np.where(better, fa, best)
            best_cost = np.where(better, cost, best_cost)
            best_j = np.where(better, j, best_j)
        rows = np.flatnonzero(ok)
        chosen[rows, best_j[rows]] = True
        return np.where(ok, best - before, np.nan), chosen
    # k GPUs (whole, or partial on several): best fit, least free first, ties by index.
    key = np.where(qual_pod, free + busy, np.inf)
    order = np.argsort(key, axis=1, kind="stable")[:, : pod.gpus]
    np.put_along_axis(chosen, order, True, axis=1)
    chosen &= qual_pod
    chosen[~ok] = False
    if need is None:
        free2 = np.where(chosen, 0.0, free)
    else:
        free2 = np.where(chosen, np.maximum(free - need, 0.0), free)
    idle2 = idle & ~chosen
    delta = _frag_vec(free2, idle2, cpu_after, shapes) - _frag_vec(free, idle, cpu, shapes)
    return np.where(ok, delta, np.nan), chosen


def score_batch(
    pod: PodShape,
    batch: NodeBatch,
    cfg: ScoringConfig,
    shapes: Shapes,
    *,
    fits: np.ndarray | None = None,
) -> BatchScores:
    """Score `pod` on every row of `batch` (see the module docstring).

    `fits` may pass a precomputed filter outcome (from `fit_batch`); otherwise it is
    computed with the same rules.
    """
    n = len(batch)
    free = batch.free()
    idle = batch.idle(cfg.idle_used_fraction)
    fresh = batch.fresh
    if n == 0:
        z = np.zeros(0)
        return BatchScores(
            (),
            np.zeros(0, dtype=np.int64),
            z,
            z,
            np.zeros(0, bool),
            z,
            z,
            z,
            z,
            z,
            z,
            z,
            z,
            np.zeros((0, free.shape[1]), bool),
            np.zeros(0, np.int8),
        )
    qual_pod = qualifying_gpus(pod, batch, cfg) if pod.gpus > 0 else np.zeros_like(batch.valid)
    if fits is None:
        cpu_ok = batch.cpu_free >= pod.cpu_milli
        fits = cpu_ok & (~fresh | (qual_pod.sum(axis=1) >= pod.gpus) | (pod.gpus <= 0))
    if cfg.gpu_assignment == "fewest-pods" and pod.gpus == 1 and batch.pods is not None:
        # the device plugin's pick (see device_plugin_candidates): rows with pod counts
        gp = batch.pods
        tracked = ~np.isnan(gp)
        known = fresh & batch.valid.any(axis=1) & (tracked | ~batch.valid).all(axis=1)
        gp_v = np.where(batch.valid & tracked, gp, np.inf)
        cand = batch.valid & (gp_v == gp_v.min(axis=1)[:, None])
        dp_ok = ~(cand & ~qual_pod).any(axis=1)
        qual_pod = np.where(known[:, None], qual_pod & cand, qual_pod)
        fits = fits & (~known | dp_ok)
    # fragmentation: only rows with fresh GPU state where the pod fits
    can = fits & fresh
    delta = np.full(n, np.nan)
    chosen = np.zeros(free.shape, dtype=bool)
    util = batch.util_or_nan()
    if can.any():
        rows = np.flatnonzero(can)
        if pod.mem_per_gpu_mib is not None:
            per_gpu = np.full(len(rows), pod.mem_per_gpu_mib)
        else:
            per_gpu = batch.total[rows].max(axis=1)
        u = np.clip(np.nan_to_num(util[rows], nan=0.0), 0.0, 1.0)
        d_rows, c_rows = _delta_batch(
            pod,
            free[rows],
            idle[rows],
            qual_pod[rows],
            np.ones(len(rows), bool),
            batch.cpu_free[rows],
            shapes,
            cfg.busy_gpu_penalty * u * per_gpu[:, None],
        )
        delta[rows] = d_rows
        chosen[rows] = c_rows
    if pod.mem_per_gpu_mib is not None:
        demand = np.full(n, max(1, pod.gpus) * pod.mem_per_gpu_mib)
    else:
        demand = max(1, pod.gpus) * batch.total.max(axis=1)
    demand = np.where(demand > 0, demand, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.clip(delta / demand, -50.0, 50.0)
        frag = np.where(np.isnan(delta), NEUTRAL, 1.0 / (1.0 + np.exp(x)))
    frag = np.where(fits, frag, 0.0)
    # rho and largest free extent
    free_sum = free.sum(axis=1)
    largest = free.max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(free_sum > 0, 1.0 - largest / np.where(free_sum > 0, free_sum, 1.0), 0.0)
    rho = np.where(fresh, rho, 0.0)
    # load
    lw = cfg.load_weights
    tot = np.where(batch.valid, batch.total, 0.0).sum(axis=1)
    # measured memory only (docs/design.md section 4: mem_used/mem_total): claims already count in
    # fit and fragmentation through free = total - max(used, allocated); counting them here
    # too would turn load into "prefer the least-claimed node" and undo the packing.
    used = np.where(batch.valid, batch.used, 0.0).sum(axis=1)
    mem_part = np.where(tot > 0, np.clip(used / np.where(tot > 0, tot, 1.0), 0, 1), np.nan)
    mem_part = np.where(fresh, mem_part, np.nan)
    # GPU utilisation (mean over the node's measured GPUs) folded into the first part
    u_valid = batch.valid & ~np.isnan(util)
    u_count = u_valid.sum(axis=1)
    u_mean = np.where(
        u_count > 0,
        np.clip(np.where(u_valid, util, 0.0), 0, 1).sum(axis=1) / np.maximum(u_count, 1),
        np.nan,
    )
    s_u = cfg.util_share
    mem_part = np.where(
        np.isnan(u_mean),
        mem_part,
        np.where(np.isnan(mem_part), u_mean, (1 - s_u) * mem_part + s_u * u_mean),
    )
    mem_part = np.where(fresh, mem_part, np.nan)
    streams_part = np.clip(batch.streams / cfg.max_streams, 0, 1)
    image_part = np.clip(batch.image_share, 0, 1)
    num = np.zeros(n)
    den = np.zeros(n)
    for w, part in ((lw.memory, mem_part), (lw.streams, streams_part), (lw.image, image_part)):
        present = ~np.isnan(part)
        num += np.where(present, w * np.nan_to_num(part), 0.0)
        den += np.where(present, w, 0.0)
    load = np.where(den > 0, 1.0 - num / np.where(den > 0, den, 1.0), NEUTRAL)
    load = np.where(fresh, load, NEUTRAL)
    # spread
    r = batch.replica_counts(pod.model)
    rep = r / (r + 1.0)
    rep = np.where(rho > cfg.rho_threshold, rep * (1.0 + cfg.rho_repulsion * rho), rep)
    spread = np.clip(1.0 - rep, 0.0, 1.0)
    # modality
    table = MODALITY_AFFINITY.get(pod.modality)
    if table is None:
        modality = np.full(n, NEUTRAL)
    else:
        lut = np.array(
            [table.get(p, NEUTRAL) for p, _ in sorted(POOL_CODES.items(), key=lambda kv: kv[1])]
        )
        modality = lut[batch.pool]
        if pod.modality == "multi-image":
            modality = (1 - MULTI_IMAGE_NVLINK_SHARE) * modality + (
                MULTI_IMAGE_NVLINK_SHARE * batch.nvlink
            )
    # qos
    if pod.qos == "realtime":
        p_part = 1.0 - np.clip(batch.p95 / cfg.qos_p95_ceiling_s, 0, 1)
        s_part = 1.0 - np.clip(batch.streams / cfg.max_streams, 0, 1)
        cnt = (~np.isnan(p_part)).astype(float) + (~np.isnan(s_part)).astype(float)
        sm = np.nan_to_num(p_part) + np.nan_to_num(s_part)
        qos = np.where(cnt > 0, sm / np.where(cnt > 0, cnt, 1.0), NEUTRAL)
        qos = np.where(fresh, qos, NEUTRAL)
    else:
        qos = np.full(n, NEUTRAL)
    w = cfg.weights
    value = (
        w.fragmentation * frag
        + w.load * load
        + w.spread * spread
        + w.modality * modality
        + w.qos * qos
    ) / w.total()
    value = np.clip(value, 0.0, 1.0)
    scaled, score = finish_scores(value, fits, cfg, batch.names)
    return BatchScores(
        names=batch.names,
        score=score,
        value=value,
        scaled=scaled,
        fits=fits,
        fragmentation=frag,
        load=load,
        spread=spread,
        modality=modality,
        qos=qos,
        delta_f=delta,
        rho=rho,
        largest_free=np.where(fresh, largest, np.nan),
        chosen=chosen,
        codes=batch.codes,
    )


def finish_scores(
    value: np.ndarray,
    fits: np.ndarray,
    cfg: ScoringConfig,
    names: Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(scaled, score): the last step of `score_batch`, from the nodes' weighted values to
    what the scheduler gets: `cfg.normalisation` over the nodes that fit (with the stable
    node preference when `names` are given and the values differ), then rounding to
    integers 0..10 (half up), only the best candidate(s) keeping 10. Public so that a caller
    holding values per node (the simulator caches them between pods) finishes exactly as
    the extender does."""
    ranked = value
    if cfg.normalisation != "absolute" and names is not None and fits.any():
        v = value[fits]
        if float(v.max()) - float(v.min()) > 1e-9:
            w = cfg.weights
            share = STABLE_PREFERENCE_SHARE * w.fragmentation / w.total()
            pref = np.fromiter(map(node_preference, names), float, len(value))
            ranked = value + share * pref
    scaled = _normalise(ranked, fits, cfg)
    score = np.clip(np.floor(scaled * 10.0 + 0.5), 0, 10).astype(np.int64)
    if cfg.normalisation != "absolute" and fits.any():
        top = float(ranked[fits].max())
        score = np.where(fits & (ranked < top - 1e-12), np.minimum(score, 9), score)
    return scaled, score


def _normalise(value: np.ndarray, fits: np.ndarray, cfg: ScoringConfig) -> np.ndarray:
    scaled = np.where(fits, value, 0.0)
    if cfg.normalisation == "absolute" or not fits.any():
        return scaled
    v = value[fits]
    lo, hi = float(v.min()), float(v.max())
    if hi - lo <= 1e-9:
        return scaled
    return np.where(fits, (value - lo) / (hi - lo), 0.0)


def score_nodes(
    pod: PodShape, nodes: Sequence[NodeState], cfg: ScoringConfig, shapes: Shapes
) -> list[NodeScore]:
    """Score `pod` on each node; results in input order (see the module docstring)."""
    return score_batch(pod, NodeBatch.from_states(nodes), cfg, shapes).nodes()
