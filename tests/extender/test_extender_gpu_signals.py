"""Per-GPU signals in the extender: which GPU a bound pod is on (measured, or the device
plugin's pick predicted), GPU utilisation in the load term and the slot choice, and the
device plugin's fewest-pods rule in fit and scoring."""

from __future__ import annotations

import math
import random

import pytest

from extender.batch import NodeBatch
from extender.config import ScoringConfig
from extender.model import GpuState, NodeState, PodShape
from extender.objects import parse_node, parse_pod
from extender.scoring import load_term, score_batch, score_nodes
from extender.shapes import ShapeDistribution
from extender.state import build_node_state
from kvspread.clock import FakeClock
from kvspread.settings import ConfigError
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender import scoring_reference as ref
from tests.extender.test_extender_scoring import delta_of
from tests.fake_kube import make_node, make_pod

CFG = ScoringConfig()
SCORED = CFG.with_(gpu_assignment="scored")
SHAPES = ShapeDistribution(CFG).snapshot()
GIB = 1024.0


def _node(clock: FakeClock, gpus: list[tuple[float, tuple[str, ...], float | None]]) -> object:
    """A parsed Node whose signals list (used MiB, models, util) per 80 GiB GPU."""
    doc = encode_signals(
        NodeSignals(
            ts=clock.now(),
            gpus=tuple(
                GpuSignal(index=i, mem_total_mib=80 * GIB, mem_used_mib=u, util=ut, models=m)
                for i, (u, m, ut) in enumerate(gpus)
            ),
            streams=3,
        )
    )
    return parse_node(make_node("n1", annotations={"kvspread.io/signals": doc}))


def _pod(name: str, model: str, gib: int) -> object:
    return parse_pod(
        make_pod(
            name,
            node_name="n1",
            gpus=1,
            labels={"kvspread.io/model": model},
            annotations={"kvspread.io/gpu-memory": f"{gib}Gi"},
        )
    )


def test_bound_pods_sit_on_the_gpus_their_model_is_measured_on() -> None:
    clock = FakeClock()
    # two replicas of m, seen on GPUs 1 and 3; GPU 0 holds another tenant (no model)
    node = _node(
        clock,
        [(16 * GIB, (), 1.0), (24 * GIB, ("m",), 0.5), (0.0, (), 0.0), (24 * GIB, ("m",), 0.2)],
    )
    pods = [_pod("a", "m", 24), _pod("b", "m", 24)]
    st = build_node_state(node, pods, [], clock.now(), CFG)
    assert [g.allocated_mib for g in st.gpus] == [0.0, 24 * GIB, 0.0, 24 * GIB]
    assert [g.util for g in st.gpus] == [1.0, 0.5, 0.0, 0.2]
    # GPU 0's 16 GiB are nobody's claim: counted as another tenant's pod
    assert [g.pods for g in st.gpus] == [1, 1, 0, 1]


def test_a_pod_the_collector_has_not_seen_goes_where_the_device_plugin_puts_it() -> None:
    clock = FakeClock()
    # GPU 0 has the most free memory but a foreign process; GPU 2 is empty
    node = _node(clock, [(8 * GIB, (), None), (40 * GIB, ("m",), None), (0.0, (), None)])
    pods = [_pod("a", "m", 40), _pod("new", "m", 24)]
    st = build_node_state(node, pods, [], clock.now(), CFG)
    # the device plugin gives the new pod the GPU with the fewest pods: GPU 2
    assert [g.allocated_mib for g in st.gpus] == [0.0, 40 * GIB, 24 * GIB]
    assert [g.pods for g in st.gpus] == [1, 1, 1]
    # `scored` keeps the extender's own best fit for it (the fullest GPU that fits: GPU 1)
    st2 = build_node_state(node, pods, [], clock.now(), SCORED)
    assert [g.allocated_mib for g in st2.gpus] == [0.0, 64 * GIB, 0.0]


def test_load_term_folds_in_utilisation() -> None:
    def load(util: float | None) -> float:
        node = NodeState("n", gpus=(GpuState(100.0, 20.0, util=util),))
        return float(load_term(NodeBatch.from_states([node]), CFG)[0])

    assert load(0.0) == pytest.approx(1 - 0.1) and load(1.0) == pytest.approx(1 - 0.6)
    # without a reading the memory part is docs/design.md's mem_used/mem_total
    assert load(None) == pytest.approx(0.8)
    assert ref.busy_part(0.2, 0.8, CFG) == pytest.approx(0.5 * 0.2 + 0.5 * 0.8)


def test_score_batch_load_uses_the_nodes_mean_utilisation() -> None:
    gpus = (GpuState(80 * GIB, 8 * GIB, util=1.0), GpuState(80 * GIB, 8 * GIB, util=0.0))
    node = NodeState("n", gpus=gpus, streams=10.0)
    s = score_nodes(PodShape(1, 16 * GIB), [node], CFG.with_(normalisation="absolute"), SHAPES)
    want = ref.load_term(16 * GIB, 160 * GIB, 10.0, None, CFG, util=0.5)
    assert s[0].terms.load == pytest.approx(want)


def test_the_slot_choice_avoids_a_busy_gpu_of_equal_fragmentation() -> None:
    gpus = (GpuState(80 * GIB, 40 * GIB, util=0.9), GpuState(80 * GIB, 40 * GIB, util=0.1))
    node = NodeState("n", gpus=gpus)
    pod = PodShape(1, 16 * GIB)
    for cfg in (CFG, SCORED):
        _, chosen = delta_of(pod, node, SHAPES, cfg)
        assert chosen == (1,)
        assert score_nodes(pod, [node], cfg, SHAPES)[0].gpus_chosen == (1,)
    # without the penalty, the tie goes to the lower index as before
    _, chosen = delta_of(pod, node, SHAPES, SCORED.with_(busy_gpu_penalty=0.0))
    assert chosen == (0,)


def test_a_node_fits_only_when_every_gpu_the_device_plugin_may_pick_has_room() -> None:
    pod = PodShape(1, 32 * GIB)
    # GPU 0: no pod but only 20 GiB free (memory held outside kvspread's claims is rare but
    # possible); GPU 1: one pod, plenty free. The plugin would hand out GPU 0.
    crowded = NodeState(
        "a", gpus=(GpuState(80 * GIB, 60 * GIB, pods=0), GpuState(80 * GIB, 8 * GIB, pods=1))
    )
    roomy = NodeState(
        "b", gpus=(GpuState(80 * GIB, 8 * GIB, pods=1), GpuState(80 * GIB, 0.0, pods=0))
    )
    assert ref.device_plugin_candidates(crowded.gpus, pod, CFG) == [0]
    assert ref.device_plugin_candidates(crowded.gpus, pod, SCORED) is None
    assert ref.device_plugin_candidates(crowded.gpus, PodShape(2, 32 * GIB), CFG) is None
    assert math.isnan(delta_of(pod, crowded, SHAPES, CFG)[0])
    assert delta_of(pod, roomy, SHAPES, CFG)[1] == (1,)
    s = score_nodes(pod, [crowded, roomy], CFG, SHAPES)
    assert [x.fits for x in s] == [False, True] and s[1].gpus_chosen == (1,)
    # the batch path agrees, also with a precomputed filter result that let the node pass
    b = score_batch(pod, NodeBatch.from_states([crowded, roomy]), CFG, SHAPES)
    assert b.fits.tolist() == [False, True]
    # `scored`: the extender's slot (GPU 1) is taken as given
    assert [x.fits for x in score_nodes(pod, [crowded, roomy], SCORED, SHAPES)] == [True, True]
    # pod counts unknown (the trace replay): the old behaviour
    plain = NodeState("c", gpus=(GpuState(80 * GIB, 60 * GIB), GpuState(80 * GIB, 8 * GIB)))
    assert score_nodes(pod, [plain], CFG, SHAPES)[0].fits


def test_batch_concat_and_take_keep_per_gpu_columns() -> None:
    a = NodeState("a", gpus=(GpuState(10.0, util=0.5, pods=2),))
    b = NodeState("b", gpus=(GpuState(10.0), GpuState(10.0, util=0.25, pods=0)))
    batch = NodeBatch.concat([NodeBatch.from_states([a]), NodeBatch.from_states([b])])
    assert batch.util[0, 0] == 0.5 and math.isnan(batch.util[0, 1]) and batch.util[1, 1] == 0.25
    assert batch.take([1]).pods.tolist() == [[pytest.approx(math.nan, nan_ok=True), 0.0]]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"util_share": 1.5}, "scoring.util_share"),
        ({"busy_gpu_penalty": -1}, "scoring.busy_gpu_penalty"),
        ({"gpu_assignment": "random"}, "scoring.gpu_assignment"),
    ],
)
def test_new_settings_are_validated(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ScoringConfig.from_mapping(data)


def test_new_settings_parse() -> None:
    cfg = ScoringConfig.from_mapping(
        {"util_share": 0.25, "busy_gpu_penalty": 2, "gpu_assignment": "scored"}
    )
    assert (cfg.util_share, cfg.busy_gpu_penalty, cfg.gpu_assignment) == (0.25, 2.0, "scored")


def _random_nodes(rng: random.Random, n: int) -> list[NodeState]:
    out = []
    for i in range(n):
        gpus = []
        for _ in range(rng.choice((1, 2, 4, 8))):
            used = rng.choice((0.0, 8.0, 24.0, 40.0, 70.0)) * GIB
            gpus.append(
                GpuState(
                    80 * GIB,
                    used,
                    allocated_mib=rng.choice((0.0, used, used + 8 * GIB)),
                    util=rng.choice((None, 0.0, 0.3, 1.0)),
                    pods=rng.choice((0, 1, 2)),
                )
            )
        out.append(NodeState(f"n{i}", gpus=tuple(gpus), streams=float(rng.randint(0, 50))))
    return out


@pytest.mark.parametrize("cfg", [CFG, SCORED], ids=["fewest-pods", "scored"])
@pytest.mark.parametrize(
    "pod", [PodShape(1, 16 * GIB), PodShape(1, 48 * GIB), PodShape(2, 24 * GIB)]
)
def test_batch_and_scalar_agree_with_utilisation_and_pod_counts(
    cfg: ScoringConfig, pod: PodShape
) -> None:
    nodes = _random_nodes(random.Random(11), 150)
    scores = score_nodes(pod, nodes, cfg.with_(normalisation="absolute"), SHAPES)
    for node, s in zip(nodes, scores, strict=True):
        delta, chosen = ref.placement_delta(pod, node, SHAPES, cfg)
        assert s.fits == (not math.isnan(delta))
        if s.fits:
            assert s.delta_f == pytest.approx(delta, abs=1e-6)
            assert s.gpus_chosen == chosen
        mean_util = [g.util for g in node.gpus if g.util is not None]
        used = sum(g.used_mib for g in node.gpus)  # measured only: claims are not load
        total = sum(g.total_mib for g in node.gpus)
        util = sum(mean_util) / len(mean_util) if mean_util else None
        want = ref.load_term(used, total, node.streams, None, cfg, util)
        assert s.terms.load == pytest.approx(want)
