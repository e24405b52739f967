"""Cluster state for the extender: node and pod caches fed by list+watch, the ledger's
effect on them, and a column table that answers names-only requests quickly.

`Reflector` runs the classic list-then-watch loop for one resource through the
`kubernetes` client (raw JSON, no model deserialisation: 5,000 nodes must stay cheap):
list -> remember metadata.resourceVersion -> watch from it (`allowWatchBookmarks`) ->
apply ADDED/MODIFIED/DELETED and move the resourceVersion -> when the watch ends
(server timeout), watch again from the last resourceVersion; on 410 Gone (an ERROR
event with a Status code 410, or an HTTP 410) list again; on any other error wait with
exponential backoff (with jitter, capped) and list again.

`ClusterState` holds what the reflectors deliver: `NodeInfo` by node, `PodInfo` of the
GPU/kvspread pods bound to each node, and a `NodeTable` row per node with the
`NodeState` the scorer needs (rebuilt for a node whenever its Node, its pods or its
ledger entries change). `ready` turns true after the first full list of both (and of the
NodeSignals resources when `watch_node_signals()` was called: a node's NodeSignals stands
in for its annotation, extender/signals_watch.py).

Thread-safety: reflector threads and request handlers share `ClusterState` through
one lock; `take()` returns copies.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from extender.batch import NodeBatch, NodeTable
from extender.config import ScoringConfig
from extender.ledger import Ledger
from extender.objects import NodeInfo, PodInfo, field, parse_node, parse_pod
from extender.signals_watch import ANNOTATION_SOURCE, NodeSignalsCache
from extender.state import build_node_state
from kvspread.clock import Clock

__all__ = ["Reflector", "ReflectorStats", "ClusterState", "Backoff"]

log = logging.getLogger("kvspread.extender.cache")


@dataclass
class Backoff:
    """Exponential backoff with full jitter: delay in [base/2, cap], doubling per failure."""

    base_s: float = 0.2
    cap_s: float = 30.0
    failures: int = 0

    def next_delay(self, rng: random.Random) -> float:
        self.failures += 1
        top = min(self.cap_s, self.base_s * (2 ** (self.failures - 1)))
        return rng.uniform(top / 2, top)

    def reset(self) -> None:
        self.failures = 0


@dataclass
class ReflectorStats:
    """Counters a test or /metrics can read."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    gone: int = 0
    errors: int = 0
    resource_version: str = ""
    synced: bool = False
    last_error: str = ""


class _Gone(Exception):
    pass


class Reflector:
    """List+watch one resource and feed `on_list(items)` / `on_event(type, obj)`.

    `list_call(**kw)` is a `kubernetes` client list method (e.g. `CoreV1Api.list_node`);
    it is called with `_preload_content=False` so the raw JSON is parsed here.
    """

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        *,
        field_selector: str | None = None,
        watch_timeout_s: int = 300,
        backoff: Backoff | None = None,
        request_timeout_s: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self._list_call = list_call
        self._on_list = on_list
        self._on_event = on_event
        self._field_selector = field_selector
        self._watch_timeout_s = watch_timeout_s
        self._backoff = backoff or Backoff()
        self._request_timeout_s = request_timeout_s
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._resp_lock = threading.Lock()
        self._resp: Any = None
        self._thread: threading.Thread | None = None
        self.stats = ReflectorStats()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"reflector-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, join_timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._resp_lock:
            resp = self._resp
        if resp is not None:
            # Unblock the reader thread: shut the socket down under the response (closing
            # the response alone does not interrupt a blocked recv).
            conn = getattr(resp, "connection", None)
            sock = getattr(conn, "sock", None) if conn is not None else None
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(join_timeout_s)

    def _kw(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"_preload_content": False}
        if self._field_selector:
            kw["field_selector"] = self._field_selector
        return kw

    def _list(self) -> str:
        resp = self._list_call(**self._kw(), _request_timeout=self._request_timeout_s)
        try:
            doc = json.loads(resp.data)
        finally:
            resp.release_conn()
        items = field(doc, "items") or []
        rv = field(field(doc, "metadata"), "resourceVersion") or ""
        self._on_list([i for i in items if isinstance(i, dict)])
        self.stats.lists += 1
        self.stats.resource_version = str(rv)
        self.stats.synced = True
        return str(rv)

    def _watch(self, rv: str) -> str:
        from kubernetes.watch.watch import iter_resp_lines

        kw = self._kw()
        kw.update(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout_s,
            _request_timeout=(self._request_timeout_s, self._watch_timeout_s + 30),
        )
        resp = self._list_call(**kw)
        with self._resp_lock:
            self._resp = resp
        self.stats.watches += 1
        try:
            if self._stop.is_set():
                return rv
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    break
                if not line or not line.strip():
                    continue
                event = json.loads(line)
                etype = field(event, "type")
                obj = field(event, "object")
                if etype == "ERROR":
                    code = field(obj, "code")
                    if code == 410:
                        raise _Gone(field(obj, "message") or "410 Gone")
                    raise RuntimeError(f"watch error event: {obj!r}")
                new_rv = field(field(obj, "metadata"), "resourceVersion")
                if etype in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, dict):
                    self._on_event(etype, obj)
                    self.stats.events += 1
                if new_rv:
                    rv = str(new_rv)
                    self.stats.resource_version = rv
        finally:
            with self._resp_lock:
                self._resp = None
            try:
                resp.release_conn()
            except Exception:  # noqa: BLE001
                pass
        return rv

    def run(self) -> None:
        """The loop; returns after stop()."""
        from kubernetes.client.exceptions import ApiException

        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                    self._backoff.reset()
                rv = self._watch(rv)
            except _Gone as exc:
                self.stats.gone += 1
                log.info(
                    "watch expired, listing again",
                    extra={"kv": {"resource": self.name, "why": str(exc)}},
                )
                rv = None
            except ApiException as exc:
                if exc.status == 410:
                    self.stats.gone += 1
                    rv = None
                    continue
                self._failed(f"HTTP {exc.status}: {exc.reason}")
                rv = None
            except Exception as exc:  # noqa: BLE001 - network, parse; keep the loop alive
                if self._stop.is_set():
                    break
                self._failed(f"{type(exc).__name__}: {exc}")
                rv = None

    def _failed(self, why: str) -> None:
        self.stats.errors += 1
        self.stats.last_error = why
        delay = self._backoff.next_delay(self._rng)
        log.warning(
            "list/watch failed, retrying",
            extra={"kv": {"resource": self.name, "error": why, "retry_in_s": round(delay, 3)}},
        )
        self._stop.wait(delay)


class ClusterState:
    """Node and pod caches + the node table the scorer reads (see the module docstring)."""

    def __init__(self, cfg: ScoringConfig, ledger: Ledger, clock: Clock) -> None:
        self._cfg = cfg
        self._ledger = ledger
        self._clock = clock
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._pods_on: dict[str, dict[str, PodInfo]] = {}
        self._table = NodeTable()
        self.nodes_synced = False
        self.pods_synced = False
        self.on_change: Callable[[], None] | None = None
        self.node_signals: NodeSignalsCache | None = None

    def watch_node_signals(self) -> NodeSignalsCache:
        """Take node signals from NodeSignals resources (extender/signals_watch.py) too;
        returns the cache its reflector feeds."""
        self.node_signals = NodeSignalsCache(self.ledger_changed)
        return self.node_signals

    def _signals_of(self, info: NodeInfo) -> NodeInfo:
        return info if self.node_signals is None else self.node_signals.apply(info)

    def signals_source(self, node: str) -> str:
        """Where `node`'s signals come from now (explain)."""
        with self._lock:
            info = self._nodes.get(node)
        if self.node_signals is None:
            return ANNOTATION_SOURCE if info is not None and info.signals_annotation else "none"
        return self.node_signals.source(info, node)

    @property
    def ready(self) -> bool:
        signals = self.node_signals is None or self.node_signals.synced
        return self.nodes_synced and self.pods_synced and signals

    # --- feeding ------------------------------------------------------------------------
    def replace_nodes(self, items: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            infos = [parse_node(o) for o in items]
            new = {i.name: i for i in infos if i.name}
            for gone in set(self._nodes) - set(new):
                self._table.remove(gone)
            self._nodes = new
            for name in new:
                self._refresh(name)
            self.nodes_synced = True

    def node_event(self, etype: str, obj: dict[str, Any]) -> None:
        info = parse_node(obj)
        if not info.name:
            return
        with self._lock:
            if etype == "DELETED":
                self._nodes.pop(info.name, None)
                self._table.remove(info.name)
                return
            self._nodes[info.name] = info
            self._refresh(info.name)

    def replace_pods(self, items: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            old_nodes = set(self._pods_on)
            self._pods = {}
            self._pods_on = {}
            for o in items:
                self._add_pod(parse_pod(o))
            for name in old_nodes | set(self._pods_on):
                self._refresh(name)
            self.pods_synced = True

    def pod_event(self, etype: str, obj: dict[str, Any]) -> None:
        pod = parse_pod(obj)
        if not pod.name:
            return
        with self._lock:
            touched = set()
            old = self._pods.pop(pod.key, None)
            if old is not None:
                self._pods_on.get(old.node_name, {}).pop(old.key, None)
                touched.add(old.node_name)
            if etype == "DELETED":
                was = self._ledger.forget(pod.key)
                if was:
                    touched.add(was)
            else:
                self._add_pod(pod)
                touched.add(pod.node_name)
            for name in touched:
                if name:
                    self._refresh(name)

    def _add_pod(self, pod: PodInfo) -> None:
        if not pod.node_name:
            return
        was = self._ledger.forget(pod.key)  # bound: the ledger entry has done its job
        if was and was != pod.node_name:
            self._refresh(was)
        if not pod.active or (pod.shape.gpus <= 0 and not pod.shape.model):
            return
        self._pods[pod.key] = pod
        self._pods_on.setdefault(pod.node_name, {})[pod.key] = pod

    def _refresh(self, name: str) -> None:
        info = self._nodes.get(name)
        if info is None:
            return
        state = build_node_state(
            self._signals_of(info),
            self._pods_on.get(info.name, {}).values(),
            self._ledger.on_node(info.name),
            self._clock.now(),
            self._cfg,
        )
        self._table.set(state)

    def ledger_changed(self, nodes: Iterable[str]) -> None:
        """Rebuild the rows of nodes whose ledger entries changed."""
        with self._lock:
            for name in nodes:
                self._refresh(name)

    # --- reading ------------------------------------------------------------------------
    def take(self, names: Sequence[str], model: str | None = None) -> tuple[NodeBatch, list[int]]:
        """Rows for `names` (request order) and the positions of names not in the cache;
        `model` precomputes that model's replica counts."""
        with self._lock:
            return self._table.take(names, self._clock.now(), self._cfg.stale_after_s, model)

    def batch_for(self, infos: Sequence[NodeInfo]) -> NodeBatch:
        """Column batch for nodes given in a request body (full NodeList mode), in order.

        A node whose labels and signals annotation are what the cache already holds is
        taken from the table (no rebuild); the others are built from the body.
        """
        with self._lock:
            known_pos: list[int] = []
            other_pos: list[int] = []
            cached = self._nodes
            for pos, info in enumerate(infos):
                (known_pos if cached.get(info.name) == info else other_pos).append(pos)
            if not other_pos:
                batch, _ = self._table.take(
                    [infos[p].name for p in known_pos], self._clock.now(), self._cfg.stale_after_s
                )
                return batch
            now = self._clock.now()
            built = NodeBatch.from_states(
                [
                    build_node_state(
                        self._signals_of(infos[p]),
                        self._pods_on.get(infos[p].name, {}).values(),
                        self._ledger.on_node(infos[p].name),
                        now,
                        self._cfg,
                    )
                    for p in other_pos
                ]
            )
            if not known_pos:
                return built
            known, _ = self._table.take(
                [infos[p].name for p in known_pos], now, self._cfg.stale_after_s
            )
        order = np.empty(len(infos), dtype=np.intp)
        order[np.asarray(known_pos + other_pos, dtype=np.intp)] = np.arange(len(infos))
        return NodeBatch.concat([known, built]).take(order)

    def node_names(self) -> list[str]:
        with self._lock:
            return self._table.row_names()

    def pods_on(self, node: str) -> list[PodInfo]:
        with self._lock:
            return list(self._pods_on.get(node, {}).values())

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self._nodes), len(self._pods)
