"""A column (array) view of many `NodeState`s, so one pod is scored against thousands of
nodes with a few numpy operations instead of a Python loop per node.

Rows are nodes; GPU columns are padded to the widest node (`valid` marks real GPUs; a
padded slot has total, used and allocated 0, so it holds no free memory and is never
idle). Missing measurements are NaN, never 0. A `NodeBatch` is immutable by
convention: the arrays are marked read-only; `take()` returns new batches. Build once
per cluster state (the cache does) and `take()` the requested rows. Values derived from a
batch alone (no pod) are kept with it (`NodeBatch.memo`), and `NodeTable.take` hands out
the same batch while the rows asked for are unchanged, so they are computed once for many
requests.

The array columns are declared once, as the `NodeBatch` fields made with `_column(...)`
(`COLUMNS`): `from_states`, `take`, `concat` and the `NodeTable` row store all walk that
list, so adding a column is one line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from extender.model import SIGNAL_STATES, GpuState, NodeState
from kvspread.gpumem import free_mib

__all__ = [
    "NodeBatch",
    "NodeTable",
    "POOL_CODES",
    "COLUMNS",
    "Column",
    "Keep",
    "ONCE",
    "patch_rows",
]

POOL_CODES: dict[str | None, int] = {None: 0, "language": 1, "mixed": 2, "vision": 3}
"""Node pool label -> small integer (0 = unlabelled or unknown pool)."""


_CODE = {name: i for i, name in enumerate(SIGNAL_STATES)}
_MISSING = _CODE["missing"]


@dataclass(frozen=True)
class Column:
    """One array column of `NodeBatch`: (N, G) when `per_gpu`, else (N,).

    `get` reads the value from a `GpuState` (per-GPU columns) or a `NodeState`; None
    means "not measured" and leaves `fill`, which is also the value of padded slots."""

    name: str
    per_gpu: bool
    dtype: Any
    fill: Any
    get: Callable[[Any], Any]


def _column(per_gpu: bool, dtype: Any, fill: Any, get: Callable[[Any], Any]) -> Any:
    return field(metadata={"column": (per_gpu, dtype, fill, get)})


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)  # cheaper than a.flags.writeable = False (no flags object)
    return a


@dataclass(frozen=True)
class Keep:
    """How a value kept with a batch (`NodeBatch.memo`) is carried to a batch that
    `NodeTable.take` derived from it by changing a few rows (the previous pick of a scaling
    Deployment changes one node)."""

    patch: Callable[[Any, np.ndarray, Any], Any] | None = None
    """For a row-wise value (row i depends on row i alone): `patch(old, rows, new)` writes
    `make` applied to just the changed rows into the parent's value (`patch_rows`). `make`
    must then give bit for bit the same rows whatever other rows a batch holds. None: the
    value is computed again over every row."""
    reads: tuple[str, ...] | None = None
    """Every column `make` reads: when the changed rows hold the same values in all of them
    (a recorded placement changes `alloc`, not a node's load), the parent's value is the
    derived batch's as it is."""
    limit: int | None = None
    """At most this many kept values per batch share `key[0]` (values per pod shape); past
    it a value is computed and not kept."""


ONCE = Keep()
"""Kept per batch, computed again for a derived one."""


def patch_rows(old: Any, rows: np.ndarray, new: Any, axis: int = 0) -> Any:
    """`old` (an array, or a tuple of arrays, with one entry per node along `axis`) with
    the entries at positions `rows` replaced by `new`'s, as read-only copies."""
    if isinstance(old, tuple):
        return tuple(patch_rows(o, rows, n, axis) for o, n in zip(old, new, strict=True))
    out = old.copy(order="K")  # the same memory layout: BLAS products sum in layout order
    index: tuple[Any, ...] = (slice(None),) * (axis % old.ndim) + (rows,)
    out[index] = new
    return _ro(out)


@dataclass(frozen=True)
class NodeBatch:
    """Arrays over N nodes and G GPU slots. GPU memory in MiB."""

    names: tuple[str, ...]
    total: np.ndarray = _column(True, float, 0.0, lambda g: g.total_mib)
    used: np.ndarray = _column(True, float, 0.0, lambda g: g.used_mib)
    alloc: np.ndarray = _column(True, float, 0.0, lambda g: g.allocated_mib)
    valid: np.ndarray = _column(True, bool, False, lambda g: True)
    util: np.ndarray = _column(True, float, math.nan, lambda g: g.util)
    """GPU utilisation 0..1 (NVML), NaN = not measured."""
    pods: np.ndarray = _column(True, float, math.nan, lambda g: g.pods)
    """Pods per GPU (`GpuState.pods`), NaN = not tracked."""
    fresh: np.ndarray = _column(False, bool, False, lambda s: s.fresh)
    """Fresh signals with at least one GPU."""
    codes: np.ndarray = _column(False, np.int8, _MISSING, lambda s: _CODE.get(s.signals))
    """Index into SIGNAL_STATES (fresh, stale, missing, invalid)."""
    sig_ts: np.ndarray = _column(False, float, math.nan, lambda s: s.signals_ts)
    """Measurement time of the signals, NaN = unknown."""
    streams: np.ndarray = _column(False, float, math.nan, lambda s: s.streams)
    image_share: np.ndarray = _column(False, float, math.nan, lambda s: s.image_token_share)
    p95: np.ndarray = _column(False, float, math.nan, lambda s: s.p95_s)
    pool: np.ndarray = _column(False, np.int8, 0, lambda s: POOL_CODES.get(s.pool, 0))
    nvlink: np.ndarray = _column(False, bool, False, lambda s: s.nvlink)
    cpu_free: np.ndarray = _column(False, float, math.inf, lambda s: s.cpu_free_milli)
    """Free CPU in milli-cores, inf = not tracked."""
    last_gpus: np.ndarray = _column(False, float, math.nan, lambda s: s.last_gpus)
    """Not fresh: GPUs in the last (stale) document, NaN = none (`NodeState.last_gpus`)."""
    last_largest: np.ndarray = _column(False, float, math.nan, lambda s: s.last_largest_mib)
    """Not fresh: the last document's largest GPU total, MiB; NaN = none."""
    last_smallest: np.ndarray = _column(False, float, math.nan, lambda s: s.last_smallest_mib)
    """Not fresh: the last document's smallest GPU total, MiB; NaN = none."""
    replicas: Sequence[Mapping[str, int]] = ()
    """(N,) model -> replica count."""
    model_counts: Mapping[str, np.ndarray] | None = None
    """Precomputed replica_counts columns for some models (NodeTable.take(model=...))."""

    def __len__(self) -> int:
        return len(self.names)

    @property
    def signals(self) -> tuple[str, ...]:
        """(N,) signal state names."""
        return tuple(SIGNAL_STATES[c] for c in self.codes)

    @classmethod
    def from_states(cls, nodes: Sequence[NodeState]) -> NodeBatch:
        """Build from node states (one Python pass; O(N * G))."""
        table = NodeTable(width=max((len(s.gpus) for s in nodes), default=1), capacity=len(nodes))
        for s in nodes:
            table.set(s)
        batch, _ = table.take([s.name for s in nodes])
        return batch

    def take(self, rows: Sequence[int] | np.ndarray) -> NodeBatch:
        """The batch restricted to `rows` (in that order)."""
        idx = np.asarray(rows, dtype=np.intp)
        cols: dict[str, Any] = {c.name: _ro(getattr(self, c.name)[idx]) for c in COLUMNS}
        return NodeBatch(
            names=tuple(self.names[i] for i in idx),
            replicas=tuple(self.replicas[i] for i in idx),
            **cols,
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
        cols: dict[str, Any] = {
            c.name: _ro(np.concatenate([_pad(getattr(p, c.name), c, width) for p in parts]))
            for c in COLUMNS
        }
        return cls(
            names=tuple(n for p in parts for n in p.names),
            replicas=tuple(r for p in parts for r in p.replicas),
            **cols,
        )

    def with_rows(self, rows: Sequence[int], other: NodeBatch) -> NodeBatch:
        """This batch with rows `rows` replaced by the rows of `other`, in order (the
        names stay; used to re-view a few nodes without rebuilding the whole batch)."""
        idx = np.asarray(rows, dtype=np.intp)
        width = max(self.total.shape[1], other.total.shape[1])
        cols: dict[str, Any] = {}
        for c in COLUMNS:
            a = _pad(getattr(self, c.name), c, width).copy()
            a[idx] = _pad(getattr(other, c.name), c, width)
            cols[c.name] = _ro(a)
        replicas = list(self.replicas)
        for k, i in enumerate(idx):
            replicas[i] = other.replicas[k]
        counts = None
        if self.model_counts is not None:
            counts = {}
            for model, col in self.model_counts.items():
                col = col.copy()
                col[idx] = other.replica_counts(model)
                counts[model] = _ro(col)
        return NodeBatch(names=self.names, replicas=tuple(replicas), model_counts=counts, **cols)

    def free(self) -> np.ndarray:
        """(N, G) free memory per GPU (`kvspread.gpumem.free_mib`); computed once per
        batch (read-only, like every column)."""
        cached = self.__dict__.get("_free")
        if cached is None:
            cached = _ro(free_mib(self.total, self.used, self.alloc))
            object.__setattr__(self, "_free", cached)
        return cached

    def memo(self, key: Hashable, make: Callable[[NodeBatch], Any], keep: Keep = ONCE) -> Any:
        """`make(self)`, computed once per batch and `key`: a value derived from the batch
        alone, such as a node's load term, or from the batch and a pod's shape.
        `NodeTable.take` hands out the same batch while the requested rows are unchanged,
        so such values are computed once for many requests; `keep` says how a value is
        carried to a batch derived from this one by a few changed rows (`Keep`). What
        `make` returns must be read-only (shared by every caller)."""
        patch, reads, limit = keep.patch, keep.reads, keep.limit
        value = self.kept(key)
        if value is not None:
            return value
        memo = self.__dict__.get("_memo")
        if memo is None:
            memo = {}
            object.__setattr__(self, "_memo", memo)
        base: tuple[NodeBatch, np.ndarray] | None = self.__dict__.get("_base")
        if patch is not None and base is not None:
            old = base[0].kept(key)
            if old is not None and reads is not None and self._same_rows(reads):
                value = old
            elif old is not None:
                # kept by the changed rows' own batch too: values built on others reuse it
                value = patch(old, base[1], self._changed().memo(key, make, ONCE))
        if value is None:
            value = make(self)
        if limit is not None and isinstance(key, tuple):
            if sum(1 for k in memo if isinstance(k, tuple) and k[0] == key[0]) >= limit:
                return value
        memo[key] = value
        return value

    def kept(self, key: Hashable) -> Any:
        """The value `memo` keeps under `key`, or None (nothing computed or carried yet)."""
        memo = self.__dict__.get("_memo")
        return None if memo is None else memo.get(key)

    def _same_rows(self, columns: tuple[str, ...]) -> bool:
        """The changed rows (`derive`) hold the same values in `columns` as in the parent,
        bit for bit (so `make` gives the same bits on them; a NaN equals the same NaN);
        kept per column. One byte comparison a column: the rows are a node or two."""
        same: dict[str, bool] = self.__dict__.setdefault("_same", {})
        parent, rows = self.__dict__["_base"]
        for c in columns:
            ok = same.get(c)
            if ok is None:
                ok = same[c] = (
                    getattr(self, c)[rows].tobytes() == getattr(parent, c)[rows].tobytes()
                )
            if not ok:
                return False
        return True

    def _changed(self) -> NodeBatch:
        """The rows changed since the parent batch (`derive`), as a batch of their own."""
        sub: NodeBatch | None = self.__dict__.get("_sub")
        if sub is None:
            base = self.__dict__["_base"]
            sub = self.take(base[1])
            object.__setattr__(self, "_sub", sub)
        return sub

    def derive(self, parent: NodeBatch, rows: np.ndarray) -> None:
        """Mark this batch as `parent` with only `rows` (positions) changed, so that
        row-wise memo values are patched from the parent's (`memo`). The parent's own
        link is cut: only one generation is kept alive."""
        object.__setattr__(parent, "_base", None)
        object.__setattr__(self, "_base", (parent, _ro(np.asarray(rows, dtype=np.intp))))

    def idle(self, idle_used_fraction: float) -> np.ndarray:
        """GPUs that can take a whole-GPU instance: real, unclaimed, near-zero use
        (computed once per batch and fraction, read-only)."""

        def make(b: NodeBatch) -> np.ndarray:
            return _ro(b.valid & (b.alloc <= 0.0) & (b.used <= idle_used_fraction * b.total))

        idle: np.ndarray = self.memo(("idle", idle_used_fraction), make, _IDLE)
        return idle

    def replica_counts(self, model: str | None) -> np.ndarray:
        """(N,) replicas of `model` per node (0 without a model)."""
        if not model:
            return np.zeros(len(self.names))
        if self.model_counts is not None and model in self.model_counts:
            return self.model_counts[model]
        return np.fromiter((r.get(model, 0) for r in self.replicas), float, len(self.names))


_IDLE = Keep(patch_rows, reads=("valid", "alloc", "used", "total"))

COLUMNS: tuple[Column, ...] = tuple(
    Column(f.name, *f.metadata["column"]) for f in fields(NodeBatch) if "column" in f.metadata
)
"""The array columns of NodeBatch, in declaration order."""
_GPU_COLUMNS = tuple(c for c in COLUMNS if c.per_gpu)
_NODE_COLUMNS = tuple(c for c in COLUMNS if not c.per_gpu)


def _pad(a: np.ndarray, c: Column, width: int) -> np.ndarray:
    """Per-GPU column `a` widened to `width` slots with the column's fill."""
    if not c.per_gpu or a.shape[1] == width:
        return a
    out = np.full((a.shape[0], width), c.fill, dtype=a.dtype)
    out[:, : a.shape[1]] = a
    return out


def _value(c: Column, obj: GpuState | NodeState) -> Any:
    v = c.get(obj)
    return c.fill if v is None else v


def _write_row(cols: Mapping[str, np.ndarray], i: int, s: NodeState) -> None:
    """Write `s` into row `i` of the columns `cols` (GPU slots past `s.gpus` get the fill)."""
    k = len(s.gpus)
    for c in _GPU_COLUMNS:
        row = cols[c.name][i]
        row[k:] = c.fill
        row[:k] = [_value(c, g) for g in s.gpus]  # one assignment: as many slot by slot
    for c in _NODE_COLUMNS:
        cols[c.name][i] = _value(c, s)


def _same_mask(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and bool((a == b).all())


@dataclass
class _Kept:
    """The last batch `NodeTable.take` built, and what it was built from."""

    version: int
    ix: np.ndarray
    aged: np.ndarray | None
    views: dict[str, NodeState]
    batch: NodeBatch
    counts: dict[str, np.ndarray]
    """The batch's `model_counts` (a column is added for each model asked for)."""


class NodeTable:
    """Row storage for the node cache: one row per node name, updated in place.

    Readers get consistent copies through `take()` (the same read-only batch again while
    neither those rows, nor which of them aged past the stale limit, nor the re-viewed rows
    changed); a node's signals that age past the stale limit between updates are marked
    stale at read time (the row keeps the signal timestamp). Replica counts are kept as one dense column per model so that
    the spread term costs one gather. Not thread-safe by itself: the cache serialises
    access.
    """

    def __init__(self, width: int = 8, capacity: int = 64) -> None:
        self._rows: dict[str, int] = {}
        self._free_rows: list[int] = []
        self._cap = 0
        self._width = max(1, width)
        self._cols: dict[str, np.ndarray] = {}
        self._names = np.zeros(0, dtype=object)
        self._replicas = np.zeros(0, dtype=object)
        self._model_cols: dict[str, np.ndarray] = {}
        self._layout = 0
        """Bumped when a name gets or loses its row (the cached lookup is then stale)."""
        self._last: (
            tuple[int, list[str], tuple[tuple[int, ...], np.ndarray, tuple[str, ...]]] | None
        ) = None
        self._last_span = False
        """The rows of the last lookup (`_last`) are consecutive and ascending."""
        self._last_set: (
            tuple[
                int,
                list[str],
                tuple[tuple[int, ...], np.ndarray, tuple[str, ...], np.ndarray | None],
            ]
            | None
        ) = None
        """The last `_rows_of_set` lookup: (layout, names, answer)."""
        self._version = 0
        """Bumped whenever a row's content changes (a `set` of a different state, a
        removal, a widening): the kept batch (`_kept`) is then stale."""
        self._row_version = np.zeros(0, dtype=np.int64)
        """`_version` when each row last changed: which rows a kept batch lacks."""
        self._whole_version = 0
        """`_version` of the last change to every row at once (a widening)."""
        self._states: dict[int, NodeState] = {}
        """The state each row was last set from (a `set` of an equal state changes nothing)."""
        self._kept: dict[str, _Kept] = {}
        """The last batch taken without views ("plain") and with them ("views")."""
        self._grow(max(1, capacity))

    def _shape(self, c: Column, cap: int) -> tuple[int, ...]:
        return (cap, self._width) if c.per_gpu else (cap,)

    def _grow(self, cap: int) -> None:
        old = self._cap
        for c in COLUMNS:
            out = np.full(self._shape(c, cap), c.fill, dtype=c.dtype)
            prev = self._cols.get(c.name)
            if prev is not None:
                out[: prev.shape[0], ...] = prev
            self._cols[c.name] = out
        for attr in ("_names", "_replicas"):
            prev = getattr(self, attr)
            out = np.full(cap, "" if attr == "_names" else None, dtype=object)
            out[: prev.shape[0]] = prev
            setattr(self, attr, out)
        for model, col in list(self._model_cols.items()):
            out = np.zeros(cap)
            out[: col.shape[0]] = col
            self._model_cols[model] = out
        rv = np.zeros(cap, dtype=np.int64)
        rv[: self._row_version.shape[0]] = self._row_version
        self._row_version = rv
        self._free_rows.extend(range(cap - 1, old - 1, -1))
        self._cap = cap

    def _widen(self, width: int) -> None:
        self._version += 1
        for c in _GPU_COLUMNS:
            a = self._cols[c.name]
            b = np.full((self._cap, width), c.fill, dtype=a.dtype)
            b[:, : a.shape[1]] = a
            self._cols[c.name] = b
        self._width = width
        self._whole_version = self._version

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
            self._layout += 1
        elif self._states.get(i) == s:
            return  # the same content (a ledger entry recorded again, an unrelated event)
        self._version += 1
        self._row_version[i] = self._version
        self._states[i] = s
        _write_row(self._cols, i, s)
        self._names[i] = s.name
        self._set_replicas(i, s.model_replicas)

    def _set_replicas(self, i: int, replicas: Mapping[str, int]) -> None:
        old = self._replicas[i] or {}
        for model in old:
            self._model_cols[model][i] = 0.0
        for model, count in replicas.items():
            col = self._model_cols.get(model)
            if col is None:
                col = self._model_cols[model] = np.zeros(self._cap)
            col[i] = count
        self._replicas[i] = replicas

    def remove(self, name: str) -> None:
        i = self._rows.pop(name, None)
        if i is not None:
            self._layout += 1
            self._version += 1
            self._row_version[i] = self._version
            self._states.pop(i, None)
            self._names[i] = ""
            self._set_replicas(i, {})
            self._cols["fresh"][i] = False
            self._free_rows.append(i)

    def take(
        self,
        names: Sequence[str],
        now: float | None = None,
        stale_after_s: float | None = None,
        model: str | None = None,
        views: Mapping[str, NodeState] | None = None,
        table_order: bool = False,
    ) -> tuple[NodeBatch, list[int]]:
        """(batch of the known names in request order, positions in `names` not known).

        `table_order`: the rows in table order instead (`request_positions` says where each
        stands in `names`). kube-scheduler filters nodes in parallel and lists the feasible
        ones in the order their checks end, so one node set comes in another order every
        cycle; in table order it is the same batch (and what is kept with it) every time.

        `model` adds that model's replica column (`NodeBatch.model_counts`). `views` gives
        another state for some rows (the first row of each such name): written into the
        copies taken here, the way the cache re-views the nodes holding the decided pod's
        own ledger entries, instead of a second batch and a merge. A view wider than the
        table is merged with `NodeBatch.with_rows`.
        """
        if table_order:
            missing, ix, known, _ = self._rows_of_set(names)
            span = bool(len(ix)) and int(ix[-1]) - int(ix[0]) + 1 == len(ix)  # ascending
        else:
            missing, ix, known = self._rows_of(names)
            span = self._last_span
        batch = self._take_rows(ix, known, span, now, stale_after_s, model, views)
        return batch, list(missing)

    def request_positions(self, names: Sequence[str]) -> np.ndarray | None:
        """Where each row of `take(names, table_order=True)` stands in `names`; None when
        the rows are in request order (all known, the request already in table order)."""
        return self._rows_of_set(names)[3]

    def _take_rows(
        self,
        ix: np.ndarray,
        known: tuple[str, ...],
        span: bool,
        now: float | None,
        stale_after_s: float | None,
        model: str | None,
        views: Mapping[str, NodeState] | None,
    ) -> NodeBatch:
        """The batch of table rows `ix` (names `known`); see `take`. `span`: the rows are
        consecutive and ascending."""
        if views and any(len(s.gpus) > self._width for s in views.values()):
            batch = self._take_rows(ix, known, span, now, stale_after_s, model, None)
            wide = {n: s for n, s in views.items() if n in known}
            fixed = NodeBatch.from_states(list(wide.values()))
            return batch.with_rows([known.index(n) for n in wide], fixed)
        rows: slice | np.ndarray = ix
        if span:
            # the rows in table order (a list-fed cache and the scheduler agree): a
            # slice copy, several times cheaper than a gather
            rows = slice(int(ix[0]), int(ix[-1]) + 1)
        aged = None
        if now is not None and stale_after_s is not None and len(ix):
            aged = self._cols["fresh"][rows] & ((now - self._cols["sig_ts"][rows]) > stale_after_s)
            if not aged.any():
                aged = None
        views = dict(views or {})
        # two kept batches: the last one without views (what a new pod sees) and the last
        # one with them (a pod re-scored with its own ledger entries left out)
        slot = "views" if views else "plain"
        kept = self._kept.get(slot)
        if kept is not None and self._fits(kept, ix, aged) and kept.views == views:
            # nothing the batch holds has changed: the same (read-only) batch again, with
            # what was derived from it (`NodeBatch.memo`)
            if model and model not in kept.counts:
                kept.counts[model] = self._model_column(model, ix, known, views)
            return kept.batch
        batch = self._build(rows, ix, known, aged, model, views)
        plain = self._kept.get("plain")
        if plain is not None and self._fits(plain, ix, aged, exact=False):
            # a few rows differ from the batch a new pod sees (a placement recorded, one
            # node's signals, the rows re-viewed for this pod): row-wise values derived
            # from it are patched, not computed again
            differ = np.flatnonzero(self._row_version[ix] > plain.version)
            if views:
                at = {known.index(n) for n in views if n in known}
                differ = np.array(sorted(at.union(differ.tolist())), dtype=np.intp)
            if len(differ) * 4 <= len(ix):
                batch.derive(plain.batch, differ)
        counts = batch.model_counts
        assert isinstance(counts, dict)
        self._kept[slot] = _Kept(self._version, ix, aged, views, batch, counts)
        return batch

    def _fits(
        self, kept: _Kept, ix: np.ndarray, aged: np.ndarray | None, exact: bool = True
    ) -> bool:
        """`kept` was built from rows `ix` aged as `aged`, since the last change to every
        row; with `exact`, none of its rows has changed since (then it is brought to the
        current version)."""
        if not (kept.ix is ix and _same_mask(kept.aged, aged)):
            return False
        if kept.version < self._whole_version:
            return False
        if not exact or kept.version == self._version:
            return True
        if (self._row_version[ix] > kept.version).any():
            return False
        kept.version = self._version  # what changed is not among these rows
        return True

    def _build(
        self,
        rows: slice | np.ndarray,
        ix: np.ndarray,
        known: tuple[str, ...],
        aged: np.ndarray | None,
        model: str | None,
        views: Mapping[str, NodeState] | None,
    ) -> NodeBatch:
        """The batch of `rows` (copies), aged rows marked stale, `views` written in."""
        replicas = tuple(self._replicas[rows])
        if isinstance(rows, slice):
            cols = {c.name: self._cols[c.name][rows].copy() for c in COLUMNS}
        else:
            cols = {c.name: self._cols[c.name][rows] for c in COLUMNS}
        if aged is not None:
            cols["fresh"] = cols["fresh"] & ~aged
            cols["codes"] = np.where(aged, np.int8(_CODE["stale"]), cols["codes"])
        if views:
            replicas = self._view_rows(views, known, cols, replicas)
        counts: dict[str, np.ndarray] = {}
        if model:
            counts[model] = self._model_column(model, ix, known, views)
        ro: dict[str, Any] = {k: _ro(v) for k, v in cols.items()}
        return NodeBatch(names=known, replicas=replicas, model_counts=counts, **ro)

    def _model_column(
        self,
        model: str,
        ix: np.ndarray,
        known: tuple[str, ...],
        views: Mapping[str, NodeState] | None,
    ) -> np.ndarray:
        """(N,) replicas of `model` on the rows `ix`, the `views` rows from their state."""
        col = self._model_cols.get(model)
        out = col[ix] if col is not None else np.zeros(len(ix))
        for name, s in (views or {}).items():
            if name in known:
                out[known.index(name)] = float(s.model_replicas.get(model, 0))
        return _ro(out)

    @staticmethod
    def _view_rows(
        views: Mapping[str, NodeState],
        known: tuple[str, ...],
        cols: dict[str, np.ndarray],
        replicas: tuple[Mapping[str, int], ...],
    ) -> tuple[Mapping[str, int], ...]:
        """Write `views` into the taken copies `cols`; returns the replicas with theirs."""
        reps = list(replicas)
        for name, s in views.items():
            if name in known:
                i = known.index(name)
                _write_row(cols, i, s)
                reps[i] = s.model_replicas
        return tuple(reps)

    def _lookup(self, names: Sequence[str]) -> tuple[tuple[int, ...], list[int]]:
        """(positions of `names` the table does not hold, the rows of the others in order)."""
        found: list[int | None] = list(map(self._rows.get, names))
        if None not in found:
            return (), found  # type: ignore[return-value]  # no None in found
        return tuple(p for p, i in enumerate(found) if i is None), [
            i for i in found if i is not None
        ]

    def _rows_of(self, names: Sequence[str]) -> tuple[tuple[int, ...], np.ndarray, tuple[str, ...]]:
        """(missing positions, row indices, known names) for `names`.

        kube-scheduler sends the same node list call after call, so the lookup of the last
        list is kept until a node is added or removed (one list comparison, in C, instead
        of 5,000 dict lookups and an array build per request)."""
        last = self._last
        if last is not None and last[0] == self._layout and last[1] == names:
            return last[2]
        missing, idx = self._lookup(names)
        known = tuple(self._names[idx]) if missing else tuple(names)
        ix = _ro(np.array(idx, dtype=np.intp))
        out = (missing, ix, known)
        self._last = (self._layout, list(names), out)
        self._last_span = bool(len(ix)) and bool((np.diff(ix) == 1).all())
        return out

    def _rows_of_set(
        self, names: Sequence[str]
    ) -> tuple[tuple[int, ...], np.ndarray, tuple[str, ...], np.ndarray | None]:
        """(missing positions, row indices ascending, their names, their positions in
        `names` or None when that is their order) for `names`.

        The same names in another order give the same (identical) row array and names, so
        that the kept batch serves them; the same list again is one list comparison."""
        last = self._last_set
        if last is not None and last[0] == self._layout and last[1] == names:
            return last[2]
        missing, idx = self._lookup(names)
        rows = np.array(idx, dtype=np.intp)
        at = np.arange(len(names), dtype=np.intp)  # the known names' positions
        if missing:
            at = np.delete(at, missing)
        order = np.argsort(rows, kind="stable")
        ix = rows[order]
        pos: np.ndarray | None = at[order]
        if not missing and bool((order == at).all()):
            pos = None  # already in table order: the batch is in request order
        if last is not None and last[0] == self._layout and np.array_equal(last[2][1], ix):
            ix, known = last[2][1], last[2][2]  # the same rows: the same objects
        else:
            ix = _ro(ix)
            known = tuple(self._names[ix])
        out = (missing, ix, known, None if pos is None else _ro(pos))
        self._last_set = (self._layout, list(names), out)
        return out
