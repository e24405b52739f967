"""The simulated cluster: nodes, GPUs with their memory ledger, and pods.

Two memory views per GPU, as docs/design.md section 4 distinguishes them:
- `claims`: what the scheduler knows was promised (each pod's `kvspread.io/gpu-memory`);
- `held`: what processes actually hold (an engine preallocates weights + KV pool when it
  starts; a crash-looping pod holds nothing; other tenants hold their size).
free_g = total - max(used, allocated) uses both. An engine sizes its KV pool from what
the GPU really has free when it starts, so a GPU that was over-promised gives a smaller
pool (or a failed start), however the scheduler counted.

Utilisation is what NVML reports as `utilization.gpu`: the share of the last sample
period in which at least one kernel ran. A GPU keeps the times its busy set turned
non-empty or empty, so `util(now)` is exact for any window ending now.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.serving.engine import Engine

__all__ = [
    "Gpu",
    "Node",
    "Pod",
    "POD_STATES",
    "NVML_UTIL_WINDOW_S",
    "device_plugin_gpu",
    "device_plugin_gpus",
    "island_ids",
    "resource_fit",
]

POD_STATES = ("pending", "loading", "ready", "crashloop", "terminating", "gone")

NVML_UTIL_WINDOW_S = 1.0
"""NVML's utilisation sample period: "between 1 second and 1/6 second depending on the
product" (nvmlDeviceGetUtilizationRates); the longest, the smoothest reading."""
_LOG_KEEP_S = 10.0


@dataclass(eq=False)
class Gpu:
    """One GPU (memory in GiB). `busy` holds occupants (pod ids) currently computing."""

    node: int
    index: int
    total_gib: float
    claims: dict[str, float] = field(default_factory=dict)
    held: dict[str, float] = field(default_factory=dict)
    busy: set[str] = field(default_factory=set)
    occupants: list[str] = field(default_factory=list)  # ids bound here (slots in use)
    busy_log: list[tuple[float, bool]] = field(default_factory=list)
    """(time, any occupant busy) at each change, the last few seconds (for `util`)."""

    def set_busy(self, pid: str, on: bool, now: float) -> None:
        """Mark an occupant computing (on) or idle, keeping the utilisation log."""
        if on:
            self.busy.add(pid)
        else:
            self.busy.discard(pid)
        state = bool(self.busy)
        log = self.busy_log
        if not log or log[-1][1] != state:
            log.append((now, state))
        cutoff = now - _LOG_KEEP_S
        k = 0
        while k + 1 < len(log) and log[k + 1][0] <= cutoff:
            k += 1
        if k:
            del log[:k]

    def util(self, now: float, window: float = NVML_UTIL_WINDOW_S) -> float:
        """Share of (now - window, now] in which at least one occupant computed."""
        start = now - window
        log = self.busy_log
        busy = 0.0
        for i, (t, state) in enumerate(log):
            if not state:
                continue
            end = log[i + 1][0] if i + 1 < len(log) else now
            a, b = max(t, start), min(end, now)
            if b > a:
                busy += b - a
        return min(1.0, busy / window) if window > 0 else 0.0

    @property
    def used_gib(self) -> float:
        return sum(self.held.values())

    @property
    def allocated_gib(self) -> float:
        return sum(self.claims.values())

    @property
    def free_gib(self) -> float:
        """Free as the scheduler sees it: total - max(used, allocated)."""
        return max(0.0, self.total_gib - max(self.used_gib, self.allocated_gib))

    @property
    def really_free_gib(self) -> float:
        """What a starting process can actually allocate."""
        return max(0.0, self.total_gib - self.used_gib)


@dataclass(eq=False)
class Node:
    name: str
    index: int
    pool: str
    nvlink: bool
    gpus: list[Gpu]
    islands: tuple[int, ...] = ()
    """NVLink island of each GPU (`island_ids`); GPUs of one island talk over NVLink."""

    def one_island(self, gpus: list[int]) -> bool:
        """Whether GPUs `gpus` of this node are all in one NVLink island."""
        return len({self.islands[j] for j in gpus}) == 1 if self.islands else len(gpus) <= 1


def island_ids(gpus: int, nvlink: bool, island_gpus: int) -> tuple[int, ...]:
    """NVLink island of each of a node's `gpus` GPUs: without NVLink every GPU is its own
    island (PCIe only); with it, consecutive groups of `island_gpus` (0: one island of
    all, an NVSwitch board such as HGX A100 8-GPU)."""
    if not nvlink:
        return tuple(range(gpus))
    size = island_gpus if island_gpus > 0 else gpus
    return tuple(j // size for j in range(gpus))


def device_plugin_gpu(node: Node, slots: int) -> Gpu | None:
    """The GPU the NVIDIA device plugin gives a pod that asks for one time-sliced
    `nvidia.com/gpu` on `node`: its distributed allocation takes the GPU with the fewest
    allocated replicas (k8s-device-plugin `distributedAlloc`), here ties to the lower
    index; None when every GPU's replicas are taken. It knows nothing of GPU memory."""
    open_gpus = [g for g in node.gpus if len(g.occupants) < slots]
    if not open_gpus:
        return None
    return min(open_gpus, key=lambda g: (len(g.occupants), g.index))


def resource_fit(node: Node, slots: int, gpus: int) -> bool:
    """kube-scheduler's NodeResourcesFit filter on `nvidia.com/gpu`: the node's free
    device-plugin replicas cover the pod's request. With several GPUs per pod the GPUs
    are whole (slots 1, config.validate), so it needs that many free GPUs."""
    if gpus <= 1:
        return any(len(g.occupants) < slots for g in node.gpus)
    return sum(1 for g in node.gpus if not g.occupants) >= gpus


def device_plugin_gpus(node: Node, count: int, slots: int) -> list[Gpu] | None:
    """The GPUs the NVIDIA device plugin gives a pod asking for `count` `nvidia.com/gpu`.

    One GPU: `device_plugin_gpu`. Several (whole GPUs, no time-slicing): the plugin's
    preferred allocation uses go-gpuallocator's best-effort policy, which scores every
    set of free GPUs by their links and takes the best; any set inside one NVLink island
    scores above one that crosses PCIe, and sets of one island score alike, so here:
    the lowest-indexed `count` free GPUs of the first island holding that many, else the
    lowest-indexed free GPUs across islands. None when fewer than `count` are free."""
    if count <= 1:
        g = device_plugin_gpu(node, slots)
        return None if g is None else [g]
    free = [g for g in node.gpus if not g.occupants]
    if len(free) < count:
        return None
    islands = node.islands or tuple(range(len(node.gpus)))
    by_island: dict[int, list[Gpu]] = {}
    for g in free:
        by_island.setdefault(islands[g.index], []).append(g)
    for isl in sorted(by_island):
        if len(by_island[isl]) >= count:
            return by_island[isl][:count]
    return free[:count]


@dataclass(eq=False)
class Pod:
    """A model instance (or, with `service` empty, another tenant's pod)."""

    pid: str
    service: str
    request_gib: float
    created: float
    state: str = "pending"
    node: int = -1
    gpu: int = -1  # the first of `gpus`
    gpus: tuple[int, ...] = ()  # every GPU the pod holds (tensor parallel: several)
    placed_at: float = float("nan")
    ready_at: float = float("nan")
    ended_at: float = float("nan")
    visible_at: float = float("inf")  # when NVML (and so the collector) sees its process
    footprint_gib: float = 0.0
    pool_tokens: int = 0
    restarts: int = 0
    attempt: int = 0
    epoch: int = 0
    tiebreak: float = 0.0
    engine: Engine | None = None
    gpu_seconds: float = 0.0
