"""Process -> pod attribution: pid -> cgroup -> pod UID -> pod name and namespace.

The cgroup text is parsed by `bpf.cgroup` (every kubelet layout is listed there); this
module reads `/proc/<pid>/cgroup` and joins the UID to the pod table. `proc_root` is
injectable so tests use a fixture /proc tree. Results are cached per pid (bounded); a pid
not found in the pod table is re-read after `retry_s`, so pods that start after the
collector are picked up.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bpf.cgroup import parse_proc_cgroup
from kvspread.clock import SYSTEM_CLOCK, Clock

__all__ = ["PodRef", "PodMeta", "Attributor"]


@dataclass(frozen=True)
class PodMeta:
    """What the Kubernetes API says about a pod (from the pod list on this node)."""

    uid: str
    namespace: str
    name: str
    ip: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    deleting: bool = False
    """metadata.deletionTimestamp is set: the pod drains and serves no new requests."""

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)


@dataclass(frozen=True)
class PodRef:
    """A process's pod: always the UID and container id from the cgroup; name and
    namespace when the pod table knows the UID."""

    uid: str
    container_id: str = ""
    namespace: str = ""
    name: str = ""


PodLookup = Callable[[str], PodMeta | None]


class Attributor:
    """Cached pid -> PodRef. Thread-safe (the event, signals and scrape threads share it)."""

    def __init__(
        self,
        proc_root: Path = Path("/proc"),
        pod_lookup: PodLookup | None = None,
        *,
        max_entries: int = 8192,
        retry_s: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._proc = Path(proc_root)
        self._lookup = pod_lookup
        self._max = max_entries
        self._retry = retry_s
        self._clock = clock
        self._cache: OrderedDict[int, tuple[PodRef | None, float]] = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, pid: int) -> PodRef | None:
        """The pod of `pid`, or None for a process outside any pod (or gone)."""
        with self._lock:
            return self._resolve(pid)

    def _resolve(self, pid: int) -> PodRef | None:
        now = self._clock.monotonic()
        hit = self._cache.get(pid)
        if hit is not None:
            ref, at = hit
            complete = ref is not None and (ref.name or self._lookup is None)
            if complete or now - at < self._retry:
                self._cache.move_to_end(pid)
                return ref
        ref = self._read(pid)
        self._cache[pid] = (ref, now)
        self._cache.move_to_end(pid)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return ref

    def forget(self, pid: int) -> None:
        with self._lock:
            self._cache.pop(pid, None)

    def _read(self, pid: int) -> PodRef | None:
        try:
            text = (self._proc / str(pid) / "cgroup").read_text()
        except OSError:
            return None
        found = parse_proc_cgroup(text)
        if found is None:
            return None
        uid, cid = found.uid, found.container_id
        meta = self._lookup(uid) if self._lookup else None
        if meta is None:
            return PodRef(uid=uid, container_id=cid)
        return PodRef(uid=uid, container_id=cid, namespace=meta.namespace, name=meta.name)

    def __len__(self) -> int:
        return len(self._cache)
