"""Memory stays flat under many full-NodeList requests (issue 10, point 5).

The full check (1,000 requests of 5,000-node NodeLists, RSS within 50 MB of its level after
the first) is `python bench/extender_bench.py --memory 1000`: too slow for the suite. Here
the same shape, smaller: a real uvicorn server, 100 NodeLists of 600 nodes of which a few
change each time (as signals do), RSS after the first and after the last. That the memo of
parsed nodes stays bounded however much nodes change is checked on the memo itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from extender.cache import ClusterState
from extender.config import ExtenderConfig
from extender.nodelist import NodeMemo
from extender.objects import parse_node
from extender.run import build
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.extender.uvicorn_server import serve_app
from tests.fake_kube import make_node, make_pod


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _node(i: int, ts: float) -> dict[str, Any]:
    sig = NodeSignals(
        ts=ts,
        node=f"n{i}",
        gpus=tuple(
            GpuSignal(index=j, mem_total_mib=81920, mem_used_mib=1000.0 * ((i + j) % 70))
            for j in range(8)
        ),
        streams=i % 9,
        p95_s=0.05,
    )
    return make_node(
        f"n{i}",
        labels={"kvspread.io/pool": "mixed"},
        annotations={"kvspread.io/signals": encode_signals(sig)},
        allocatable={"nvidia.com/gpu": "8"},
    )


def test_memo_keeps_two_generations_and_hands_out_the_same_objects() -> None:
    memo = NodeMemo(capacity=64)
    raws = [json.dumps(_node(i, 1.0)).encode() for i in range(50)]
    first = memo.infos(raws)
    assert first is not None and [i.name for i in first] == [f"n{i}" for i in range(50)]
    again = memo.infos([bytes(r) for r in raws])  # equal bytes, other objects: memo hits
    assert again is not None and all(a is b for a, b in zip(first, again, strict=True))
    assert first[3] == parse_node(json.loads(raws[3]))
    for round_ in range(40):  # every node changes every round: 2,000 new entries
        fresh = [json.dumps(_node(i, 2.0 + round_)).encode() for i in range(50)]
        assert memo.infos(fresh) is not None
        assert len(memo) <= 2 * 100  # two generations of max(64, 2 x 50)
    assert memo.infos([b'{"metadata": {"name": 1}}']) is None  # not canonical: general path


@pytest.mark.slow
def test_rss_stays_flat_over_many_full_nodelist_requests() -> None:
    clock = FakeClock()
    nodes = [_node(i, clock.now()) for i in range(600)]
    cfg = ExtenderConfig.from_mapping(
        {"kubernetes": {"api_server": "http://127.0.0.1:9", "node_signals": False}}
    )
    running = build(cfg, clock)
    state = running.state
    assert isinstance(state, ClusterState)
    state.replace_nodes(nodes)
    state.replace_pods([])
    pod = make_pod(
        "llm-0",
        "serving",
        gpus=1,
        labels={"kvspread.io/model": "llama"},
        annotations={"kvspread.io/gpu-memory": "24Gi"},
    )

    def body(k: int) -> bytes:
        # a few nodes report new signals each request (new bytes for the memo)
        for i in range(6 * k % 600, 6 * k % 600 + 6):
            nodes[i] = _node(i, clock.now() + k * 1e-3)
        return json.dumps({"Pod": pod, "Nodes": {"items": nodes}, "NodeNames": None}).encode()

    with serve_app(running.app) as url, httpx.Client(base_url=url, timeout=60) as client:
        r = client.post("/filter", content=body(0))
        assert r.status_code == 200 and 0 < len(r.json()["Nodes"]["items"]) <= 600
        after_first = _rss_mib()
        for k in range(1, 100):
            r = client.post("/prioritize" if k % 2 else "/filter", content=body(k))
            assert r.status_code == 200
        grown = _rss_mib() - after_first
    # each body is ~1.4 MB: keeping the bodies (or what was read from them) would show >130 MB
    assert grown < 50, f"RSS grew {grown:.0f} MiB over 100 full-NodeList requests"
