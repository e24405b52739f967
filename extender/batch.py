"""A column (array) view of many `NodeState`s, so one pod is scored against thousands of
nodes with a few numpy operations instead of a Python loop per node.

Rows are nodes; GPU columns are padded to the widest node (`valid` marks real GPUs; a
padded slot has total, used and allocated 0, so it holds no free memory and is never
idle). Missing measurements are NaN, never 0. A `NodeBatch` is immutable by
convention: the arrays are marked read-only; `take()` and `with_rows()` return new
batches. Build once per cluster state (the cache does) and `take()` the requested rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from extender.model import SIGNAL_STATES, NodeState

__all__ = ["NodeBatch", "NodeTable", "POOL_CODES"]

POOL_CODES: dict[str | None, int] = {None: 0, "language": 1, "mixed": 2, "vision": 3}
"""Node pool label -> small integer (0 = unlabelled or unknown pool)."""


_CODE = {name: i for i, name in enumerate(SIGNAL_STATES)}


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class NodeBatch:
    """Arrays over N nodes and G GPU slots. GPU memory in MiB."""

    names: tuple[str, ...]
    total: np.ndarray  # (N, G) float
    used: np.ndarray  # (N, G) float
    alloc: np.ndarray  # (N, G) float
    valid: np.ndarray  # (N, G) bool
    fresh: np.ndarray  # (N,) bool: fresh signals with at least one GPU
    codes: np.ndarray  # (N,) int8 index into SIGNAL_STATES (fresh, stale, missing, invalid)
    streams: np.ndarray  # (N,) float, NaN = not measured
    image_share: np.ndarray  # (N,) float, NaN = not measured
    p95: np.ndarray  # (N,) float, NaN = not measured
    pool: np.ndarray  # (N,) int8, POOL_CODES
    nvlink: np.ndarray  # (N,) bool
    cpu_free: np.ndarray  # (N,) float, inf = not tracked
    replicas: Sequence[Mapping[str, int]]  # (N,) model -> replica count
    model_counts: Mapping[str, np.ndarray] | None = None
    """Precomputed replica_counts columns for some models (NodeTable.take(model=...))."""
    util: np.ndarray | None = None
    """(N, G) float GPU utilisation 0..1 (NVML), NaN = not measured; None = none at all."""
    pods: np.ndarray | None = None
    """(N, G) float pods per GPU (`GpuState.pods`), NaN = not tracked; None = none at all."""

    def util_or_nan(self) -> np.ndarray:
        """(N, G) utilisation with NaN where not measured (also when `util` is None)."""
        if self.util is None:
            return np.full(self.total.shape, np.nan)
        return self.util

    def pods_or_nan(self) -> np.ndarray:
        """(N, G) pods per GPU with NaN where not tracked (also when `pods` is None)."""
        if self.pods is None:
            return np.full(self.total.shape, np.nan)
        return self.pods

    def __len__(self) -> int:
        return len(self.names)

    @property
    def signals(self) -> tuple[str, ...]:
        """(N,) signal state names."""
        return tuple(SIGNAL_STATES[c] for c in self.codes)

    @classmethod
    def from_states(cls, nodes: Sequence[NodeState]) -> NodeBatch:
        """Build from node states (one Python pass; O(N * G))."""
        n = len(nodes)
        width = max((len(s.gpus) for s in nodes), default=0)
        width = max(width, 1)
        total = np.zeros((n, width))
        used = np.zeros((n, width))
        alloc = np.zeros((n, width))
        valid = np.zeros((n, width), dtype=bool)
        util = np.full((n, width), np.nan)
        gpu_pods = np.full((n, width), np.nan)
        streams = np.full(n, np.nan)
        image = np.full(n, np.nan)
        p95 = np.full(n, np.nan)
        pool = np.zeros(n, dtype=np.int8)
        nvlink = np.zeros(n, dtype=bool)
        cpu = np.full(n, np.inf)
        fresh = np.zeros(n, dtype=bool)
        for i, s in enumerate(nodes):
            if s.gpus:
                for j, g in enumerate(s.gpus):
                    total[i, j] = g.total_mib
                    used[i, j] = g.used_mib
                    alloc[i, j] = g.allocated_mib
                    if g.util is not None:
                        util[i, j] = g.util
                    if g.pods is not None:
                        gpu_pods[i, j] = g.pods
                valid[i, : len(s.gpus)] = True
            fresh[i] = s.fresh
            if s.streams is not None:
                streams[i] = s.streams
            if s.image_token_share is not None:
                image[i] = s.image_token_share
            if s.p95_s is not None:
                p95[i] = s.p95_s
            pool[i] = POOL_CODES.get(s.pool, 0)
            nvlink[i] = s.nvlink
            if s.cpu_free_milli is not None:
                cpu[i] = s.cpu_free_milli
        return cls(
            names=tuple(s.name for s in nodes),
            total=_ro(total),
            used=_ro(used),
            alloc=_ro(alloc),
            valid=_ro(valid),
            fresh=_ro(fresh),
            codes=_ro(np.array([_CODE.get(s.signals, 2) for s in nodes], dtype=np.int8)),
            streams=_ro(streams),
            image_share=_ro(image),
            p95=_ro(p95),
            pool=_ro(pool),
            nvlink=_ro(nvlink),
            cpu_free=_ro(cpu),
            replicas=tuple(s.model_replicas for s in nodes),
            util=_ro(util),
            pods=_ro(gpu_pods),
        )

    def take(self, rows: Sequence[int] | np.ndarray) -> NodeBatch:
        """The batch restricted to `rows` (in that order)."""
        idx = np.asarray(rows, dtype=np.intp)
        return NodeBatch(
            names=tuple(self.names[i] for i in idx),
            total=_ro(self.total[idx]),
            used=_ro(self.used[idx]),
            alloc=_ro(self.alloc[idx]),
            valid=_ro(self.valid[idx]),
            fresh=_ro(self.fresh[idx]),
            codes=_ro(self.codes[idx]),
            streams=_ro(self.streams[idx]),
            image_share=_ro(self.image_share[idx]),
            p95=_ro(self.p95[idx]),
            pool=_ro(self.pool[idx]),
            nvlink=_ro(self.nvlink[idx]),
            cpu_free=_ro(self.cpu_free[idx]),
            replicas=tuple(self.replicas[i] for i in idx),
            util=None if self.util is None else _ro(self.util[idx]),
            pods=None if self.pods is None else _ro(self.pods[idx]),
        )

    @classmethod
    def concat(cls, parts: Sequence[NodeBatch]) -> NodeBatch:
        """Rows of several batches, in order (GPU columns padded to the widest)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.from_states([])
        if len(parts) == 1:
            return parts[0]
        width = max(p.total.shape[1] for p in parts)

        def pad(a: np.ndarray, fill: float | bool) -> np.ndarray:
            if a.shape[1] == width:
                return a
            out = np.full((a.shape[0], width), fill, dtype=a.dtype)
            out[:, : a.shape[1]] = a
            return out

        return cls(
            names=tuple(n for p in parts for n in p.names),
            total=_ro(np.concatenate([pad(p.total, 0.0) for p in parts])),
            used=_ro(np.concatenate([pad(p.used, 0.0) for p in parts])),
            alloc=_ro(np.concatenate([pad(p.alloc, 0.0) for p in parts])),
            valid=_ro(np.concatenate([pad(p.valid, False) for p in parts])),
            fresh=_ro(np.concatenate([p.fresh for p in parts])),
            codes=_ro(np.concatenate([p.codes for p in parts])),
            streams=_ro(np.concatenate([p.streams for p in parts])),
            image_share=_ro(np.concatenate([p.image_share for p in parts])),
            p95=_ro(np.concatenate([p.p95 for p in parts])),
            pool=_ro(np.concatenate([p.pool for p in parts])),
            nvlink=_ro(np.concatenate([p.nvlink for p in parts])),
            cpu_free=_ro(np.concatenate([p.cpu_free for p in parts])),
            replicas=tuple(r for p in parts for r in p.replicas),
            util=_ro(np.concatenate([pad(p.util_or_nan(), np.nan) for p in parts])),
            pods=_ro(np.concatenate([pad(p.pods_or_nan(), np.nan) for p in parts])),
        )

    def free(self) -> np.ndarray:
        """free_g = total_g - max(used_g, allocated_g), clipped at 0 (docs/design.md section 4)."""
        return np.maximum(self.total - np.maximum(self.used, self.alloc), 0.0)

    def idle(self, idle_used_fraction: float) -> np.ndarray:
        """GPUs that can take a whole-GPU instance: real, unclaimed, near-zero use."""
        return self.valid & (self.alloc <= 0.0) & (self.used <= idle_used_fraction * self.total)

    def replica_counts(self, model: str | None) -> np.ndarray:
        """(N,) replicas of `model` per node (0 without a model)."""
        if not model:
            return np.zeros(len(self.names))
        if self.model_counts is not None and model in self.model_counts:
            return self.model_counts[model]
        return np.fromiter((r.get(model, 0) for r in self.replicas), float, len(self.names))


class NodeTable:
    """Row storage for the node cache: one row per node name, updated in place.

    Readers get consistent copies through `take()`; a node's signals that age past the
    stale limit between updates are marked stale at read time (the row keeps the
    signal timestamp). Replica counts are kept as one dense column per model so that
    the spread term costs one gather. Not thread-safe by itself: the cache serialises
    access.
    """

    def __init__(self, width: int = 8) -> None:
        self._rows: dict[str, int] = {}
        self._free_rows: list[int] = []
        self._cap = 0
        self._width = max(1, width)
        self._model_cols: dict[str, np.ndarray] = {}
        self._grow(64)

    def _grow(self, cap: int) -> None:
        old = self._cap
        w = self._width

        def grow(name: str, shape: tuple[int, ...], fill: object, dtype: object) -> None:
            out = np.full(shape, fill, dtype=dtype)
            prev = self.__dict__.get(name)
            if prev is not None:
                out[: prev.shape[0], ...] = prev
            setattr(self, name, out)

        grow("total", (cap, w), 0.0, float)
        grow("used", (cap, w), 0.0, float)
        grow("alloc", (cap, w), 0.0, float)
        grow("valid", (cap, w), False, bool)
        grow("util", (cap, w), np.nan, float)
        grow("gpu_pods", (cap, w), np.nan, float)
        grow("fresh", (cap,), False, bool)
        grow("sig_ts", (cap,), np.nan, float)
        grow("streams", (cap,), np.nan, float)
        grow("image", (cap,), np.nan, float)
        grow("p95", (cap,), np.nan, float)
        grow("pool", (cap,), 0, np.int8)
        grow("nvlink", (cap,), False, bool)
        grow("cpu", (cap,), np.inf, float)
        grow("codes", (cap,), _CODE["missing"], np.int8)
        grow("names", (cap,), "", object)
        grow("replicas", (cap,), None, object)
        for model, col in list(self._model_cols.items()):
            out = np.zeros(cap)
            out[: col.shape[0]] = col
            self._model_cols[model] = out
        self._free_rows.extend(range(cap - 1, old - 1, -1))
        self._cap = cap

    def _widen(self, width: int) -> None:
        for attr in ("total", "used", "alloc", "valid", "util", "gpu_pods"):
            a = getattr(self, attr)
            b = np.zeros((self._cap, width), dtype=a.dtype)
            if attr in ("util", "gpu_pods"):
                b[:] = np.nan
            b[:, : a.shape[1]] = a
            setattr(self, attr, b)
        self._width = width

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, name: str) -> bool:
        return name in self._rows

    def row_names(self) -> list[str]:
        return list(self._rows)

    def set(self, s: NodeState) -> None:
        """Insert or replace the row for `s.name`."""
        if len(s.gpus) > self._width:
            self._widen(len(s.gpus))
        i = self._rows.get(s.name)
        if i is None:
            if not self._free_rows:
                self._grow(self._cap * 2)
            i = self._free_rows.pop()
            self._rows[s.name] = i
        self.total[i] = 0.0
        self.used[i] = 0.0
        self.alloc[i] = 0.0
        self.valid[i] = False
        self.util[i] = np.nan
        self.gpu_pods[i] = np.nan
        for j, g in enumerate(s.gpus):
            self.total[i, j] = g.total_mib
            self.used[i, j] = g.used_mib
            self.alloc[i, j] = g.allocated_mib
            self.valid[i, j] = True
            if g.util is not None:
                self.util[i, j] = g.util
            if g.pods is not None:
                self.gpu_pods[i, j] = g.pods
        self.fresh[i] = s.fresh
        self.sig_ts[i] = np.nan if s.signals_ts is None else s.signals_ts
        self.streams[i] = np.nan if s.streams is None else s.streams
        self.image[i] = np.nan if s.image_token_share is None else s.image_token_share
        self.p95[i] = np.nan if s.p95_s is None else s.p95_s
        self.pool[i] = POOL_CODES.get(s.pool, 0)
        self.nvlink[i] = s.nvlink
        self.cpu[i] = np.inf if s.cpu_free_milli is None else s.cpu_free_milli
        self.codes[i] = _CODE.get(s.signals, _CODE["missing"])
        self.names[i] = s.name
        self._set_replicas(i, s.model_replicas)

    def _set_replicas(self, i: int, replicas: Mapping[str, int]) -> None:
        old = self.replicas[i] or {}
        for model in old:
            self._model_cols[model][i] = 0.0
        for model, count in replicas.items():
            col = self._model_cols.get(model)
            if col is None:
                col = self._model_cols[model] = np.zeros(self._cap)
            col[i] = count
        self.replicas[i] = replicas

    def remove(self, name: str) -> None:
        i = self._rows.pop(name, None)
        if i is not None:
            self.names[i] = ""
            self._set_replicas(i, {})
            self.fresh[i] = False
            self._free_rows.append(i)

    def take(
        self,
        names: Sequence[str],
        now: float | None = None,
        stale_after_s: float | None = None,
        model: str | None = None,
    ) -> tuple[NodeBatch, list[int]]:
        """(batch of the known names in request order, positions in `names` not known).

        `model` adds that model's replica column (`NodeBatch.model_counts`).
        """
        found = list(map(self._rows.get, names))
        if None in found:
            missing = [p for p, i in enumerate(found) if i is None]
            idx = [i for i in found if i is not None]
            known = tuple(self.names[idx])
        else:
            missing, idx = [], found
            known = tuple(names)
        ix = np.array(idx, dtype=np.intp)
        fresh = self.fresh[ix]
        codes = self.codes[ix]
        if now is not None and stale_after_s is not None and len(ix):
            aged = fresh & ((now - self.sig_ts[ix]) > stale_after_s)
            if aged.any():
                fresh = fresh & ~aged
                codes = np.where(aged, np.int8(_CODE["stale"]), codes)
        counts = None
        if model:
            col = self._model_cols.get(model)
            counts = {model: _ro(col[ix] if col is not None else np.zeros(len(ix)))}
        batch = NodeBatch(
            names=known,
            total=_ro(self.total[ix]),
            used=_ro(self.used[ix]),
            alloc=_ro(self.alloc[ix]),
            valid=_ro(self.valid[ix]),
            fresh=_ro(fresh),
            codes=_ro(codes),
            streams=_ro(self.streams[ix]),
            image_share=_ro(self.image[ix]),
            p95=_ro(self.p95[ix]),
            pool=_ro(self.pool[ix]),
            nvlink=_ro(self.nvlink[ix]),
            cpu_free=_ro(self.cpu[ix]),
            replicas=self.replicas[ix],
            model_counts=counts,
            util=_ro(self.util[ix]),
            pods=_ro(self.gpu_pods[ix]),
        )
        return batch, missing
