"""Assemble a `NodeState` from what the caches hold: the Node (labels, signals
annotation), the kvspread pods bound to it and the ledger's recent placements.

Per-GPU claims (allocated_g of docs/design.md section 4). Kubernetes does not say which GPU
of a node a pod got: kube-scheduler binds to a node and the kubelet's device manager,
asking the device plugin, picks the device. The claims are laid out from what is known:

1. a ledger placement (scheduled, not yet bound) on the GPU slots it was scored for;
2. a bound pod whose model the signals list on a GPU is on that GPU: the collector maps
   NVML's per-process memory to pods, so once it has seen the engine's process the GPU
   is measured, not guessed (one pod per listed GPU; with more replicas of the model
   than listed GPUs, the rest are pods the collector has not seen yet);
3. a bound pod the signals do not show yet (starting: image pull, CUDA init; or signals
   older than its binding) on the GPU the device plugin picks: the NVIDIA device plugin
   hands out time-sliced replicas with its distributed allocation (the GPU with the
   fewest allocated replicas first), so the pod goes to the GPU with the fewest pods,
   counting a GPU whose measured use exceeds its kvspread claims as holding another
   tenant's pod; ties to the lower index; a GPU that can take the pod is preferred only
   among equals.

Measured use still counts through free = total - max(used, allocated), so a wrong
prediction in step 3 can only make a GPU look fuller, never emptier, than the larger of
the two views, and it lasts until the collector's next document shows the pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from extender.config import ScoringConfig
from extender.ledger import Placement
from extender.model import GpuState, NodeState, PodShape
from extender.objects import NodeInfo, PodInfo
from kvspread.gpumem import free_mib
from kvspread.signals import (
    NodeSignals,
    SignalsError,
    SignalsReading,
    SignalState,
    decode_signals,
)

__all__ = ["build_node_state", "read_signals_cached"]


@lru_cache(maxsize=32768)
def _decode(text: str) -> NodeSignals | str:
    """Decoded document, or the error message; memoised by the annotation text.

    The same annotation arrives many times (watch events of unrelated fields, every
    full-NodeList request); decoding and validating it dominates otherwise.
    """
    try:
        return decode_signals(text)
    except SignalsError as exc:
        return str(exc)


@lru_cache(maxsize=65536)
def _gpu(total: float, used: float, alloc: float, util: float | None, pods: int) -> GpuState:
    """One `GpuState`, shared by every node state that holds the same values: a node's
    state is rebuilt on every ledger change and mostly comes out the same, and the node
    table then recognises an unchanged row by comparing states (identical GPUs compare
    at once)."""
    return GpuState(total_mib=total, used_mib=used, allocated_mib=alloc, util=util, pods=pods)


def read_signals_cached(annotation: str | None, now: float, stale_after_s: float) -> SignalsReading:
    """`kvspread.signals.read_signals` with the decoding memoised. Never raises."""
    if annotation is None or annotation == "":
        return SignalsReading(SignalState.MISSING, reason="no kvspread.io/signals annotation")
    sig = _decode(annotation)
    if isinstance(sig, str):
        return SignalsReading(SignalState.INVALID, reason=sig)
    age = now - sig.ts
    if age > stale_after_s:
        return SignalsReading(
            SignalState.STALE, sig, reason=f"signals are {age:.0f}s old", age_s=age
        )
    return SignalsReading(SignalState.FRESH, sig, age_s=age)


def _need(shape: PodShape, total: float) -> float:
    return total if shape.mem_per_gpu_mib is None else shape.mem_per_gpu_mib


def _place_seen(
    pods: list[PodInfo],
    total: list[float],
    alloc: list[float],
    pods_on: list[int],
    models: list[tuple[str, ...]],
) -> list[PodInfo]:
    """Claims of bound pods the signals show (their model listed on a GPU); returns the
    pods not shown (or not wholly shown), to be predicted by `_place_unseen`."""
    taken: dict[str, set[int]] = {}
    rest = []
    for p in pods:
        shape = p.shape
        if shape.gpus <= 0 or not shape.model:
            rest.append(p)
            continue
        used_by_model = taken.setdefault(shape.model, set())
        listed = [j for j in range(len(total)) if shape.model in models[j]]
        free_listed = [j for j in listed if j not in used_by_model]
        if len(free_listed) < shape.gpus:
            rest.append(p)
            continue
        for j in free_listed[: shape.gpus]:
            alloc[j] += _need(shape, total[j])
            pods_on[j] += 1
            used_by_model.add(j)
    return rest


def _place_unseen(
    shape: PodShape,
    total: list[float],
    used: list[float],
    alloc: list[float],
    pods_on: list[int],
    fewest_pods: bool = True,
) -> None:
    """Claims of one bound pod the signals do not show yet, on the GPUs the device plugin
    picks (fewest pods first, see the module docstring); with `fewest_pods` False
    (`gpu_assignment: scored`) on the GPU the scoring would pick, best fit."""
    n = len(total)
    if shape.gpus <= 0 or n == 0:
        return

    def free(j: int) -> float:
        return float(free_mib(total[j], used[j], alloc[j]))

    def qualifies(j: int) -> bool:
        if shape.mem_per_gpu_mib is None:
            return alloc[j] <= 0.0
        return free(j) >= shape.mem_per_gpu_mib

    if fewest_pods:
        order = sorted(range(n), key=lambda j: (pods_on[j], not qualifies(j), j))
    else:
        order = sorted(
            range(n), key=lambda j: (not qualifies(j), free(j) if qualifies(j) else -free(j), j)
        )
    for j in order[: shape.gpus]:
        alloc[j] += _need(shape, total[j])
        pods_on[j] += 1


class _Layout:
    """What a decoded annotation gives every node state built from it: the GPUs in index
    order and their totals, measured use, models and idle limits (read-only lists)."""

    __slots__ = ("sig", "gpus", "total", "used", "models", "idle_mib")

    def __init__(self, sig: NodeSignals, idle_used_fraction: float) -> None:
        self.sig = sig
        self.gpus = sorted(sig.gpus or (), key=lambda g: g.index)
        self.total = [g.mem_total_mib for g in self.gpus]
        self.used = [g.mem_used_mib for g in self.gpus]
        self.models = [g.models for g in self.gpus]
        self.idle_mib = [idle_used_fraction * t for t in self.total]


@lru_cache(maxsize=32768)
def _layout(text: str, idle_used_fraction: float) -> _Layout | None:
    """The `_Layout` of a valid annotation (None when it does not decode), memoised like
    `_decode`: a node's state is rebuilt on every ledger change of the node."""
    sig = _decode(text)
    return None if isinstance(sig, str) else _Layout(sig, idle_used_fraction)


def build_node_state(
    info: NodeInfo,
    pods: Iterable[PodInfo],
    placements: Iterable[Placement],
    now: float,
    cfg: ScoringConfig,
) -> NodeState:
    """The node as the scorer sees it at wall time `now` (seconds since the epoch)."""
    active = sorted((p for p in pods if p.active), key=lambda p: p.key)
    if active:
        bound_keys = {p.key for p in active}
        pending = [pl for pl in placements if pl.pod not in bound_keys]
    else:
        pending = list(placements)
    replicas: dict[str, int] = {}
    for p in active:
        if p.shape.model:
            replicas[p.shape.model] = replicas.get(p.shape.model, 0) + 1
    for pl in pending:
        if pl.shape.model:
            replicas[pl.shape.model] = replicas.get(pl.shape.model, 0) + 1
    text = info.signals_annotation
    lay = _layout(text, cfg.idle_used_fraction) if text else None
    if lay is None or now - lay.sig.ts > cfg.stale_after_s:
        # not fresh: `read_signals_cached` says why (the same reading as for a fresh one)
        reading = read_signals_cached(text, now, cfg.stale_after_s)
        last = reading.signals
        totals = [g.mem_total_mib for g in (last.gpus or ())] if last is not None else []
        return NodeState(
            name=info.name,
            signals=reading.state.value,
            pool=info.pool,
            nvlink=info.nvlink,
            model_replicas=replicas,
            signals_ts=None if last is None else last.ts,
            last_gpus=None if last is None else len(totals),
            last_largest_mib=max(totals) if totals else None,
            last_smallest_mib=min(totals) if totals else None,
        )
    sig = lay.sig
    total, models = lay.total, lay.models
    n = len(total)
    alloc = [0.0] * n
    pods_on = [0] * n
    for pl in pending:
        for j in pl.gpus:
            if 0 <= j < n:
                alloc[j] += _need(pl.shape, total[j])
                pods_on[j] += 1
    unseen = _place_seen(active, total, alloc, pods_on, models) if active else active
    # another tenant's process: measured use that the kvspread claims do not explain
    used, idle_mib = lay.used, lay.idle_mib
    for j in range(n):
        if used[j] - alloc[j] > idle_mib[j]:
            pods_on[j] += 1
    for p in unseen:
        _place_unseen(p.shape, total, used, alloc, pods_on, cfg.gpu_assignment == "fewest-pods")
    gpus = tuple(
        _gpu(g.mem_total_mib, g.mem_used_mib, a, g.util, k)
        for g, a, k in zip(lay.gpus, alloc, pods_on, strict=True)
    )
    streams = None if sig.streams is None else float(sig.streams)
    measured = (streams, sig.image_token_share, sig.p95_s)
    # NodeState(name, gpus, signals, streams, image share, p95, pool, nvlink, replicas, cpu, ts)
    return NodeState(
        info.name, gpus, _FRESH, *measured, info.pool, info.nvlink, replicas, None, sig.ts
    )


_FRESH = SignalState.FRESH.value
