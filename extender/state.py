"""Assemble a `NodeState` from what the caches hold: the Node (labels, signals
annotation), the kvspread pods bound to it and the ledger's recent placements.

Per-GPU claims (allocated_g of DESIGN.md section 4): Kubernetes does not say which GPU
of a node a pod got (the device plugin decides), so claims are laid out the way the
extender itself would place them: a ledger placement on the GPU slots it was scored
for; a bound pod on GPUs whose signals list its model first, then best fit (the
qualifying GPU with the least free memory), in a stable pod order. Measured use still
counts through free = total - max(used, allocated), so a wrong guess can only make a
GPU look fuller, never emptier, than the larger of the two views.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from extender.config import ScoringConfig
from extender.ledger import Placement
from extender.model import GpuState, NodeState, PodShape
from extender.objects import NodeInfo, PodInfo
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


def _place(
    shape: PodShape,
    total: list[float],
    used: list[float],
    alloc: list[float],
    models: list[tuple[str, ...]],
    cfg: ScoringConfig,
) -> None:
    """Add one bound pod's claims to `alloc` (in place; a private scratch list)."""
    n = len(total)
    if shape.gpus <= 0 or n == 0:
        return

    def free(j: int) -> float:
        return max(0.0, total[j] - max(used[j], alloc[j]))

    def qualifies(j: int) -> bool:
        if shape.mem_per_gpu_mib is None:
            return alloc[j] <= 0.0
        return free(j) >= shape.mem_per_gpu_mib

    order = sorted(
        range(n),
        key=lambda j: (
            not (shape.model and shape.model in models[j]),
            not qualifies(j),
            free(j) if qualifies(j) else -free(j),
            j,
        ),
    )
    for j in order[: shape.gpus]:
        need = total[j] if shape.mem_per_gpu_mib is None else shape.mem_per_gpu_mib
        alloc[j] += need


def build_node_state(
    info: NodeInfo,
    pods: Iterable[PodInfo],
    placements: Iterable[Placement],
    now: float,
    cfg: ScoringConfig,
) -> NodeState:
    """The node as the scorer sees it at wall time `now` (seconds since the epoch)."""
    active = sorted((p for p in pods if p.active), key=lambda p: p.key)
    bound_keys = {p.key for p in active}
    pending = [pl for pl in placements if pl.pod not in bound_keys]
    replicas: dict[str, int] = {}
    for p in active:
        if p.shape.model:
            replicas[p.shape.model] = replicas.get(p.shape.model, 0) + 1
    for pl in pending:
        if pl.shape.model:
            replicas[pl.shape.model] = replicas.get(pl.shape.model, 0) + 1
    reading = read_signals_cached(info.signals_annotation, now, cfg.stale_after_s)
    if reading.state is not SignalState.FRESH or reading.signals is None:
        return NodeState(
            name=info.name,
            signals=reading.state.value,
            pool=info.pool,
            nvlink=info.nvlink,
            model_replicas=replicas,
        )
    sig = reading.signals
    gpus_sig = sorted(sig.gpus or (), key=lambda g: g.index)
    total = [g.mem_total_mib for g in gpus_sig]
    used = [g.mem_used_mib for g in gpus_sig]
    models = [g.models for g in gpus_sig]
    alloc = [0.0] * len(gpus_sig)
    for pl in pending:
        for j in pl.gpus:
            if 0 <= j < len(alloc):
                alloc[j] += (
                    total[j] if pl.shape.mem_per_gpu_mib is None else pl.shape.mem_per_gpu_mib
                )
    for p in active:
        _place(p.shape, total, used, alloc, models, cfg)
    return NodeState(
        name=info.name,
        gpus=tuple(
            GpuState(total_mib=t, used_mib=u, allocated_mib=a)
            for t, u, a in zip(total, used, alloc, strict=True)
        ),
        signals=SignalState.FRESH.value,
        streams=None if sig.streams is None else float(sig.streams),
        image_token_share=sig.image_token_share,
        p95_s=sig.p95_s,
        pool=info.pool,
        nvlink=info.nvlink,
        model_replicas=replicas,
        signals_ts=sig.ts,
    )
