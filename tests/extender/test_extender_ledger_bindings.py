"""The ledger books what the scheduler did (issue 26, point 4), replayed against
FakeKubeApi's pod watch: a burst of identical pods on identical nodes, with the scheduler
emulated as kube-scheduler picks (the highest score, equal totals at random) and each
binding written to the API server one decision late (as a busy scheduler binds). The
extender breaks exact ties itself, so the node it books is the only top-scored one; the
ledger is checked against every binding, and a pod bound elsewhere moves to the node it
is on, not the node that was booked."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator

import pytest

from extender.config import ExtenderConfig
from extender.run import Running, build
from extender.scoring import SPREAD_SLACK
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.decide import filter_doc, prioritize_scores, synced
from tests.fake_kube import FakeKubeApi, make_node, make_pod

NODES = [f"gpu-{i}" for i in range(4)]
GIB = 1024.0


def signals(clock: FakeClock) -> str:
    gpus = tuple(GpuSignal(index=i, mem_total_mib=80 * GIB, mem_used_mib=0) for i in range(8))
    return encode_signals(NodeSignals(ts=clock.now(), gpus=gpus))


@pytest.fixture
def cluster() -> Iterator[tuple[FakeKubeApi, Running]]:
    clock = FakeClock()
    with FakeKubeApi() as api:
        for name in NODES:  # identical nodes: same GPUs, same (empty) signals
            api.put(
                make_node(
                    name,
                    annotations={"kvspread.io/signals": signals(clock)},
                    allocatable={"nvidia.com/gpu": "8"},
                )
            )
        kube = {"api_server": api.url, "watch_timeout_s": 30, "node_signals": False}
        running = build(ExtenderConfig.from_mapping({"kubernetes": kube}), clock)
        with synced(api, running):
            yield api, running


def replica(i: int) -> dict:
    pod = make_pod(
        f"llm-{i}",
        "serving",
        gpus=1,
        labels={"kvspread.io/model": "llama"},
        annotations={"kvspread.io/gpu-memory": "20Gi"},
        scheduler_name="kvspread-scheduler",
    )
    pod["metadata"]["uid"] = f"uid-{i}"
    return pod


def schedule(running: Running, pod: dict, rng: random.Random) -> tuple[str, dict[str, int]]:
    """kube-scheduler's choice with only the extender's scores differing: filter, then the
    highest score, equal scores at random (its selectHost)."""
    body = json.dumps({"Pod": pod, "NodeNames": NODES})
    passed = filter_doc(running.extender, body)["NodeNames"]
    scores = prioritize_scores(running.extender, body)
    top = max(scores[n] for n in passed)
    return rng.choice([n for n in passed if scores[n] == top]), scores


def bind(api: FakeKubeApi, pod: dict, node: str) -> None:
    pod["spec"]["nodeName"] = node
    api.put(pod)


def wait_bound(api: FakeKubeApi, running: Running, key: str, node: str) -> None:
    assert api.wait_for(lambda: key in {p.key for p in running.state.pods_on(node)})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_burst_of_ties_is_booked_where_it_is_bound(cluster, seed: int) -> None:  # noqa: ANN001
    api, running = cluster
    ledger = running.state.ledger
    rng = random.Random(seed)
    pending: tuple[dict, str] | None = None
    for i in range(24):
        pod = replica(i)
        node, scores = schedule(running, pod, rng)
        assert sorted(scores.values()).count(max(scores.values())) == 1  # one top node
        # the ledger holds the pod on the node the scheduler is binding it to
        assert ledger.nodes_of((f"serving/llm-{i}", f"uid-{i}")) == {node}
        if pending is not None:  # the previous pod's binding arrives one decision late
            bind(api, *pending)
            wait_bound(
                api,
                running,
                pending[0]["metadata"]["namespace"] + "/" + pending[0]["metadata"]["name"],
                pending[1],
            )
        pending = (pod, node)
    assert pending is not None
    bind(api, *pending)
    wait_bound(api, running, "serving/llm-23", pending[1])
    assert api.wait_for(lambda: len(ledger) == 0)
    assert ledger.bindings() == {"as_booked": 24, "elsewhere": 0}
    per_node = Counter(p.node_name for n in NODES for p in running.state.pods_on(n))
    # the spread rule held on what was bound (no phantom replica skewed it)
    assert (
        sum(per_node.values()) == 24
        and max(per_node.values()) - min(per_node.values()) <= SPREAD_SLACK
    )


def test_a_pod_bound_elsewhere_counts_where_it_is(cluster) -> None:  # noqa: ANN001
    api, running = cluster
    ledger = running.state.ledger
    pod = replica(0)
    booked, _ = schedule(running, pod, random.Random(0))
    other = next(n for n in NODES if n != booked)
    bind(api, pod, other)  # another score plugin outweighed the extender
    wait_bound(api, running, "serving/llm-0", other)
    assert api.wait_for(lambda: ledger.on_node(booked) == [])
    assert ledger.bindings() == {"as_booked": 0, "elsewhere": 1}
    # the next replica avoids the node that holds the first, not the one that was booked
    nxt, scores = schedule(running, replica(1), random.Random(0))
    assert nxt != other and scores[other] < scores[nxt]


def test_the_ledger_bindings_metric(cluster) -> None:  # noqa: ANN001
    from fastapi.testclient import TestClient

    api, running = cluster
    pod = replica(0)
    booked, _ = schedule(running, pod, random.Random(0))
    bind(api, pod, booked)
    wait_bound(api, running, "serving/llm-0", booked)
    body = TestClient(running.app).get("/metrics").text
    assert 'kvspread_extender_ledger_bindings_total{outcome="as_booked"} 1.0' in body
    assert 'kvspread_extender_ledger_bindings_total{outcome="elsewhere"} 0.0' in body
