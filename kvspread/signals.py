"""The node-signals document (docs/design.md section 3): written by the collector into the
Node annotation `kvspread.io/signals` and served at the collector's `GET /signals`;
read by the extender (and the simulator).

Wire form (compact JSON, at most 4 KiB)::

    {"v": 1, "ts": 1800000000.0, "node": "gpu-node-1",
     "gpus": [{"i": 0, "uuid": "GPU-..", "mem_total_mib": 81559, "mem_used_mib": 30210,
               "util": 0.41, "kv_blocks_total": 16384, "kv_blocks_used": 9000,
               "models": ["qwen2-vl-7b"],
               "pods": [{"uid": "3fcb4b70-..", "ns": "llm", "name": "vllm-0",
                         "mem_used_mib": 20480.0},
                        {"uid": "", "mem_used_mib": 512.0}]}],
     "streams": 12, "image_token_share": 0.31, "p95_s": 0.142, "ttft_p95_s": 0.081,
     "absent": ["nvml"]}

Absent numbers are left out, never written as zero: a node without NVML has no `gpus`
key and says so in `absent`. `util`, `kv_blocks_*`, `streams`, `image_token_share`,
`p95_s` and `ttft_p95_s` (time to first token of SSE streams; absent when no stream was
seen) are optional per field for the same reason.

`pods` is the GPU memory of each pod's processes on that GPU (NVML per-process memory,
host pid -> cgroup -> pod): `uid` always, `ns` and `name` once the collector's pod table
knows the UID; the entry with `uid` "" is the processes in no pod. `mem_used_mib` is left
out where NVML does not report a process's memory (unknown, not 0). A GPU without `pods`
has no per-pod figure (NVML could not list its processes, or the list was dropped to stay
under 4 KiB) and `absent` names `gpu_pods`; `"pods": []` means no process uses the GPU.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

__all__ = [
    "SCHEMA_VERSION",
    "MAX_DOCUMENT_BYTES",
    "HEARTBEAT_S",
    "STALE_AFTER_S",
    "GpuSignal",
    "PodMemory",
    "NodeSignals",
    "SignalState",
    "SignalsReading",
    "SignalsError",
    "encode_signals",
    "decode_signals",
    "read_signals",
]

SCHEMA_VERSION = 1
MAX_DOCUMENT_BYTES = 4096
MAX_PODS_PER_GPU = 64

HEARTBEAT_S: Final = 120.0
"""The collector rewrites an unchanged document at least this often (its
`publish.max_interval_s`), so that a reader can tell a quiet node from a dead collector."""
STALE_AFTER_S: Final = 300.0
"""A document older than this is stale to its readers (the extender's
`scoring.stale_after_s`, the router's `metrics.signals_stale_after_s`; docs/design.md
section 3): two heartbeats and a cycle fit, so one lost write never makes a node stale, and
5,000 nodes heartbeat at 42 writes/s, under the 50 writes/s bound (docs/collector.md)."""


class SignalsError(ValueError):
    """A signals document that cannot be used; the message says which field is wrong."""


@dataclass(frozen=True)
class PodMemory:
    """One pod's processes on one GPU. `uid` "" is the processes in no pod; memory in MiB,
    None where NVML does not report it."""

    uid: str
    namespace: str = ""
    name: str = ""
    mem_used_mib: float | None = None


@dataclass(frozen=True)
class GpuSignal:
    """One GPU as the collector measured it. Memory in MiB (free: kvspread.gpumem)."""

    index: int
    mem_total_mib: float
    mem_used_mib: float
    uuid: str = ""
    util: float | None = None
    kv_blocks_total: int | None = None
    kv_blocks_used: int | None = None
    models: tuple[str, ...] = ()
    pods: tuple[PodMemory, ...] | None = None  # None: absent (not listed or dropped)


@dataclass(frozen=True)
class NodeSignals:
    """A node's measured state at time `ts` (seconds since the epoch)."""

    ts: float
    node: str = ""
    gpus: tuple[GpuSignal, ...] | None = None
    streams: int | None = None
    image_token_share: float | None = None
    p95_s: float | None = None
    ttft_p95_s: float | None = None  # p95 time to first token of the node's SSE streams
    absent: tuple[str, ...] = field(default_factory=tuple)
    version: int = SCHEMA_VERSION


class SignalState(StrEnum):
    FRESH = "fresh"
    STALE = "stale"
    MISSING = "missing"
    INVALID = "invalid"


@dataclass(frozen=True)
class SignalsReading:
    """What a reader made of a node's annotation: the signals when fresh, else why not."""

    state: SignalState
    signals: NodeSignals | None = None
    reason: str = ""
    age_s: float | None = None


def _num(value: Any, where: str, *, lo: float | None = 0.0, hi: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SignalsError(f"{where} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise SignalsError(f"{where} must be finite, got {value!r}")
    if lo is not None and v < lo:
        raise SignalsError(f"{where} must be >= {lo}, got {value!r}")
    if hi is not None and v > hi:
        raise SignalsError(f"{where} must be <= {hi}, got {value!r}")
    return v


def _opt(d: dict[str, Any], key: str, where: str, **kw: Any) -> float | None:
    if key not in d or d[key] is None:
        return None
    return _num(d[key], f"{where}.{key}", **kw)


def _encode_pod(p: PodMemory) -> dict[str, Any]:
    d: dict[str, Any] = {"uid": p.uid}
    if p.namespace:
        d["ns"] = p.namespace
    if p.name:
        d["name"] = p.name
    if p.mem_used_mib is not None:
        d["mem_used_mib"] = round(p.mem_used_mib, 1)
    return d


def _decode_pods(raw: Any, where: str) -> tuple[PodMemory, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_PODS_PER_GPU:
        raise SignalsError(f"{where} must be a list of at most {MAX_PODS_PER_GPU} objects")
    out = []
    for n, p in enumerate(raw):
        at = f"{where}[{n}]"
        if not isinstance(p, dict):
            raise SignalsError(f"{at} must be an object")
        texts = [p.get("uid"), p.get("ns", ""), p.get("name", "")]
        for key, value in zip(("uid", "ns", "name"), texts, strict=True):
            if not isinstance(value, str):
                raise SignalsError(f"{at}.{key} must be a string")
        uid, ns, name = texts
        out.append(PodMemory(uid, ns, name, _opt(p, "mem_used_mib", at)))
    return tuple(out)


def encode_signals(s: NodeSignals) -> str:
    """Serialise to the compact wire JSON; raises SignalsError past 4 KiB or past
    MAX_PODS_PER_GPU pod entries on a GPU (what readers accept)."""
    doc: dict[str, Any] = {"v": s.version, "ts": round(s.ts, 3)}
    if s.node:
        doc["node"] = s.node
    if s.gpus is not None:
        gpus = []
        for g in s.gpus:
            gd: dict[str, Any] = {
                "i": g.index,
                "mem_total_mib": round(g.mem_total_mib, 1),
                "mem_used_mib": round(g.mem_used_mib, 1),
            }
            if g.uuid:
                gd["uuid"] = g.uuid
            if g.util is not None:
                gd["util"] = round(g.util, 3)
            if g.kv_blocks_total is not None:
                gd["kv_blocks_total"] = g.kv_blocks_total
            if g.kv_blocks_used is not None:
                gd["kv_blocks_used"] = g.kv_blocks_used
            if g.models:
                gd["models"] = list(g.models)
            if g.pods is not None:
                if len(g.pods) > MAX_PODS_PER_GPU:
                    raise SignalsError(
                        f"GPU {g.index} has {len(g.pods)} pod entries, over {MAX_PODS_PER_GPU}"
                    )
                gd["pods"] = [_encode_pod(p) for p in g.pods]
            gpus.append(gd)
        doc["gpus"] = gpus
    if s.streams is not None:
        doc["streams"] = s.streams
    if s.image_token_share is not None:
        doc["image_token_share"] = round(s.image_token_share, 4)
    if s.p95_s is not None:
        doc["p95_s"] = round(s.p95_s, 6)
    if s.ttft_p95_s is not None:
        doc["ttft_p95_s"] = round(s.ttft_p95_s, 6)
    if s.absent:
        doc["absent"] = list(s.absent)
    text = json.dumps(doc, separators=(",", ":"), sort_keys=False)
    if len(text.encode()) > MAX_DOCUMENT_BYTES:
        raise SignalsError(
            f"signals document is {len(text.encode())} bytes, over the {MAX_DOCUMENT_BYTES} limit"
        )
    return text


def decode_signals(text: str) -> NodeSignals:
    """Parse and validate a wire document. Raises SignalsError naming the bad field."""
    if len(text.encode("utf-8", "replace")) > MAX_DOCUMENT_BYTES:
        raise SignalsError(f"document over {MAX_DOCUMENT_BYTES} bytes")
    try:
        doc = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise SignalsError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SignalsError("document must be a JSON object")
    version = doc.get("v")
    if version != SCHEMA_VERSION:
        raise SignalsError(f"unsupported schema version v={version!r} (this reader knows 1)")
    ts = _num(doc.get("ts"), "ts")
    node = doc.get("node", "")
    if not isinstance(node, str):
        raise SignalsError("node must be a string")
    gpus: tuple[GpuSignal, ...] | None = None
    if "gpus" in doc and doc["gpus"] is not None:
        raw = doc["gpus"]
        if not isinstance(raw, list) or len(raw) > 64:
            raise SignalsError("gpus must be a list of at most 64 objects")
        out = []
        for n, g in enumerate(raw):
            where = f"gpus[{n}]"
            if not isinstance(g, dict):
                raise SignalsError(f"{where} must be an object")
            total = _num(g.get("mem_total_mib"), f"{where}.mem_total_mib")
            used = _num(g.get("mem_used_mib"), f"{where}.mem_used_mib")
            kvt = _opt(g, "kv_blocks_total", where)
            kvu = _opt(g, "kv_blocks_used", where)
            models = g.get("models", [])
            if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
                raise SignalsError(f"{where}.models must be a list of strings")
            uuid = g.get("uuid", "")
            if not isinstance(uuid, str):
                raise SignalsError(f"{where}.uuid must be a string")
            out.append(
                GpuSignal(
                    index=int(_num(g.get("i", n), f"{where}.i")),
                    uuid=uuid,
                    mem_total_mib=total,
                    mem_used_mib=min(used, total),
                    util=_opt(g, "util", where, hi=1.0),
                    kv_blocks_total=None if kvt is None else int(kvt),
                    kv_blocks_used=None if kvu is None else int(kvu),
                    models=tuple(models),
                    pods=_decode_pods(g.get("pods"), f"{where}.pods"),
                )
            )
        gpus = tuple(out)
    streams = _opt(doc, "streams", "doc")
    absent = doc.get("absent", [])
    if not isinstance(absent, list) or not all(isinstance(a, str) for a in absent):
        raise SignalsError("absent must be a list of strings")
    return NodeSignals(
        ts=ts,
        node=node,
        gpus=gpus,
        streams=None if streams is None else int(streams),
        image_token_share=_opt(doc, "image_token_share", "doc", hi=1.0),
        p95_s=_opt(doc, "p95_s", "doc"),
        ttft_p95_s=_opt(doc, "ttft_p95_s", "doc"),
        absent=tuple(absent),
        version=SCHEMA_VERSION,
    )


def read_signals(annotation: str | None, now: float, stale_after_s: float) -> SignalsReading:
    """Classify a node's annotation: fresh signals, or stale / missing / invalid with why.

    Never raises: a reader must not crash or filter a node on a bad document.
    """
    if annotation is None or annotation == "":
        return SignalsReading(SignalState.MISSING, reason="no kvspread.io/signals annotation")
    try:
        sig = decode_signals(annotation)
    except SignalsError as exc:
        return SignalsReading(SignalState.INVALID, reason=str(exc))
    age = now - sig.ts
    if age > stale_after_s:
        return SignalsReading(
            SignalState.STALE, sig, reason=f"signals are {age:.0f}s old", age_s=age
        )
    return SignalsReading(SignalState.FRESH, sig, age_s=age)
