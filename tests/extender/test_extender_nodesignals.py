"""The extender follows NodeSignals resources (kvspread.io/v1alpha1) through list+watch
against FakeKubeApi: a node's NodeSignals stands in for its annotation (added, updated,
deleted -> back to the annotation), readiness waits for their first list, 410 Gone is
survived, explain says which channel each node's signals came from, and the age of a
node's signals (stale rank tier, `signals.exclude_after_s`) is that of the channel that
supplied them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from extender.config import DEFAULT_STALE_AFTER_S, ExtenderConfig
from extender.run import Running, build
from extender.wire import parse_args
from kvspread import names
from kvspread import nodesignals as ns
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.decide import filter_doc, prioritize_scores, synced
from tests.fake_kube import FakeKubeApi, make_node, make_pod


def doc(clock: FakeClock, node: str, used: float, age_s: float = 0.0) -> str:
    return encode_signals(
        NodeSignals(
            ts=clock.now() - age_s,
            node=node,
            gpus=(GpuSignal(index=0, mem_total_mib=81920, mem_used_mib=used),),
        )
    )


def resource(api: FakeKubeApi, clock: FakeClock, node: str, used: float) -> dict:
    uid = api.get("Node", node)["metadata"]["uid"]  # type: ignore[index]
    return api.put(ns.build_resource(node, uid, doc(clock, node, used)))


def fast(url: str) -> ExtenderConfig:
    """Short watches and backoff against the fake API server."""
    kube = {"api_server": url, "watch_timeout_s": 2, "backoff_base_s": 0.05, "backoff_max_s": 0.2}
    return ExtenderConfig.from_mapping({"kubernetes": kube})


@pytest.fixture
def cluster() -> Iterator[tuple[FakeKubeApi, Running, FakeClock]]:
    clock = FakeClock()
    with FakeKubeApi() as api:
        # n1 publishes on the resource channel, n2 still on the annotation
        api.put(make_node("n1"))
        api.put(make_node("n2", annotations={names.ANNOTATION_SIGNALS: doc(clock, "n2", 60000)}))
        resource(api, clock, "n1", 1000)
        running = build(fast(api.url), clock)
        assert [r.name for r in running.reflectors] == ["nodes", "pods", "nodesignals"]
        with synced(api, running):
            yield api, running, clock


def used_of(running: Running, node: str) -> float | None:
    batch, missing = running.state.take([node])  # type: ignore[union-attr]
    assert missing == []
    if batch.signals[0] != "fresh":
        return None
    return float(batch.used[0].sum())


def test_signals_follow_the_resource(cluster) -> None:  # noqa: ANN001
    api, running, clock = cluster
    assert used_of(running, "n1") == 1000  # from its NodeSignals
    assert used_of(running, "n2") == 60000  # from its annotation
    lists = [p for m, p, q in api.requests if p.endswith("/nodesignals") and "watch" not in q]
    assert lists == ["/apis/kvspread.io/v1alpha1/nodesignals"]
    # MODIFIED: a merge patch of the document, as the collector writes it
    before = api.resource_version
    with_patch = api.get("NodeSignals", "n1", api_version=ns.API_VERSION)
    assert with_patch is not None
    patched = dict(with_patch)
    patched["spec"] = ns.document_patch(doc(clock, "n1", 30000))["spec"]
    api.put(patched)
    assert api.wait_for(lambda: used_of(running, "n1") == 30000)
    assert running.reflectors[2].stats.resource_version == str(before + 1)
    # ADDED for the annotation node: the resource wins over the annotation
    resource(api, clock, "n2", 2000)
    assert api.wait_for(lambda: used_of(running, "n2") == 2000)
    # DELETED (garbage-collected with a Node, or by hand): back to the annotation
    assert api.delete("NodeSignals", "n2", api_version=ns.API_VERSION)
    assert api.wait_for(lambda: used_of(running, "n2") == 60000)
    assert api.delete("NodeSignals", "n1", api_version=ns.API_VERSION)
    assert api.wait_for(lambda: running.state.take(["n1"])[0].signals == ("missing",))


def test_relist_after_gone_replaces_the_resources(cluster) -> None:  # noqa: ANN001
    api, running, clock = cluster
    reflector = running.reflectors[2]
    # every watch open first: a watch still being opened would miss break_watches and
    # see the deletion as a plain event (the flake under load, issue 26 point 7)
    assert api.wait_for(lambda: api.open_watches() >= 3 and reflector.stats.watches >= 1, 30)
    api.compact()
    api.delete("NodeSignals", "n1", api_version=ns.API_VERSION)  # as the watch expires
    api.break_watches(gone=True)
    # generous bounds: this flaked once at 10 s on a 2-core machine under heavy load
    assert api.wait_for(lambda: reflector.stats.gone >= 1 and reflector.stats.lists >= 2, 30)
    assert api.wait_for(lambda: running.state.take(["n1"])[0].signals == ("missing",), 30)


def test_readiness_waits_for_the_nodesignals_list() -> None:
    clock = FakeClock()
    with FakeKubeApi() as api:
        api.put(make_node("n1"))
        # the CRD not installed yet: the list answers 404 a few times
        api.fail_next(404, path_prefix="/apis/kvspread.io/", count=3, watch=False)
        running = build(fast(api.url), clock)
        with synced(api, running):
            stats = running.reflectors[2].stats
            assert stats.errors == 3 and "HTTP 404" in stats.last_error


def test_switched_off_watches_only_nodes_and_pods() -> None:
    cfg = ExtenderConfig.from_mapping(
        {"kubernetes": {"api_server": "http://127.0.0.1:9", "node_signals": False}}
    )
    running = build(cfg, FakeClock())
    assert [r.name for r in running.reflectors] == ["nodes", "pods"]
    running.state.replace_nodes([])  # type: ignore[union-attr]
    running.state.replace_pods([])  # type: ignore[union-attr]
    assert running.ready()


def test_explain_names_the_channel(cluster) -> None:  # noqa: ANN001
    api, running, clock = cluster
    api.put(make_node("n3"))
    api.put(make_pod("llm-0", "serving", gpus=1, annotations={"kvspread.io/gpu-memory": "8Gi"}))
    assert api.wait_for(lambda: len(running.state.node_names()) == 3)  # type: ignore[union-attr]
    pod = api.get("Pod", "llm-0", "serving")
    body = json.dumps({"Pod": pod, "NodeNames": ["n1", "n2", "n3"]})
    running.extender.prioritize(parse_args(body))
    out = running.extender.explain("serving/llm-0")
    assert out is not None
    got = {r["node"]: r["signals_from"] for r in out["prioritize"]["scores"]}
    rv = api.get("NodeSignals", "n1", api_version=ns.API_VERSION)["metadata"]["resourceVersion"]  # type: ignore[index]
    assert got == {
        "n1": f"NodeSignals n1 (resourceVersion {rv})",
        "n2": "annotation kvspread.io/signals",
        "n3": "none (no NodeSignals, no annotation)",
    }


def fed(clock: FakeClock, nodes: list[dict], resources: dict[str, str], **extra: object) -> Running:
    """A cluster-mode extender whose caches are fed directly: `resources` maps a node to
    its NodeSignals document."""
    cfg = ExtenderConfig.from_mapping({"kubernetes": {"api_server": "http://127.0.0.1:9"}} | extra)
    running = build(cfg, clock)
    state = running.state
    state.replace_nodes(nodes)  # type: ignore[attr-defined]
    state.replace_pods([])  # type: ignore[attr-defined]
    objs = [ns.build_resource(n, f"uid-{n}", d) for n, d in resources.items()]
    state.node_signals.replace_all(objs)  # type: ignore[attr-defined]
    assert running.ready()
    return running


def llm_body(names_: list[str]) -> str:
    pod = make_pod("llm-0", "serving", gpus=1, annotations={"kvspread.io/gpu-memory": "8Gi"})
    pod["metadata"]["uid"] = "uid-llm-0"
    return json.dumps({"Pod": pod, "NodeNames": names_})


def test_a_stale_nodesignals_ranks_last_even_over_a_fresh_annotation() -> None:
    clock = FakeClock()
    old = DEFAULT_STALE_AFTER_S + 1
    nodes = [
        make_node("fresh", annotations={names.ANNOTATION_SIGNALS: doc(clock, "fresh", 60000)}),
        # a fresh annotation left behind, but the NodeSignals (which wins) is old
        make_node("dark", annotations={names.ANNOTATION_SIGNALS: doc(clock, "dark", 0)}),
        # an old annotation, but a fresh NodeSignals: fresh
        make_node("moved", annotations={names.ANNOTATION_SIGNALS: doc(clock, "moved", 0, old)}),
    ]
    running = fed(
        clock,
        nodes,
        {"dark": doc(clock, "dark", 0, old), "moved": doc(clock, "moved", 70000)},
    )
    batch, _ = running.state.take(["fresh", "dark", "moved"])
    assert batch.signals == ("fresh", "stale", "fresh")
    body = llm_body(["fresh", "dark", "moved"])
    assert set(filter_doc(running.extender, body)["NodeNames"]) == {"fresh", "dark", "moved"}
    scores = prioritize_scores(running.extender, body)
    assert scores["dark"] < min(scores["fresh"], scores["moved"]), scores
    out = running.extender.explain("serving/llm-0")
    assert out is not None
    dark = next(r for r in out["prioritize"]["scores"] if r["node"] == "dark")
    assert "ranked below every node with fresh signals" in dark["note"]
    assert dark["signals_from"].startswith("NodeSignals dark")


def test_exclude_after_s_judges_the_nodesignals_age() -> None:
    clock = FakeClock()
    nodes = [
        make_node("ok", annotations={names.ANNOTATION_SIGNALS: doc(clock, "ok", 0, 900)}),
        make_node("old", annotations={names.ANNOTATION_SIGNALS: doc(clock, "old", 0)}),
    ]
    running = fed(
        clock,
        nodes,
        {"ok": doc(clock, "ok", 0), "old": doc(clock, "old", 0, 900)},
        signals={"exclude_after_s": 600},
    )
    out = filter_doc(running.extender, llm_body(["ok", "old"]))
    assert out["NodeNames"] == ["ok"]
    assert "900s old" in out["FailedNodes"]["old"]


def test_standalone_explain_names_the_request_body() -> None:
    clock = FakeClock()
    running = build(ExtenderConfig.from_mapping({"server": {"standalone": True}}), clock)
    node = make_node("n1", annotations={names.ANNOTATION_SIGNALS: doc(clock, "n1", 0)})
    pod = make_pod("llm-0", "serving", gpus=1, annotations={"kvspread.io/gpu-memory": "8Gi"})
    running.extender.prioritize(parse_args(json.dumps({"Pod": pod, "Nodes": {"items": [node]}})))
    out = running.extender.explain("serving/llm-0")
    assert out is not None
    assert [r["signals_from"] for r in out["prioritize"]["scores"]] == [
        "annotation kvspread.io/signals (request body)"
    ]
