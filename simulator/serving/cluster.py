"""The simulated cluster: nodes, GPUs with their memory ledger, and pods.

Two memory views per GPU, as DESIGN.md section 4 distinguishes them:
- `claims`: what the scheduler knows was promised (each pod's `kvspread.io/gpu-memory`);
- `held`: what processes actually hold (an engine preallocates weights + KV pool when it
  starts; a crash-looping pod holds nothing; other tenants hold their size).
free_g = total - max(used, allocated) uses both. An engine sizes its KV pool from what
the GPU really has free when it starts, so a GPU that was over-promised gives a smaller
pool (or a failed start), however the scheduler counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.serving.engine import Engine

__all__ = ["Gpu", "Node", "Pod", "POD_STATES"]

POD_STATES = ("pending", "loading", "ready", "crashloop", "terminating", "gone")


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


@dataclass(eq=False)
class Pod:
    """A model instance (or, with `service` empty, another tenant's pod)."""

    pid: str
    service: str
    request_gib: float
    created: float
    state: str = "pending"
    node: int = -1
    gpu: int = -1
    placed_at: float = float("nan")
    ready_at: float = float("nan")
    ended_at: float = float("nan")
    footprint_gib: float = 0.0
    pool_tokens: int = 0
    restarts: int = 0
    attempt: int = 0
    epoch: int = 0
    tiebreak: float = 0.0
    engine: Engine | None = None
    gpu_seconds: float = 0.0
