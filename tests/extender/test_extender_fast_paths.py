"""The cheap paths of the last scoring steps (tie-break, tiers, scaling, rounding) give
exactly (bit for bit) what the straightforward way gives: the straightforward way is kept
here, as the code stood before the fast paths, and both run on random inputs made to hit
every branch (exact ties, near ties inside one TIE_EPSILON group, many groups, big
groups, NaN values, several tiers, `absolute` normalisation, no names)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from extender.config import ScoringConfig
from extender.model import PodShape
from extender.scoring import (
    SPREAD_SLACK,
    TIE_EPSILON,
    TIER_NO_SIGNALS,
    TIER_SPREAD,
    _finish,
    finish_scores,
    node_preference,
    rank_tiers,
    tie_break,
    to_score,
)

# --- the straightforward way -------------------------------------------------------------


def _ref_tie_break(case: dict[str, Any]) -> np.ndarray:
    """The stable preference's tie-break for one case of `_inputs` (value, fits, cfg,
    names, rest), written out group by group."""
    value, fits, cfg, names, rest = (case[k] for k in ("value", "fits", "cfg", "names", "rest"))
    zero = np.zeros(len(value))
    if cfg.normalisation == "absolute" or names is None or not fits.any():
        return zero
    c = np.flatnonzero(fits)
    v = value[c]
    if float(v.max()) - float(v.min()) <= 1e-9:
        return zero
    pref = np.array([node_preference(n) for n in names])[c]
    w = cfg.weights
    key = v + cfg.tie_band * (w.fragmentation / w.total(case["covered"])) * pref
    if rest is None:
        group = np.zeros(len(c), dtype=np.int64)
    else:
        group = np.floor(rest[c] / TIE_EPSILON + 0.5).astype(np.int64)
    by_group = np.argsort(group, kind="stable")
    same = group[by_group][1:] == group[by_group][:-1]
    ranked = v
    if same.any():
        shared = np.zeros(len(c), dtype=bool)
        shared[1:] |= same
        shared[:-1] |= same
        m = by_group[shared]
        gm = group[m]
        by_key = m[np.lexsort((-pref[m], -key[m], gm))]
        by_value = m[np.lexsort((-v[m], gm))]
        ranked = v.copy()
        ranked[by_key] = v[by_value]
    by_order = np.lexsort((pref, key))
    order = np.empty(len(c))
    order[by_order] = np.arange(len(c)) / len(c)
    out = zero
    out[c] = ranked - v + 1e-9 * order
    return out


def _ref_rank_tiers(
    fits: np.ndarray, fresh: np.ndarray | None = None, replicas: np.ndarray | None = None
) -> np.ndarray:
    tier = np.zeros(len(fits), dtype=np.int8)
    if not fits.any():
        return tier
    if replicas is not None:
        r_min = float(replicas[fits].min())
        tier[fits & (replicas >= r_min + SPREAD_SLACK)] = TIER_SPREAD
    if fresh is not None and (fits & fresh).any():
        tier[fits & ~fresh] = TIER_NO_SIGNALS
    return tier


def _ref_normalise(value: np.ndarray, fits: np.ndarray, cfg: ScoringConfig) -> np.ndarray:
    scaled = np.where(fits, value, 0.0)
    if cfg.normalisation == "absolute" or not fits.any():
        return scaled
    v = value[fits]
    lo, hi = float(v.min()), float(v.max())
    if hi - lo <= 1e-9:
        return scaled
    return np.where(fits, (value - lo) / (hi - lo), 0.0)


def _ref_finish(case: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tier and cap rules node by node (the tiers in use, best first), for one case of
    `_inputs`."""
    value, fits, cfg, tier = case["value"], case["fits"], case["cfg"], case["tier"]
    tiers = sorted({int(tier[i]) for i in range(len(fits)) if fits[i]}) if tier is not None else []
    best = fits if len(tiers) < 2 else fits & (tier == tiers[0])
    tb = _ref_tie_break({**case, "fits": best})
    ranked = value + tb
    scaled = _ref_normalise(ranked, best, cfg)
    score = to_score(scaled)
    capped = cfg.normalisation != "absolute" and bool(best.any())
    top = float(ranked[best].max()) if capped else 0.0
    k = len(tiers) - 1
    for i in range(len(value)):
        if capped and best[i] and ranked[i] < top - 1e-12:
            score[i] = min(score[i], 9)
        if k > 0 and fits[i]:
            t = tiers.index(int(tier[i]))  # type: ignore[index]
            score[i] = max(score[i], k) if t == 0 else k - t
    return scaled, score, tb


# --- random inputs -----------------------------------------------------------------------


def _inputs(rng: random.Random) -> dict[str, Any]:
    """value, fits, names, tier, rest and cfg for one random request."""
    n = rng.choice([0, 1, 2, 3, 7, 40, 300])
    style = rng.choice(["distinct", "exact", "near", "one-group", "many-groups", "flat"])
    np_rng = np.random.default_rng(rng.randrange(2**32))
    rest: np.ndarray
    if style == "distinct":
        rest = np_rng.random(n) * 0.6
    elif style == "one-group":
        rest = np.full(n, 0.3) + np_rng.random(n) * TIE_EPSILON * 0.4
    elif style == "many-groups":
        rest = np_rng.integers(0, max(1, n // 2), n) * 0.01
    else:
        rest = np_rng.integers(0, max(1, n // rng.choice([1, 3, 20])), n) * 0.05
    frag: np.ndarray = np_rng.random(n)
    if style in ("exact", "flat"):
        frag = np.round(frag * rng.choice([1, 3]), 0) / 3
    value = rest + 0.35 * frag
    if style == "near":
        value = value + np_rng.integers(0, 3, n) * 2e-10
    if style == "flat":
        value = np.full(n, 0.4)
    if n and rng.random() < 0.1:
        value[rng.randrange(n)] = np.nan
    fits = np_rng.random(n) < rng.choice([0.0, 0.3, 0.9, 1.0])
    tier = np_rng.integers(0, 3, n).astype(np.int8) * (rng.random() < 0.4)
    cfg = ScoringConfig().with_(
        tie_band=rng.choice([0.0, 0.1, 0.5]),
        normalisation=rng.choice(["candidates", "candidates", "absolute"]),
    )
    given = tuple(f"node-{rng.randrange(10**6)}-{i}" for i in range(n))
    names: Sequence[str] | None = given
    if rng.random() < 0.2:
        names = list(given)
    elif rng.random() < 0.1:
        names = None
    return {
        "value": value,
        "fits": fits,
        "cfg": cfg,
        "names": names,
        "tier": None if rng.random() < 0.2 else tier,
        "rest": None if rng.random() < 0.15 else rest,
        "covered": rng.random() < 0.3,  # a pod the contention term covers: its share differs
    }


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(8))
def test_finish_is_the_straightforward_way_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        a = _inputs(rng)
        args = (a["value"], a["fits"], a["cfg"], a["names"], a["tier"], a["rest"])
        pod = PodShape(1, 1024.0, qos="realtime") if a["covered"] else None
        w = a["cfg"].weights
        got = _finish(*args, share=w.fragmentation / w.total(a["covered"]))  # type: ignore[arg-type]
        want = _ref_finish(a)
        for g, w in zip(got, want, strict=True):
            assert _equal(g, w), a
        tb = tie_break(a["value"], a["fits"], a["cfg"], a["names"], a["rest"], pod=pod)  # type: ignore[arg-type]
        assert _equal(tb, _ref_tie_break(a))
        fs = finish_scores(a["value"], a["fits"], a["cfg"], a["names"], a["tier"], pod=pod)  # type: ignore[arg-type]
        ref = _ref_finish({**a, "rest": None})
        assert _equal(fs[0], ref[0]) and _equal(fs[1], ref[1])


@pytest.mark.parametrize("seed", range(4))
def test_rank_tiers_is_the_straightforward_way(seed: int) -> None:
    np_rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(np_rng.integers(0, 30))
        fits = np_rng.random(n) < np_rng.random()
        fresh = None if np_rng.random() < 0.2 else np_rng.random(n) < np_rng.random()
        replicas = None if np_rng.random() < 0.3 else np_rng.integers(0, 5, n).astype(float)
        assert _equal(rank_tiers(fits, fresh, replicas), _ref_rank_tiers(fits, fresh, replicas))


def _pod_with_gpus(value: object) -> dict[str, object]:
    return {
        "metadata": {"name": "p", "annotations": {"kvspread.io/gpu-memory": "24Gi"}},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": value}}}]},
    }


def test_memoised_quantities_keep_types_apart() -> None:
    """The GPU count is memoised by value *and type*: True (== 1 in Python) stays invalid
    after 1 was read, and 1.0 after True; an unhashable value still gets its message."""
    from extender.objects import parse_pod

    for value, gpus, bad in [
        (1, 1, False),
        (True, 0, True),
        ("1", 1, False),
        (1.0, 1, False),
        (False, 0, True),
        ([1], 0, True),
        ("1.5", 0, True),
    ]:
        for _ in range(2):  # the second read comes from the memo
            info = parse_pod(_pod_with_gpus(value))
            assert bool(info.error) == bad, (value, info.error)
            assert info.shape.gpus == (gpus if not bad else 1), value
            assert info.shape.mem_per_gpu_mib == 24576.0


@pytest.mark.parametrize("seed", range(3))
def test_terms_take_their_cheap_paths_exactly(seed: int) -> None:
    """One demand for every node divides as the (N,) array of it does, and the modality
    table kept per modality gives the formula's values: each equal bit for bit."""
    from extender.batch import POOL_CODES, NodeBatch
    from extender.scoring import (
        MODALITY_AFFINITY,
        MULTI_IMAGE_NVLINK_SHARE,
        NEUTRAL,
        fragmentation_term,
        modality_term,
    )
    from tests.extender.test_extender_scoring import _random_nodes

    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    for _ in range(50):
        n = rng.choice([0, 1, 5, 60])
        delta = np_rng.normal(0, 40000, n)
        delta[np_rng.random(n) < 0.2] = np.nan
        for demand in (24576.0, 0.0, -1.0, 3 * 8192.0):
            assert _equal(
                fragmentation_term(delta, demand), fragmentation_term(delta, np.full(n, demand))
            )
        batch = NodeBatch.from_states(_random_nodes(rng, n))
        for modality in (*MODALITY_AFFINITY, "smell"):
            pod = PodShape(rng.choice([1, 2]), modality=modality)
            table = MODALITY_AFFINITY.get(modality)
            if table is None:
                want = np.full(n, NEUTRAL)
            else:
                pools = sorted(POOL_CODES.items(), key=lambda kv: kv[1])
                want = np.array([table.get(p, NEUTRAL) for p, _ in pools])[batch.pool]
                if modality == "multi-image" or pod.gpus > 1:
                    s = MULTI_IMAGE_NVLINK_SHARE
                    want = (1 - s) * want + s * batch.nvlink
            assert _equal(modality_term(pod, batch), want)


def test_term_buckets_are_searchsorted_exactly() -> None:
    """The histograms' bucket of a value (a tenth corrected by one) is searchsorted's,
    on and next to every edge, outside [0,1] and at random."""
    from extender.metrics import TERM_BUCKETS, _bucket

    edges = np.array(TERM_BUCKETS)
    near = np.concatenate(
        [edges, np.nextafter(edges, 2.0), np.nextafter(edges, -1.0), np.arange(0, 101) / 100]
    )
    rng = np.random.default_rng(3)
    v = np.concatenate(
        [near, [0.0, -0.0, -5.0, 1.5, 1e300, -1e300], rng.random(200_000) * 1.4 - 0.2]
    )
    assert _equal(_bucket(v), np.searchsorted(edges, v, side="left").astype(np.intp))
    m = rng.random((3, 5, 40))
    assert _equal(_bucket(m), np.searchsorted(edges, m, side="left").astype(np.intp))


def test_node_names_read_again_are_a_new_equal_list() -> None:
    """The NodeNames of the last request are not read again when the same bytes come,
    yet every request gets its own list, and a body whose names are not strings still
    takes the general path (which words the 400) after a good one."""
    import json

    from extender.nodelist import fast_args
    from extender.wire import WireError, parse_args

    names = [f"node-{i}" for i in range(50)]
    body = json.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": names}).encode()
    first = fast_args(body)
    assert first is not None and first.node_names == names
    first.node_names.append("changed")
    again = fast_args(body)
    assert again is not None and again.node_names == names
    assert again.node_names is not first.node_names
    assert parse_args(body).names == names
    bad = json.dumps({"Pod": {}, "NodeNames": [*names[:3], 7]}).encode()
    assert fast_args(bad) is None
    with pytest.raises(WireError, match=r"NodeNames\[3\] must be a string"):
        parse_args(bad)
    assert fast_args(json.dumps({"Pod": {}, "NodeNames": None}).encode()) is None
    assert fast_args(body) is not None


def test_shapes_of_counts_is_shapes_of() -> None:
    """The snapshot a new pod takes (`Shapes.of_counts`) holds exactly what `Shapes.of`
    makes of the same weighted shapes, dropped ones (weight or GPUs 0) included."""
    from extender.shapes import Shape, Shapes

    rng = random.Random(9)
    for _ in range(300):
        pairs = [
            (
                (
                    rng.choice([0, 1, 2, 8]),
                    rng.choice([None, 8192.0, 40960.0]),
                    rng.choice([0.0, 4000.0]),
                ),
                rng.choice([0.0, 1e-9, 0.3, 1.0, 7.25]) * rng.random(),
            )
            for _ in range(rng.randrange(1, 6))
        ]
        items = [Shape(k[0], k[1], k[2], w) for k, w in pairs]
        try:
            want = Shapes.of(items)
        except ValueError as exc:
            with pytest.raises(ValueError, match=str(exc)):
                Shapes.of_counts(pairs)
            continue
        got = Shapes.of_counts(pairs)
        assert got.items == want.items
        for name in ("k", "need", "whole", "cpu", "p"):
            assert _equal(getattr(got, name), getattr(want, name)), name


def test_node_state_layout_is_kept_per_idle_fraction_and_staleness_is_read_each_time() -> None:
    """The memoised GPU layout of an annotation holds the idle limits of one
    `idle_used_fraction`: another fraction gets its own (the unexplained use that counts
    as another tenant's pod follows it), and the same annotation turns stale with time."""
    from extender.objects import NodeInfo
    from extender.state import build_node_state
    from kvspread.signals import GpuSignal, NodeSignals, encode_signals

    text = encode_signals(
        NodeSignals(ts=1000.0, gpus=(GpuSignal(index=0, mem_total_mib=81920, mem_used_mib=5000),))
    )
    info = NodeInfo("n1", None, False, text, None)
    tight = ScoringConfig().with_(idle_used_fraction=0.02)
    loose = ScoringConfig().with_(idle_used_fraction=0.1)
    for cfg, pods in [(tight, 1), (loose, 0), (tight, 1)]:
        s = build_node_state(info, (), (), 1010.0, cfg)
        assert s.fresh and s.gpus[0].pods == pods, (cfg.idle_used_fraction, s)
    old = build_node_state(info, (), (), 1000.0 + tight.stale_after_s + 1, tight)
    assert old.signals == "stale" and not old.gpus and old.signals_ts == 1000.0
