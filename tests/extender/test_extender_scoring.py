"""The pure scoring functions: each vectorised term's formula on named cases (one-row
batches), and `score_batch` agreeing node by node with the scalar reference of the maths
(tests/extender/scoring_reference.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from extender.batch import NodeBatch
from extender.config import ScoringConfig
from extender.model import GpuState, NodeState, PodShape
from extender.scoring import (
    NEUTRAL,
    TERMS,
    candidate_gpus,
    combine,
    expected_fragmentation,
    explain,
    fragmentation_term,
    load_term,
    modality_term,
    placement_delta,
    qos_term,
    score_batch,
    score_nodes,
    spread_term,
    to_score,
)
from extender.shapes import Shape, Shapes
from kvspread.gpumem import node_fragmentation_of
from tests.extender import scoring_reference as ref

CFG = ScoringConfig()
G80 = 81920.0


def one(node: NodeState) -> NodeBatch:
    """A one-row batch: how a single node is scored."""
    return NodeBatch.from_states([node])


def delta_of(
    pod: PodShape, node: NodeState, shapes: Shapes, cfg: ScoringConfig = CFG
) -> tuple[float, tuple[int, ...]]:
    """(dF, GPUs chosen) of `pod` on one node through the production code."""
    batch = one(node)
    qual, fits = candidate_gpus(pod, batch, cfg)
    delta, chosen = placement_delta(pod, batch, qual, fits, cfg, shapes)
    return float(delta[0]), tuple(int(j) for j in np.flatnonzero(chosen[0]))


def gpus(*free: float, total: float = G80) -> tuple[GpuState, ...]:
    """GPUs with the given free memory (used = total - free)."""
    return tuple(GpuState(total_mib=total, used_mib=total - f) for f in free)


ONE_WHOLE = Shapes.of([Shape(1, None, 0.0, 1.0)])
HALF = Shapes.of([Shape(1, 40960.0, 0.0, 1.0)])


@pytest.mark.parametrize(
    ("node_gpus", "shapes", "expected"),
    [
        pytest.param(
            gpus(G80, G80), ONE_WHOLE, 0.0, id="idle GPUs hold no fragment for whole-GPU shape"
        ),
        pytest.param(
            gpus(G80, 1000),
            ONE_WHOLE,
            1000.0,
            id="a partly used GPU is a fragment for whole-GPU shape",
        ),
        pytest.param(
            gpus(30000, 20000),
            ONE_WHOLE,
            50000.0,
            id="shape does not fit: all free memory is fragment",
        ),
        pytest.param(
            gpus(50000, 20000), HALF, 20000.0, id="GPU below the shape's need is a fragment"
        ),
        pytest.param(gpus(50000, 45000), HALF, 0.0, id="every GPU can host the shape: no fragment"),
        pytest.param(
            gpus(30000, 20000),
            Shapes.of([Shape(1, None, 0.0, 1.0), Shape(1, 25000.0, 0.0, 1.0)]),
            0.5 * 50000 + 0.5 * 20000,
            id="mixture: weighted by p",
        ),
        pytest.param(
            gpus(G80, G80, 1000),
            Shapes.of([Shape(2, None, 0.0, 1.0)]),
            1000.0,
            id="two-GPU shape fits on two idle GPUs",
        ),
        pytest.param(
            gpus(G80, 1000, 1000),
            Shapes.of([Shape(2, None, 0.0, 1.0)]),
            G80 + 2000.0,
            id="two-GPU shape does not fit: everything counts",
        ),
    ],
)
def test_expected_fragmentation(
    node_gpus: tuple[GpuState, ...], shapes: Shapes, expected: float
) -> None:
    got = expected_fragmentation(one(NodeState("n", gpus=node_gpus)), shapes, CFG)[0]
    assert got == pytest.approx(expected)
    assert ref.expected_fragmentation(node_gpus, shapes, CFG) == pytest.approx(expected)


def test_expected_fragmentation_counts_cpu_where_tracked() -> None:
    shapes = Shapes.of([Shape(1, 10000.0, 8000.0, 1.0)])
    roomy = one(NodeState("n", gpus=gpus(20000), cpu_free_milli=16000))
    short = one(NodeState("n", gpus=gpus(20000), cpu_free_milli=4000))
    assert expected_fragmentation(roomy, shapes, CFG)[0] == 0.0
    assert expected_fragmentation(short, shapes, CFG)[0] == 20000.0


def test_placement_prefers_the_gpu_that_leaves_least_fragment() -> None:
    # FGD: a 20 GiB pod should go on the GPU with 25 GiB free (leaving 5), not the idle one.
    node = NodeState("n", gpus=(GpuState(G80, used_mib=G80 - 25600), GpuState(G80)))
    pod = PodShape(gpus=1, mem_per_gpu_mib=20480)
    delta, chosen = delta_of(pod, node, ONE_WHOLE)
    assert chosen == (0,)
    assert delta == pytest.approx(-20480.0)  # 25600 of fragment becomes 5120


def test_placement_delta_is_nan_when_the_pod_does_not_fit() -> None:
    node = NodeState("n", gpus=gpus(1000, 1000))
    delta, chosen = delta_of(PodShape(gpus=1, mem_per_gpu_mib=20480), node, ONE_WHOLE)
    assert math.isnan(delta)
    assert chosen == ()


@pytest.mark.parametrize(
    ("delta", "demand", "expected"),
    [
        pytest.param(0.0, 1000.0, 0.5, id="no change: neutral"),
        pytest.param(-1e9, 1000.0, 1.0, id="removes much fragmentation: 1"),
        pytest.param(1e9, 1000.0, 0.0, id="creates much fragmentation: 0"),
        pytest.param(1000.0, 1000.0, 1 / (1 + math.e), id="one demand's worth created"),
        pytest.param(float("nan"), 1000.0, NEUTRAL, id="not computed: neutral"),
    ],
)
def test_fragmentation_term(delta: float, demand: float, expected: float) -> None:
    got = fragmentation_term(np.array([delta]), np.array([demand]))[0]
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("used", "total", "streams", "image", "expected"),
    [
        pytest.param(0.0, 100.0, 0.0, 0.0, 1.0, id="idle node: 1"),
        pytest.param(100.0, 100.0, 256.0, 1.0, 0.0, id="full on every part: 0"),
        pytest.param(50.0, 100.0, 128.0, 0.5, 0.5, id="half on every part: 0.5"),
        pytest.param(100.0, 100.0, None, None, 0.0, id="only memory measured, full"),
        pytest.param(None, None, 0.0, None, 1.0, id="only streams measured, none"),
        pytest.param(None, None, None, None, NEUTRAL, id="nothing measured: neutral"),
        pytest.param(40.0, 100.0, 0.0, 0.0, 1 - 0.4 * 0.4, id="0.4 x memory share"),
    ],
)
def test_load_term(
    used: float | None,
    total: float | None,
    streams: float | None,
    image: float | None,
    expected: float,
) -> None:
    # one GPU; a GPU of total 0 stands for "memory not measured"
    gpu = GpuState(total or 0.0, used_mib=used or 0.0)
    node = NodeState("n", gpus=(gpu,), streams=streams, image_token_share=image)
    assert load_term(one(node), CFG)[0] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("replicas", "rho", "expected"),
    [
        pytest.param(0, 0.9, 1.0, id="no replica: 1 whatever rho"),
        pytest.param(1, 0.0, 0.5, id="one replica: 0.5"),
        pytest.param(3, 0.0, 0.25, id="three replicas: 0.25"),
        pytest.param(1, 0.35, 0.5, id="rho at threshold: no extra repulsion"),
        pytest.param(1, 0.4, 1 - 0.5 * 1.8, id="rho 0.4: repulsion x 1.8"),
        pytest.param(3, 0.5, 0.0, id="strong repulsion clipped at 0"),
    ],
)
def test_spread_term(replicas: int, rho: float, expected: float) -> None:
    got = spread_term(np.array([float(replicas)]), np.array([rho]), CFG)[0]
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("modality", "pool", "nvlink", "expected"),
    [
        pytest.param("text", "language", False, 1.0, id="text on language pool"),
        pytest.param("text", "vision", False, 0.3, id="text on vision pool"),
        pytest.param("image", "vision", False, 1.0, id="image on vision pool"),
        pytest.param("multi-image", "vision", True, 1.0, id="multi-image on NVLink vision"),
        pytest.param("multi-image", "vision", False, 0.7, id="multi-image without NVLink"),
        pytest.param("text", None, False, NEUTRAL, id="unlabelled node: neutral"),
        pytest.param("video", "vision", False, NEUTRAL, id="unknown modality: neutral"),
    ],
)
def test_modality_term(modality: str, pool: str | None, nvlink: bool, expected: float) -> None:
    node = NodeState("n", pool=pool, nvlink=nvlink)
    assert modality_term(PodShape(modality=modality), one(node))[0] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("qos", "p95", "streams", "expected"),
    [
        pytest.param("realtime", 0.0, 0.0, 1.0, id="realtime, quiet node: 1"),
        pytest.param("realtime", 0.12, 256.0, 0.0, id="realtime, at the ceilings: 0"),
        pytest.param("realtime", 0.06, None, 0.5, id="realtime, half the latency ceiling"),
        pytest.param("realtime", None, None, NEUTRAL, id="realtime, nothing measured: neutral"),
        pytest.param("batch", 0.0, 0.0, NEUTRAL, id="batch: neutral"),
        pytest.param(None, 0.5, 9.0, NEUTRAL, id="no class: neutral"),
    ],
)
def test_qos_term(
    qos: str | None, p95: float | None, streams: float | None, expected: float
) -> None:
    node = NodeState("n", gpus=gpus(G80), p95_s=p95, streams=streams)
    assert qos_term(PodShape(qos=qos), one(node), CFG)[0] == pytest.approx(expected)


def test_combine_is_a_weighted_mean() -> None:
    five = [t for t in TERMS if t != "contention"]
    only_frag = {t: np.array([1.0 if t == "fragmentation" else 0.0]) for t in five}
    assert combine(only_frag, CFG.weights)[0] == pytest.approx(0.35)
    assert combine({t: np.ones(1) for t in five}, CFG.weights)[0] == pytest.approx(1.0)
    # with the contention term (a pod it covers) its weight joins the divisor
    with_it = {**only_frag, "contention": np.zeros(1)}
    assert combine(with_it, CFG.weights)[0] == pytest.approx(0.35 / 1.5)
    assert combine({t: np.ones(1) for t in TERMS}, CFG.weights)[0] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("x", "score"),
    [(0.0, 0), (0.049, 0), (0.05, 1), (0.449, 4), (0.45, 5), (1.0, 10), (1.7, 10), (-1, 0)],
)
def test_to_score_rounds_half_up_and_clips(x: float, score: int) -> None:
    assert to_score(np.array([x]))[0] == score


def _random_nodes(rng: random.Random, n: int) -> list[NodeState]:
    out = []
    for i in range(n):
        fresh = rng.random() > 0.15
        out.append(
            NodeState(
                name=f"n{i}",
                gpus=tuple(
                    GpuState(
                        G80,
                        used_mib=rng.choice([0.0, 500.0, 20000.0, 50000.0, G80]),
                        allocated_mib=rng.choice([0.0, 0.0, 16384.0]),
                    )
                    for _ in range(rng.choice([1, 2, 4, 8]))
                )
                if fresh
                else (),
                signals="fresh" if fresh else rng.choice(["stale", "missing", "invalid"]),
                streams=rng.choice([None, 0.0, 12.0, 300.0]),
                image_token_share=rng.choice([None, 0.0, 0.4]),
                p95_s=rng.choice([None, 0.02, 0.2]),
                pool=rng.choice([None, "language", "mixed", "vision"]),
                nvlink=rng.random() < 0.5,
                model_replicas={"llama": rng.choice([0, 1, 2])},
            )
        )
    return out


SHAPES = Shapes.of(
    [
        Shape(1, None, 0.0, 0.5),
        Shape(1, 16384.0, 0.0, 0.3),
        Shape(2, None, 0.0, 0.1),
        Shape(1, 40960.0, 0.0, 0.1),
    ]
)


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(PodShape(1, 20480.0, model="llama", qos="realtime"), id="one partial GPU"),
        pytest.param(PodShape(2, None, model="llama", modality="multi-image"), id="two whole GPUs"),
        pytest.param(PodShape(3, 30000.0, modality="image"), id="three partial GPUs"),
        pytest.param(PodShape(0), id="no GPU"),
    ],
)
def test_score_batch_agrees_with_the_scalar_reference(pod: PodShape) -> None:
    nodes = _random_nodes(random.Random(7), 120)
    cfg = CFG.with_(normalisation="absolute")
    scores = score_nodes(pod, nodes, cfg, SHAPES)
    for node, s in zip(nodes, scores, strict=True):
        assert s.name == node.name
        if node.fresh and pod.gpus > 0:
            delta, chosen = ref.placement_delta(pod, node, SHAPES, cfg)
            if math.isnan(delta):
                assert math.isnan(s.delta_f)
            else:
                assert s.delta_f == pytest.approx(delta, abs=1e-6)
                assert s.gpus_chosen == chosen
        rho = node_fragmentation_of([g.free_mib for g in node.gpus])[0] if node.fresh else 0.0
        assert s.rho == pytest.approx(rho)
        if node.fresh:
            used = sum(g.used_mib for g in node.gpus)  # measured only: claims are not load
            total = sum(g.total_mib for g in node.gpus)
            load = ref.load_term(used, total, node.streams, node.image_token_share, cfg)
            qos = ref.qos_term(pod.qos, node.p95_s, node.streams, cfg)
        else:
            load = qos = NEUTRAL
        assert s.terms.load == pytest.approx(load)
        assert s.terms.qos == pytest.approx(qos)
        assert s.terms.contention == pytest.approx(ref.contention_term(pod, node, cfg), nan_ok=True)
        reps = node.model_replicas.get(pod.model, 0) if pod.model else 0
        assert s.terms.spread == pytest.approx(ref.spread_term(reps, rho, cfg))
        assert s.terms.modality == pytest.approx(
            ref.modality_term(pod.modality, node.pool, node.nvlink, pod.gpus)
        )
        if s.fits:
            demand = pod.gpus * (
                pod.mem_per_gpu_mib or max((g.total_mib for g in node.gpus), default=0)
            )
            frag = ref.fragmentation_term(s.delta_f, demand)
            assert s.terms.fragmentation == pytest.approx(frag)
            assert s.value == pytest.approx(ref.combine(s.terms, cfg.weights))
            if s.tier:  # no fresh signals / over the spread bound: ranked below the rest
                assert s.score < 2
            else:
                assert s.score >= ref.to_score(s.value)
        else:
            assert s.score == 0


def test_candidate_normalisation_spans_zero_to_ten() -> None:
    nodes = _random_nodes(random.Random(3), 60)
    scores = score_nodes(PodShape(1, 20480.0), nodes, CFG, SHAPES)
    fitting = [s.score for s in scores if s.fits]
    assert min(fitting) == 0 and max(fitting) == 10
    assert all(s.score == 0 for s in scores if not s.fits)


def test_equal_candidates_keep_their_absolute_score() -> None:
    nodes = [NodeState(f"n{i}") for i in range(3)]  # no signals at all
    scores = score_nodes(PodShape(1, 1024.0), nodes, CFG, SHAPES)
    assert {s.score for s in scores} == {ref.to_score(scores[0].value)}


def test_fgd_prefers_the_node_where_the_pod_fills_a_hole() -> None:
    hole = NodeState("hole", gpus=(GpuState(G80, used_mib=G80 - 20480), GpuState(G80)))
    idle = NodeState("idle", gpus=(GpuState(G80), GpuState(G80)))
    cfg = CFG.with_(weights=CFG.weights.__class__(1.0, 0.0, 0.0, 0.0, 0.0))
    by_name = {s.name: s for s in score_nodes(PodShape(1, 20480.0), [idle, hole], cfg, ONE_WHOLE)}
    assert by_name["hole"].score == 10
    assert by_name["idle"].score == 0
    assert by_name["hole"].delta_f < 0 < by_name["idle"].delta_f


def test_explain_is_json_ready() -> None:
    s = score_nodes(PodShape(1, 20480.0), [NodeState("n", gpus=gpus(G80))], CFG, ONE_WHOLE)[0]
    doc = explain(s)
    assert doc["node"] == "n"
    assert set(doc["terms"]) == {"fragmentation", "load", "spread", "modality", "qos", "contention"}
    assert doc["terms"]["contention"] is None  # a pod without a QoS class: not covered
    assert doc["gpus_chosen"] == [0]
    assert doc["signals"] == "fresh"


def test_empty_batch() -> None:
    res = score_batch(PodShape(1, 1.0), NodeBatch.from_states([]), CFG, ONE_WHOLE)
    assert len(res.names) == 0 and res.nodes() == []


def test_inputs_are_not_modified() -> None:
    nodes = _random_nodes(random.Random(1), 20)
    batch = NodeBatch.from_states(nodes)
    before = batch.free().copy()
    score_batch(PodShape(1, 20480.0), batch, CFG, SHAPES)
    assert np.array_equal(before, batch.free())
    assert not batch.total.flags.writeable


def test_claims_are_not_load_but_still_count_in_fit_and_fragmentation() -> None:
    """Load reads measured memory only (docs/design.md section 4); a GPU's claims (pods placed,
    not yet measured) shape fit and fragmentation instead, so the load term alone never
    turns into "prefer the least-claimed node"."""
    pod = PodShape(1, 20_000.0)
    empty = NodeState("empty", gpus=(GpuState(80_000.0),) * 2)
    claimed = NodeState("claimed", gpus=(GpuState(80_000.0, allocated_mib=50_000.0),) * 2)
    measured = NodeState("measured", gpus=(GpuState(80_000.0, used_mib=50_000.0),) * 2)
    by = {s.name: s for s in score_nodes(pod, [empty, claimed, measured], CFG, SHAPES)}
    assert by["claimed"].terms.load == pytest.approx(by["empty"].terms.load)
    assert by["measured"].terms.load < by["empty"].terms.load
    # the claim still takes free memory: fragmentation differs from the empty node
    assert by["claimed"].delta_f != pytest.approx(by["empty"].delta_f)


# --- contention ---------------------------------------------------------------------------


def _contended_nodes(rng: random.Random, n: int) -> list[NodeState]:
    """Nodes whose GPUs carry pod counts (some untracked), utilisation and claims."""
    out = []
    for i in range(n):
        fresh = rng.random() > 0.1
        tracked = rng.random() > 0.2
        out.append(
            NodeState(
                name=f"c{i}",
                gpus=tuple(
                    GpuState(
                        G80,
                        used_mib=rng.choice([0.0, 500.0, 20000.0]),
                        allocated_mib=rng.choice([0.0, 0.0, 16384.0]),
                        util=rng.choice([None, 0.0, 0.3, 1.0, 1.7]),
                        pods=rng.choice([0, 0, 1, 2]) if tracked else None,
                    )
                    for _ in range(rng.choice([1, 2, 4]))
                )
                if fresh
                else (),
                signals="fresh" if fresh else "stale",
                pool=rng.choice([None, "language", "vision"]),
                model_replicas={"llama": rng.choice([0, 1])},
            )
        )
    return out


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(PodShape(1, 20480.0, model="llama", qos="realtime"), id="realtime partial"),
        pytest.param(PodShape(1, None, qos="realtime"), id="realtime whole"),
        pytest.param(PodShape(1, 20480.0, qos="batch"), id="batch: not covered"),
        pytest.param(PodShape(2, 20480.0, qos="realtime"), id="two GPUs: not covered"),
        pytest.param(PodShape(1, 20480.0), id="no class: not covered"),
    ],
)
def test_contention_term_agrees_with_the_scalar_reference(pod: PodShape) -> None:
    nodes = _contended_nodes(random.Random(11), 150)
    cfg = CFG.with_(normalisation="absolute")
    scores = score_nodes(pod, nodes, cfg, SHAPES)
    covered = pod.gpus == 1 and pod.qos == "realtime"
    seen = set()
    for node, s in zip(nodes, scores, strict=True):
        want = ref.contention_term(pod, node, cfg)
        assert math.isnan(want) != covered
        assert s.terms.contention == pytest.approx(want, nan_ok=True)
        seen.add(round(want, 3) if covered else None)
        if s.fits:
            assert s.value == pytest.approx(ref.combine(s.terms, cfg.weights))
    if covered:  # the random nodes reach every case: idle, busy by utilisation, claimed, unknown
        assert {0.0, 0.7, 1.0, NEUTRAL} <= seen


def _pair(util: float | None, claimed: float) -> list[NodeState]:
    """Two nodes alike but for the GPU the device plugin picks on the first (GPU 0: fewest
    pods, lower index): its utilisation and claims."""

    def node(name: str, u: float | None, alloc: float) -> NodeState:
        return NodeState(
            name,
            gpus=(
                GpuState(G80, used_mib=1000.0, allocated_mib=alloc, util=u, pods=0),
                GpuState(G80, used_mib=1000.0, util=0.0, pods=1),
            ),
        )

    return [node("busy", util, claimed), node("calm", 0.0, 0.0)]


@pytest.mark.parametrize(
    ("util", "claimed"),
    [pytest.param(0.9, 0.0, id="another tenant computes"), pytest.param(0.0, 8192.0, id="claimed")],
)
def test_a_realtime_pod_avoids_the_shared_gpu_and_a_batch_pod_does_not_care(
    util: float, claimed: float
) -> None:
    nodes = _pair(util, claimed)
    rt = score_nodes(PodShape(1, 8192.0, qos="realtime"), nodes, CFG, HALF)
    batch = score_nodes(PodShape(1, 8192.0, qos="batch"), nodes, CFG, HALF)
    assert rt[0].terms.contention == pytest.approx(0.1 if util else 0.0)
    assert rt[1].terms.contention == 1.0
    assert rt[1].score == 10 and rt[0].score < rt[1].score
    assert math.isnan(batch[0].terms.contention) and math.isnan(batch[1].terms.contention)
    # for the batch pod only the five terms decide: the values are those without the term
    five = [ref.combine(s.terms, CFG.weights) for s in batch]
    assert [s.value for s in batch] == pytest.approx(five)


def test_the_term_off_gives_the_five_term_values_bit_for_bit() -> None:
    nodes = _contended_nodes(random.Random(5), 80)
    pod = PodShape(1, 20480.0, model="llama", qos="realtime")
    off = [CFG.with_(contention_qos=()), CFG.with_(weights=CFG.weights.__class__(contention=0.0))]
    as_batch = score_batch(
        PodShape(1, 20480.0, model="llama", qos="batch"), NodeBatch.from_states(nodes), CFG, SHAPES
    )
    for cfg in off:
        got = score_batch(pod, NodeBatch.from_states(nodes), cfg, SHAPES)
        assert np.isnan(got.contention).all()
        # the qos term differs between the classes; every other output is the batch pod's
        same = got.qos == as_batch.qos
        assert np.array_equal(got.value[same], as_batch.value[same])
        assert same.any()


def test_contention_under_scored_gpu_assignment_reads_the_chosen_gpu() -> None:
    # GPU 0 is calm but holds a pod, GPU 1 computes and holds none. The device plugin gives
    # GPU 1 (fewest pods); the scoring, picking the slot itself, takes GPU 0 (equal room,
    # lower index), and the term reads the GPU each assignment gives
    node = NodeState(
        "n",
        gpus=(
            GpuState(G80, used_mib=1000.0, util=0.0, pods=1),
            GpuState(G80, used_mib=1000.0, util=0.8, pods=0),
        ),
    )
    pod = PodShape(1, 8192.0, qos="realtime")
    cfg = CFG.with_(gpu_assignment="scored", busy_gpu_penalty=0.0)
    s = score_nodes(pod, [node], cfg, HALF)[0]
    assert s.gpus_chosen == (0,) and s.terms.contention == 1.0
    dp = score_nodes(pod, [node], CFG.with_(busy_gpu_penalty=0.0), HALF)[0]
    assert dp.gpus_chosen == (1,)
    assert dp.terms.contention == pytest.approx(0.2)
