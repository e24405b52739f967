"""Node signals (docs/design.md sections 3 and 4) from GPU, engine and request measurements.

Pure: `build_signals` takes what the sources measured and returns the
`kvspread.signals.NodeSignals` document; a source that is absent leaves its fields
out and is named in `absent`. The collector publishes measurements; free memory and rho
come from `kvspread.gpumem` (shared with the extender), and scoring them (the load weight
of docs/design.md section 4) is the extender's job (extender/scoring.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bpf.gpu import GpuSample
from bpf.gpupods import PodGpuMemory
from kvspread.engine import EngineSample
from kvspread.signals import GpuSignal, NodeSignals, PodMemory, SignalsError, encode_signals

__all__ = [
    "MIB",
    "GPU_PODS_ABSENT",
    "SignalInputs",
    "image_token_share",
    "build_signals",
    "fit_signals",
]

MIB = 1024 * 1024
GPU_PODS_ABSENT = "gpu_pods"
"""Named in `absent` when a GPU of the document has no per-pod memory."""


def image_token_share(
    image_parts: int, requests: int, tokens_per_image: float, text_tokens_per_request: float
) -> tuple[float, float]:
    """Estimated (image tokens, total tokens) of `requests` requests with `image_parts`
    images in all: each image is `tokens_per_image` tokens (576 for LLaVA-1.5's
    336 px CLIP encoder), each request has `text_tokens_per_request` text tokens."""
    img = image_parts * tokens_per_image
    return img, img + requests * text_tokens_per_request


@dataclass(frozen=True)
class SignalInputs:
    """Everything measured for one document; None means the source is absent."""

    node: str
    now: float
    gpus: Sequence[GpuSample] | None
    gpu_models: Mapping[int, Sequence[str]]  # GPU index -> models served on it
    gpu_engines: Mapping[int, Sequence[EngineSample]]  # GPU index -> engines using it
    streams: int | None
    image_token_share: float | None
    p95_s: float | None
    absent: tuple[str, ...] = ()
    ttft_p95_s: float | None = None  # SSE streams' time to first token; None: none seen
    # GPU index -> its pods' memory (bpf.gpupods); a GPU missing here has no per-pod figure
    gpu_pods: Mapping[int, Sequence[PodGpuMemory]] | None = None


def _kv_blocks(engines: Sequence[EngineSample]) -> tuple[int | None, int | None]:
    """The GPU's KV blocks (total, used) over the engines on it: an engine that does not
    report a figure is left out; one whose figure the parser dropped makes it unknown."""

    def total(field: str) -> int | None:
        if any(field in e.dropped for e in engines):
            return None
        vals = [v for e in engines if (v := getattr(e, field)) is not None]
        return sum(vals) if vals else None

    return total("kv_blocks_total"), total("kv_blocks_used")


def _pods(memory: Sequence[PodGpuMemory] | None) -> tuple[PodMemory, ...] | None:
    if memory is None:
        return None
    return tuple(
        PodMemory(m.uid, m.namespace, m.name, None if m.used_bytes is None else m.used_bytes / MIB)
        for m in memory
    )


def build_signals(inp: SignalInputs) -> NodeSignals:
    gpus: tuple[GpuSignal, ...] | None = None
    absent = set(inp.absent)
    if inp.gpus is not None:
        out = []
        per_pod = inp.gpu_pods or {}
        for g in sorted(inp.gpus, key=lambda s: s.index):
            pods = _pods(per_pod.get(g.index))
            kv_total, kv_used = _kv_blocks(inp.gpu_engines.get(g.index, ()))
            out.append(
                GpuSignal(
                    index=g.index,
                    uuid=g.uuid,
                    mem_total_mib=g.mem_total / MIB,
                    mem_used_mib=min(g.mem_used, g.mem_total) / MIB,
                    util=None if g.util is None else max(0.0, min(1.0, g.util)),
                    kv_blocks_total=kv_total,
                    kv_blocks_used=kv_used,
                    models=tuple(sorted(set(inp.gpu_models.get(g.index, ())))),
                    pods=pods,
                )
            )
            if pods is None:
                absent.add(GPU_PODS_ABSENT)
        gpus = tuple(out)
    else:
        absent.add(GPU_PODS_ABSENT)
    return NodeSignals(
        ts=inp.now,
        node=inp.node,
        gpus=gpus,
        streams=inp.streams,
        image_token_share=inp.image_token_share,
        p95_s=inp.p95_s,
        ttft_p95_s=inp.ttft_p95_s,
        absent=tuple(sorted(absent)),
    )


def _without_models(s: NodeSignals) -> NodeSignals:
    return replace(s, gpus=tuple(replace(g, models=()) for g in s.gpus or ()))


def _without_pods(s: NodeSignals) -> NodeSignals:
    return replace(
        s,
        gpus=tuple(replace(g, pods=None) for g in s.gpus or ()),
        absent=tuple(sorted({*s.absent, GPU_PODS_ABSENT})),
    )


def _without_uuids(s: NodeSignals) -> NodeSignals:
    return replace(s, gpus=tuple(replace(g, uuid="") for g in s.gpus or ()))


def fit_signals(sig: NodeSignals) -> tuple[NodeSignals, str]:
    """Encode; when over 4 KiB, drop model lists, then per-pod memory (`absent` then
    names `gpu_pods`), then UUIDs, until it fits."""
    try:
        return sig, encode_signals(sig)
    except SignalsError:
        if sig.gpus is None:
            raise  # nothing left to drop
    for step in (_without_models, _without_pods, _without_uuids):
        sig = step(sig)
        try:
            return sig, encode_signals(sig)
        except SignalsError:
            continue
    return sig, encode_signals(sig)  # still over: raises SignalsError
