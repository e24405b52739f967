"""A scalar, one-node-at-a-time reference of the scoring maths (test oracle only).

The production code (extender/scoring.py) computes every term vectorised over a
`NodeBatch`; these loops restate the same formulas node by node, the way docs/design.md
sections 4-5 write them, so that tests can check the vectorised code against an
independent statement of the maths. Never imported outside tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from extender.batch import POOL_CODES
from extender.config import ScoringConfig, TermWeights
from extender.model import GpuState, NodeState, PodShape
from extender.scoring import MODALITY_AFFINITY, MULTI_IMAGE_NVLINK_SHARE, NEUTRAL, TermValues
from extender.shapes import Shapes


def gpu_qualifies(gpu: GpuState, pod: PodShape, cfg: ScoringConfig) -> bool:
    """True when one of the pod's instances' GPUs fits on `gpu`."""
    if pod.mem_per_gpu_mib is None:
        return gpu.is_idle(cfg.idle_used_fraction)
    return gpu.free_mib >= pod.mem_per_gpu_mib


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


def modality_term(modality: str, pool: str | None, nvlink: bool, gpus: int = 1) -> float:
    """Affinity of the pod's modality to the node's pool (`MODALITY_AFFINITY`).

    Multi-image pods and pods asking for several GPUs give 30 % of the term to NVLink
    (docs/design.md section 5). An unknown modality or pool is neutral.
    """
    table = MODALITY_AFFINITY.get(modality)
    if table is None:
        return NEUTRAL
    base = table.get(pool if pool in POOL_CODES else None, NEUTRAL)
    if modality == "multi-image" or gpus > 1:
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


def contention_term(pod: PodShape, node: NodeState, cfg: ScoringConfig) -> float:
    """1 - contention of the GPU the device plugin gives a one-GPU pod of a class in
    `cfg.contention_qos` (NaN for other pods): the first of the GPUs with the fewest pods;
    contention = max(its utilisation, 1 where kvspread claims memory on it). Neutral where
    the signals are not fresh or the pods per GPU are not tracked."""
    if pod.gpus != 1 or pod.qos not in cfg.contention_qos or cfg.weights.contention <= 0:
        return math.nan
    if not node.fresh:
        return NEUTRAL
    if cfg.gpu_assignment == "scored":
        raise NotImplementedError("the reference states the device plugin's pick only")
    cands = device_plugin_candidates(node.gpus, pod, cfg)
    if not cands:
        return NEUTRAL
    g = node.gpus[cands[0]]
    util = 0.0 if g.util is None else min(1.0, max(0.0, g.util))
    return 1.0 - max(util, 1.0 if g.allocated_mib > 0 else 0.0)


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
    """Weighted mean of the terms, in [0,1] (weights need not sum to 1); contention counts
    only where it is a number (a pod it covers), its weight then added to the divisor."""
    five = (
        weights.fragmentation * terms.fragmentation
        + weights.load * terms.load
        + weights.spread * terms.spread
        + weights.modality * terms.modality
        + weights.qos * terms.qos
    )
    if math.isnan(terms.contention):
        return five / weights.total()
    return (five + weights.contention * terms.contention) / weights.total(contention=True)


def to_score(x: float) -> int:
    """[0,1] -> integer 0..10, rounding half up (deterministic, no banker's rounding)."""
    if not math.isfinite(x):
        return 0
    return max(0, min(10, int(math.floor(x * 10.0 + 0.5))))
