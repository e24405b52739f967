"""Endpoints from the cluster: an `InferencePool` (inference.networking.k8s.io/v1) and its
Ready pods, or pods by label selector without Gateway API; plus the nodes' kvspread
signals for the load term.

Each resource is one list-then-watch loop, kvspread/kube.py's `Reflector` (list ->
resourceVersion -> watch from it with bookmarks -> on the server's timeout watch again ->
on 410 Gone or any error back off, one backoff for list and watch, and list again)
through kvspread/kubehttp.py's `connect` (httpx for an API server URL and in the cluster,
the `kubernetes` client for a kubeconfig). After every change the endpoint set is rebuilt:
for each pod matching the pool's `selector.matchLabels` that is Ready, has a pod IP and is
not being deleted, one endpoint per `targetPorts[].number` (up to 8, the data-parallel
ranks: router/ranks.py; the older `targetPortNumber` too). A pod's modality is its
`kvspread.io/modality` label, else its node's `kvspread.io/pool` (vision -> image,
language -> text, mixed -> mixed). Its metrics URL uses the `kvspread.io/metrics-port` and
`kvspread.io/metrics-path` annotations, else `--metrics-port`, else the target port.
Until the pool and the pods have been listed once, the set is not synced (readiness off).

A node's signals come from its NodeSignals resource (kvspread.io/v1alpha1, the collector's
default channel; list+watch by kvspread/nodesignals.py's `watch`) when it has one, else
from its `kvspread.io/signals` annotation; a deleted NodeSignals falls back to the
annotation. `kubernetes.node_signals: false` reads annotations only. The NodeSignals list
does not hold readiness back (no CRD must not stop routing): until it is listed, nodes'
annotations are read.

In pool mode the pool's InferenceObjective resources are watched too (router/objectivewatch.py,
`objectives.resources`): their priorities go to the picker; they never hold readiness back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kvspread import nodesignals
from kvspread.kube import Reflector, path_list_call
from kvspread.kubehttp import connect
from kvspread.names import (
    ANNOTATION_ENGINE,
    ANNOTATION_METRICS_PATH,
    ANNOTATION_METRICS_PORT,
    ANNOTATION_SIGNALS,
    LABEL_MODALITY,
    LABEL_POOL,
)
from kvspread.signals import SignalState, read_signals
from router.config import RouterConfig
from router.endpoints import Endpoint, EndpointSet
from router.objectivewatch import ObjectiveWatch
from router.ranks import PortsError, pod_ranks, rank_name, target_ports

__all__ = ["PoolWatch", "pool_endpoints", "pod_ready", "POOL_GROUP", "POOL_VERSION"]

log = logging.getLogger("kvspread.router.kubewatch")

POOL_GROUP = "inference.networking.k8s.io"
POOL_VERSION = "v1"
POOL_MODALITY = {"vision": "image", "language": "text", "mixed": "mixed"}


def pod_ready(pod: dict[str, Any]) -> bool:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def parse_selector(text: str) -> dict[str, str]:
    """`a=b,c=d` -> {a: b, c: d} (equality selectors only, as InferencePool's matchLabels)."""
    out = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{part!r} is not key=value")
        out[key.strip()] = value.strip().lstrip("=")
    return out


def pool_endpoints(
    selector: dict[str, str],
    ports: list[int],
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any]],
    metrics_port: int | None = None,
    metrics_path: str = "/metrics",
) -> list[Endpoint]:
    """The Ready endpoints of the pods that `selector` selects (pure)."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if not _matches(selector, labels) or not pod_ready(pod):
            continue
        ann = meta.get("annotations") or {}
        ip = pod["status"]["podIP"]
        host = f"[{ip}]" if ":" in ip else ip  # an IPv6 pod IP, as Envoy and URLs write it
        node = (pod.get("spec") or {}).get("nodeName") or ""
        modality = labels.get(LABEL_MODALITY)
        if modality is None and node in nodes:
            pool = ((nodes[node].get("metadata") or {}).get("labels") or {}).get(LABEL_POOL)
            modality = POOL_MODALITY.get(pool or "")
        path = ann.get(ANNOTATION_METRICS_PATH) or metrics_path
        pod_name = meta.get("name", "")
        for rank in pod_ranks(ports, ann):
            port = rank.port
            mport = ann.get(ANNOTATION_METRICS_PORT) or metrics_port or port
            out.append(
                Endpoint(
                    address=f"{host}:{port}",
                    metrics_url=f"http://{host}:{mport}{path}",
                    name=f"{meta.get('namespace', '')}/{rank_name(pod_name, rank, len(ports))}",
                    namespace=meta.get("namespace", ""),
                    node=node,
                    modality=modality,
                    engine=ann.get(ANNOTATION_ENGINE),
                    pod=pod_name,
                    rank=rank.index,
                )
            )
    return out


class _ListWatch:
    """One resource's list+watch (kvspread/kube.py's `Reflector`, with its one backoff)
    feeding a dict of objects by namespace/name."""

    def __init__(
        self,
        api: Any,
        name: str,
        path: str,
        query: list[tuple[str, str]],
        on_change: Callable[[], None],
        watch_timeout_s: int = 300,
    ) -> None:
        self.name = name
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = False
        self._on_change = on_change
        self._lock = threading.Lock()
        self.reflector = Reflector(
            name,
            path_list_call(api, path, query),
            self._replace,
            self._event,
            watch_timeout_s=watch_timeout_s,
        )

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.objects.values())

    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        m = obj.get("metadata") or {}
        return f"{m.get('namespace', '')}/{m.get('name', '')}"

    def _replace(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self.objects = {self._key(o): o for o in items}
            self.synced = True
        self._on_change()

    def _event(self, etype: str, obj: dict[str, Any]) -> None:
        with self._lock:
            if etype == "DELETED":
                self.objects.pop(self._key(obj), None)
            else:
                self.objects[self._key(obj)] = obj
        self._on_change()


class PoolWatch:
    """Keeps `EndpointSet` equal to the pool's (or the selector's) Ready endpoints, and, in
    pool mode, hands the pool's InferenceObjective priorities to `on_objectives`."""

    def __init__(
        self,
        cfg: RouterConfig,
        endpoints: EndpointSet,
        on_objectives: Callable[[Mapping[str, int]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.endpoints = endpoints
        self._api = connect(cfg.kubernetes.kubeconfig, cfg.kubernetes.api_server)
        self._rebuild_lock = threading.Lock()
        self.pool_problem = ""
        self.objectives: ObjectiveWatch | None = None
        if cfg.mode == "pool" and cfg.objectives.resources != "off":
            self.objectives = ObjectiveWatch(
                self._api,
                cfg.pool.namespace,
                cfg.pool.name or "",
                on_objectives or (lambda _priorities: None),
                resources=cfg.objectives.resources,
                max_resources=cfg.objectives.max_resources,
            )
        if cfg.mode == "pool":
            ns = cfg.pool.namespace
            self.pool: _ListWatch | None = self._lw(
                "inferencepool",
                f"/apis/{POOL_GROUP}/{POOL_VERSION}/namespaces/{ns}/inferencepools",
                [("fieldSelector", f"metadata.name={cfg.pool.name}")],
            )
            self.pods = self._lw("pods", f"/api/v1/namespaces/{ns}/pods", [])
        else:
            self.pool = None
            try:
                self._selector = parse_selector(cfg.endpoints.selector or "")
            except ValueError as exc:
                from kvspread.settings import ConfigError

                raise ConfigError(f"endpoints.selector: {exc}") from exc
            path = (
                f"/api/v1/namespaces/{cfg.endpoints.namespace}/pods"
                if cfg.endpoints.namespace
                else "/api/v1/pods"
            )
            self.pods = self._lw("pods", path, [("labelSelector", cfg.endpoints.selector or "")])
        self.nodes = self._lw("nodes", "/api/v1/nodes", [])
        self.node_signals: nodesignals.NodeSignalsCache | None = None
        self._ns_watch: Reflector | None = None
        if cfg.kubernetes.node_signals:
            self.node_signals = nodesignals.NodeSignalsCache(lambda _nodes: self._rebuild())
            self._ns_watch = nodesignals.watch(self._api, self.node_signals)

    def _lw(self, name: str, path: str, query: list[tuple[str, str]]) -> _ListWatch:
        return _ListWatch(self._api, name, path, query, self._rebuild)

    def _problem(self, text: str) -> None:
        """Say why the pool gives no endpoints (a warning once per new reason)."""
        if text and text != self.pool_problem:
            log.warning("InferencePool unusable, no endpoints", extra={"kv": {"why": text}})
        self.pool_problem = text

    def _pool_spec(self) -> tuple[dict[str, str], list[int]] | None:
        if self.pool is None:
            return self._selector, [int(self.cfg.endpoints.target_port or 0)]
        pools = self.pool.snapshot()
        where = f"InferencePool {self.cfg.pool.namespace}/{self.cfg.pool.name}"
        if not pools:
            self._problem(f"{where} does not exist")
            return None
        spec = pools[0].get("spec") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        if not sel:
            self._problem(f"{where} has no spec.selector.matchLabels")
            return None
        try:
            ports = target_ports(spec)
        except PortsError as exc:
            self._problem(f"{where}: {exc}")
            return None
        self._problem("")
        return {str(k): str(v) for k, v in sel.items()}, ports

    def _rebuild(self) -> None:
        with self._rebuild_lock:
            watches = [self.pods, self.nodes] + ([self.pool] if self.pool else [])
            if not all(w.synced for w in watches):
                return
            nodes = {(n.get("metadata") or {}).get("name", ""): n for n in self.nodes.snapshot()}
            spec = self._pool_spec()
            eps = [] if spec is None else pool_endpoints(
                spec[0], spec[1], self.pods.snapshot(), nodes,
                self.cfg.endpoints.metrics_port, self.cfg.endpoints.metrics_path,
            )  # fmt: skip
            now = time.time()
            documents = {
                name: ((node.get("metadata") or {}).get("annotations") or {}).get(
                    ANNOTATION_SIGNALS
                )
                for name, node in nodes.items()
            }
            if self.node_signals is not None:  # a node's NodeSignals wins over its annotation
                documents.update({n: o.document for n, o in self.node_signals.snapshot().items()})
            signals = {}
            for name, document in documents.items():
                reading = read_signals(document, now, float("inf"))
                if reading.state == SignalState.FRESH and reading.signals is not None:
                    signals[name] = reading.signals  # age is judged when scoring
            self.endpoints.set_node_signals(signals)
            self.endpoints.replace(eps)

    def reflectors(self) -> list[Reflector]:
        """Every list+watch this router runs (each with its own backoff)."""
        watches = [self.pods, self.nodes] + ([self.pool] if self.pool else [])
        extra = [self._ns_watch] if self._ns_watch is not None else []
        if self.objectives is not None:
            extra.append(self.objectives.reflector)
        return [w.reflector for w in watches] + extra

    def start(self) -> None:
        for r in self.reflectors():
            r.start()

    def stop(self) -> None:
        for r in self.reflectors():
            r.stop()
