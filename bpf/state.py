"""What the collector has measured, shared by the sources (writers) and the exporters,
`/signals` and `/readyz` (readers). Every table is bounded."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bpf.events import TcpStats
from bpf.gpu import GpuSample
from bpf.gpupods import PodGpuMemory
from bpf.stats import DURATION_BUCKETS, QUEUE_BUCKETS, CounterTable, HistogramTable, RecentWindow
from kvspread.engine import EngineSample
from kvspread.names import GEN_AI_TPOT_BUCKETS, GEN_AI_TTFT_BUCKETS, NORMALIZED_LATENCY_BUCKETS
from kvspread.signals import NodeSignals

__all__ = ["SourceStatus", "EngineReading", "CollectorState", "SOURCES"]

SOURCES = ("bpf", "nvml", "engine", "kubernetes")


@dataclass(frozen=True)
class SourceStatus:
    up: bool
    reason: str = ""


@dataclass(frozen=True)
class EngineReading:
    """One engine endpoint's last scrape: the samples, or why there are none."""

    url: str
    pod_uid: str
    namespace: str
    pod: str
    samples: tuple[EngineSample, ...] = ()
    error: str = ""
    service: str = ""  # the engine pod's service label, so the adapter can select by service


@dataclass
class CollectorState:
    requests: HistogramTable = field(default_factory=lambda: HistogramTable(DURATION_BUCKETS))
    ttfb: HistogramTable = field(default_factory=lambda: HistogramTable(DURATION_BUCKETS))
    ttft: HistogramTable = field(default_factory=lambda: HistogramTable(GEN_AI_TTFT_BUCKETS))
    tpot: HistogramTable = field(default_factory=lambda: HistogramTable(GEN_AI_TPOT_BUCKETS))
    normalized: HistogramTable = field(
        default_factory=lambda: HistogramTable(NORMALIZED_LATENCY_BUCKETS)
    )
    ttft_window: RecentWindow = field(default_factory=RecentWindow)  # node TTFT p95
    accept_delay: HistogramTable = field(default_factory=lambda: HistogramTable(QUEUE_BUCKETS, 512))
    edges: CounterTable = field(default_factory=CounterTable)
    window: RecentWindow = field(default_factory=RecentWindow)
    backlog: dict[int, tuple[int, int]] = field(default_factory=dict)  # port -> (len, max)
    tcp: dict[tuple[int, int], TcpStats] = field(default_factory=dict)
    # (tgid, port) -> kernel histogram of the requests over the budget (TcpStats layout)
    unsampled: dict[tuple[int, int], TcpStats] = field(default_factory=dict)
    gpus: list[GpuSample] | None = None
    # GPU index -> memory of each pod's processes (bpf.gpupods); a GPU whose processes
    # NVML could not list has no entry
    gpu_pods: dict[int, tuple[PodGpuMemory, ...]] = field(default_factory=dict)
    engines: dict[str, EngineReading] = field(default_factory=dict)
    signals: NodeSignals | None = None
    fragmentation: float | None = None
    largest_free_mib: float | None = None
    streams: int | None = None
    image_share: float | None = None
    sources: dict[str, SourceStatus] = field(
        default_factory=lambda: {s: SourceStatus(False, "not started") for s in SOURCES}
    )
    events: dict[str, int] = field(default_factory=dict)  # program -> events read
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count
    models: dict[str, int] = field(default_factory=dict)  # request model outcome -> streams
    publishes: int = 0
    publish_failures: int = 0
    pod_of_pid: Callable[[int], Any] | None = None  # pid -> PodRef (attribution)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set_source(self, name: str, up: bool, reason: str = "") -> None:
        with self.lock:
            self.sources[name] = SourceStatus(up, reason)

    def count(self, table: str, key: str, n: int = 1) -> None:
        """Bump a counter. Only the event thread writes them, so no lock: readers copy."""
        d = self.events if table == "events" else self.models if table == "models" else self.dropped
        d[key] = d.get(key, 0) + n
