"""Decisions a platform engineer can trust (issue 10): re-scoring one pod is stable, stale
signals never win, replicas spread, the tie-break only breaks ties."""

from __future__ import annotations

import json

import numpy as np
import pytest

from extender.config import DEFAULT_STALE_AFTER_S, ExtenderConfig
from extender.run import Running, build
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.decide import filter_doc, prioritize_scores
from tests.fake_kube import make_node, make_pod

GIB = 1024.0


def signals(clock: FakeClock, used_gib: float, gpus: int = 2, age_s: float = 0.0) -> str:
    return encode_signals(
        NodeSignals(
            ts=clock.now() - age_s,
            gpus=tuple(
                GpuSignal(index=i, mem_total_mib=80 * GIB, mem_used_mib=used_gib * GIB)
                for i in range(gpus)
            ),
        )
    )


def cluster(clock: FakeClock, nodes: list[dict]) -> Running:
    """A cluster-mode extender whose caches are fed directly (no reflectors started)."""
    cfg = ExtenderConfig.from_mapping({"kubernetes": {"api_server": "http://127.0.0.1:9"}})
    running = build(cfg, clock)
    running.state.replace_nodes(nodes)  # type: ignore[attr-defined]
    running.state.replace_pods([])  # type: ignore[attr-defined]
    return running


def gpu_pod(name: str, mem: str = "20Gi", model: str | None = None, uid: str = "") -> dict:
    labels = {"kvspread.io/model": model} if model else {}
    pod = make_pod(
        name, "serving", gpus=1, labels=labels, annotations={"kvspread.io/gpu-memory": mem}
    )
    if uid:
        pod["metadata"]["uid"] = uid
    return pod


def names_body(pod: dict, names: list[str]) -> str:
    return json.dumps({"Pod": pod, "NodeNames": names})


# --- 1. a pod's own earlier placement never counts against it ---------------------------


def test_rescoring_the_same_pod_gives_the_same_ranking() -> None:
    clock = FakeClock()
    names = [f"idem-{i:02d}" for i in range(6)]
    running = cluster(
        clock, [make_node(n, annotations={"kvspread.io/signals": signals(clock, 0)}) for n in names]
    )
    pod = gpu_pod("retry", model="llama", uid="uid-retry")
    first = prioritize_scores(running.extender, names_body(pod, names))
    for _ in range(3):
        assert prioritize_scores(running.extender, names_body(pod, names)) == first


def test_a_pods_own_claim_does_not_fail_it_in_filter() -> None:
    clock = FakeClock()
    # one node with 60 GiB free on its only GPU: room for one 50 GiB pod
    node = make_node("n1", annotations={"kvspread.io/signals": signals(clock, 20, gpus=1)})
    running = cluster(clock, [node])
    pod = gpu_pod("big", mem="50Gi", uid="uid-big")
    assert prioritize_scores(running.extender, names_body(pod, ["n1"]))["n1"] > 0
    assert [p.pod for p in running.state.ledger.on_node("n1")] == ["serving/big"]
    # the scheduler retries the same pod (bind failed): its own ledger entry is no obstacle
    assert filter_doc(running.extender, names_body(pod, ["n1"]))["NodeNames"] == ["n1"]
    # ... in full-NodeList mode too
    full = json.dumps({"Pod": pod, "Nodes": {"items": [node]}})
    assert filter_doc(running.extender, full)["FailedNodes"] == {}
    # another pod still sees the claim
    other = gpu_pod("other", mem="50Gi", uid="uid-other")
    assert "n1" in filter_doc(running.extender, names_body(other, ["n1"]))["FailedNodes"]


def test_standalone_rescoring_is_stable_too() -> None:
    clock = FakeClock()
    running = build(ExtenderConfig.from_mapping({"server": {"standalone": True}}), clock)
    nodes = [
        make_node(f"s{i}", annotations={"kvspread.io/signals": signals(clock, 0)}) for i in range(4)
    ]
    pod = gpu_pod("retry", model="llama", uid="uid-s")
    body = json.dumps({"Pod": pod, "Nodes": {"items": nodes}})
    first = prioritize_scores(running.extender, body)
    assert prioritize_scores(running.extender, body) == first


# --- 2. stale or missing signals never win -----------------------------------------------


def _stale_cases() -> list[tuple[list[float], str, float]]:
    """40 simple cases: fresh nodes at various GPU use (GiB used per GPU) and one node
    without fresh signals (stale of some age, or missing)."""
    cases = []
    for used in ([0.0], [40.0], [60.0], [0.0, 50.0], [10.0, 20.0, 60.0]):
        for kind in ("stale", "missing"):
            for age in (DEFAULT_STALE_AFTER_S + 1, 3600.0):  # just past the limit, an hour
                for mem in ("8Gi", "20Gi"):
                    cases.append((used, kind, age, mem))
    return cases  # type: ignore[return-value]


def test_a_node_without_fresh_signals_ranks_below_every_fresh_fitting_node() -> None:
    cases = _stale_cases()
    assert len(cases) == 40
    for used, kind, age, mem in cases:  # type: ignore[misc]
        clock = FakeClock()
        nodes = [
            make_node(f"fresh-{i}", annotations={"kvspread.io/signals": signals(clock, u)})
            for i, u in enumerate(used)
        ]
        ann = {"kvspread.io/signals": signals(clock, 0, age_s=age)} if kind == "stale" else {}
        nodes.append(make_node("dark", annotations=ann))
        running = cluster(clock, nodes)
        pod = gpu_pod("p", mem=mem, model="llama", uid="uid-p")
        body = names_body(pod, [n["metadata"]["name"] for n in nodes])
        passed = filter_doc(running.extender, body)["NodeNames"]
        assert "dark" in passed  # still a candidate
        scores = prioritize_scores(running.extender, body)
        fresh_fit = [n for n in passed if n != "dark"]
        assert fresh_fit, (used, mem)
        assert all(scores["dark"] < scores[n] for n in fresh_fit), (used, kind, age, mem, scores)
        explain = running.extender.explain("serving/p")
        assert explain is not None
        dark = next(s for s in explain["prioritize"]["scores"] if s["node"] == "dark")
        assert "ranked below every node with fresh signals" in dark["note"]
        # the pick in the ledger is a fresh node
        assert running.state.ledger.nodes_of(("serving/p", "uid-p")) <= set(fresh_fit)


def test_without_any_fresh_node_the_dark_nodes_stay_ordinary_candidates() -> None:
    clock = FakeClock()
    nodes = [make_node(f"dark-{i}") for i in range(3)]  # no collector anywhere
    running = cluster(clock, nodes)
    body = names_body(gpu_pod("p"), [n["metadata"]["name"] for n in nodes])
    assert filter_doc(running.extender, body)["NodeNames"] == ["dark-0", "dark-1", "dark-2"]
    scores = prioritize_scores(running.extender, body)
    # equal nodes: none demoted to a lower tier, but one (the one the ledger books) on top
    # so that kube-scheduler's random tie-break cannot bind elsewhere
    top = max(scores.values())
    assert sorted(scores.values()) == [top - 1, top - 1, top] and top - 1 > 0
    booked = running.state.ledger.nodes_of(("serving/p", "uid-p"))
    assert booked == {n for n, v in scores.items() if v == top}


def test_exclude_after_s_fails_old_signals_for_gpu_pods_naming_the_age() -> None:
    clock = FakeClock()
    nodes = [
        make_node("fresh", annotations={"kvspread.io/signals": signals(clock, 0)}),
        make_node("old", annotations={"kvspread.io/signals": signals(clock, 0, age_s=900)}),
        make_node("none"),
    ]
    cfg = ExtenderConfig.from_mapping(
        {
            "kubernetes": {"api_server": "http://127.0.0.1:9"},
            "signals": {"exclude_after_s": 600},
        }
    )
    running = build(cfg, clock)
    running.state.replace_nodes(nodes)  # type: ignore[attr-defined]
    running.state.replace_pods([])  # type: ignore[attr-defined]
    doc = filter_doc(running.extender, names_body(gpu_pod("p"), ["fresh", "old", "none"]))
    assert doc["NodeNames"] == ["fresh", "none"]
    assert "900s old" in doc["FailedNodes"]["old"]
    assert "signals.exclude_after_s" in doc["FailedNodes"]["old"]
    # a pod without GPUs is never excluded
    cpu_pod = make_pod("web", "serving")
    assert filter_doc(running.extender, names_body(cpu_pod, ["old"]))["NodeNames"] == ["old"]
    text = running.extender.metrics.registry.get_sample_value(
        "kvspread_extender_filter_failures_total", {"reason": "stale_signals"}
    )
    assert text == 1.0
    stale = running.extender.metrics.registry.get_sample_value(
        "kvspread_extender_node_signals_total", {"state": "stale"}
    )
    assert stale is not None and stale >= 1


def test_exclude_after_s_is_validated() -> None:
    import pytest

    from kvspread.settings import ConfigError

    with pytest.raises(ConfigError, match="signals.exclude_after_s"):
        ExtenderConfig.from_mapping({"signals": {"exclude_after_s": 0}})
    assert ExtenderConfig().signals.exclude_after_s is None


# --- 3. replicas of one model actually spread --------------------------------------------


def _schedule_replicas(
    running: Running, nodes: list[dict], replicas: int, full: bool, bind: bool
) -> dict[str, int]:
    """kube-scheduler's part, played by the test: filter, prioritize, bind the best
    (ties to the first), and (cluster mode) the pod then shows up bound in the pod cache."""
    import math

    names = [n["metadata"]["name"] for n in nodes]
    held = dict.fromkeys(names, 0)
    for k in range(replicas):
        pod = gpu_pod(f"llama-{k}", mem="20Gi", model="llama", uid=f"uid-{k}")
        if full:
            body = json.dumps({"Pod": pod, "Nodes": {"items": nodes}})
        else:
            body = names_body(pod, names)
        fd = filter_doc(running.extender, body)
        passed = [n["metadata"]["name"] for n in fd["Nodes"]["items"]] if full else fd["NodeNames"]
        scores = prioritize_scores(running.extender, body)
        best = max(passed, key=lambda n: scores[n])
        held[best] += 1
        if bind:
            pod["spec"]["nodeName"] = best
            running.state.pod_event("ADDED", pod)  # type: ignore[attr-defined]
        bound = math.ceil((k + 1) / len(passed)) + 1
        assert max(held.values()) <= bound or min(held[n] for n in passed) >= max(held.values()), (
            held
        )
    return held


def test_ten_replicas_over_twelve_nodes_spread_in_cluster_mode() -> None:
    clock = FakeClock()
    nodes = [
        make_node(f"g{i:02d}", annotations={"kvspread.io/signals": signals(clock, 0, gpus=8)})
        for i in range(12)
    ]
    running = cluster(clock, nodes)
    held = _schedule_replicas(running, nodes, 10, full=False, bind=True)
    assert max(held.values()) <= 2, held


def test_replicas_spread_while_the_ledger_alone_knows_them_in_standalone_mode() -> None:
    clock = FakeClock()
    nodes = [
        make_node(f"g{i:02d}", annotations={"kvspread.io/signals": signals(clock, 0, gpus=8)})
        for i in range(12)
    ]
    running = build(ExtenderConfig.from_mapping({"server": {"standalone": True}}), clock)
    held = _schedule_replicas(running, nodes, 10, full=True, bind=False)
    assert max(held.values()) <= 2, held


def test_replicas_spread_on_partly_used_nodes_too() -> None:
    clock = FakeClock()
    nodes = [
        make_node(
            f"p{i:02d}", annotations={"kvspread.io/signals": signals(clock, 10.0 * (i % 4), gpus=4)}
        )
        for i in range(6)
    ]
    running = cluster(clock, nodes)
    held = _schedule_replicas(running, nodes, 14, full=False, bind=True)
    assert max(held.values()) <= 4, held  # ceil(14 / 6) + 1


# --- 6. metrics say what they count -------------------------------------------------------


def test_one_decision_counter_per_verb_counting_every_outcome() -> None:
    clock = FakeClock()
    node = make_node("n1", annotations={"kvspread.io/signals": signals(clock, 70, gpus=1)})
    running = cluster(clock, [node])
    ext = running.extender
    bad = gpu_pod("bad", mem="lots")
    filter_doc(ext, names_body(gpu_pod("big", mem="50Gi"), ["n1"]))  # fails every node
    filter_doc(ext, names_body(gpu_pod("small", mem="4Gi"), ["n1"]))
    filter_doc(ext, names_body(bad, ["n1"]))
    prioritize_scores(ext, names_body(bad, ["n1"]))
    prioritize_scores(ext, names_body(gpu_pod("small", mem="4Gi"), ["n1"]))

    def count(name: str, outcome: str) -> float | None:
        return ext.metrics.registry.get_sample_value(name, {"outcome": outcome})

    f, p = (
        "kvspread_extender_filter_decisions_total",
        "kvspread_extender_prioritize_decisions_total",
    )
    assert (count(f, "no_fit"), count(f, "passed"), count(f, "invalid_pod")) == (1.0, 1.0, 1.0)
    assert (count(p, "invalid_pod"), count(p, "placed"), count(p, "no_fit")) == (1.0, 1.0, None)
    assert count("kvspread_extender_decisions_total", "invalid_pod") is None
    helps = {m.name: m.documentation for m in ext.metrics.registry.collect()}
    assert helps[f.removesuffix("_total")].startswith("Filter calls by outcome")
    assert helps[p.removesuffix("_total")].startswith("Prioritize calls by outcome")


# --- 4. the tie-break preference only breaks ties ----------------------------------------


def test_the_preference_never_overrides_a_difference_in_another_term() -> None:
    """Issue 10.4: a vision-pool node (value 0.7257) got 9 and a mixed-pool node (0.7163)
    got 10 for an image pod, because the node preference outweighed the modality term."""
    from extender.scoring import node_preference

    clock = FakeClock()
    # two node names whose preference favours the mixed-pool node as much as possible
    mixed = max((f"mixed-{i}" for i in range(300)), key=node_preference)
    vision = min((f"vision-{i}" for i in range(300)), key=node_preference)
    assert node_preference(mixed) - node_preference(vision) > 0.9
    sig = signals(clock, 0)
    nodes = [
        make_node(
            mixed, labels={"kvspread.io/pool": "mixed"}, annotations={"kvspread.io/signals": sig}
        ),
        make_node(
            vision, labels={"kvspread.io/pool": "vision"}, annotations={"kvspread.io/signals": sig}
        ),
        make_node("busy", annotations={"kvspread.io/signals": signals(clock, 70)}),
    ]
    running = cluster(clock, nodes)
    pod = gpu_pod("img", mem="8Gi", uid="uid-img")
    pod["metadata"]["labels"]["kvspread.io/modality"] = "image"
    scores = prioritize_scores(running.extender, names_body(pod, [mixed, vision, "busy"]))
    assert scores[vision] == 10 and scores[mixed] < 10, scores
    doc = running.extender.explain("serving/img")
    assert doc is not None
    by = {s["node"]: s for s in doc["prioritize"]["scores"]}
    assert by[vision]["value"] > by[mixed]["value"]
    assert "tie_break" in by[vision]


def _tie_values() -> tuple[list[str], np.ndarray, np.ndarray]:
    """Five candidates that agree on every term but fragmentation: two exact ties at the
    top, one 0.01 below (inside the default band), two far below."""
    from extender.scoring import node_preference

    names = sorted((f"tb-{i}" for i in range(40)), key=node_preference)[::8][:5]
    share = 0.35
    frag = np.array([0.80, 0.80, 0.79, 0.50, 0.20])
    rest = np.full(5, 0.3)
    return names, rest + share * frag, rest


def test_tie_band_zero_orders_exact_ties_only() -> None:
    from extender.config import ScoringConfig
    from extender.scoring import node_preference, tie_break

    names, value, rest = _tie_values()
    cfg = ScoringConfig().with_(tie_band=0.0)
    tb = tie_break(value, np.ones(5, dtype=bool), cfg, names, rest)
    ranked = value + tb
    # never more than the exact-tie order (1e-9 x rank) is added
    assert np.all(np.abs(tb) < 1e-8)
    # every unequal pair keeps its order
    for i in range(5):
        for j in range(5):
            if value[i] > value[j] + 1e-12:
                assert ranked[i] > ranked[j]
    # the exact tie goes to the preferred name, the same way every time
    top = max((0, 1), key=lambda i: node_preference(names[i]))
    assert int(np.argmax(ranked)) == top
    assert np.array_equal(tie_break(value, np.ones(5, dtype=bool), cfg, names, rest), tb)


def test_default_band_reorders_only_inside_it() -> None:
    from extender.config import DEFAULT_TIE_BAND, ScoringConfig
    from extender.scoring import tie_break

    names, value, rest = _tie_values()
    cfg = ScoringConfig()
    assert cfg.tie_band == DEFAULT_TIE_BAND == 0.1
    ranked = value + tie_break(value, np.ones(5, dtype=bool), cfg, names, rest)
    # the values are permuted among the three near the top, never changed
    top3 = sorted(np.round(ranked[:3], 6))
    assert top3 == sorted(np.round(value[:3], 6))
    # the two far below stay below, in their order
    assert ranked[3] < ranked[:3].min() and ranked[4] < ranked[3]


def test_tie_band_is_validated_with_a_clear_message() -> None:
    from extender.config import ScoringConfig

    with pytest.raises(ValueError, match="tie_band"):
        ScoringConfig.from_mapping({"tie_band": 2})
    assert ScoringConfig.from_mapping({"tie_band": 0}).tie_band == 0.0
