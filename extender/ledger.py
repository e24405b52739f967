"""The placement ledger: the extender's own recent placements (docs/design.md section 4).

Between the moment the extender scores a node best for a pod and the moment the pod
shows up bound in the pod cache (and its memory in the node's signals), the node looks
emptier than it is. Without a memory of its own decisions, a burst of pods would all
pile onto the same best node. An entry holds the pod's shape and the GPU slots it would
take; it ends when the pod is seen bound (anywhere), when the pod is deleted, or after
`ttl_s` (the pod went elsewhere, or was never bound). What the scheduler did is followed
from the pod watch, not assumed: a binding ends the entry wherever it landed (the pod
cache then counts the pod on its real node) and is counted as booked or elsewhere
(`bindings()`, the metric kvspread_extender_ledger_bindings_total). A pod's own entry never counts
against it (`on_node(..., exclude=)`): a scheduler retry re-scores the pod as if its
earlier pick had not happened, so the ranking is the same every time.

Thread-safe (one lock); time comes from an injected clock.
"""

from __future__ import annotations

import heapq
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
    """Recent placements by pod key; at most one per pod (the latest decision wins).

    Indexed by node, by UID and by age (a heap), so recording, expiring and the lookups
    the cache makes for every request cost what they touch, not the whole ledger: a
    scaling Deployment leaves one entry per replica until each shows up bound."""

    def __init__(self, clock: Clock, ttl_s: float = DEFAULT_LEDGER_TTL_S) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ledger ttl must be > 0, got {ttl_s!r}")
        self._clock = clock
        self._ttl = ttl_s
        self._lock = threading.Lock()
        self._by_pod: dict[str, Placement] = {}
        self._seq: dict[str, int] = {}
        """Pod key -> its position in `_by_pod` (insertion order): breaks ties of `at`."""
        self._next_seq = 0
        self._on_node: dict[str, dict[str, Placement]] = {}
        self._by_uid: dict[str, set[str]] = {}
        self._ages: list[tuple[float, int, str, Placement]] = []
        """Heap of (at, push count, pod key, entry); an entry no longer current is skipped."""
        self._pushes = 0
        self._bindings = {"as_booked": 0, "elsewhere": 0}

    def _put(self, p: Placement) -> None:
        old = self._by_pod.get(p.pod)
        if old is not None:
            self._unindex(old)
        else:
            self._seq[p.pod] = self._next_seq
            self._next_seq += 1
        self._by_pod[p.pod] = p
        self._on_node.setdefault(p.node, {})[p.pod] = p
        if p.uid:
            self._by_uid.setdefault(p.uid, set()).add(p.pod)
        self._pushes += 1
        heapq.heappush(self._ages, (p.at, self._pushes, p.pod, p))

    def _unindex(self, p: Placement) -> None:
        on = self._on_node.get(p.node)
        if on is not None:
            on.pop(p.pod, None)
            if not on:
                del self._on_node[p.node]
        if p.uid:
            keys = self._by_uid.get(p.uid)
            if keys is not None:
                keys.discard(p.pod)
                if not keys:
                    del self._by_uid[p.uid]

    def _pop(self, pod: str) -> Placement | None:
        old = self._by_pod.pop(pod, None)
        if old is not None:
            self._unindex(old)
            del self._seq[pod]
            if not self._by_pod:
                self._ages.clear()
        return old

    def record(
        self, pod: str, node: str, shape: PodShape, gpus: tuple[int, ...], uid: str = ""
    ) -> set[str]:
        """Remember a placement; returns the nodes whose view changed (old and new)."""
        with self._lock:
            changed = self._expire_locked()
            old = self._by_pod.get(pod)
            if old is not None:
                changed.add(old.node)
            self._put(Placement(pod, node, shape, gpus, self._clock.monotonic(), uid))
            changed.add(node)
            return changed

    def forget(self, pod: str) -> str | None:
        """End a pod's entry (seen bound or deleted); returns the node it was on."""
        with self._lock:
            old = self._pop(pod)
            return old.node if old else None

    def bound(self, pod: str, node: str) -> str | None:
        """The pod was seen bound to `node`: end its entry (wherever it was booked) and
        count whether the scheduler bound it where the ledger held it; returns the node
        the entry was on."""
        with self._lock:
            old = self._pop(pod)
            if old is not None:
                self._bindings["as_booked" if old.node == node else "elsewhere"] += 1
            return old.node if old else None

    def bindings(self) -> dict[str, int]:
        """Bindings seen for booked pods: as_booked (the node the ledger held) and
        elsewhere (the scheduler chose another node)."""
        with self._lock:
            return dict(self._bindings)

    def expire(self) -> set[str]:
        """Drop entries older than the TTL; returns the nodes whose view changed."""
        with self._lock:
            return self._expire_locked()

    def _expire_locked(self) -> set[str]:
        cutoff = self._clock.monotonic() - self._ttl
        ages = self._ages
        gone: set[str] = set()
        while ages and ages[0][0] <= cutoff:
            _, _, pod, p = heapq.heappop(ages)
            if self._by_pod.get(pod) is p:
                self._pop(pod)
                gone.add(p.node)
        if len(ages) > 2 * len(self._by_pod) + 64:
            # entries replaced by later decisions: rebuild the heap from the live ones
            self._ages = [(p.at, self._seq[k], k, p) for k, p in self._by_pod.items()]
            self._pushes = self._next_seq
            heapq.heapify(self._ages)
        return gone

    def on_node(self, node: str, exclude: PodRef | None = None) -> list[Placement]:
        """Live entries on `node`, oldest first (entries past the TTL are not returned),
        without the entries of the pod `exclude`."""
        cutoff = self._clock.monotonic() - self._ttl
        with self._lock:
            on = self._on_node.get(node)
            if not on:
                return []
            live = [
                p
                for p in on.values()
                if p.at > cutoff and not (exclude is not None and p.belongs_to(exclude))
            ]
            seq = self._seq
            return sorted(live, key=lambda p: (p.at, seq[p.pod]))

    def nodes_of(self, pod: PodRef) -> set[str]:
        """Nodes holding a live entry of `pod` (its own earlier picks)."""
        cutoff = self._clock.monotonic() - self._ttl
        key, uid = pod
        with self._lock:
            keys = {key}
            if uid:
                keys |= self._by_uid.get(uid, set())
            found = (self._by_pod.get(k) for k in keys)
            return {p.node for p in found if p is not None and p.at > cutoff}

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_pod)
