"""The cheap paths for small, one-off batches (the simulator re-scores the node or two that
changed since a shape was last scored) give exactly (bit for bit) what the general way
gives: the one-GPU choice in Python is the vectorised loop; without pod counts the device
plugin's rule narrows nothing; the load term without utilisation or with parts nobody measured is
the full formula; `node_values` is `score_batch` before finishing; preferences passed in
are the ones looked up by name."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from extender import scoring
from extender.batch import NodeBatch
from extender.config import ScoringConfig
from extender.model import SIGNALS_FRESH, GpuState, NodeState
from extender.scoring import (
    _SCAN_ROWS,
    BatchScores,
    _choose_slots,
    _scan_rows,
    candidate_gpus,
    finish_scores,
    load_term,
    node_preference,
    node_values,
    score_batch,
)
from tests.extender.test_extender_table_reuse import PODS, SHAPES, _nodes

NOW = 1.7e9


def _bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _bare(s: NodeState) -> NodeState:
    """`s` as the simulator's nodes are: no utilisation, pod counts, streams, image share
    or latency measured."""
    gpus = tuple(dataclasses.replace(g, util=None, pods=None) for g in s.gpus)
    return dataclasses.replace(s, gpus=gpus, streams=None, image_token_share=None, p95_s=None)


def _states(rng: random.Random, n: int, bare: bool) -> list[NodeState]:
    states = _nodes(rng, n, NOW)
    return [_bare(s) for s in states] if bare else states


@pytest.mark.parametrize("bare", [False, True])
@pytest.mark.parametrize("assignment", ["fewest-pods", "scored"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_few_rows_score_as_the_vectorised_choice_scores_them(
    seed: int, assignment: str, bare: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of up to `_SCAN_ROWS` rows choose the GPU in Python; the same batch scored
    with the vectorised loop gives the same scores, bit for bit."""
    rng = random.Random(seed)
    cfg = ScoringConfig().with_(gpu_assignment=assignment)
    for _ in range(6):
        states = _states(rng, rng.randint(1, _SCAN_ROWS), bare)
        small = [score_batch(p, NodeBatch.from_states(states), cfg, SHAPES) for p in PODS]
        with monkeypatch.context() as m:
            m.setattr(scoring, "_SCAN_ROWS", 0)
            loop = [score_batch(p, NodeBatch.from_states(states), cfg, SHAPES) for p in PODS]
        for a, b in zip(small, loop, strict=True):
            for f in dataclasses.fields(BatchScores):
                x, y = getattr(a, f.name), getattr(b, f.name)
                assert x == y if f.name == "names" else _bits(x, y), f.name


@pytest.mark.parametrize("seed", [1, 2])
def test_without_pod_counts_the_device_plugin_rule_changes_nothing(seed: int) -> None:
    """No node's pods per GPU tracked (the simulator): `fewest-pods` has no GPU to narrow
    the candidates to, so they are those of `scored`, which never narrows them."""
    states = _states(random.Random(seed), 30, bare=True)
    fewest, scored = ScoringConfig(), ScoringConfig().with_(gpu_assignment="scored")
    for pod in PODS:
        a = candidate_gpus(pod, NodeBatch.from_states(states), fewest)
        b = candidate_gpus(pod, NodeBatch.from_states(states), scored)
        assert all(_bits(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("seed", range(6))
def test_the_one_gpu_choice_in_python_is_the_vectorised_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    g = int(rng.integers(1, 9))
    for n in range(1, _SCAN_ROWS + 1):
        fa = rng.choice([0.0, 1.0, 2.0, 1.0 + 5e-10, 3.5, np.nan], size=(g, n))
        fa += rng.choice([0.0, 0.0, 1e-10, 2e-9], size=(g, n))
        busy = rng.choice([0.0, 0.0, 0.25, 1e-9], size=(g, n))
        qual = rng.random((n, g)) < 0.7
        cost_q = np.where(qual.T, fa + busy, np.inf)
        best, best_i = _choose_slots(cost_q, fa)
        got_best, got_i = _scan_rows(cost_q, fa)
        assert _bits(got_i, best_i)
        assert _bits(got_best, best)


def _measured_everything(states: list[NodeState]) -> NodeState:
    """A fresh node with the most GPUs of `states` (so the batch's GPU columns stay as they
    are) on which every load part is measured: beside it no shortcut applies."""
    widest = max(states, key=lambda s: len(s.gpus))
    gpus = tuple(
        dataclasses.replace(g, util=0.35, used_mib=g.total_mib / 3)
        for g in widest.gpus or (GpuState(total_mib=81920.0),)
    )
    node = dataclasses.replace(
        widest,
        name="witness",
        gpus=gpus,
        signals=SIGNALS_FRESH,
        streams=5,
        image_token_share=0.25,
        signals_ts=NOW,
    )
    assert node.fresh and gpus
    return node


@pytest.mark.parametrize("seed", range(8))
def test_the_load_term_skips_only_what_nobody_measured(seed: int) -> None:
    rng = random.Random(seed)
    states = _nodes(rng, rng.choice([1, 3, 30]), NOW)
    keep = rng.sample(["util", "streams", "image", "used"], rng.randint(0, 4))
    out = []
    for s in states:
        gpus = tuple(
            dataclasses.replace(
                g,
                util=g.util if "util" in keep else None,
                used_mib=g.used_mib if "used" in keep else math.nan,
            )
            for g in s.gpus
        )
        out.append(
            dataclasses.replace(
                s,
                gpus=gpus,
                streams=s.streams if "streams" in keep else None,
                image_token_share=s.image_token_share if "image" in keep else None,
            )
        )
    # rows are independent: with a node on which everything is measured the term takes
    # every part and every operation, and the other rows must come out the same
    batch = NodeBatch.from_states(out)
    full = NodeBatch.from_states([*out, _measured_everything(states)])
    for cfg in (ScoringConfig(), ScoringConfig().with_(util_share=0.3)):
        assert _bits(load_term(batch, cfg), load_term(full, cfg)[: len(out)])


@pytest.mark.parametrize("bare", [False, True])
def test_node_values_are_score_batch_before_finishing(bare: bool) -> None:
    rng = random.Random(7)
    states = _states(rng, 12, bare)
    cfg = ScoringConfig()
    for pod in PODS:
        full = score_batch(pod, NodeBatch.from_states(states), cfg, SHAPES)
        fits, value, chosen = node_values(pod, NodeBatch.from_states(states), cfg, SHAPES)
        assert _bits(fits, full.fits) and _bits(value, full.value)
        assert _bits(chosen, full.chosen)


def test_preferences_passed_in_finish_as_the_names_do() -> None:
    rng = np.random.default_rng(3)
    names = [f"node-{i}" for i in range(50)]
    prefs = np.array([node_preference(n) for n in names])
    cfg = ScoringConfig()
    for _ in range(20):
        value = rng.choice([0.5, 0.5 + 1e-8, 0.52, 0.7], size=50)
        fits = rng.random(50) < 0.8
        a = finish_scores(value, fits, cfg, names)
        b = finish_scores(value, fits, cfg, names, preferences=prefs)
        assert all(_bits(x, y) for x, y in zip(a, b, strict=True))
