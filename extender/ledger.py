"""The placement ledger: the extender's own recent placements (docs/design.md section 4).

Between the moment the extender scores a node best for a pod and the moment the pod
shows up bound in the pod cache (and its memory in the node's signals), the node looks
emptier than it is. Without a memory of its own decisions, a burst of pods would all
pile onto the same best node. An entry holds the pod's shape and the GPU slots it would
take; it ends when the pod is seen bound (anywhere), when the pod is deleted, or after
`ttl_s` (the pod went elsewhere, or was never bound). A pod's own entry never counts
against it (`on_node(..., exclude=)`): a scheduler retry re-scores the pod as if its
earlier pick had not happened, so the ranking is the same every time.

Thread-safe (one lock); time comes from an injected clock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from extender.config import DEFAULT_LEDGER_TTL_S
from extender.model import PodShape
from kvspread.clock import Clock

__all__ = ["Placement", "PodRef", "Ledger", "DEFAULT_LEDGER_TTL_S"]


PodRef = tuple[str, str]
"""(namespace/name, UID) of the pod being decided; its own entries never count against it."""


@dataclass(frozen=True, slots=True)
class Placement:
    """One recent placement: `pod` ("ns/name", UID `uid` when known) onto `node`, GPU
    slots `gpus`."""

    pod: str
    node: str
    shape: PodShape
    gpus: tuple[int, ...]
    at: float  # monotonic seconds
    uid: str = ""

    def belongs_to(self, pod: PodRef) -> bool:
        """True when this entry is `pod`'s own (same namespace/name, or same UID)."""
        key, uid = pod
        return self.pod == key or (bool(uid) and self.uid == uid)


class Ledger:
    """Recent placements by pod key; at most one per pod (the latest decision wins)."""

    def __init__(self, clock: Clock, ttl_s: float = DEFAULT_LEDGER_TTL_S) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ledger ttl must be > 0, got {ttl_s!r}")
        self._clock = clock
        self._ttl = ttl_s
        self._lock = threading.Lock()
        self._by_pod: dict[str, Placement] = {}

    def record(
        self, pod: str, node: str, shape: PodShape, gpus: tuple[int, ...], uid: str = ""
    ) -> set[str]:
        """Remember a placement; returns the nodes whose view changed (old and new)."""
        with self._lock:
            changed = self._expire_locked()
            old = self._by_pod.get(pod)
            if old is not None:
                changed.add(old.node)
            self._by_pod[pod] = Placement(pod, node, shape, gpus, self._clock.monotonic(), uid)
            changed.add(node)
            return changed

    def forget(self, pod: str) -> str | None:
        """End a pod's entry (seen bound or deleted); returns the node it was on."""
        with self._lock:
            old = self._by_pod.pop(pod, None)
            return old.node if old else None

    def expire(self) -> set[str]:
        """Drop entries older than the TTL; returns the nodes whose view changed."""
        with self._lock:
            return self._expire_locked()

    def _expire_locked(self) -> set[str]:
        cutoff = self._clock.monotonic() - self._ttl
        old = [k for k, p in self._by_pod.items() if p.at <= cutoff]
        return {self._by_pod.pop(k).node for k in old}

    def on_node(self, node: str, exclude: PodRef | None = None) -> list[Placement]:
        """Live entries on `node`, oldest first (entries past the TTL are not returned),
        without the entries of the pod `exclude`."""
        cutoff = self._clock.monotonic() - self._ttl
        with self._lock:
            return sorted(
                (
                    p
                    for p in self._by_pod.values()
                    if p.node == node
                    and p.at > cutoff
                    and not (exclude is not None and p.belongs_to(exclude))
                ),
                key=lambda p: p.at,
            )

    def nodes_of(self, pod: PodRef) -> set[str]:
        """Nodes holding a live entry of `pod` (its own earlier picks)."""
        cutoff = self._clock.monotonic() - self._ttl
        with self._lock:
            return {p.node for p in self._by_pod.values() if p.at > cutoff and p.belongs_to(pod)}

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_pod)
