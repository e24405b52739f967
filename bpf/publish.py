"""Publishing the node signals: when (pure) and, for the Node annotation channel, how
(one PATCH; the NodeSignals resource channel is bpf/publish_crd.py).

docs/design.md section 3: at most once per `min_interval_s` (default 10 s) per node, and only
when a value moved by more than a threshold; a heartbeat every `max_interval_s`
(default 120 s, well below the extender's 300 s staleness) keeps an unchanged document
fresh. bpf/publisher.py adds the per-node write budget; docs/collector.md shows why these
defaults keep 5,000 nodes under 50 writes/s.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kvspread import names
from kvspread.nodesignals import CHANNELS
from kvspread.settings import bounded, invalid
from kvspread.signals import HEARTBEAT_S, NodeSignals

__all__ = ["PublishConfig", "should_publish", "patch_node_annotation"]


@dataclass(frozen=True)
class PublishConfig:
    """Where and when the node signals are written (YAML `publish:`): at most every
    `min_interval_s`, at least every `max_interval_s`, in between when a signal moved by
    more than its threshold, and never more than the write budget allows."""

    channel: str = "nodesignals"
    """nodesignals (one NodeSignals resource per node: scales) or annotation (the Node's
    kvspread.io/signals: small clusters)."""
    min_interval_s: float = 10.0
    """Fewest seconds between two writes."""
    max_interval_s: float = HEARTBEAT_S
    """Heartbeat: most seconds between two writes, changed or not (well below the
    extender's stale_after_s)."""
    writes_per_100s: float = 1.0
    """Write budget: average writes per 100 s per node, heartbeats included (0: no budget)."""
    write_burst: int = 2
    """Writes a node may make in a row above that average."""
    mem_threshold_mib: float = 512.0
    """GPU memory used moved by more than this, MiB."""
    util_threshold: float = 0.10
    """GPU utilisation moved by more than this (0..1)."""
    kv_threshold: float = 0.05
    """KV blocks used moved by more than this share of the total."""
    streams_threshold: float = 0.10
    """Relative change of active streams (and at least 1)."""
    share_threshold: float = 0.05
    """Image-token share moved by more than this."""
    p95_threshold: float = 0.10
    """Relative change of the p95 latency."""

    def validate(self) -> None:
        if self.channel not in CHANNELS:
            raise invalid("channel", "one of " + ", ".join(CHANNELS), self.channel)
        bounded(self, *(f.name for f in fields(self) if f.name != "channel"), at_least=0)
        bounded(self, "write_burst", at_least=1, what="an integer")


def _rel(a: float, b: float) -> float:
    base = max(abs(a), abs(b))
    return abs(a - b) / base if base > 0 else 0.0


def _gpu_changed(prev: NodeSignals, cur: NodeSignals, c: PublishConfig) -> str | None:
    if (prev.gpus is None) != (cur.gpus is None):
        return "gpu availability changed"
    if prev.gpus is None or cur.gpus is None:
        return None
    if len(prev.gpus) != len(cur.gpus):
        return "gpu count changed"
    for p, q in zip(prev.gpus, cur.gpus, strict=True):
        if abs(p.mem_used_mib - q.mem_used_mib) > c.mem_threshold_mib:
            return f"gpu {q.index} memory moved"
        if (p.util is None) != (q.util is None) or (
            p.util is not None and q.util is not None and abs(p.util - q.util) > c.util_threshold
        ):
            return f"gpu {q.index} utilisation moved"
        if p.models != q.models:
            return f"gpu {q.index} models changed"
        if (p.kv_blocks_used is None) != (q.kv_blocks_used is None):
            return f"gpu {q.index} kv availability changed"
        if p.kv_blocks_used is not None and q.kv_blocks_used is not None:
            total = max(q.kv_blocks_total or 0, 1)
            if abs(p.kv_blocks_used - q.kv_blocks_used) / total > c.kv_threshold:
                return f"gpu {q.index} kv usage moved"
    return None


def should_publish(
    previous: NodeSignals | None, current: NodeSignals, now: float, config: PublishConfig
) -> tuple[bool, str]:
    """Whether to write `current` now, and why (for the debug log).

    `previous` is the last document written (its `ts` is when); None means never.
    """
    if previous is None:
        return True, "first publication"
    age = now - previous.ts
    if age < config.min_interval_s:
        return False, "rate limited"
    if age >= config.max_interval_s:
        return True, "heartbeat"
    if set(previous.absent) != set(current.absent):
        return True, "sources changed"
    why = _gpu_changed(previous, current, config)
    if why:
        return True, why
    if (previous.streams is None) != (current.streams is None):
        return True, "streams availability changed"
    if previous.streams is not None and current.streams is not None:
        diff = abs(previous.streams - current.streams)
        if diff >= 1 and diff > config.streams_threshold * max(previous.streams, current.streams):
            return True, "streams moved"
    a, b = previous.image_token_share, current.image_token_share
    if (a is None) != (b is None) or (
        a is not None and b is not None and abs(a - b) > config.share_threshold
    ):
        return True, "image-token share moved"
    a, b = previous.p95_s, current.p95_s
    if (a is None) != (b is None) or (
        a is not None and b is not None and _rel(a, b) > config.p95_threshold
    ):
        return True, "p95 moved"
    return False, "no significant change"


def patch_node_annotation(api_client: Any, node: str, document: str) -> None:
    """Merge-patch `kvspread.io/signals` on the Node (RBAC: patch nodes).

    Raises the client's ApiException on failure; the caller logs and retries later.
    """
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    body = {"metadata": {"annotations": {names.ANNOTATION_SIGNALS: document}}}
    core.patch_node(node, body, _content_type="application/merge-patch+json", _request_timeout=10)
