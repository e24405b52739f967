"""Property tests (hypothesis) over the whole decision path: generated nodes become real
Node objects with a `kvspread.io/signals` annotation, a generated pod becomes a real
Pod, and both go through ExtenderArgs parsing, the cache-free full-NodeList path and the
names-only path against a cache."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.config import DEFAULT_STALE_AFTER_S, ExtenderConfig
from extender.run import build
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.decide import filter_doc, prioritize_scores
from tests.fake_kube import make_node, make_pod

CLOCK = FakeClock()
IDLE_FRACTION = 0.05


@dataclass(frozen=True)
class GenNode:
    name: str
    gpus: tuple[tuple[float, float], ...]  # (total MiB, used MiB)
    signals: str  # fresh | stale | missing | invalid
    pool: str | None
    model_replicas: int

    def obj(self) -> dict:
        ann = {}
        if self.signals in ("fresh", "stale"):
            ts = CLOCK.now() - (0 if self.signals == "fresh" else 2 * DEFAULT_STALE_AFTER_S)
            ann["kvspread.io/signals"] = encode_signals(
                NodeSignals(
                    ts=ts,
                    gpus=tuple(
                        GpuSignal(index=i, mem_total_mib=t, mem_used_mib=u)
                        for i, (t, u) in enumerate(self.gpus)
                    ),
                    streams=3,
                )
            )
        elif self.signals == "invalid":
            ann["kvspread.io/signals"] = '{"v": 99}'
        labels = {"kvspread.io/pool": self.pool} if self.pool else {}
        return make_node(self.name, labels=labels, annotations=ann)


@dataclass(frozen=True)
class GenPod:
    gpus: int
    mem_gib: int | None
    model: str | None

    def obj(self) -> dict:
        ann = {"kvspread.io/gpu-memory": f"{self.mem_gib}Gi"} if self.mem_gib else {}
        labels = {"kvspread.io/model": self.model} if self.model else {}
        return make_pod("p", "ns", gpus=self.gpus, labels=labels, annotations=ann)


def oracle_fits(pod: GenPod, node: GenNode) -> bool:
    """Independent statement of docs/design.md section 5's filter rule (a memory annotation
    without a GPU limit means one GPU, extender/objects.py), with the device plugin's
    choice for one-GPU pods (the GPU with the fewest pods; a GPU in use by a process no pod
    explains holds one) and stale nodes failed by what their last document proves (issue
    26, point 5)."""
    gpus = pod.gpus or (1 if pod.mem_gib else 0)
    if gpus == 0 or node.signals in ("missing", "invalid"):
        return True
    if node.signals == "stale":
        totals = [t for t, _ in node.gpus]
        need = None if pod.mem_gib is None else pod.mem_gib * 1024
        if len(totals) < gpus:
            return False
        if need is not None and (
            max(totals) < need or min(totals) < need <= max(totals) and len(totals) - 1 < gpus
        ):
            return False
        return True
    if pod.mem_gib is None:
        ok = [u <= IDLE_FRACTION * t for t, u in node.gpus]
    else:
        ok = [t - u >= pod.mem_gib * 1024 for t, u in node.gpus]
    if gpus == 1:
        pods = [1 if u > IDLE_FRACTION * t else 0 for t, u in node.gpus]
        return all(ok[j] for j, k in enumerate(pods) if k == min(pods))
    return sum(ok) >= gpus


gpu = st.tuples(st.sampled_from([16384.0, 40960.0, 81920.0]), st.floats(0, 1)).map(
    lambda tu: (tu[0], round(tu[0] * tu[1], 1))
)
nodes_st = st.lists(
    st.builds(
        GenNode,
        name=st.just(""),
        gpus=st.lists(gpu, min_size=1, max_size=8).map(tuple),
        signals=st.sampled_from(["fresh", "fresh", "fresh", "stale", "missing", "invalid"]),
        pool=st.sampled_from([None, "language", "mixed", "vision"]),
        model_replicas=st.integers(0, 2),
    ),
    min_size=0,
    max_size=25,
).map(lambda ns: [replace(n, name=f"node-{i}") for i, n in enumerate(ns)])
pods_st = st.builds(
    GenPod,
    gpus=st.integers(0, 4),
    mem_gib=st.one_of(st.none(), st.integers(1, 80)),
    model=st.sampled_from([None, "llama"]),
)

RUNNING = build(ExtenderConfig.from_mapping({"server": {"standalone": True}}), CLOCK)
EXT = RUNNING.extender
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def full_body(pod: GenPod, nodes: list[GenNode]) -> bytes:
    return json.dumps({"Pod": pod.obj(), "Nodes": {"items": [n.obj() for n in nodes]}}).encode()


def prioritize(pod: GenPod, nodes: list[GenNode]) -> dict[str, int]:
    EXT.state.ledger.forget("ns/p")
    out = prioritize_scores(EXT, full_body(pod, nodes))
    EXT.state.ledger.forget("ns/p")  # keep examples independent
    return out


@PROPS
@given(pod=pods_st, nodes=nodes_st)
def test_scores_are_integers_0_to_10(pod: GenPod, nodes: list[GenNode]) -> None:
    scores = prioritize(pod, nodes)
    assert list(scores) == [n.name for n in nodes]
    assert all(type(s) is int and 0 <= s <= 10 for s in scores.values())


@PROPS
@given(pod=pods_st, nodes=nodes_st, data=st.data())
def test_a_nodes_score_does_not_depend_on_node_order(
    pod: GenPod, nodes: list[GenNode], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(nodes))
    assert prioritize(pod, nodes) == prioritize(pod, list(shuffled))


@PROPS
@given(pod=pods_st, nodes=nodes_st)
def test_filter_passes_exactly_the_nodes_where_the_pod_fits(
    pod: GenPod, nodes: list[GenNode]
) -> None:
    out = filter_doc(EXT, full_body(pod, nodes))
    passed = {n["metadata"]["name"] for n in out["Nodes"]["items"]}
    for n in nodes:
        assert (n.name in passed) is oracle_fits(pod, n), n
        assert (n.name in out["FailedNodes"]) is (not oracle_fits(pod, n))


@PROPS
@given(pod=pods_st, nodes=nodes_st.filter(bool), data=st.data())
def test_adding_free_memory_never_makes_a_node_fail(
    pod: GenPod, nodes: list[GenNode], data: st.DataObject
) -> None:
    i = data.draw(st.integers(0, len(nodes) - 1))
    node = nodes[i]
    j = data.draw(st.integers(0, len(node.gpus) - 1))
    total, used = node.gpus[j]
    freed = data.draw(st.floats(0, 1)) * used
    more_free = replace(node, gpus=node.gpus[:j] + ((total, used - freed),) + node.gpus[j + 1 :])
    before = filter_doc(EXT, full_body(pod, [node]))
    after = filter_doc(EXT, full_body(pod, [more_free]))
    if node.name not in before["FailedNodes"]:
        assert more_free.name not in after["FailedNodes"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods_st, nodes=nodes_st, extra=st.lists(st.text(min_size=1, max_size=8), max_size=3))
def test_names_only_mode_agrees_with_full_mode_and_passes_unknown_nodes(
    pod: GenPod, nodes: list[GenNode], extra: list[str]
) -> None:
    cfg = ExtenderConfig.from_mapping({"kubernetes": {"api_server": "http://127.0.0.1:9"}})
    running = build(cfg, CLOCK)  # reflectors never started: the cache is fed directly
    running.state.replace_nodes([n.obj() for n in nodes])
    running.state.replace_pods([])
    unknown = [f"unknown-{e}" for e in extra]
    names = [n.name for n in nodes] + unknown
    body = json.dumps({"Pod": pod.obj(), "NodeNames": names})
    out = filter_doc(running.extender, body)
    for n in nodes:
        assert (n.name in out["NodeNames"]) is oracle_fits(pod, n)
    assert all(u in out["NodeNames"] for u in unknown)
    scores = prioritize_scores(running.extender, body)
    assert all(scores[u] == 5 for u in unknown)
    assert all(0 <= s <= 10 for s in scores.values())


def _cluster_with(nodes: list[GenNode]):  # noqa: ANN202
    cfg = ExtenderConfig.from_mapping({"kubernetes": {"api_server": "http://127.0.0.1:9"}})
    running = build(cfg, CLOCK)  # reflectors never started: the cache is fed directly
    running.state.replace_nodes([n.obj() for n in nodes])
    running.state.replace_pods([])
    return running


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods_st, nodes=nodes_st, repeats=st.integers(2, 4))
def test_rescoring_the_same_pod_is_idempotent(
    pod: GenPod, nodes: list[GenNode], repeats: int
) -> None:
    running = _cluster_with(nodes)
    body = json.dumps({"Pod": pod.obj(), "NodeNames": [n.name for n in nodes]})
    first = prioritize_scores(running.extender, body)
    for _ in range(repeats):
        assert prioritize_scores(running.extender, body) == first
    # the filter too: the pod's own recorded pick never fails it
    passed = filter_doc(running.extender, body)["NodeNames"]
    assert passed == [n.name for n in nodes if oracle_fits(pod, n)]


@PROPS
@given(pod=pods_st, nodes=nodes_st)
def test_stale_nodes_never_outrank_fresh_fitting_ones(pod: GenPod, nodes: list[GenNode]) -> None:
    scores = prioritize(pod, nodes)
    # fresh nodes the pod fits on; a score of 0 means prioritize found it does not fit after
    # all (the device plugin's GPU lacks room, a rule the filter leaves to prioritize)
    fresh_fit = [
        n.name for n in nodes if n.signals == "fresh" and oracle_fits(pod, n) and scores[n.name]
    ]
    dark = [n.name for n in nodes if n.signals != "fresh"]
    for d in dark:
        for f in fresh_fit:
            assert scores[d] < scores[f], (d, f, scores)


@PROPS
@given(pod=pods_st, nodes=nodes_st)
def test_filter_and_prioritize_agree_on_fit(pod: GenPod, nodes: list[GenNode]) -> None:
    """One fit predicate (issue 26, point 5): a node /filter passes is one /prioritize
    counts as fitting, and the other way round."""
    passed = {
        n["metadata"]["name"] for n in filter_doc(EXT, full_body(pod, nodes))["Nodes"]["items"]
    }
    prioritize(pod, nodes)
    explained = EXT.explain("ns/p")
    if explained is None or "prioritize" not in explained or pod.gpus == 0 and not pod.mem_gib:
        return  # a pod without GPUs is not scored (and always passes)
    fits = {s["node"] for s in explained["prioritize"]["scores"] if s["fits"]}
    assert fits == passed
