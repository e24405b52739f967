"""A batch that the node table derives from the previous one by changing a few rows patches
the values kept with it (`NodeBatch.memo`) instead of computing them over every row; and the
server answers before it does a decision's bookkeeping. Both must give exactly (bit for
bit) what the straightforward way gives."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import pytest

from extender.batch import NodeBatch, NodeTable
from extender.config import ScoringConfig
from extender.model import NodeState
from extender.scoring import score_batch, warm_batch
from extender.wire import parse_args
from tests.extender.test_extender_table_reuse import (
    PODS,
    SHAPES,
    _nodes,
    _same,
    _same_columns,
    _table,
)

NOW = 1.7e9
CFG = ScoringConfig()


def _changed(rng: random.Random, s: NodeState, now: float) -> NodeState:
    """Another random state under the same name (a placement claimed memory, new signals);
    one in three keeps the signal time, GPU count and freshness, so only values change."""
    new = dataclasses.replace(_nodes(rng, 1, now)[0], name=s.name)
    if rng.random() < 0.34 and len(new.gpus) >= len(s.gpus):
        new = dataclasses.replace(
            new, gpus=new.gpus[: len(s.gpus)], signals_ts=s.signals_ts, signals=s.signals
        )
    return new


@pytest.mark.parametrize("assignment", ["fewest-pods", "scored"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_derived_batch_scores_exactly_like_a_fresh_one(seed: int, assignment: str) -> None:
    rng = random.Random(seed)
    now = 1.7e9
    cfg = ScoringConfig().with_(gpu_assignment=assignment)
    states = _nodes(rng, rng.choice([5, 40, 300]), now)
    names = [s.name for s in states]
    table = NodeTable(capacity=4)
    for s in states:
        table.set(s)
    batch, _ = table.take(names, now, 120.0, "llama")
    derived_count = 0
    for step in range(6):
        for pod in PODS:  # fill the memo of the batch that the next one derives from
            score_batch(pod, batch, cfg, SHAPES, now=now)
        for i in rng.sample(range(len(states)), max(1, len(states) // 10)):
            states[i] = _changed(rng, states[i], now)
            table.set(states[i])
        derived, _ = table.take(list(names), now, 120.0, "llama")
        assert derived is not batch
        # patched unless a change widened the table or aged a row: then rebuilt
        if derived.__dict__.get("_base") is not None:
            derived_count += 1
            assert batch.__dict__.get("_base") is None  # one generation kept alive
        fresh_table = NodeTable(capacity=4)
        for s in states:
            fresh_table.set(s)
        cold, _ = fresh_table.take(names, now, 120.0, "llama")
        _same_columns(derived, cold)
        for pod in PODS if step % 2 else reversed(PODS):
            _same(
                score_batch(pod, derived, cfg, SHAPES, now=now),
                score_batch(pod, cold, cfg, SHAPES, now=now),
            )
        batch = derived
    assert derived_count >= 2


def test_a_change_outside_the_requested_rows_keeps_the_batch() -> None:
    rng = random.Random(9)
    now = 1.7e9
    states = _nodes(rng, 20, now)
    table = NodeTable()
    for s in states:
        table.set(s)
    names = [s.name for s in states[:10]]
    first, _ = table.take(names, now, 120.0)
    table.set(_changed(rng, states[15], now))  # not among the requested names
    assert table.take(list(names), now, 120.0)[0] is first
    table.set(_changed(rng, states[3], now))
    assert table.take(list(names), now, 120.0)[0] is not first


def test_warming_a_batch_leaves_the_scores_as_they_are() -> None:
    rng = random.Random(4)
    now = 1.7e9
    cfg = ScoringConfig()
    states = _nodes(rng, 60, now)
    names = [s.name for s in states]
    table = NodeTable()
    for s in states:
        table.set(s)
    batch, _ = table.take(names, now, 120.0, "llama")
    for pod in PODS:
        score_batch(pod, batch, cfg, SHAPES, now=now)
    states[7] = _changed(rng, states[7], now)
    table.set(states[7])
    for pod in PODS:
        warm, _ = table.take(list(names), now, 120.0, "llama")
        warm_batch(pod, warm, cfg, SHAPES)
        cold = NodeTable()
        for s in states:
            cold.set(s)
        fresh, _ = cold.take(names, now, 120.0, "llama")
        _same(
            score_batch(pod, warm, cfg, SHAPES, now=now),
            score_batch(pod, fresh, cfg, SHAPES, now=now),
        )


def test_prioritize_defers_its_bookkeeping_to_the_caller_when_asked() -> None:
    """With `later`, the ledger entry, metrics and explain record wait for the caller (the
    server runs them once the answer is sent); the answer is the same either way."""
    from bench.extender_bench import nth_pod
    from bench.extender_nodes import filled_extender, request_body, synthetic_nodes

    nodes = synthetic_nodes(30)
    names = [n["metadata"]["name"] for n in nodes]
    inline = filled_extender(30, nodes).extender
    deferred = filled_extender(30, nodes).extender
    body = request_body(nodes, True)
    pod = parse_args(body).pod["metadata"]
    key = f"{pod['namespace']}/{pod['name']}"
    later: list[Callable[[], None]] = []
    got = deferred.prioritize(parse_args(body), later)
    assert got == inline.prioritize(parse_args(body)) and len(later) == 2
    assert len(inline.state.ledger) == 1 and inline.explain(key) is not None
    assert len(deferred.state.ledger) == 0 and deferred.explain(key) is None
    later[0]()
    assert len(deferred.state.ledger) == 1 and deferred.explain(key) is not None
    for i in range(1, 6):  # the next pods see the picks the same way in both
        nxt = parse_args(nth_pod(body, i))
        later = []
        assert deferred.prioritize(nxt, later) == inline.prioritize(nxt)
        for job in later:
            job()
    for name in names:
        assert [p.pod for p in deferred.state.ledger.on_node(name)] == [
            p.pod for p in inline.state.ledger.on_node(name)
        ]


def _unordered(table: NodeTable, names: list[str], model: str | None = None) -> tuple:
    batch, missing = table.take(names, 1.7e9, 120.0, model, table_order=True)
    return batch, table.request_positions(names), missing


def test_one_node_set_in_any_order_is_one_batch() -> None:
    """kube-scheduler filters in parallel and lists feasible nodes as their checks end, so
    the same nodes come in another order every cycle: the table hands out one batch (rows in
    table order) and says where each row stands in the request."""
    rng = random.Random(11)
    states = _nodes(rng, 50, 1.7e9)
    table = _table(states)
    names = [s.name for s in states]
    first, pos, missing = _unordered(table, names, "llama")
    assert pos is None and missing == [] and first.names == tuple(names)
    for _ in range(5):
        shuffled = names[:]
        rng.shuffle(shuffled)
        again, pos, missing = _unordered(table, shuffled, "llama")
        assert again is first and missing == [] and pos is not None
        assert [shuffled[p] for p in pos] == list(again.names)
    # unknown names among them: their positions are missing, the rest map as before
    mixed = ["ghost-1", *names[::-1], "ghost-2"]
    part, pos, missing = _unordered(table, mixed, "llama")
    assert missing == [0, len(mixed) - 1] and part is first
    assert pos is not None and [mixed[p] for p in pos] == list(part.names)
    some = names[10:0:-1]
    sub, pos, _ = _unordered(table, some)
    assert sub.names == tuple(names[1:11]) and pos is not None
    assert [some[p] for p in pos] == list(sub.names)


def test_the_answers_do_not_depend_on_the_order_of_the_node_names() -> None:
    """The same pods against the same nodes listed in a new order every request get the
    same score per node as with the nodes always in one order, and the same ledger."""
    import json

    from bench.extender_bench import nth_pod
    from bench.extender_nodes import filled_extender, request_body, synthetic_nodes
    from extender.wire import encode_filter, encode_prioritize

    nodes = synthetic_nodes(40)
    names = [n["metadata"]["name"] for n in nodes]
    ordered = filled_extender(40, nodes).extender
    shuffled = filled_extender(40, nodes).extender
    body = json.loads(request_body(nodes, True))
    rng = random.Random(3)
    for i in range(12):
        mixed = names[:]
        rng.shuffle(mixed)
        a = parse_args(nth_pod(json.dumps(body).encode(), i))
        b = parse_args(nth_pod(json.dumps({**body, "NodeNames": mixed}).encode(), i))
        fa = json.loads(encode_filter(a, ordered.filter(a)))
        fb = json.loads(encode_filter(b, shuffled.filter(b)))
        assert (
            sorted(fa["NodeNames"]) == sorted(fb["NodeNames"])
            and fa["FailedNodes"] == fb["FailedNodes"]
        )
        pa = {
            h["Host"]: h["Score"] for h in json.loads(encode_prioritize(a, ordered.prioritize(a)))
        }
        hb = json.loads(encode_prioritize(b, shuffled.prioritize(b)))
        assert [h["Host"] for h in hb] == mixed  # answered in the request's order
        assert pa == {h["Host"]: h["Score"] for h in hb}
    for name in names:
        assert [p.pod for p in ordered.state.ledger.on_node(name)] == [
            p.pod for p in shuffled.state.ledger.on_node(name)
        ]


def _scored(seed: int, n: int) -> tuple[random.Random, list[NodeState], NodeTable, NodeBatch]:
    """(rng, states, their table, its batch with every test pod scored once)."""
    rng = random.Random(seed)
    states = _nodes(rng, n, NOW)
    table = _table(states)
    batch, _ = table.take([s.name for s in states], NOW, 120.0, "llama")
    for pod in PODS:
        score_batch(pod, batch, CFG, SHAPES, now=NOW)
    return rng, states, table, batch


def test_a_re_scored_pod_derives_from_the_batch_new_pods_see() -> None:
    """A pod re-scored with its own ledger entries left out (views) gets a batch patched
    from the one new pods see, and does not displace it: the next new pod gets that batch
    back. Both score like fresh batches."""
    rng, states, table, plain = _scored(21, 80)
    now, cfg, names = NOW, CFG, [s.name for s in states]
    for _ in range(3):
        i = rng.randrange(len(states))
        # a view is built at the time of the request (its freshness already current)
        view = dataclasses.replace(_nodes(rng, 1, now)[0], name=names[i])
        if view.signals_ts is not None:
            view = dataclasses.replace(view, signals_ts=now)
        viewed, _ = table.take(names, now, 120.0, "llama", {names[i]: view})
        assert viewed.__dict__.get("_base") is not None  # patched from the plain batch
        want = [*states[:i], view, *states[i + 1 :]]
        fresh, _ = _table(want).take(names, now, 120.0, "llama")
        _same_columns(viewed, fresh)
        for pod in PODS:
            _same(
                score_batch(pod, viewed, cfg, SHAPES, now=now),
                score_batch(pod, fresh, cfg, SHAPES, now=now),
            )
        again, _ = table.take(names, now, 120.0, "llama")
        assert again is plain  # the batch new pods see is still the kept one
        assert table.take(names, now, 120.0, "llama", {names[i]: view})[0] is viewed


@pytest.mark.parametrize("what", ["alloc", "util", "streams", "signals_ts"])
def test_a_value_whose_columns_did_not_change_is_the_parents(what: str) -> None:
    """A recorded placement changes a node's claims (`alloc`), not its load: the load is the
    parent's array as it is, while what reads the changed column is patched; either way the
    scores are those of a fresh batch."""
    from extender.scoring import load_term

    rng, states, table, parent = _scored(5, 40)
    now, cfg, names = NOW, CFG, [s.name for s in states]
    i = next(k for k, s in enumerate(states) if s.fresh and s.gpus)
    s = states[i]
    g0 = s.gpus[0]
    if what == "alloc":
        gpus = (dataclasses.replace(g0, allocated_mib=g0.allocated_mib + 1024.0), *s.gpus[1:])
        states[i] = dataclasses.replace(s, gpus=gpus)
    elif what == "util":
        gpus = (dataclasses.replace(g0, util=0.5 if g0.util != 0.5 else 0.25), *s.gpus[1:])
        states[i] = dataclasses.replace(s, gpus=gpus)
    elif what == "streams":
        states[i] = dataclasses.replace(s, streams=(s.streams or 0.0) + 3.0)
    else:
        states[i] = dataclasses.replace(s, signals_ts=now - 1.0)
    table.set(states[i])
    derived, _ = table.take(list(names), now, 120.0, "llama")
    assert derived.__dict__.get("_base") is not None
    reused = load_term(derived, cfg) is load_term(parent, cfg)
    assert reused == (what in ("alloc", "signals_ts"))
    fresh, _ = _table(states).take(names, now, 120.0, "llama")
    for pod in PODS:
        _same(
            score_batch(pod, derived, cfg, SHAPES, now=now),
            score_batch(pod, fresh, cfg, SHAPES, now=now),
        )
