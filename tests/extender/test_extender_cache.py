"""The list+watch code against FakeKubeApi: first sync, events, 410 Gone in the middle
of a watch (ERROR event and HTTP 410), other errors with backoff, and the ledger."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from extender.config import DEFAULT_STALE_AFTER_S, ExtenderConfig
from extender.run import Running, build
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.decide import filter_doc, prioritize_scores, synced
from tests.fake_kube import FakeKubeApi, make_node, make_pod


def sig(clock: FakeClock, used: float) -> str:
    return encode_signals(
        NodeSignals(
            ts=clock.now(), gpus=(GpuSignal(index=0, mem_total_mib=81920, mem_used_mib=used),)
        )
    )


@pytest.fixture
def cluster() -> Iterator[tuple[FakeKubeApi, Running, FakeClock]]:
    clock = FakeClock()
    with FakeKubeApi() as api:
        api.put(make_node("n1", annotations={"kvspread.io/signals": sig(clock, 1000)}))
        api.put(make_node("n2", annotations={"kvspread.io/signals": sig(clock, 60000)}))
        api.put(
            make_pod(
                "llm-0",
                "serving",
                node_name="n1",
                gpus=1,
                labels={"kvspread.io/model": "llama"},
                annotations={"kvspread.io/gpu-memory": "20Gi"},
            )
        )
        api.put(make_pod("web", "default", node_name="n1"))  # no GPU, no model: ignored
        cfg = ExtenderConfig.from_mapping(
            {
                "kubernetes": {
                    "api_server": api.url,
                    "watch_timeout_s": 2,
                    "backoff_base_s": 0.05,
                    "backoff_max_s": 0.2,
                }
            }
        )
        running = build(cfg, clock)
        assert not running.ready()
        with synced(api, running):
            yield api, running, clock


def free_of(running: Running, node: str) -> float:
    batch, missing = running.state.take([node])  # type: ignore[union-attr]
    assert missing == []
    return float(batch.free()[0].sum())


def test_first_sync_holds_nodes_signals_and_gpu_pods(cluster) -> None:  # noqa: ANN001
    api, running, _ = cluster
    state = running.state
    assert sorted(state.node_names()) == ["n1", "n2"]
    assert [p.key for p in state.pods_on("n1")] == ["serving/llm-0"]
    # n1: 80920 MiB free measured, the bound pod claims 20 GiB of it
    assert free_of(running, "n1") == 81920 - 20480
    assert free_of(running, "n2") == 81920 - 60000
    pods_lists = [q for m, p, q in api.requests if p == "/api/v1/pods" and "watch" not in q]
    assert pods_lists[0]["fieldSelector"] == "spec.nodeName!="


def test_watch_events_update_the_cache(cluster) -> None:  # noqa: ANN001
    api, running, clock = cluster
    api.put(make_node("n3", annotations={"kvspread.io/signals": sig(clock, 0)}))
    assert api.wait_for(lambda: "n3" in running.state.node_names())
    node = api.get("Node", "n2")
    node["metadata"]["annotations"]["kvspread.io/signals"] = sig(clock, 10000)
    api.put(node)
    assert api.wait_for(lambda: free_of(running, "n2") == 81920 - 10000)
    api.delete("Pod", "llm-0", "serving")
    assert api.wait_for(lambda: free_of(running, "n1") == 81920 - 1000)
    api.delete("Node", "n3")
    assert api.wait_for(lambda: "n3" not in running.state.node_names())


def test_410_in_the_middle_of_a_watch_forces_a_relist(cluster) -> None:  # noqa: ANN001
    api, running, clock = cluster
    nodes = running.reflectors[0]
    lists_before = nodes.stats.lists
    assert api.wait_for(lambda: api.open_watches() >= 2)
    # history is compacted and the open watches get ERROR 410; a change made while the
    # reflector was away must still arrive through the re-list
    api.compact()
    api.break_watches(gone=True)
    api.put(make_node("late", annotations={"kvspread.io/signals": sig(clock, 0)}))
    assert api.wait_for(lambda: nodes.stats.gone >= 1 and nodes.stats.lists > lists_before)
    assert api.wait_for(lambda: "late" in running.state.node_names())
    assert running.ready()


def test_http_410_on_watch_and_500_on_list_recover_with_backoff(cluster) -> None:  # noqa: ANN001
    api, running, clock = cluster
    pods = running.reflectors[1]
    api.fail_next(410, path_prefix="/api/v1/pods", watch=True)
    api.fail_next(500, path_prefix="/api/v1/pods", watch=False, count=2)
    api.break_watches(gone=False)  # the watch ends normally; the re-watch gets HTTP 410
    assert api.wait_for(lambda: pods.stats.gone >= 1 and pods.stats.errors >= 2, 15)
    assert "HTTP 500" in pods.stats.last_error
    api.put(
        make_pod(
            "llm-1",
            "serving",
            node_name="n2",
            gpus=1,
            annotations={"kvspread.io/gpu-memory": "8Gi"},
        )
    )
    assert api.wait_for(
        lambda: [p.key for p in running.state.pods_on("n2")] == ["serving/llm-1"], 15
    )


def test_watches_resume_from_the_last_resource_version(cluster) -> None:  # noqa: ANN001
    api, running, _ = cluster
    nodes = running.reflectors[0]
    assert api.wait_for(lambda: nodes.stats.watches >= 2, 10)  # server timeout is 2 s
    watches = [q for m, p, q in api.requests if p == "/api/v1/nodes" and q.get("watch")]
    assert all(q.get("resourceVersion") for q in watches)
    assert all(q.get("allowWatchBookmarks") == "true" for q in watches)
    assert nodes.stats.lists == 1  # a normal watch timeout does not re-list


def test_ledger_keeps_a_burst_off_one_node_and_ends_when_bound(cluster) -> None:  # noqa: ANN001
    api, running, clock = cluster
    ext = running.extender

    def body(name: str, mem: str = "50Gi") -> dict:
        pod = make_pod(name, "serving", gpus=1, annotations={"kvspread.io/gpu-memory": mem})
        return {"Pod": pod, "NodeNames": ["n1", "n2"]}

    # n1 has 60 GiB free after llm-0: the first 50 GiB pod goes there ...
    first = prioritize_scores(ext, json.dumps(body("burst-0")))
    assert first["n1"] > 0 and first["n2"] == 0  # n2 has 21 GiB free: cannot fit
    assert [p.pod for p in ext.state.ledger.on_node("n1")] == ["serving/burst-0"]
    # ... and until it shows up bound, a second one no longer fits there
    second = filter_doc(ext, json.dumps(body("burst-1")))
    assert "n1" in second["FailedNodes"]
    # the pod appears bound on n1: the ledger entry ends, the pod cache takes over
    bound = body("burst-0")["Pod"]
    bound["spec"]["nodeName"] = "n1"
    api.put(bound)
    assert api.wait_for(lambda: ext.state.ledger.on_node("n1") == [])
    assert api.wait_for(lambda: len(running.state.pods_on("n1")) == 2)
    # and after the TTL a placement that never got bound is forgotten
    prioritize_scores(ext, json.dumps(body("never-bound", "8Gi")))
    assert len(ext.state.ledger) == 1
    clock.advance(31)
    assert ext.state.ledger.on_node("n1") == [] and ext.state.ledger.on_node("n2") == []


def test_stale_signals_turn_neutral_as_time_passes(cluster) -> None:  # noqa: ANN001
    _, running, clock = cluster
    batch, _ = running.state.take(["n1"])
    assert batch.signals == ("fresh",)
    clock.advance(DEFAULT_STALE_AFTER_S + 1)
    batch, _ = running.state.take(["n1"])
    assert batch.signals == ("stale",) and not batch.fresh[0]
