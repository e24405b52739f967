"""The endpoint set the picker chooses from, and what it knows about each endpoint.

Endpoints come from `--endpoints` or from the InferencePool watch (router/kubewatch.py);
`EndpointSet.replace` swaps the set and keeps what was measured of endpoints that stay.
A scraper thread GETs every endpoint's engine /metrics each `interval_s` in parallel and
parses it with the collector's parser (kvspread/engine.py: vLLM, SGLang, TensorRT-LLM, TGI).
A failed or unparsable scrape leaves the endpoint's last numbers in place but its age
grows, so after `stale_after_s` it is stale (ranked after every fresh endpoint).

A pick counts against its endpoint (`picks_since_scrape`, `pending_tokens`) until a scrape
asked after it succeeds: the engine's answer covers the requests sent before it was asked,
so the picks sent while a scrape is in flight stay counted (at most `MAX_PENDING`).

The prefill backlog (`prefill_tokens`) is the prompt tokens sent to an endpoint that its
prefix cache was not expected to hold, drained at `prefill_tokens_per_s` (a leaky bucket):
the prefill work a new request waits behind there, which neither the engine's request
counts nor its KV usage show (a replica prefilling one 30k-token prompt reports one
running request and little KV). A scrape that shows the engine idle (nothing running or
waiting) empties it down to the picks sent after that scrape was asked.

The GPU memory share of an endpoint is its node's used / total GPU memory from the node's
kvspread signals (`kvspread.io/signals`, written by the collector) while they are younger
than `signals_stale_after_s`; otherwise it is absent. The image-token share is the node's
`image_token_share` signal when the node has fresh signals, else the picker's own count of the image and total
tokens it routed there (exponentially decayed with `share_half_life_s`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvspread.engine import EngineParseError, EngineSample, scrape
from kvspread.signals import NodeSignals
from router.config import MetricsConfig
from router.request import RequestInfo
from router.scoring import EndpointView

if TYPE_CHECKING:  # imported by the first scrape, in the scraper's threads: a starting
    import httpx  # picker answers before its quarter of a second of imports is done

__all__ = ["Endpoint", "EndpointSet", "Measured", "summarise_samples", "VIEW_MAX_AGE_S"]

log = logging.getLogger("kvspread.router.endpoints")

VIEW_MAX_AGE_S = 0.1
"""Longest an endpoint's cached view is reused (its decayed image share and age text)."""


@dataclass(frozen=True)
class Endpoint:
    """A ready model-server endpoint."""

    address: str  # ip:port the gateway sends requests to
    metrics_url: str
    name: str = ""
    namespace: str = ""
    node: str = ""
    modality: str | None = None
    engine: str | None = None  # kvspread.io/engine annotation; None = detect
    pod: str = ""  # the pod's own name (pool or selector endpoints)
    rank: int = 0  # the position of its port in the pool's targetPorts (router/ranks.py)


@dataclass
class Measured:
    """What the last successful scrape said; None where the engine does not report it."""

    scraped_at: float | None = None
    error: str = ""
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    kv_capacity_tokens: int | None = None
    ignored: tuple[str, ...] = ()  # numbers the engine gave out of range, taken as absent
    picks_since_scrape: int = 0
    # (sent at, KV tokens, prompt tokens to prefill) of each pick no scrape has shown yet
    pending: deque[tuple[float, int, int]] = field(
        default_factory=lambda: deque(maxlen=MAX_PENDING)
    )
    pending_tokens: int = 0
    backlog_tokens: float = 0.0  # prefill backlog at `backlog_at` (module docstring)
    backlog_at: float = 0.0
    image_tokens: float = 0.0
    all_tokens: float = 0.0
    decayed_at: float = field(default_factory=time.monotonic)


MAX_PENDING = 4096
"""Picks remembered per endpoint between two scrapes (older ones are dropped: bounded)."""

KV_USAGE_TOLERANCE = 0.01
"""How far outside 0..1 a KV usage may be and still be read (clipped): engines round."""


def _prefill(req: RequestInfo, kv_tokens: int) -> int:
    """The prompt tokens a pick leaves to prefill: its KV tokens less its output."""
    return max(0, min(req.prompt_tokens, kv_tokens - req.max_tokens))


def _finite(value: float | None) -> float | None:
    """`value`, or None when it is NaN or infinite (absent, the worst value, never used)."""
    return value if value is not None and math.isfinite(value) else None


def summarise_samples(samples: list[EngineSample]) -> Measured:
    """One endpoint's numbers from its engine's samples (one per served model).

    A value no engine can mean (NaN, an infinity, a negative count, a KV usage outside
    0..1 beyond `KV_USAGE_TOLERANCE`), or one the parser dropped for that reason
    (`EngineSample.dropped`), makes that number absent for the whole endpoint, named in
    `ignored`: absent counts as the worst value, so a broken gauge never makes an endpoint
    look emptier than it is, as summing only the other models would. A model that does
    not report a number at all (None, not dropped) is left out of its sum."""
    ignored: list[str] = []

    def dropped(*fields: str) -> bool:
        return any(f in s.dropped for s in samples for f in fields)

    def count(name: str, vals: list[float | None]) -> float | None:
        known = [v for v in vals if v is not None]
        if dropped(name) or any(not (math.isfinite(v) and v >= 0) for v in known):
            ignored.append(name)
            return None
        return sum(known) if known else None

    usages = [s.kv_usage for s in samples if s.kv_usage is not None]
    kv_usage = None
    if dropped("kv_usage") or any(
        not (math.isfinite(u) and -KV_USAGE_TOLERANCE <= u <= 1 + KV_USAGE_TOLERANCE)
        for u in usages
    ):
        ignored.append("kv_usage")
    elif usages:
        kv_usage = min(1.0, max(0.0, max(usages)))
    capacity: int | None = None
    capacity_dropped = dropped("kv_blocks_total", "block_size")
    for s in samples:
        blocks, size = s.kv_blocks_total or 0, s.block_size or 0
        if blocks < 0 or size < 0 or capacity_dropped:
            ignored.append("kv_capacity_tokens")
            capacity = None
            break
        if blocks and size:
            capacity = (capacity or 0) + blocks * size
    return Measured(
        waiting=count("waiting", [s.waiting for s in samples]),
        running=count("running", [s.running for s in samples]),
        kv_usage=kv_usage,
        kv_capacity_tokens=capacity,
        ignored=tuple(ignored),
    )


Scraper = Callable[[Endpoint], list[EngineSample]]


def _scrape(ep: Endpoint, timeout_s: float, client: httpx.Client) -> list[EngineSample]:
    return scrape(ep.metrics_url, engine=ep.engine, timeout_s=timeout_s, client=client)


class EndpointSet:
    """Thread-safe: the gRPC handlers read views while the scraper and the watch write."""

    def __init__(
        self,
        metrics: MetricsConfig | None = None,
        *,
        share_half_life_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        scraper: Scraper | None = None,
        prefill_tokens_per_s: float = 8000.0,
    ) -> None:
        self.metrics = metrics or MetricsConfig()
        """Scrape interval, timeout and the staleness bounds (the router's `metrics:`)."""
        self._half_life_s = share_half_life_s
        self._prefill_rate = prefill_tokens_per_s  # the backlog's drain (scoring's own)
        self._clock = clock
        self._wall = wall_clock
        timeout_s = self.metrics.timeout_s
        # one client for every scrape: a new one per GET costs a CA bundle load (ms of CPU);
        # built by the first scrape (self.client)
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self._scraper = scraper or (lambda ep: _scrape(ep, timeout_s, self.client()))
        self._lock = threading.Lock()
        self._endpoints: dict[str, Endpoint] = {}
        self._measured: dict[str, Measured] = {}
        self._nodes: dict[str, NodeSignals] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="router-scrape")
        # views() is asked once per request: it reuses each endpoint's view until something
        # it shows changes (a scrape, a pick there, the set, node signals, a staleness bound
        # or VIEW_MAX_AGE_S passing), so a pick rebuilds one view, not all of them
        self._views: dict[str, EndpointView] = {}
        self._views_until = -math.inf
        self._unexpected: set[tuple[str, str]] = set()  # (endpoint, error type) logged
        self.synced = False  # True after the first replace()
        self.generation = 0  # counts replace() calls: who caches per endpoint can prune
        self.scrapes = 0

    # --- membership -------------------------------------------------------------------
    def replace(self, endpoints: list[Endpoint]) -> None:
        with self._lock:
            self._endpoints = {e.address: e for e in endpoints}
            now = self._clock()
            self._measured = {
                a: self._measured.get(a) or Measured(decayed_at=now, backlog_at=now)
                for a in self._endpoints
            }
            self._views_until = -math.inf
            self.synced = True
            self.generation += 1

    def set_node_signals(self, nodes: dict[str, NodeSignals]) -> None:
        with self._lock:
            self._nodes = dict(nodes)
            self._views_until = -math.inf

    def endpoints(self) -> list[Endpoint]:
        with self._lock:
            return list(self._endpoints.values())

    def endpoint(self, address: str) -> Endpoint | None:
        """The endpoint at `address`, if it is in the set."""
        with self._lock:
            return self._endpoints.get(address)

    # --- scraping ---------------------------------------------------------------------
    def client(self) -> httpx.Client:
        """The scrapes' HTTP client, built (and httpx imported) on first use."""
        with self._client_lock:
            if self._client is None:
                import httpx

                self._client = httpx.Client(
                    timeout=self.metrics.timeout_s, limits=httpx.Limits(max_connections=64)
                )
            return self._client

    def _scrape_one(self, ep: Endpoint) -> None:
        """Scrape one endpoint. Any failure (an unreachable engine, a URL httpx refuses, a
        parser surprise) marks this endpoint stale with the error as the reason; it never
        reaches the scraper thread, so one bad endpoint cannot stop the others' scrapes."""
        import httpx  # for its error class; the scrape itself imported it (once)

        asked_at = self._clock()
        try:
            got = summarise_samples(self._scraper(ep))
            err = ""
        except (httpx.HTTPError, EngineParseError, OSError) as exc:
            got, err = None, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - see the docstring
            got, err = None, f"{type(exc).__name__}: {exc}"
            self._log_unexpected(ep.address, exc)
        now = self._clock()
        with self._lock:
            m = self._measured.get(ep.address)
            if m is None:
                return  # left the set meanwhile
            if got is None:
                # a warning once per new reason, each repeat of it at debug: a dead endpoint
                # would otherwise fill the log every interval
                level = logging.WARNING if m.error != err else logging.DEBUG
                log.log(
                    level,
                    "metrics scrape failed",
                    extra={"kv": {"endpoint": ep.address, "why": err}},
                )
                m.error = err
                self._views.pop(ep.address, None)
                return
            if got.ignored and got.ignored != m.ignored:
                log.warning(
                    "engine metrics out of range, taken as absent",
                    extra={"kv": {"endpoint": ep.address, "ignored": list(got.ignored)}},
                )
            self._views.pop(ep.address, None)
            m.scraped_at = now
            m.error = ""
            m.waiting, m.running = got.waiting, got.running
            m.kv_usage, m.kv_capacity_tokens = got.kv_usage, got.kv_capacity_tokens
            m.ignored = got.ignored
            # the engine's answer shows the picks sent before it was asked; the later ones
            # stay pending (they count until a scrape shows them)
            while m.pending and m.pending[0][0] <= asked_at:
                m.pending_tokens -= m.pending.popleft()[1]
            m.picks_since_scrape = len(m.pending)
            if got.running == 0 and got.waiting == 0:  # idle when asked: nothing older left
                self._drain(m, now)
                m.backlog_tokens = min(m.backlog_tokens, sum(p[2] for p in m.pending))
        self.scrapes += 1

    def _log_unexpected(self, where: str, exc: BaseException) -> None:
        """Log an error no scrape should raise with its traceback, once per endpoint and
        kind of error (the scraper retries every `interval_s`)."""
        key = (where, type(exc).__name__)
        with self._lock:
            if key in self._unexpected:
                return
            self._unexpected.add(key)
        log.error(
            "unexpected scrape error",
            exc_info=exc,
            extra={"kv": {"endpoint": where, "why": f"{type(exc).__name__}: {exc}"}},
        )

    def scrape_all(self) -> None:
        """One round over every endpoint, in parallel; returns when all are done."""
        eps = self.endpoints()
        list(self._pool.map(self._scrape_one, eps))

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                started = self._clock()
                try:
                    self.scrape_all()
                except Exception as exc:  # noqa: BLE001 - the scraper thread must live on
                    self._log_unexpected("(scrape round)", exc)
                self._stop.wait(max(0.0, self.metrics.interval_s - (self._clock() - started)))

        self._thread = threading.Thread(target=loop, name="router-scraper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._client_lock:
            if self._client is not None:
                self._client.close()

    # --- what the scorer sees ---------------------------------------------------------
    def _decay(self, m: Measured, now: float) -> None:
        dt = now - m.decayed_at
        if dt > 0:
            f = math.pow(0.5, dt / self._half_life_s)
            m.image_tokens *= f
            m.all_tokens *= f
            m.decayed_at = now

    def _drain(self, m: Measured, now: float) -> None:
        dt = now - m.backlog_at
        if dt > 0:
            m.backlog_tokens = max(0.0, m.backlog_tokens - dt * self._prefill_rate)
            m.backlog_at = now

    def record_pick(self, address: str, req: RequestInfo, kv_tokens: int | None = None) -> None:
        """Count a pick (and the KV tokens it will take: `kv_tokens`, else all of its
        tokens) until a scrape asked after it shows it, its tokens for the image share, and
        its prompt tokens not expected cached (`kv_tokens` less the output) in the prefill
        backlog."""
        now = self._clock()
        with self._lock:
            m = self._measured.get(address)
            if m is None:
                return
            self._views.pop(address, None)
            self._decay(m, now)
            self._drain(m, now)
            tokens = req.total_tokens if kv_tokens is None else kv_tokens
            prefill = _prefill(req, tokens)
            if len(m.pending) == MAX_PENDING:
                m.pending_tokens -= m.pending[0][1]
            m.pending.append((now, tokens, prefill))
            m.pending_tokens += tokens
            m.backlog_tokens += prefill
            m.picks_since_scrape = len(m.pending)
            m.image_tokens += req.image_tokens
            m.all_tokens += req.prompt_tokens

    def move_pick(self, src: str, dst: str, req: RequestInfo, kv_tokens: int | None = None) -> None:
        """Another endpoint served a pick: take it back from `src` (its pending entry, if
        no scrape has shown it yet, and its tokens in the image share, which never go
        below 0) and count it at `dst` (record_pick)."""
        tokens = req.total_tokens if kv_tokens is None else kv_tokens
        with self._lock:
            m = self._measured.get(src)
            if m is not None:
                self._views.pop(src, None)
                self._decay(m, self._clock())
                self._drain(m, self._clock())
                m.backlog_tokens = max(0.0, m.backlog_tokens - _prefill(req, tokens))
                for i in range(len(m.pending) - 1, -1, -1):  # the latest entry of that size
                    if m.pending[i][1] == tokens:
                        del m.pending[i]
                        m.pending_tokens -= tokens
                        break
                m.picks_since_scrape = len(m.pending)
                m.image_tokens = max(0.0, m.image_tokens - req.image_tokens)
                m.all_tokens = max(0.0, m.all_tokens - req.prompt_tokens)
        self.record_pick(dst, req, kv_tokens)

    def _view(self, ep: Endpoint, m: Measured, now: float, wall: float) -> EndpointView:
        self._decay(m, now)
        self._drain(m, now)
        own_share = m.image_tokens / (m.all_tokens + 1.0)
        node = self._nodes.get(ep.node) if ep.node else None
        if node is not None and wall - node.ts > self.metrics.signals_stale_after_s:
            node = None  # stale node signals count as absent (the worst value)
        mem_share = None
        image_share: float | None = own_share
        if node is not None:
            if node.gpus:
                total = sum(g.mem_total_mib for g in node.gpus)
                if total > 0:
                    mem_share = _finite(sum(g.mem_used_mib for g in node.gpus) / total)
            if node.image_token_share is not None:
                image_share = _finite(node.image_token_share)
        if m.scraped_at is None:
            fresh, why = False, "never scraped" + (f" ({m.error})" if m.error else "")
        else:
            age = now - m.scraped_at
            fresh = age <= self.metrics.stale_after_s
            why = "" if fresh else f"metrics {age:.1f}s old" + (f" ({m.error})" if m.error else "")
        return EndpointView(
            address=ep.address,
            name=ep.name or ep.address,
            modality=ep.modality,
            fresh=fresh,
            stale_reason=why,
            waiting=m.waiting,
            running=m.running,
            kv_usage=m.kv_usage,
            kv_capacity_tokens=m.kv_capacity_tokens,
            ignored=m.ignored,
            gpu_memory_share=mem_share,
            image_token_share=image_share,
            picks_since_scrape=m.picks_since_scrape,
            pending_tokens=m.pending_tokens,
            prefill_tokens=int(m.backlog_tokens),
        )

    def _until(self, now: float, wall: float) -> float:
        """When the cached views stop being true: the next staleness bound (of metrics or
        node signals) or VIEW_MAX_AGE_S from now, whichever comes first."""
        until = now + VIEW_MAX_AGE_S
        for a, ep in self._endpoints.items():
            at = self._measured[a].scraped_at
            if at is not None and at + self.metrics.stale_after_s >= now:
                until = min(until, at + self.metrics.stale_after_s)
            node = self._nodes.get(ep.node) if ep.node else None
            if node is not None and node.ts + self.metrics.signals_stale_after_s >= wall:
                until = min(until, now + node.ts + self.metrics.signals_stale_after_s - wall)
        return until

    def views(self) -> list[EndpointView]:
        now, wall = self._clock(), self._wall()
        with self._lock:
            if now > self._views_until:
                self._views.clear()
                self._views_until = self._until(now, wall)
            cache = self._views
            out = []
            for a, ep in self._endpoints.items():
                v = cache.get(a)
                if v is None:
                    v = cache[a] = self._view(ep, self._measured[a], now, wall)
                out.append(v)
            return out
