"""The target distribution of instance shapes that expected fragmentation is taken over.

FGD (Weng et al., USENIX ATC'23) measures fragmentation against the workload that is
expected to arrive: shape m (GPU count k_m, per-GPU memory g_m) with weight p_m
(docs/design.md section 4). kvspread learns p_m online from the GPU pods it is asked about:
every observed pod adds 1 to its shape's count and all counts decay with a half-life
measured in observed pods (deterministic, no clock). A configurable prior with a
pseudo-count keeps the distribution sensible before any pod is seen.

    shapes = ShapeDistribution.from_config(cfg)
    shapes.observe(PodShape(gpus=1, mem_per_gpu_mib=24576))
    snap = shapes.snapshot()          # immutable, what scoring reads

`ShapeDistribution` is thread-safe (one lock); `Shapes` is immutable.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from extender.config import ScoringConfig
from extender.model import PodShape

__all__ = ["Shape", "Shapes", "ShapeDistribution"]


@dataclass(frozen=True, slots=True)
class Shape:
    """One instance shape with its probability p (the p_m of docs/design.md section 4)."""

    gpus: int
    mem_per_gpu_mib: float | None
    cpu_milli: float
    p: float


@dataclass(frozen=True)
class Shapes:
    """An immutable snapshot of the distribution, with arrays for vectorised scoring.

    `need` holds the per-GPU need in MiB with NaN for whole-GPU shapes; `whole` marks
    them; `k` the GPU counts; `cpu` the CPU need; `p` sums to 1.
    """

    items: tuple[Shape, ...]
    k: np.ndarray
    need: np.ndarray
    whole: np.ndarray
    cpu: np.ndarray
    p: np.ndarray

    @classmethod
    def of(cls, items: tuple[Shape, ...] | list[Shape]) -> Shapes:
        """Build from shapes (weights are renormalised to sum to 1)."""
        items = tuple(s for s in items if s.p > 0 and s.gpus > 0)
        if not items:
            raise ValueError("a shape distribution needs at least one shape with p > 0")
        total = sum(s.p for s in items)
        items = tuple(Shape(s.gpus, s.mem_per_gpu_mib, s.cpu_milli, s.p / total) for s in items)
        return cls(
            items=items,
            k=np.array([s.gpus for s in items], dtype=np.float64),
            need=np.array(
                [np.nan if s.mem_per_gpu_mib is None else s.mem_per_gpu_mib for s in items],
                dtype=np.float64,
            ),
            whole=np.array([s.mem_per_gpu_mib is None for s in items], dtype=bool),
            cpu=np.array([s.cpu_milli for s in items], dtype=np.float64),
            p=np.array([s.p for s in items], dtype=np.float64),
        )

    @cached_property
    def geometry(self) -> tuple[tuple[int, float | None, float], ...]:
        """The shapes without their weights, in order: what the per-shape parts of the
        expected fragmentation depend on (the weights change with every pod observed)."""
        return tuple((s.gpus, s.mem_per_gpu_mib, s.cpu_milli) for s in self.items)

    @classmethod
    def of_counts(cls, counts: list[tuple[tuple[int, float | None, float], float]]) -> Shapes:
        """`of` for ((gpus, mem_per_gpu_mib, cpu_milli), weight) pairs, the same snapshot
        without building each Shape twice (the extender takes one per new pod)."""
        keep = [(k, w) for k, w in counts if w > 0 and k[0] > 0]
        if not keep:
            return cls.of([])  # its error
        total = sum(w for _, w in keep)
        p = [w / total for _, w in keep]
        return cls(
            items=tuple(Shape(k[0], k[1], k[2], q) for (k, _), q in zip(keep, p, strict=True)),
            k=np.array([k[0] for k, _ in keep], dtype=np.float64),
            need=np.array([np.nan if k[1] is None else k[1] for k, _ in keep], dtype=np.float64),
            whole=np.array([k[1] is None for k, _ in keep], dtype=bool),
            cpu=np.array([k[2] for k, _ in keep], dtype=np.float64),
            p=np.array(p, dtype=np.float64),
        )

    def as_dicts(self) -> list[dict[str, object]]:
        """JSON-ready view (for /debug/explain and docs)."""
        return [
            {
                "gpus": s.gpus,
                "mem_per_gpu_mib": s.mem_per_gpu_mib,
                "cpu_milli": s.cpu_milli,
                "p": round(s.p, 6),
            }
            for s in self.items
        ]


class ShapeDistribution:
    """Decayed counts of observed shapes plus the configured prior. Thread-safe."""

    def __init__(self, cfg: ScoringConfig) -> None:
        self._cfg = cfg
        self._lock = threading.Lock()
        self._counts: dict[tuple[int, float | None, float], float] = {}
        self._decay = 0.5 ** (1.0 / cfg.shape_half_life_pods)
        self._observed = 0
        self._snapshot: Shapes | None = None
        prior: dict[tuple[int, float | None, float], float] = {}
        prior_total = sum(s.weight for s in cfg.shape_prior)
        for s in cfg.shape_prior:
            key = (s.gpus, s.mem_per_gpu_mib, s.cpu_milli)
            prior[key] = prior.get(key, 0.0) + cfg.shape_prior_weight * s.weight / prior_total
        self._prior = prior
        """The prior's pseudo-counts (fixed by the config; every snapshot starts from them)."""

    @classmethod
    def from_config(cls, cfg: ScoringConfig) -> ShapeDistribution:
        return cls(cfg)

    @property
    def observed(self) -> int:
        """How many pods have been observed so far."""
        return self._observed

    def observe(self, pod: PodShape) -> None:
        """Count one pod's shape (non-GPU pods are ignored: they cause no GPU fragments)."""
        if pod.gpus <= 0:
            return
        with self._lock:
            d = self._decay
            for key in self._counts:
                self._counts[key] *= d
            self._counts[pod.key] = self._counts.get(pod.key, 0.0) + 1.0
            if len(self._counts) > self._cfg.max_shapes:
                lightest = min(self._counts, key=lambda k: self._counts[k])
                del self._counts[lightest]
            self._observed += 1
            self._snapshot = None

    def snapshot(self) -> Shapes:
        """The current distribution: prior (pseudo-count `shape_prior_weight`) + counts."""
        with self._lock:
            if self._snapshot is not None:
                return self._snapshot
            cfg = self._cfg
            merged = dict(self._prior)
            for key, c in self._counts.items():
                merged[key] = merged.get(key, 0.0) + c
            if sum(merged.values()) <= 0:  # prior weight 0 and nothing observed yet
                merged = {
                    (s.gpus, s.mem_per_gpu_mib, s.cpu_milli): s.weight for s in cfg.shape_prior
                }
            ranked = sorted(merged.items(), key=lambda kv: -kv[1])[: cfg.max_shapes]
            self._snapshot = Shapes.of_counts(ranked)
            return self._snapshot
