"""The discrete-event loop: arrivals, engine steps, pod lifecycle, HPA syncs, metric pushes.

One `Simulation` is one (config, placement policy, autoscaler, routing, seed) run; requests
go to ready replicas through the routing policy (simulator/serving/routing.py). Events live
in a heap ordered by (time, sequence number), so equal times resolve in insertion order and
a run is a pure function of its inputs: the same seed gives the same result bit for bit.

Pod lifecycle: pending -> (placed by the policy) loading -> ready -> terminating -> gone;
a start whose KV pool is too small (the engine sized it from what the GPU really had
free) goes to crashloop and retries with Kubernetes' back-off. Scale-down deletes pods
in the ReplicaSet controller's order: pending, then not ready, then those sharing a node
with more replicas, then the most recently ready.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from bpf.publish import PublishConfig, should_publish
from bpf.stats import RecentWindow
from kvspread import names
from kvspread.signals import NodeSignals
from simulator.serving.autoscalers import (
    DEFAULT_AUTOSCALER,
    FIXED_PEAK,
    hpa_metrics,
    sized_for_peak,
)
from simulator.serving.cluster import Gpu, Node, Pod, device_plugin_gpus, island_ids
from simulator.serving.config import SimConfig
from simulator.serving.costmodel import kv_pool_tokens, sharing_factor, tp_speedup
from simulator.serving.engine import Engine
from simulator.serving.hpa import Hpa
from simulator.serving.placement import (
    BoundPod,
    ClusterSnapshot,
    NodeView,
    PlacementPolicy,
    Want,
    make_policy,
)
from simulator.serving.routing import DEFAULT_ROUTING, Router, make_router
from simulator.serving.slis import AdapterSlis, ServiceMetrics
from simulator.serving.workload import Request, generate_requests

__all__ = ["Simulation", "RunCounters", "RunResult", "simulate", "TimelineRow"]

_STEP, _READY, _RESTART, _HPA, _SCHED, _KILL, _TICK, _SCRAPE = range(8)
METRIC_WINDOW_S = 60.0  # adapter SLI window (docs/design.md section 6 default)
DRAIN_S = 600.0  # after the last arrival, let in-flight requests finish (HPA keeps running)
BACKGROUND_BUSY_SINCE_S = -10.0
"""When a background tenant drawn busy began computing: before the run, longer ago than
NVML's utilisation window, so the collector's first document (t = 0, read before the
initial replicas are placed) shows it busy, as a cluster whose tenants were already running
would. Starting it at 0 made every GPU read 0 % at t = 0 and hid the tenants from the
first placement (docs/evaluation.md section 3)."""


@dataclass
class TimelineRow:
    t: float
    replicas: dict[str, int]
    ready: dict[str, int]
    p95_s: dict[str, float | None]
    rps: dict[str, float | None]
    gpus_occupied: int


@dataclass
class RunCounters:
    """What a run counts as it goes: the Simulation adds to one, and its RunResult is one
    (so each counter is declared once, and handed over without a copy per field)."""

    timeline: list[TimelineRow] = field(default_factory=list)
    scale_events: list[tuple[float, str, int, int]] = field(default_factory=list)
    """(t, service, from, to)."""
    occupied_gpu_seconds: float = 0.0
    start_failures: int = 0
    pending_pod_seconds: float = 0.0
    unschedulable_attempts: int = 0
    events: int = 0
    overcommits: int = 0  # placements onto a GPU whose claims then exceed its memory
    gpu_overridden: int = 0  # placements where the device plugin's GPU was not the preferred


@dataclass(kw_only=True)
class RunResult(RunCounters):
    """Everything one run produced; `report.summarise` turns it into table rows."""

    policy: str
    seed: int
    config: SimConfig
    requests: list[Request]
    pod_gpu_seconds: float
    preemptions: int
    sim_end: float
    mean_sharing_factor: float = 1.0  # engine step slow-down from GPU sharing, busy-time mean
    pods: list[Pod] = field(default_factory=list)
    autoscaler: str = DEFAULT_AUTOSCALER
    routing: str = DEFAULT_ROUTING


class Simulation:
    """One run. Not thread-safe; `run()` once."""

    def __init__(
        self,
        cfg: SimConfig,
        policy: str,
        seed: int,
        progress: Callable[[float], None] | None = None,
        requests: list[Request] | None = None,
        autoscaler: str = DEFAULT_AUTOSCALER,
        routing: str = DEFAULT_ROUTING,
    ) -> None:
        self.requests = requests if requests is not None else generate_requests(cfg, seed)
        if autoscaler == FIXED_PEAK:
            cfg = sized_for_peak(cfg, self.requests)
        self.cfg = cfg
        self.autoscaler = autoscaler
        self.routing = routing
        self.router: Router = make_router(
            routing,
            {s: spec.model for s, spec in cfg.services.items()},
            {s: spec.kind for s, spec in cfg.services.items()},
            np.random.default_rng([seed, 31337]),
            cfg.picker_scoring,
        )
        self.hpa_metrics = {s: hpa_metrics(autoscaler, spec) for s, spec in cfg.services.items()}
        self.seed = seed
        self.policy_name = policy
        self.rng = np.random.default_rng([seed, 4242])
        self.policy: PlacementPolicy = make_policy(
            policy, np.random.default_rng([seed, 77]), cfg.scoring_config()
        )
        self.progress = progress
        self.end = cfg.warmup_s + cfg.duration_s
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.counted = RunCounters()
        self.nodes: list[Node] = []
        self.pods: dict[str, Pod] = {}
        self.pod_counter = 0
        self.services = cfg.services
        self.by_service: dict[str, list[Pod]] = {s: [] for s in cfg.services}
        self.ready: dict[str, list[Pod]] = {s: [] for s in cfg.services}
        self.backlog: dict[str, list[Request]] = {s: [] for s in cfg.services}
        self.unscheduled: list[Pod] = []
        self.adapter = AdapterSlis(METRIC_WINDOW_S, cfg.slo.good_threshold_s, cfg.pressure_rule())
        self.metrics = {
            s: ServiceMetrics(self.adapter, s, qos=spec.qos) for s, spec in cfg.services.items()
        }
        # the collector's per-node request window (bpf.stats), for the published p95
        self.node_metrics: dict[int, RecentWindow] = {}
        self.node_cache: dict[int, set[str]] = defaultdict(set)  # models cached per node
        behavior = cfg.slo_hpa if autoscaler == "slo" else cfg.hpa
        self.hpa_behavior = behavior  # its sync_period_s is how often every HPA here runs
        self.hpas = {
            s: Hpa(spec.min_replicas, spec.max_replicas, behavior)
            for s, spec in cfg.services.items()
        }
        self.spec_replicas = {s: spec.initial_replicas for s, spec in cfg.services.items()}
        self.views: dict[int, NodeView] = {}
        self.node_tokens: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.node_tokens_prev: dict[int, list[float]] = {}
        self.retired_preemptions = 0
        self.busy_s = 0.0  # engine busy time, and the same weighted by the sharing factor
        self.slowed_s = 0.0
        self.sched_pending = False
        self.slots = cfg.cluster.slots_per_gpu
        self.published: dict[int, NodeSignals] = {}
        self.publish_cfg = PublishConfig(min_interval_s=cfg.startup.signals_period_s)

    # ---- events ----
    def _push(self, t: float, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, payload))

    # ---- cluster construction ----
    def _build_cluster(self) -> None:
        c = self.cfg.cluster
        for i in range(c.nodes):
            gpus = [Gpu(i, j, self.cfg.gpu.hbm_gib) for j in range(c.gpus_per_node)]
            nvlink = c.nvlink[i % len(c.nvlink)]
            size = c.nvlink_island_gpus[i % len(c.nvlink_island_gpus)]
            islands = island_ids(c.gpus_per_node, nvlink, size)
            self.nodes.append(
                Node(f"gpu-node-{i}", i, c.pools[i % len(c.pools)], nvlink, gpus, islands)
            )
            self.node_metrics[i] = RecentWindow(window_s=METRIC_WINDOW_S)
        bg = self.cfg.background
        brng = np.random.default_rng([self.seed, 5150])
        k = 0
        for node in self.nodes:
            for g in node.gpus:
                if bg.mem_gib and brng.random() < bg.gpu_fraction:
                    mem = float(bg.mem_gib[int(brng.integers(len(bg.mem_gib)))])
                    busy = bool(brng.random() < bg.busy_p)
                    pid = f"bg-{k}"
                    k += 1
                    g.claims[pid] = mem
                    g.held[pid] = mem
                    g.occupants.append(pid)
                    if busy:  # computing since before the run: t = 0's signals read it
                        g.set_busy(pid, True, BACKGROUND_BUSY_SINCE_S)

    # ---- helpers ----
    def _gpus(self, pod: Pod) -> list[Gpu]:
        """Every GPU the pod holds (one, or its tensor-parallel set)."""
        node = self.nodes[pod.node]
        if len(pod.gpus) == 1:  # the common case, on the hot path of every step
            return [node.gpus[pod.gpu]]
        return [node.gpus[j] for j in pod.gpus]

    def _factor(self, pod: Pod) -> float:
        """Time-slicing slow-down of the pod's steps: its most shared GPU (a
        tensor-parallel step waits for its slowest worker)."""
        if len(pod.gpus) == 1:
            return sharing_factor(self.cfg.cost, len(self.nodes[pod.node].gpus[pod.gpu].busy))
        return max(sharing_factor(self.cfg.cost, len(g.busy)) for g in self._gpus(pod))

    def _kick(self, pod: Pod, now: float) -> None:
        """Start a segment on an idle engine, or cut the one in flight so new work joins."""
        eng = pod.engine
        assert eng is not None
        self._update_busy(pod, now)
        if not eng.in_flight:
            end = eng.plan(now, self._factor(pod))
            if end is not None:
                pod.epoch += 1
                self._push(end, _STEP, (pod.pid, pod.epoch))
            self._update_busy(pod, now)
        else:
            new_end = eng.truncate(now)
            if new_end is not None:
                pod.epoch += 1
                self._push(new_end, _STEP, (pod.pid, pod.epoch))

    def _update_busy(self, pod: Pod, now: float) -> None:
        eng = pod.engine
        active = eng is not None and (eng.active or eng.in_flight)
        for gpu in self._gpus(pod):
            if active == (pod.pid in gpu.busy):
                continue
            gpu.set_busy(pod.pid, active, now)
            self._cut_neighbours(gpu, pod.pid, now)

    def _cut_neighbours(self, gpu: Gpu, pid: str, now: float) -> None:
        """The GPU's sharing changed: its other engines' steps now take a different time,
        so their decode segments end after the step in progress and are planned again."""
        for other_id in gpu.occupants:
            if other_id == pid:
                continue
            other = self.pods.get(other_id)
            if other is None or other.engine is None or not other.engine.in_flight:
                continue
            new_end = other.engine.truncate(now)
            if new_end is not None:
                other.epoch += 1
                self._push(new_end, _STEP, (other.pid, other.epoch))

    # ---- requests ----
    def _route(self, req: Request, now: float) -> None:
        spec = self.services[req.service]
        model = self.cfg.models[spec.model]
        if req.prompt + req.out > model.max_model_len:
            req.status = "oom-len"
            req.finish = now
            self._record(req, now)
            return
        pods = self.ready[req.service]
        if not pods:
            self.backlog[req.service].append(req)
            return
        self._assign(req, self.router.pick(req, pods, now), now)

    def _assign(self, req: Request, pod: Pod, now: float) -> None:
        assert pod.engine is not None
        req.instance = int(pod.pid.rsplit("-", 1)[1])
        req.node = pod.node
        pod.engine.enqueue(req)
        tok = self.node_tokens[pod.node]
        tok[0] += req.image_tokens
        tok[1] += req.prompt
        self._kick(pod, now)

    def _record(self, req: Request, now: float) -> None:
        ok = req.status == "ok"
        if math.isnan(req.finish):
            req.finish = now
        m = self.metrics[req.service]
        m.observe(now - req.arrival, ok)
        if ok and req.out > 1:
            m.observe_tpot((now - req.first_token) / (req.out - 1))
        if ok and req.out >= 1:
            m.observe_normalized((now - req.arrival) / req.out)
        if req.node >= 0:
            self.node_metrics[req.node].add(now, now - req.arrival, 0)

    # ---- pods ----
    def _new_pod(self, service: str, now: float) -> Pod:
        spec = self.services[service]
        pid = f"{service}-{self.pod_counter}"
        self.pod_counter += 1
        pod = Pod(pid, service, spec.gpu_memory_gib, now, tiebreak=float(self.rng.random()))
        self.pods[pid] = pod
        self.by_service[service].append(pod)
        return pod

    def _bound_by_node(self) -> dict[int, list[BoundPod]]:
        """Model instances bound to each node (what the extender's pod cache lists)."""
        out: dict[int, list[BoundPod]] = defaultdict(list)
        for pod in self.pods.values():
            if pod.node >= 0 and pod.state not in ("gone", "pending"):
                spec = self.services[pod.service]
                out[pod.node].append(
                    BoundPod(
                        spec.model,
                        spec.kind,
                        spec.qos,
                        pod.request_gib,
                        len(pod.gpus),
                        name=pod.pid,
                    )
                )
        return out

    def _try_place(self, pod: Pod, now: float, initial: bool = False) -> bool:
        spec = self.services[pod.service]
        tp = spec.tensor_parallel
        want = Want(spec.model, spec.kind, spec.qos, spec.gpu_memory_gib, tp)
        seen = ClusterSnapshot(
            self.nodes, self.cfg.cluster.slots_per_gpu, self.views, self._bound_by_node(), now
        )
        choice = self.policy.choose(want, seen)
        # the policy picks the node; inside it the device plugin picks the GPUs, for every
        # policy alike (no policy here can pin a GPU: kube-scheduler binds to a node)
        dp = None if choice is None else device_plugin_gpus(self.nodes[choice[0]], tp, self.slots)
        if choice is None or dp is None:
            self.counted.unschedulable_attempts += 1
            return False
        pod.node, pod.gpu, pod.gpus = choice[0], dp[0].index, tuple(g.index for g in dp)
        if choice[1] != dp[0].index:
            self.counted.gpu_overridden += 1
        for gpu in dp:
            if gpu.allocated_gib + pod.request_gib > gpu.total_gib + 1e-9:
                self.counted.overcommits += 1  # promised more memory than the GPU has
            gpu.claims[pod.pid] = pod.request_gib
            gpu.occupants.append(pod.pid)
        pod.placed_at = now
        self._start_loading(pod, now, delay=0.0 if initial else None)
        return True

    def _start_loading(self, pod: Pod, now: float, delay: float | None = None) -> None:
        pod.footprint_gib = 0.0
        for gpu in self._gpus(pod):
            held = min(pod.request_gib, gpu.really_free_gib)
            gpu.held[pod.pid] = held
            pod.footprint_gib += held
        pod.state = "loading"
        pod.attempt += 1
        model = self.services[pod.service].model
        cached = self.node_cache[pod.node]
        st = self.cfg.startup
        if delay == 0.0:
            pod.visible_at = now  # the run starts with these engines up
        else:
            pod.visible_at = now + (st.visible_s if model in cached else st.cold_visible_s)
        if delay is None:
            delay = self.cfg.startup.load_s if model in cached else self.cfg.startup.cold_load_s
            if self.cfg.models[model].multimodal:
                delay += self.cfg.startup.multimodal_extra_s
        cached.add(model)
        self._push(now + delay, _READY, (pod.pid, pod.attempt))

    def _on_ready(self, pod: Pod, now: float) -> None:
        spec = self.services[pod.service]
        model = self.cfg.models[spec.model]
        pool = kv_pool_tokens(self.cfg.cost, model, pod.footprint_gib, len(pod.gpus))
        too_small = pool < self.cfg.cost.block_tokens or (
            self.cfg.cost.require_max_model_len_fits and pool < model.max_model_len
        )
        if too_small:
            # vLLM exits at start-up; the kubelet restarts it with back-off
            self.counted.start_failures += 1
            pod.restarts += 1
            pod.state = "crashloop"
            for gpu in self._gpus(pod):
                gpu.held.pop(pod.pid, None)
            pod.footprint_gib = 0.0
            back = min(
                self.cfg.startup.backoff_max_s,
                self.cfg.startup.backoff_initial_s * 2 ** (pod.restarts - 1),
            )
            self._push(now + back, _RESTART, (pod.pid, pod.attempt))
            return
        pod.pool_tokens = pool
        one_island = self.nodes[pod.node].one_island(list(pod.gpus))
        speedup = tp_speedup(self.cfg.cost, len(pod.gpus), one_island)
        pod.engine = Engine(self.cfg.cost, self.cfg.gpu, model, pool, speedup, self.cfg.cache)
        pod.state = "ready"
        pod.ready_at = now
        self.ready[pod.service].append(pod)
        backlog = self.backlog[pod.service]
        self.backlog[pod.service] = []
        for req in backlog:
            self._route(req, now)

    def _delete_pod(self, pod: Pod, now: float) -> None:
        """Scale-down of one pod: immediate unless it is serving, then graceful."""
        if pod.state == "pending":
            pod.state = "gone"
            pod.ended_at = now
            if pod in self.unscheduled:
                self.unscheduled.remove(pod)
            return
        if pod.state in ("loading", "crashloop"):
            self._release(pod, now)
            return
        if pod.state == "ready":
            pod.state = "terminating"
            self.ready[pod.service].remove(pod)
            if pod.engine is not None and not pod.engine.active and not pod.engine.in_flight:
                self._release(pod, now)
            else:
                self._push(now + self.cfg.startup.grace_s, _KILL, (pod.pid, 0))

    def _release(self, pod: Pod, now: float) -> None:
        for gpu in self._gpus(pod):
            gpu.claims.pop(pod.pid, None)
            gpu.held.pop(pod.pid, None)
            if pod.pid in gpu.busy:
                gpu.set_busy(pod.pid, False, now)
                self._cut_neighbours(gpu, pod.pid, now)
            if pod.pid in gpu.occupants:
                gpu.occupants.remove(pod.pid)
        if pod.engine is not None:
            self.retired_preemptions += pod.engine.preemptions
            self.busy_s += pod.engine.busy_s
            self.slowed_s += pod.engine.slowed_s
            for req in pod.engine.drain_all():
                req.status = "aborted"
                req.finish = now
                self._record(req, now)
        pod.state = "gone"
        pod.ended_at = now
        pod.epoch += 1
        self.pods.pop(pod.pid, None)
        self.by_service[pod.service].remove(pod)
        self._retired.append(pod)
        self._kick_scheduler(now)

    def _kick_scheduler(self, now: float) -> None:
        if self.unscheduled and not self.sched_pending:
            self.sched_pending = True
            self._push(now, _SCHED, None)

    def _scale(self, service: str, target: int, now: float) -> None:
        live = [p for p in self.by_service[service] if p.state not in ("terminating", "gone")]
        if target > len(live):
            for _ in range(target - len(live)):
                pod = self._new_pod(service, now)
                if not self._try_place(pod, now):
                    self.unscheduled.append(pod)
                    self._kick_scheduler(now + self.cfg.startup.schedule_retry_s)
        elif target < len(live):
            per_node: dict[int, int] = defaultdict(int)
            for p in live:
                per_node[p.node] += 1
            order = {"pending": 0, "crashloop": 1, "loading": 2, "ready": 3}

            def rank(p: Pod) -> tuple[float, ...]:
                ready_at = p.ready_at if not math.isnan(p.ready_at) else 0.0
                return (order[p.state], -per_node[p.node], -ready_at, -p.created)

            for p in sorted(live, key=rank)[: len(live) - target]:
                self._delete_pod(p, now)

    # ---- periodic work ----
    def _hpa_sync(self, service: str, now: float) -> None:
        m = self.metrics[service]
        current = self.spec_replicas[service]
        ready = len(self.ready[service])
        values = []
        for target in self.hpa_metrics[service] or ():
            v = m.value(target.metric, now)
            values.append((target.type, v, target.value))
        decision = self.hpas[service].step(now, current, ready, values)  # type: ignore[arg-type]
        if decision.desired != current:
            self.counted.scale_events.append((now, service, current, decision.desired))
            self.spec_replicas[service] = decision.desired
            self._scale(service, decision.desired, now)

    def _tick(self, now: float) -> None:
        step = self.cfg.timeline_step_s
        occupied = 0
        for node in self.nodes:
            for g in node.gpus:
                if any(o in self.pods for o in g.occupants):
                    occupied += 1
        self.counted.occupied_gpu_seconds += occupied * step
        self.counted.pending_pod_seconds += len(self.unscheduled) * step
        engines: dict[str, list[tuple[str, float, float]]] = {s: [] for s in self.services}
        # ready engines export their gauges; the collector stops scraping a pod once it is
        # being deleted (bpf.agent.engine_targets), so a draining one exports none
        for pod in self.pods.values():
            e = pod.engine
            if e is not None and pod.state == "ready":
                engines[pod.service].append((pod.pid, len(e.waiting), e.kv_usage))
        for s in self.services:
            self.metrics[s].push(now, engines[s])
        # the collector's signals (published every signals_period_s)
        period = self.cfg.startup.signals_period_s
        if now % period < step - 1e-9 or period <= step:
            self._publish(now)
        row = TimelineRow(
            t=now,
            replicas={s: self.spec_replicas[s] for s in self.services},
            ready={s: len(self.ready[s]) for s in self.services},
            p95_s={s: self.metrics[s].value(names.SLI_LATENCY_P95, now) for s in self.services},
            rps={
                s: self.metrics[s].value(names.SLI_REQUESTS_PER_SECOND, now) for s in self.services
            },
            gpus_occupied=occupied,
        )
        self.counted.timeline.append(row)

    def _publish(self, now: float) -> None:
        """The collector's node signals (docs/design.md section 3), every signals period."""
        views: dict[int, NodeView] = {}
        streams: dict[int, int] = defaultdict(int)
        for pod in self.pods.values():
            if pod.engine is not None and pod.node >= 0:
                streams[pod.node] += pod.engine.load
        for node in self.nodes:
            tok = self.node_tokens[node.index]
            prev = self.node_tokens_prev.get(node.index, [0.0, 0.0])
            d_img, d_all = tok[0] - prev[0], tok[1] - prev[1]
            self.node_tokens_prev[node.index] = list(tok)
            models: list[tuple[str, ...]] = []
            kv: list[tuple[int, int] | None] = []
            used: list[float] = []
            utils: list[float] = []
            for g in node.gpus:
                engines = [
                    e
                    for o in g.occupants
                    if o in self.pods and (e := self.pods[o].engine) is not None
                ]
                # NVML sees a process (and the collector its pod's model) once it has
                # started and holds memory (`visible_at`): loading engines count from then
                holders = [
                    self.pods[o]
                    for o in g.held
                    if o in self.pods and g.held[o] > 0 and self.pods[o].visible_at <= now
                ]
                models.append(tuple(sorted({self.services[p.service].model for p in holders})))
                used.append(
                    sum(
                        mem
                        for o, mem in g.held.items()
                        if o not in self.pods or self.pods[o].visible_at <= now
                    )
                )
                utils.append(g.util(now))
                kv.append(
                    (
                        sum(e.pool_blocks for e in engines),
                        sum(e.used_blocks for e in engines),
                    )
                    if engines
                    else None
                )
            view = NodeView(
                ts=now,
                node=node.name,
                used_mib=tuple(u * 1024.0 for u in used),
                total_mib=tuple(g.total_gib * 1024.0 for g in node.gpus),
                streams=streams[node.index],
                image_token_share=(d_img / d_all) if d_all > 0 else None,
                p95_s=self.node_metrics[node.index].p95(now),
                models=tuple(models),
                kv_blocks=tuple(kv),
                util=tuple(utils),
            )
            # the collector's own rule (bpf.publish): at most once per period, and only when
            # a value moved past its threshold or the 30 s heartbeat is due
            doc = view.signals()
            ok, _ = should_publish(self.published.get(node.index), doc, now, self.publish_cfg)
            if ok:
                self.published[node.index] = doc
                views[node.index] = view
            elif node.index in self.views:
                views[node.index] = self.views[node.index]
        self.views = views

    # ---- main loop ----
    def run(self) -> RunResult:
        self._retired: list[Pod] = []
        self._build_cluster()
        self._publish(0.0)
        # initial replicas, placed in turn so no service gets all the good GPUs
        order: list[str] = []
        for i in range(max(s.initial_replicas for s in self.services.values())):
            for name, spec in self.services.items():
                if i < spec.initial_replicas:
                    order.append(name)
        for name in order:
            first = self._new_pod(name, 0.0)
            if not self._try_place(first, 0.0, initial=True):
                self.unscheduled.append(first)
                self._kick_scheduler(self.cfg.startup.schedule_retry_s)
            self._publish(0.0)
        sync = self.hpa_behavior.sync_period_s
        for name in self.services:
            if self.hpa_metrics[name] is not None:  # autoscaler `none`: fixed replicas
                self._push(sync, _HPA, name)
        self._push(self.cfg.timeline_step_s, _TICK, None)
        scrape_every = self.router.interval_s
        if scrape_every is not None:  # the router's /metrics scrapes (none: reads no metrics)
            self._push(0.0, _SCRAPE, None)
        reqs = self.requests
        n_req = len(reqs)
        i = 0
        hard_end = self.end + DRAIN_S
        next_report = 0.0
        heap = self.heap
        while True:
            t_arr = reqs[i].arrival if i < n_req else math.inf
            t_evt = heap[0][0] if heap else math.inf
            if t_arr <= t_evt:
                if t_arr == math.inf:
                    break
                now = t_arr
                self.counted.events += 1
                self._route(reqs[i], now)
                i += 1
                continue
            now, _, kind, payload = heapq.heappop(heap)
            if now > hard_end:
                break
            if i >= n_req and now > self.end and self._all_done():
                break
            self.counted.events += 1
            if self.progress is not None and now >= next_report:
                self.progress(min(1.0, now / self.end))
                next_report = now + 60.0
            if kind == _STEP:
                pid, epoch = cast(tuple[str, int], payload)
                pod = self.pods.get(pid)
                if pod is None or pod.epoch != epoch or pod.engine is None:
                    continue
                eng = pod.engine
                starting = [r for r, _ in eng.seg_chunks if r.gen == 0]
                for req in eng.finish(now):
                    self._record(req, now)
                for req in starting:
                    if req.first_token == now:
                        self.metrics[pod.service].observe_ttft(now - req.arrival)
                if pod.state == "terminating" and not eng.active:
                    self._release(pod, now)
                    continue
                end = eng.plan(now, self._factor(pod))
                if end is not None:
                    pod.epoch += 1
                    self._push(end, _STEP, (pod.pid, pod.epoch))
                self._update_busy(pod, now)
                if pod.state == "terminating" and not eng.active and not eng.in_flight:
                    self._release(pod, now)
            elif kind == _READY:
                pid, attempt = cast(tuple[str, int], payload)
                pod = self.pods.get(pid)
                if pod is not None and pod.state == "loading" and pod.attempt == attempt:
                    self._on_ready(pod, now)
            elif kind == _RESTART:
                pid, attempt = cast(tuple[str, int], payload)
                pod = self.pods.get(pid)
                if pod is not None and pod.state == "crashloop" and pod.attempt == attempt:
                    self._start_loading(pod, now)
            elif kind == _KILL:
                pid, _ = cast(tuple[str, int], payload)
                pod = self.pods.get(pid)
                if pod is not None and pod.state == "terminating":
                    self._release(pod, now)
            elif kind == _HPA:
                self._hpa_sync(str(payload), now)
                self._push(now + sync, _HPA, payload)
            elif kind == _SCHED:
                self.sched_pending = False
                still: list[Pod] = []
                for pod in self.unscheduled:
                    if pod.state != "pending":
                        continue
                    if not self._try_place(pod, now):
                        still.append(pod)
                self.unscheduled = still
                if still:
                    self.sched_pending = True
                    self._push(now + self.cfg.startup.schedule_retry_s, _SCHED, None)
            elif kind == _TICK:
                self._tick(now)
                self._push(now + self.cfg.timeline_step_s, _TICK, None)
            elif kind == _SCRAPE:
                names_ = {n.index: n.name for n in self.nodes}
                self.router.node_signals({names_[i]: d for i, d in self.published.items()})
                self.router.scrape(self.ready, names_, now)
                assert scrape_every is not None
                self._push(now + scrape_every, _SCRAPE, None)
        return self._result(now)

    def _all_done(self) -> bool:
        if any(self.backlog.values()):
            return False
        return not any(p.engine is not None and p.engine.active for p in self.pods.values())

    def _result(self, now: float) -> RunResult:
        end = now
        pod_gpu_s = 0.0
        preempt = self.retired_preemptions
        all_pods = list(self._retired) + list(self.pods.values())
        for pod in all_pods:
            if math.isnan(pod.placed_at):
                continue
            stop = pod.ended_at if not math.isnan(pod.ended_at) else end
            # a fractional pod is charged its share of the GPU's memory, on each of its GPUs
            share = len(pod.gpus) * pod.request_gib / self.cfg.gpu.hbm_gib
            pod.gpu_seconds = max(0.0, stop - pod.placed_at) * share
            pod_gpu_s += pod.gpu_seconds
        busy, slowed = self.busy_s, self.slowed_s
        for pod in self.pods.values():
            if pod.engine is not None:
                preempt += pod.engine.preemptions
                busy += pod.engine.busy_s
                slowed += pod.engine.slowed_s
        for pod in all_pods:
            pod.engine = None  # results travel between processes: keep them small
        self.router.close()
        if self.progress is not None:
            self.progress(1.0)
        return RunResult(
            **vars(self.counted),
            policy=self.policy_name,
            seed=self.seed,
            config=self.cfg,
            requests=self.requests,
            pod_gpu_seconds=pod_gpu_s,
            preemptions=preempt,
            sim_end=end,
            mean_sharing_factor=slowed / busy if busy > 0 else 1.0,
            pods=all_pods,
            autoscaler=self.autoscaler,
            routing=self.routing,
        )


def simulate(
    cfg: SimConfig,
    policy: str,
    seed: int,
    progress: Callable[[float], None] | None = None,
    autoscaler: str = DEFAULT_AUTOSCALER,
    routing: str = DEFAULT_ROUTING,
) -> RunResult:
    """Run one (policy, autoscaler, routing, seed) simulation; the seed alone fixes the
    arrivals."""
    return Simulation(
        cfg, policy, seed, progress=progress, autoscaler=autoscaler, routing=routing
    ).run()
