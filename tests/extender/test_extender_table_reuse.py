"""The node table hands out the same batch while its rows are unchanged, the pod-independent
columns are computed once per batch, re-viewed rows are written into the taken copies, and
the term histograms count several requests together: each must give exactly (bit for bit)
what the straightforward way gives."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from extender.batch import COLUMNS, NodeBatch, NodeTable
from extender.config import ScoringConfig
from extender.metrics import TERM_BUCKETS, _TermHistograms
from extender.model import GpuState, NodeState, PodShape
from extender.scoring import TERMS, BatchScores, score_batch
from extender.shapes import Shape, Shapes
from tests.extender.test_extender_scoring import _random_nodes

G80 = 81920.0
SHAPES = Shapes.of(
    [
        Shape(1, None, 0.0, 0.4),
        Shape(1, 16384.0, 0.0, 0.3),
        Shape(2, None, 0.0, 0.1),
        Shape(1, 40960.0, 0.0, 0.2),
    ]
)
PODS = [
    PodShape(1, 20480.0, model="llama", qos="realtime"),
    PodShape(1, 8192.0, model="qwen", modality="image"),
    PodShape(2, None, model="llama", modality="multi-image"),
    PodShape(3, 30000.0, modality="audio"),
    PodShape(1, None, qos="realtime"),
    PodShape(0, model="llama"),
]


def _nodes(rng: random.Random, n: int, ts: float) -> list[NodeState]:
    """test_extender_scoring's random nodes, with GPU utilisation, pod counts and signal
    times (some older than the stale limit) added."""
    out = []
    for s in _random_nodes(rng, n):
        gpus = tuple(
            dataclasses.replace(
                g, util=rng.choice([None, 0.0, 0.35, 1.0]), pods=rng.choice([None, 0, 1, 2])
            )
            for g in s.gpus
        )
        age = rng.choice([0.0, 10.0, 200.0])
        out.append(dataclasses.replace(s, gpus=gpus, signals_ts=ts - age if s.fresh else None))
    return out


def _same(a: BatchScores, b: BatchScores) -> None:
    for f in dataclasses.fields(BatchScores):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "names":
            assert x == y
        else:
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), f.name


def _same_columns(a: NodeBatch, b: NodeBatch) -> None:
    assert a.names == b.names and tuple(a.replicas) == tuple(b.replicas)
    for c in COLUMNS:
        x, y = getattr(a, c.name), getattr(b, c.name)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), c.name


def _table(states: list[NodeState]) -> NodeTable:
    table = NodeTable(capacity=4)
    for s in states:
        table.set(s)
    return table


@pytest.mark.parametrize("assignment", ["fewest-pods", "scored"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_kept_batch_scores_exactly_like_a_fresh_one(seed: int, assignment: str) -> None:
    rng = random.Random(seed)
    now = 1.7e9
    cfg = ScoringConfig().with_(gpu_assignment=assignment)
    states = _nodes(rng, rng.choice([3, 40, 300]), now)
    table = _table(states)
    names = [s.name for s in states]
    first, _ = table.take(names, now, 120.0, "llama")
    for _ in range(2):  # memoised columns computed by the first pod, reused by the rest
        for pod in PODS:
            again, _ = table.take(list(names), now, 120.0, "llama")
            assert again is first
            cold, _ = _table(states).take(names, now, 120.0, "llama")  # nothing memoised
            _same_columns(again, cold)
            _same(
                score_batch(pod, again, cfg, SHAPES, now=now),
                score_batch(pod, cold, cfg, SHAPES, now=now),
            )


def test_the_table_hands_out_a_new_batch_when_a_row_or_its_age_changes() -> None:
    now = 1.7e9
    table = NodeTable()
    a = NodeState("a", gpus=(GpuState(G80, 100.0),), signals_ts=now)
    b = NodeState("b", gpus=(GpuState(G80, 200.0),), signals_ts=now)
    table.set(a)
    table.set(b)
    first, _ = table.take(["a", "b"], now, 120.0)
    table.set(dataclasses.replace(b))  # an equal state: nothing changed
    assert table.take(["a", "b"], now, 120.0)[0] is first
    table.set(dataclasses.replace(b, gpus=(GpuState(G80, 900.0),)))
    changed, _ = table.take(["a", "b"], now, 120.0)
    assert changed is not first and changed.used[1, 0] == 900.0
    assert table.take(["a", "b"], now, 120.0)[0] is changed
    aged, _ = table.take(["a", "b"], now + 121.0, 120.0)  # both signals now stale
    assert aged is not changed and aged.signals == ("stale", "stale")
    assert not aged.fresh.any()
    table.remove("a")
    gone, missing = table.take(["a", "b"], now, 120.0)
    assert gone.names == ("b",) and missing == [0]


def test_views_are_written_in_exactly_as_a_merged_second_batch() -> None:
    """The rows of the nodes holding the decided pod's own ledger entries, re-viewed without
    them, against the way they were merged before (a batch of the views, `with_rows`)."""
    rng = random.Random(5)
    now = 1.7e9
    states = _nodes(rng, 30, now)
    table = _table(states)
    names = [s.name for s in states]
    for pick in ([3], [0, 29], [7, 7]):
        views = {
            names[i]: dataclasses.replace(
                _nodes(rng, 1, now)[0], name=names[i], model_replicas={"llama": 3, "qwen": 1}
            )
            for i in pick
        }
        got, _ = table.take(names, now, 120.0, "llama", views)
        base, _ = _table(states).take(names, now, 120.0, "llama")
        first = {n: names.index(n) for n in views}  # the first row of each name
        want = base.with_rows(list(first.values()), NodeBatch.from_states(list(views.values())))
        _same_columns(got, want)
        assert np.array_equal(got.replica_counts("llama"), want.replica_counts("llama"))
        assert table.take(names, now, 120.0, "qwen", views)[0] is got  # same views: kept
        qwen = [float(views[n].model_replicas["qwen"]) if n in views else 0.0 for n in names]
        assert got.replica_counts("qwen").tolist() == qwen
    wider = NodeState("n1", gpus=tuple(GpuState(G80) for _ in range(12)), signals_ts=now)
    got, _ = table.take(names, now, 120.0, None, {"n1": wider})  # wider than the table
    assert got.total.shape[1] == 12 and got.valid[1].sum() == 12


def _histograms_one_at_a_time(
    requests: list[dict[str, np.ndarray]],
) -> tuple[dict[str, list[int]], dict[str, float]]:
    """What the histograms held when every request was counted at once (the old way)."""
    edges = np.array(TERM_BUCKETS)
    counts = {t: [0] * len(edges) for t in TERMS}
    sums = dict.fromkeys(TERMS, 0.0)
    for values in requests:
        for t in TERMS:
            v = values[t]
            finite = np.isfinite(v)
            idx = np.searchsorted(edges, v[finite], side="left")
            for i in idx.tolist():
                if i < len(edges):
                    counts[t][i] += 1
            sums[t] += float(np.where(finite, v, 0.0).sum())
    return counts, sums


def test_term_histograms_counted_together_equal_counting_each_request() -> None:
    rng = np.random.default_rng(3)
    requests = []
    for k in range(150):
        n = [1, 7, 500, 500, 500, 3000][k % 6]
        values = {}
        for t in TERMS:
            v = rng.choice(np.array([0.0, 0.1, 0.3, 0.5, 0.7, 1.0, 0.30000000000000004]), n)
            v = np.where(rng.random(n) < 0.5, rng.random(n), v)
            v[rng.random(n) < 0.02] = math.nan
            v[rng.random(n) < 0.01] = math.inf
            values[t] = v
        requests.append(values)
    h = _TermHistograms(TERMS)
    for values in requests:
        h.observe_many(values)
    (fam,) = list(h.collect())
    counts, sums = _histograms_one_at_a_time(requests)
    by_term: dict[str, dict[str, float]] = {}
    for s in fam.samples:
        kind = s.name.rsplit("_", 1)[1] + s.labels.get("le", "")
        by_term.setdefault(s.labels["term"], {})[kind] = s.value
    for t in TERMS:
        got = by_term[t]
        cum = np.cumsum(counts[t]).tolist()
        for e, c in zip(TERM_BUCKETS[:-1], cum[:-1], strict=True):
            assert got[f"bucket{e}"] == c
        assert got["bucket+Inf"] == cum[-1]
        assert got["sum"] == sums[t]  # exactly the same float, not approximately
