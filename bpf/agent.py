"""The collector agent: wires probes, NVML, engine scrapes, pod lookups, node signals,
publishing and the exporters. Degrade, never die: each source runs on its own and a
source that fails (BPF that cannot load, no tracefs, no NVML, an engine that is down or
returns garbage, no Kubernetes API) is marked down in `CollectorState.sources` (served
at /readyz and as kvspread_collector_source_up) and logged once per change of reason.
A source thread's cycle that raises (`Agent._step`) marks its source down the same way
(the signals computation as source `signals`) and the thread goes on with the next cycle.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry

from bpf import loader as loader_mod
from bpf.attribution import Attributor, PodMeta, PodRef
from bpf.config import CollectorConfig, EngineTarget
from bpf.events import EventDecodeError, decode_accept_event
from bpf.export import (
    GEN_AI_OPERATIONS,
    GEN_AI_PROVIDERS,
    REQUEST_ATTRS,
    TOKEN_ATTRS,
    OtlpExporter,
    PrometheusCollector,
    otlp_attributes,
)
from bpf.gpu import GpuReader, GpuSample, GpuUnavailable, NvmlReader
from bpf.gpupods import PodGpuMemory, gpu_pod_memory
from bpf.http import RouteTemplates
from bpf.model import ModelLabels, request_model
from bpf.node import (
    MIB,
    SignalInputs,
    build_signals,
    fit_signals,
    image_token_share,
)
from bpf.publish_crd import channel_writer
from bpf.publisher import Publisher
from bpf.server import CollectorServer
from bpf.state import CollectorState, EngineReading
from bpf.tracker import ConnTracker, RequestRecord
from kvspread import engine as engine_mod
from kvspread import names
from kvspread.clock import SYSTEM_CLOCK, Clock
from kvspread.gpumem import free_mib, node_fragmentation_of
from kvspread.kube import Reflector, WatchedTable, lookup, lookup_str
from kvspread.signals import NodeSignals

__all__ = ["Agent"]

log = logging.getLogger("kvspread.collector")

SERVICE_LABELS = ("app.kubernetes.io/name", "app")
MIRROR = "kubernetes.io/config.mirror"  # a mirror pod's annotation: its static pod's hash


def _uid_of(m: PodMeta) -> str:
    return m.uid


def _pod_meta(obj: dict[str, Any]) -> PodMeta | None:
    """PodMeta from a raw v1 Pod (API JSON); None without a uid."""
    uid = lookup_str(obj, "metadata", "uid")
    if not uid:
        return None

    def pairs(key: str) -> tuple[tuple[str, str], ...]:
        m = lookup(obj, "metadata", key)
        return tuple(sorted((str(k), str(v)) for k, v in m.items())) if isinstance(m, dict) else ()

    return PodMeta(
        uid=uid,
        namespace=str(lookup(obj, "metadata", "namespace") or ""),
        name=str(lookup(obj, "metadata", "name") or ""),
        ip=lookup_str(obj, "status", "podIP"),
        labels=pairs("labels"),
        annotations=pairs("annotations"),
        deleting=bool(lookup(obj, "metadata", "deletionTimestamp")),
    )


SIGNALS = "signals"
"""The source a failing signals cycle marks down (/readyz, kvspread_collector_source_up);
present only after a cycle failed."""
LABEL_MEMO_S = 5.0
"""Longest a request's memoized attributes are reused (pod changes clear them at once)."""
LOST_REASONS = {"budget": "over_budget", "held": "held_request_evicted"}
"""`dropped` reasons of the kernel's undelivered counts (loader names); others: buffer full."""


class _RequestLabels(NamedTuple):
    values: dict[str, str]  # attribute -> value (empty when unknown)
    labels: tuple[tuple[str, str], ...]  # REQUEST_ATTRS order: the histogram key
    otlp: dict[str, Any]  # OTLP attributes


class Agent:
    """One collector. `start()` returns once the HTTP server listens; sources start in
    background threads. `stop()` ends everything. Thread-safe start/stop from one thread."""

    def __init__(
        self,
        config: CollectorConfig,
        *,
        gpu_reader: GpuReader | None = None,
        kube_client: Any = None,
        clock: Clock = SYSTEM_CLOCK,
        probe_loader: Callable[[loader_mod.ProbeConfig], loader_mod.ProbeSession] = loader_mod.load,
        otlp_exporter: Any = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.state = CollectorState()
        self.state.window.window_s = config.signals.window_s
        self.state.ttft_window.window_s = config.signals.window_s
        self.gpu_reader: GpuReader | None = gpu_reader
        self._kube = kube_client
        self._probe_loader = probe_loader
        self._stop = threading.Event()
        self._pod_reflector: Reflector | None = None
        self._threads: list[threading.Thread] = []
        self._reasons: dict[str, str] = {}
        self._started = False
        self._pods = WatchedTable(_pod_meta, _uid_of, self._pods_changed)
        self.session: loader_mod.ProbeSession | None = None
        self.tracker = ConnTracker(RouteTemplates(config.routes, config.max_routes))
        self.attributor = Attributor(config.proc_root, self._pod_lookup, retry_s=5.0, clock=clock)
        self.state.pod_of_pid = self.attributor.resolve
        self._tracker_lock = threading.Lock()  # event thread feeds, signals thread reads
        self._label_memo: dict[tuple[Any, ...], _RequestLabels] = {}
        self._models = ModelLabels()  # gen_ai.request.model values, bounded per process
        self._label_memo_at = clock.monotonic()
        self.last_published: NodeSignals | None = None
        self.publisher: Publisher | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(PrometheusCollector(self.state, config.node_name))
        self.otlp: OtlpExporter | None = None
        if config.otlp_endpoints or otlp_exporter is not None:
            attrs = {"service.name": "kvspread-collector"}
            if config.node_name:
                attrs[names.ATTR_K8S_NODE] = config.node_name
            self.otlp = OtlpExporter(
                self.state, config.otlp_endpoints, config.otlp_interval_s, attrs, otlp_exporter
            )
        self.server = CollectorServer(
            self.state,
            self.registry,
            config.listen,
            config.port,
            lambda: self._started,
            needs_kubernetes=not config.standalone,
        )
        self.bpf_ready = threading.Event()  # set once BPF is up or known to be absent
        self.engines_ready = threading.Event()  # set after the first engine scrape

    # --- logging once per reason ------------------------------------------------------
    def _source(self, name: str, up: bool, reason: str = "") -> None:
        self.state.set_source(name, up, reason)
        key = "up" if up else reason
        if self._reasons.get(name) != key:
            self._reasons[name] = key
            if up:
                log.info("source up", extra={"kv": {"source": name}})
            else:
                log.warning("source missing", extra={"kv": {"source": name, "reason": reason}})

    # --- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        """Raises ConfigError, before anything starts, for a node name it needs and lacks."""
        self.config.check_node_name()
        if self.config.nice:
            try:
                os.nice(self.config.nice)  # the whole process: event handling yields to work
            except OSError as exc:
                log.warning("cannot lower CPU priority", extra={"kv": {"reason": str(exc)}})
        self.server.start()
        log.info("collector listening", extra={"kv": {"port": self.server.port}})
        self._spawn("collector-bpf", self._bpf_loop)
        self._spawn("collector-engines", self._engine_loop)
        if self.config.standalone:
            self._source("kubernetes", False, "standalone mode: no Kubernetes API")
        else:
            self._spawn("collector-pods", self._pods_watcher().run)
        self._spawn("collector-signals", self._signals_loop)

    def _step(self, source: str, step: Callable[[], object]) -> bool:
        """Run one cycle of a source thread. An exception is logged (once per reason, with
        its traceback and the thread), marks `source` down with it and returns False: the
        thread goes on with its next cycle instead of dying. True when the cycle ran."""
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - one bad cycle must not end the source
            why = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            self._source(source, False, f"cycle failed: {why}")
            if self._reasons.get("cycle:" + source) != why:
                self._reasons["cycle:" + source] = why
                thread = threading.current_thread().name
                log.exception(
                    "source cycle failed",
                    extra={"kv": {"source": source, "thread": thread, "reason": why}},
                )
            return False
        self._reasons.pop("cycle:" + source, None)
        return True

    def _spawn(self, name: str, fn: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                fn()
            except Exception:  # noqa: BLE001 - a dying source must not take the agent down
                log.exception("source thread failed", extra={"kv": {"thread": name}})

        t = threading.Thread(target=guarded, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        if self._pod_reflector is not None:
            self._pod_reflector.stop()
        for t in self._threads:
            t.join(timeout=5)
        self.server.stop()
        if self.session is not None:
            self.session.close()
        if self.otlp is not None:
            self.otlp.shutdown()

    def run_forever(self) -> None:
        self.start()
        frozen = False
        try:
            while not self._stop.wait(1.0):
                if not frozen and self.bpf_ready.is_set():
                    # The start-up heap (bcc, the SDKs, the loaded programs' tables) moves
                    # to the permanent generation: the cyclic GC, run every few hundred
                    # requests, then scans only what the requests themselves allocate.
                    gc.freeze()
                    frozen = True
        finally:
            self.stop()

    # --- BPF --------------------------------------------------------------------------
    def _bpf_loop(self) -> None:
        c = self.config
        if not c.bpf.enabled:
            self._source("bpf", False, "disabled by configuration")
            self.bpf_ready.set()
            return
        pc = loader_mod.probe_config(c)
        try:
            session = self._probe_loader(pc)
        except loader_mod.BpfUnavailable as exc:
            self._source("bpf", False, str(exc))
            self.bpf_ready.set()
            return
        except Exception as exc:  # noqa: BLE001 - anything else from bcc
            self._source("bpf", False, f"BPF failed to load: {exc}")
            self.bpf_ready.set()
            return
        self.session = session
        session.open_batches(self.on_http_batch, self.on_accept_bytes)
        self._source("bpf", True)
        self.bpf_ready.set()
        lost_seen = 0
        failing = False
        while not self._stop.is_set():
            if self._step("bpf", lambda: session.poll(100)):
                if failing:
                    self._source("bpf", True)
                    failing = False
            else:
                failing = True
                self._stop.wait(1.0)  # a poll that keeps failing must not spin
            if session.lost != lost_seen:
                self.state.count("dropped", "perf_lost", session.lost - lost_seen)
                lost_seen = session.lost

    def on_http_bytes(self, raw: bytes) -> None:
        self.on_http_batch([raw])

    def on_http_batch(self, raws: list[bytes]) -> None:
        """A poll's worth of HTTP events: decoded and tracked under one lock, the requests
        they complete recorded together (`record_requests`)."""
        with self._tracker_lock:
            records, bad = self.tracker.on_http_raw(raws)
        if bad:
            self.state.count("dropped", "bad_event", bad)
        if len(raws) > bad:
            self.state.count("events", "http_latency", len(raws) - bad)
        self.record_requests(records)

    def on_accept_bytes(self, raw: bytes) -> None:
        try:
            ev = decode_accept_event(raw)
        except EventDecodeError:
            self.state.count("dropped", "bad_event")
            return
        self.state.count("events", "conn_track")
        with self._tracker_lock:
            self.tracker.on_accept(ev)
        ref = self.attributor.resolve(ev.tgid)
        ns, pod = (ref.namespace, ref.name) if ref else ("", "")
        self.state.backlog[ev.port] = (ev.backlog, ev.max_backlog)
        if len(self.state.backlog) > 1024:
            self.state.backlog.pop(next(iter(self.state.backlog)))
        attrs = (
            (names.ATTR_SERVER_PORT, str(ev.port)),
            (names.ATTR_K8S_NAMESPACE, ns),
            (names.ATTR_K8S_POD, pod),
        )
        if ev.queue_ns:
            self.state.accept_delay.observe(attrs, ev.queue_ns / 1e9)
            if self.otlp:
                self.otlp.record_accept(dict(attrs), ev.queue_ns / 1e9)
        client = self._pod_by_ip(ev.peer)
        self.state.edges.add(
            (
                (names.ATTR_CLIENT_ADDRESS, ev.peer if client is None else ""),
                (
                    names.ATTR_CLIENT_POD,
                    "" if client is None else f"{client.namespace}/{client.name}",
                ),
                *attrs,
            )
        )

    def _pod_labels(self, ref: PodRef | None) -> tuple[str, str]:
        """(service name, QoS class) of the serving pod from its labels, "" when unknown."""
        if ref is None:
            return "", ""
        meta = self._pods.get(ref.uid)
        if meta is None:
            return "", ""
        service = next((v for v in (meta.label(k) for k in SERVICE_LABELS) if v), "")
        return service, meta.label(names.LABEL_QOS) or ""

    def _labels(self, rec: RequestRecord) -> _RequestLabels:
        """The attributes of a request, memoized per (process, port, method, route, status,
        modality) for `LABEL_MEMO_S` and until the pod table changes: the pod lookup and
        the label tuples are built once per series, not once per request."""
        key = rec[:6]  # (tgid, port, method, route, status, modality): record_requests' key
        hit = self._label_memo.get(key)
        if hit is not None:
            return hit
        ref = self.attributor.resolve(rec.tgid)
        service, qos = self._pod_labels(ref)
        values = {
            names.ATTR_HTTP_METHOD: rec.method,
            names.ATTR_HTTP_STATUS: "" if rec.status is None else str(rec.status),
            names.ATTR_HTTP_ROUTE: rec.route,
            names.ATTR_SERVER_PORT: str(rec.port),
            names.ATTR_K8S_NAMESPACE: ref.namespace if ref else "",
            names.ATTR_K8S_POD: ref.name if ref else "",
            names.ATTR_MODALITY: rec.modality,
            names.ATTR_SERVICE_NAME: service,
            names.ATTR_QOS: qos,
        }
        labels = tuple((k, values[k]) for k in REQUEST_ATTRS)
        out = _RequestLabels(values, labels, otlp_attributes(labels))
        if len(self._label_memo) >= 4096:
            self._label_memo.clear()
        self._label_memo[key] = out
        return out

    def record_request(self, rec: RequestRecord) -> None:
        self.record_requests([rec])

    def record_requests(self, recs: list[RequestRecord]) -> None:
        """Record completed requests: histogram values grouped per label set and added
        under one lock per table, the recent-requests window extended once."""
        if not recs:
            return
        now = self.clock.monotonic()
        if now - self._label_memo_at >= LABEL_MEMO_S:
            self._label_memo.clear()
            self._label_memo_at = now
        # grouped by the label memo's key first: the per-record work is one tuple and one
        # dict lookup; labels, values and tokens are then handled per group
        groups: dict[tuple[Any, ...], list[RequestRecord]] = {}
        for rec in recs:
            key = rec[:6]  # tgid, port, method, route, status, modality: one slice
            g = groups.get(key)
            if g is None:
                groups[key] = [rec]
            else:
                g.append(rec)
        otlp = self.otlp if self.otlp is not None and self.otlp.per_request else None
        for group in groups.values():
            lab = self._labels(group[0])
            durations = [r.duration_s for r in group]
            ttfbs = [r.ttfb_s for r in group]
            lost = len(durations) - self.state.requests.observe_many(lab.labels, durations)
            if lost:
                self.state.count("dropped", "series_limit", lost)
            self.state.ttfb.observe_many(lab.labels, ttfbs)
            for rec in group:
                if otlp:
                    otlp.record_request(lab.otlp, rec.duration_s, rec.ttfb_s)
                if rec.ttft_s is not None:
                    self._record_tokens(rec, lab.values)
        self.state.window.add_many(now, [(r.duration_s, r.images) for r in recs])

    def _record_tokens(self, rec: RequestRecord, values: dict[str, str]) -> None:
        """gen_ai.server histograms of an SSE stream (the request's attributes + operation,
        provider and model)."""
        assert rec.ttft_s is not None
        model, outcome = self._models.label(rec.tgid, request_model(rec.route, rec.request))
        self.state.count("models", outcome)
        values = {
            **values,
            names.ATTR_GEN_AI_OPERATION: GEN_AI_OPERATIONS.get(rec.route, ""),
            names.ATTR_GEN_AI_PROVIDER: GEN_AI_PROVIDERS.get(rec.route, ""),
            names.ATTR_GEN_AI_REQUEST_MODEL: model,
        }
        labels = tuple((k, values[k]) for k in TOKEN_ATTRS)
        self.state.ttft.observe(labels, rec.ttft_s)
        if rec.tpot_s is not None:
            self.state.tpot.observe(labels, rec.tpot_s)
        normalized = rec.duration_s / rec.tokens if rec.tokens > 0 else None
        if normalized is not None:
            self.state.normalized.observe(labels, normalized)
        self.state.ttft_window.add(self.clock.monotonic(), rec.ttft_s, 0)
        if self.otlp:
            self.otlp.record_tokens(otlp_attributes(labels), rec.ttft_s, rec.tpot_s, normalized)

    # --- Kubernetes pods on this node -------------------------------------------------
    def _api(self) -> Any:
        if self._kube is None:
            from kvspread.kube import api_client

            self._kube = api_client(self.config.kubeconfig, self.config.kube_api_server)
        return self._kube

    def _pod_lookup(self, uid: str) -> PodMeta | None:
        """The pod of a cgroup's UID; a static pod's cgroup names its config hash, which
        its mirror pod carries in an annotation."""
        meta = self._pods.get(uid)
        if meta is None and "-" not in uid:
            meta = self._pods.find(lambda m: m.annotation(MIRROR) == uid)
        return meta

    def _pod_by_ip(self, ip: str) -> PodMeta | None:
        if not ip:
            return None
        return self._pods.find(lambda m: m.ip == ip)

    def _pods_watcher(self) -> Reflector:
        """List+watch of this node's pods (`kvspread.kube.Reflector`): changes arrive as
        watch events instead of a re-list every few seconds."""
        if self._pod_reflector is None:
            from kubernetes import client

            self.config.check_node_name()
            core = client.CoreV1Api(self._api())
            self._pod_reflector = Reflector(
                "collector-pods",
                core.list_pod_for_all_namespaces,
                self._pods.replace_all,
                self._pods.event,
                field_selector=f"spec.nodeName={self.config.node_name}",
                watch_timeout_s=max(1, int(self.config.pods.refresh_s)),
                request_timeout_s=15.0,
                on_error=lambda why: self._source("kubernetes", False, f"pod watch failed: {why}"),
            )
        return self._pod_reflector

    def refresh_pods(self) -> None:
        """List this node's pods once (the watch keeps them current afterwards)."""
        self._pods_watcher().list_once()

    def _pods_changed(self, uids: set[str]) -> None:
        """After every pod list and every pod event the table applied."""
        self._label_memo.clear()  # attributes may name other pods now
        self._source("kubernetes", True)

    # --- engines ----------------------------------------------------------------------
    def engine_targets(self) -> list[EngineTarget]:
        targets = list(self.config.engines.targets)
        for p in self._pods.snapshot().values():
            port = p.annotation(names.ANNOTATION_METRICS_PORT)
            # a pod being deleted drains: its gauges would count it as serving (the SLO
            # pressure's replica count, its queue and KV means) after the HPA let it go
            if not port or not p.ip or p.deleting:
                continue
            path = p.annotation(names.ANNOTATION_METRICS_PATH) or "/metrics"
            if not path.startswith("/"):
                path = "/" + path
            host = f"[{p.ip}]" if ":" in p.ip else p.ip
            targets.append(
                EngineTarget(
                    url=f"http://{host}:{port}{path}",
                    engine=p.annotation(names.ANNOTATION_ENGINE),
                    model=p.label(names.LABEL_MODEL) or "",
                    pod_uid=p.uid,
                    pod_name=p.name,
                    namespace=p.namespace,
                )
            )
        return targets

    def scrape_engines(self) -> None:
        targets = self.engine_targets()
        readings: dict[str, EngineReading] = {}
        for t in targets:
            service = self._pod_labels(PodRef(uid=t.pod_uid))[0] if t.pod_uid else ""
            try:
                samples = engine_mod.scrape(
                    t.url, engine=t.engine, model=t.model, timeout_s=self.config.engines.timeout_s
                )
                readings[t.url] = EngineReading(
                    t.url, t.pod_uid, t.namespace, t.pod_name, tuple(samples), service=service
                )
            except Exception as exc:  # noqa: BLE001 - down, refused, garbage, HTTP error
                readings[t.url] = EngineReading(
                    t.url, t.pod_uid, t.namespace, t.pod_name, error=f"{type(exc).__name__}: {exc}"
                )
        self.state.engines = readings
        self._note_dropped(readings)
        failing = {u: r.error for u, r in readings.items() if r.error}
        if not targets:
            self._source(
                "engine",
                False,
                f"no engine endpoints (config or pod annotation {names.ANNOTATION_METRICS_PORT})",
            )
        elif len(failing) == len(readings):
            self._source(
                "engine", False, "; ".join(f"{u}: {e}" for u, e in sorted(failing.items()))
            )
        else:
            self._source("engine", True)
            for u, e in failing.items():
                if self._reasons.get("engine:" + u) != e:
                    self._reasons["engine:" + u] = e
                    log.warning("engine endpoint failing", extra={"kv": {"url": u, "reason": e}})

    def _note_dropped(self, readings: dict[str, EngineReading]) -> None:
        """Warn once per change when an engine serves numbers no engine can mean: the
        fields they feed are left absent (bpf.engine), and the log says which."""
        for u, r in readings.items():
            dropped = sorted({f"{s.model or '-'}:{f}" for s in r.samples for f in s.dropped})
            text = ", ".join(dropped)
            if self._reasons.get("engine-dropped:" + u, "") != text:
                self._reasons["engine-dropped:" + u] = text
                if dropped:
                    log.warning(
                        "engine serves unusable values (NaN, infinite or negative): absent",
                        extra={"kv": {"url": u, "dropped": dropped}},
                    )

    def _engine_loop(self) -> None:
        while not self._stop.is_set():
            self._step("engine", self.scrape_engines)  # sets the source itself when it runs
            self.engines_ready.set()
            if self._stop.wait(self.config.engines.interval_s):
                return

    # --- GPU, signals, publishing -----------------------------------------------------
    def read_gpus(self) -> None:
        if not self.config.nvml.enabled:
            self.state.gpus = None
            self._source("nvml", False, "disabled by configuration")
            return
        if self.gpu_reader is None:
            self.gpu_reader = NvmlReader()
        try:
            self.state.gpus = self.gpu_reader.read()
            self._source("nvml", True)
        except GpuUnavailable as exc:
            self.state.gpus = None  # absent, never zeros
            self._source("nvml", False, str(exc))

    def compute_signals(self) -> NodeSignals:
        c = self.config
        st = self.state
        now_mono = self.clock.monotonic()
        if self.session is not None:
            try:
                lost = self.session.lost_events()
                for name, n in lost.items():
                    if n:
                        why = LOST_REASONS.get(name, f"kernel_buffer_full_{name}")
                        st.dropped[why] = n
                st.tcp = self.session.read_tcp_stats()
                st.unsampled = self.session.read_unsampled()
            except Exception as exc:  # noqa: BLE001
                log.debug("tcp stats read failed", extra={"kv": {"reason": str(exc)}})
        gpus = st.gpus
        gpu_models: dict[int, list[str]] = {}
        gpu_engines: dict[int, list[engine_mod.EngineSample]] = {}
        by_pod: dict[str, list[engine_mod.EngineSample]] = {}
        for r in st.engines.values():
            if r.pod_uid:
                by_pod.setdefault(r.pod_uid, []).extend(r.samples)
        gpu_pods = gpu_pod_memory(gpus or [], self.attributor.resolve)
        self._note_gpu_pods(gpus, gpu_pods)
        for index, pods in gpu_pods.items():
            for uid in {m.uid for m in pods if m.in_pod}:
                meta = self._pod_lookup(uid)
                model = meta.label(names.LABEL_MODEL) if meta else None
                samples = by_pod.get(uid, [])
                models = [model] if model else [s.model for s in samples if s.model]
                gpu_models.setdefault(index, []).extend(models)
                gpu_engines.setdefault(index, []).extend(samples)
        samples = [s for r in st.engines.values() for s in r.samples]
        running = [(s.running or 0) + (s.waiting or 0) for s in samples if s.running is not None]
        # a count the parser dropped leaves the engines' sum unknown: trace the streams
        unknown = any("running" in s.dropped or "waiting" in s.dropped for s in samples)
        streams: int | None = None
        if running and not unknown and math.isfinite(sum(running)):
            streams = int(round(sum(running)))
        elif self.session is not None:
            session = self.session
            with self._tracker_lock:
                streams = self.tracker.in_flight(
                    time.monotonic_ns(),
                    session.conn_last_write_ns,
                    c.signals.stream_idle_s,
                    session.conn_held,
                )
        requests, images = st.window.counts(now_mono)
        share: float | None = None
        if requests and self.session is not None:
            img, total = image_token_share(
                images, requests, c.signals.tokens_per_image, c.signals.text_tokens_per_request
            )
            share = img / total if total > 0 else None
        p95 = st.window.p95(now_mono) if self.session is not None else None
        ttft_p95 = st.ttft_window.p95(now_mono) if self.session is not None else None
        # a failed cycle of this computation is no missing input of the document it makes
        absent = tuple(k for k, v in st.sources.items() if not v.up and k != SIGNALS)
        sig = build_signals(
            SignalInputs(
                node=c.node_name,
                now=self.clock.now(),
                gpus=gpus,
                gpu_models=gpu_models,
                gpu_engines=gpu_engines,
                streams=streams,
                image_token_share=share,
                p95_s=p95,
                absent=absent,
                ttft_p95_s=ttft_p95,
                gpu_pods=gpu_pods,
            )
        )
        sig, _ = fit_signals(sig)
        if gpus is not None:
            free = free_mib([g.mem_total / MIB for g in gpus], [g.mem_used / MIB for g in gpus])
            st.fragmentation, st.largest_free_mib = node_fragmentation_of(free.tolist())
        else:
            st.fragmentation = st.largest_free_mib = None
        st.gpu_pods = gpu_pods
        st.streams = streams
        st.image_share = share
        st.signals = sig
        return sig

    def _note_gpu_pods(
        self, gpus: list[GpuSample] | None, pods: dict[int, tuple[PodGpuMemory, ...]]
    ) -> None:
        """Log once per change why per-pod GPU memory is absent (the document names
        `gpu_pods` in `absent`)."""
        if gpus is None:
            why = "no NVML: " + self.state.sources["nvml"].reason
        else:
            unlisted = sorted(g.index for g in gpus if g.index not in pods)
            why = f"NVML cannot list the processes of GPU {unlisted}" if unlisted else ""
        if self._reasons.get("gpu_pods", "") != why:
            self._reasons["gpu_pods"] = why
            if why:
                log.warning("per-pod GPU memory absent", extra={"kv": {"reason": why}})

    def publish(self, sig: NodeSignals) -> bool:
        """Write the signals (NodeSignals resource or Node annotation, `publish.channel`)
        when the publisher's limits allow it; True when written."""
        c = self.config
        if c.standalone or not c.node_name:
            return False
        if self.publisher is None:
            write = channel_writer(c.publish.channel, self._api, c.node_name)
            # heartbeat jitter seeded by the node: spread across nodes, reproducible per node
            rng = random.Random(c.node_name)
            self.publisher = Publisher(c.publish, write, lambda s: fit_signals(s)[1], rng)
        try:
            ok, why = self.publisher.offer(sig)
        except Exception as exc:  # noqa: BLE001 - API errors: retry next cycle
            self.state.publish_failures += 1
            what = "annotation patch" if c.publish.channel == "annotation" else "NodeSignals write"
            self._source("kubernetes", False, f"{what} failed: {exc}".splitlines()[0])
            return False
        if not ok:
            return False
        self.state.publishes += 1
        self.last_published = self.publisher.last
        log.debug("signals published", extra={"kv": {"reason": why, "channel": c.publish.channel}})
        return True

    def cycle(self) -> NodeSignals:
        """One measurement cycle: GPUs, signals, publish."""
        self.read_gpus()
        sig = self.compute_signals()
        self.publish(sig)
        self._started = True
        return sig

    def _signals_loop(self) -> None:
        self.bpf_ready.wait(timeout=60)  # first document with every source's state
        self.engines_ready.wait(timeout=2 * self.config.engines.timeout_s + 1)
        while not self._stop.is_set():
            if self._step(SIGNALS, self.cycle):
                if SIGNALS in self.state.sources and not self.state.sources[SIGNALS].up:
                    self._source(SIGNALS, True)
            if self._stop.wait(self.config.signals.interval_s):
                return
