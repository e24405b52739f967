"""Shape distribution, placement ledger and NodeState assembly."""

from __future__ import annotations

import pytest

from extender.config import ScoringConfig
from extender.ledger import Ledger
from extender.model import PodShape
from extender.objects import PodInfo, parse_node, parse_pod
from extender.shapes import ShapeDistribution
from extender.state import build_node_state
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.fake_kube import make_node, make_pod

CFG = ScoringConfig()


# --- shapes ------------------------------------------------------------------------------


def test_prior_alone_before_any_pod() -> None:
    snap = ShapeDistribution(CFG).snapshot()
    assert [(s.gpus, s.mem_per_gpu_mib, s.p) for s in snap.items] == [(1, None, 1.0)]


def test_observed_shapes_take_over_from_the_prior() -> None:
    d = ShapeDistribution(CFG)
    for _ in range(90):
        d.observe(PodShape(1, 24576.0))
    probs = {(s.gpus, s.mem_per_gpu_mib): s.p for s in d.snapshot().items}
    # 90 observations (barely decayed) against a prior pseudo-count of 10
    assert probs[(1, 24576.0)] == pytest.approx(0.9, abs=0.01)
    assert probs[(1, None)] == pytest.approx(0.1, abs=0.01)
    assert d.observed == 90


def test_counts_decay_with_the_half_life() -> None:
    cfg = CFG.with_(shape_half_life_pods=10.0, shape_prior_weight=0.0)
    d = ShapeDistribution(cfg)
    d.observe(PodShape(2, None))
    for _ in range(10):
        d.observe(PodShape(1, 8192.0))
    probs = {(s.gpus, s.mem_per_gpu_mib): s.p for s in d.snapshot().items}
    old = 0.5  # one observation after one half-life
    new = sum(0.5 ** (k / 10) for k in range(10))
    assert probs[(2, None)] == pytest.approx(old / (old + new))


def test_non_gpu_pods_are_not_shapes_and_max_shapes_holds() -> None:
    d = ShapeDistribution(CFG.with_(max_shapes=3))
    d.observe(PodShape(0))
    assert d.observed == 0
    for k in range(1, 10):
        d.observe(PodShape(1, 1000.0 * k))
    assert len(d.snapshot().items) <= 3


# --- ledger ------------------------------------------------------------------------------


def test_ledger_entries_end_after_the_ttl() -> None:
    clock = FakeClock()
    ledger = Ledger(clock, ttl_s=30)
    assert ledger.record("ns/a", "n1", PodShape(1, 100.0), (0,)) == {"n1"}
    assert [p.pod for p in ledger.on_node("n1")] == ["ns/a"]
    clock.advance(29)
    assert len(ledger.on_node("n1")) == 1
    clock.advance(2)
    assert ledger.on_node("n1") == []
    assert ledger.expire() == {"n1"}
    assert len(ledger) == 0


def test_ledger_latest_decision_wins_and_forget() -> None:
    ledger = Ledger(FakeClock())
    ledger.record("ns/a", "n1", PodShape(1, 100.0), (0,))
    assert ledger.record("ns/a", "n2", PodShape(1, 100.0), (1,)) == {"n1", "n2"}
    assert ledger.on_node("n1") == [] and len(ledger.on_node("n2")) == 1
    assert ledger.forget("ns/a") == "n2"
    assert ledger.forget("ns/a") is None
    with pytest.raises(ValueError):
        Ledger(FakeClock(), ttl_s=0)


# --- node state ----------------------------------------------------------------------------


def signals(clock: FakeClock, *used: float, models: tuple[tuple[str, ...], ...] = ()) -> str:
    return encode_signals(
        NodeSignals(
            ts=clock.now(),
            gpus=tuple(
                GpuSignal(
                    index=i, mem_total_mib=81920, mem_used_mib=u, models=models[i] if models else ()
                )
                for i, u in enumerate(used)
            ),
            streams=7,
            p95_s=0.05,
        )
    )


def bound_model_pod(gpu_memory: str) -> PodInfo:
    """Pod `a` of model `m`, bound to n1, one GPU, asking for `gpu_memory`."""
    return parse_pod(
        make_pod(
            "a",
            node_name="n1",
            gpus=1,
            labels={"kvspread.io/model": "m"},
            annotations={"kvspread.io/gpu-memory": gpu_memory},
        )
    )


def test_state_from_fresh_signals_pods_and_ledger() -> None:
    clock = FakeClock()
    node = parse_node(
        make_node(
            "n1",
            labels={"kvspread.io/pool": "vision"},
            annotations={"kvspread.io/signals": signals(clock, 1000, 1000)},
        )
    )
    pod = bound_model_pod("30Gi")
    ledger = Ledger(clock)
    ledger.record("default/b", "n1", PodShape(1, 10240.0, model="m"), (1,))
    st = build_node_state(node, [pod], ledger.on_node("n1"), clock.now(), CFG)
    assert st.fresh and st.pool == "vision" and st.streams == 7.0 and st.p95_s == 0.05
    assert st.model_replicas == {"m": 2}
    # the ledger entry sits on GPU 1; the bound pod, not yet in the signals, goes where the
    # device plugin's distributed allocation puts it: the GPU with fewer pods (GPU 0)
    assert [g.allocated_mib for g in st.gpus] == [30720.0, 10240.0]


def test_bound_pod_goes_on_the_gpu_that_serves_its_model() -> None:
    clock = FakeClock()
    ann = signals(clock, 20000, 20000, models=((), ("m",)))
    node = parse_node(make_node("n1", annotations={"kvspread.io/signals": ann}))
    pod = bound_model_pod("16Gi")
    st = build_node_state(node, [pod], [], clock.now(), CFG)
    assert [g.allocated_mib for g in st.gpus] == [0.0, 16384.0]


def test_ledger_entry_of_a_bound_pod_is_not_counted_twice() -> None:
    clock = FakeClock()
    node = parse_node(make_node("n1", annotations={"kvspread.io/signals": signals(clock, 0)}))
    pod = parse_pod(
        make_pod("a", node_name="n1", gpus=1, annotations={"kvspread.io/gpu-memory": "8Gi"})
    )
    ledger = Ledger(clock)
    ledger.record("default/a", "n1", pod.shape, (0,))
    st = build_node_state(node, [pod], ledger.on_node("n1"), clock.now(), CFG)
    assert st.gpus[0].allocated_mib == 8192.0


@pytest.mark.parametrize(
    ("annotation", "age", "state"),
    [
        pytest.param(None, 0, "missing", id="no annotation: missing"),
        pytest.param("{oops", 0, "invalid", id="garbage: invalid"),
        pytest.param("ok", CFG.stale_after_s + 1, "stale", id="past stale_after_s: stale"),
        pytest.param("ok", CFG.stale_after_s - 1, "fresh", id="within stale_after_s: fresh"),
    ],
)
def test_signal_states(annotation: str | None, age: float, state: str) -> None:
    clock = FakeClock()
    ann = signals(clock, 0) if annotation == "ok" else annotation
    node = parse_node(make_node("n1", annotations={"kvspread.io/signals": ann} if ann else {}))
    clock.advance(age)
    st = build_node_state(node, [], [], clock.now(), CFG)
    assert st.signals == state
    assert st.fresh is (state == "fresh")
    if state != "fresh":
        assert st.gpus == () and st.streams is None


def test_node_table_lookup_follows_added_removed_and_replaced_rows() -> None:
    from extender.batch import NodeTable
    from extender.model import GpuState, NodeState

    t = NodeTable()
    t.set(NodeState("a", gpus=(GpuState(100.0),)))
    t.set(NodeState("b", gpus=(GpuState(100.0),)))
    names = ["a", "b", "c"]
    batch, missing = t.take(names)
    assert batch.names == ("a", "b") and missing == [2]
    t.set(NodeState("b", gpus=(GpuState(100.0, used_mib=60.0),), model_replicas={"m": 2}))
    batch, _ = t.take(list(names), model="m")  # same list again: cached lookup, fresh values
    assert batch.used[1, 0] == 60.0 and batch.replica_counts("m").tolist() == [0.0, 2.0]
    assert batch.replicas[1] == {"m": 2}
    t.set(NodeState("c", gpus=(GpuState(100.0),)))
    batch, missing = t.take(list(names))
    assert batch.names == ("a", "b", "c") and missing == []
    t.remove("a")
    batch, missing = t.take(list(names))
    assert batch.names == ("b", "c") and missing == [0]
