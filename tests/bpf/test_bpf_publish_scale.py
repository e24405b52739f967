"""Signals at 5,000 nodes (issue 12, point 5): the real publisher (bpf/publisher.py) for
every node of a simulated cluster on a fake clock, writes counted against docs/design.md's bound
of 1 write/s per 100 nodes; the write budget on its own; and the NodeSignals writer
(bpf/publish_crd.py) against FakeKubeApi: create with the owner reference, then one merge
patch per publication, re-created after a delete, 409 on create falls back to the patch."""

from __future__ import annotations

import pytest

from bench.publish_scale import simulate
from bpf.publish import PublishConfig
from bpf.publish_crd import NodeSignalsWriter, PublishError, channel_writer
from bpf.publisher import TokenBucket
from extender.config import DEFAULT_STALE_AFTER_S
from kvspread import nodesignals as ns
from kvspread.kube import api_client
from kvspread.settings import ConfigError
from tests.fake_kube import FakeKubeApi, make_node


def test_5000_nodes_stay_within_one_write_per_second_per_100_nodes() -> None:
    # 20 % busy, 20 % changing, 60 % idle; every collector starts within the same 5 s
    r = simulate(nodes=5000, seconds=500.0, steady_from_s=200.0)
    bound = 5000 / 100
    assert r.writes >= 5000  # every node published at least once
    assert r.steady_writes_per_s <= bound
    assert len(r.per_window) == 3 and r.max_window_writes_per_s <= bound  # each 100 s
    # from the start on, every write but each node's first (a start writes once)
    assert (r.writes - 5000) / r.seconds <= bound
    # idle nodes are kept fresh by the heartbeat: no node goes stale at the extender
    assert r.max_gap_s <= PublishConfig().max_interval_s + 5.0 < DEFAULT_STALE_AFTER_S / 2
    assert r.max_document_bytes <= 4096
    assert r.held_by_budget > 0  # the busy nodes did hit the budget


def test_every_node_busy_still_within_the_bound() -> None:
    """Worst case: every node's signals move every cycle; the budget caps it (500 nodes:
    the budget is per node, so the rate scales linearly)."""
    r = simulate(nodes=500, seconds=900.0, busy=1.0, changing=0.0)
    assert r.max_window_writes_per_s <= 500 / 100
    assert r.max_gap_s <= 100.0 + 5.0 + 1e-6  # a busy node writes when a token comes back


def test_the_old_30_s_heartbeat_breaks_the_bound() -> None:
    """What issue 12 measured: a 30 s heartbeat without a budget, idle nodes only, is
    3.3x the bound (5,000 nodes: ~167 Node writes/s)."""
    old = PublishConfig(max_interval_s=30.0, writes_per_100s=0.0)
    r = simulate(nodes=500, seconds=300.0, config=old, busy=0.0, changing=0.0, steady_from_s=0.0)
    assert r.writes_per_s == pytest.approx(500 / 30, rel=0.1)
    assert r.writes_per_s > 3 * 500 / 100


def test_token_bucket_spends_refills_and_caps() -> None:
    b = TokenBucket(rate_per_s=0.01, burst=2)
    assert b.take(0.0) and b.take(0.0) and not b.take(0.0)
    assert not b.take(99.0) and b.take(100.0)  # one token per 100 s
    assert not b.available(150.0)
    assert b.available(1000.0) and b.tokens == 2  # never more than the burst
    assert b.take(-5.0)  # a clock step backwards refills nothing, takes what is there
    unlimited = TokenBucket(rate_per_s=0.0, burst=1)
    assert all(unlimited.take(0.0) for _ in range(100))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"channel": "configmap"}, "publish.channel: expected one of nodesignals, annotation"),
        ({"write_burst": 0}, "publish.write_burst: expected an integer >= 1"),
        ({"writes_per_100s": -1}, "publish.writes_per_100s: expected a number >= 0"),
    ],
)
def test_bad_publish_settings_name_the_key(section: dict, message: str) -> None:
    from bpf.config import from_mapping

    with pytest.raises(ConfigError) as exc:
        from_mapping({"publish": section})
    assert str(exc.value).startswith(message)


def _stored(api: FakeKubeApi, node: str) -> dict | None:
    return api.get("NodeSignals", node, api_version=ns.API_VERSION)


def test_writer_creates_owned_object_then_patches() -> None:
    with FakeKubeApi() as api:
        node = api.put(make_node("gpu-1"))
        write = NodeSignalsWriter(api_client(server=api.url), "gpu-1")
        write('{"v":1,"ts":1.0}')
        obj = _stored(api, "gpu-1")
        assert obj is not None and obj["spec"]["document"] == '{"v":1,"ts":1.0}'
        owner = obj["metadata"]["ownerReferences"][0]
        assert owner == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "gpu-1",
            "uid": node["metadata"]["uid"],
        }
        n = len(api.requests)
        write('{"v":1,"ts":2.0}')
        assert [(m, p) for m, p, _ in api.requests[n:]] == [
            ("PATCH", "/apis/kvspread.io/v1alpha1/nodesignals/gpu-1")
        ]
        assert _stored(api, "gpu-1")["spec"]["document"] == '{"v":1,"ts":2.0}'  # type: ignore[index]
        # deleted (by hand, or its Node re-created): the next write creates it again
        api.delete("NodeSignals", "gpu-1", api_version=ns.API_VERSION)
        write('{"v":1,"ts":3.0}')
        assert _stored(api, "gpu-1")["spec"]["document"] == '{"v":1,"ts":3.0}'  # type: ignore[index]
        assert write.creates == 2


def test_writer_race_on_create_falls_back_to_patch() -> None:
    with FakeKubeApi() as api:
        api.put(make_node("gpu-1"))
        api.fail_next(404, method="PATCH", path_prefix="/apis/kvspread.io/")
        api.put(ns.build_resource("gpu-1", "uid-x", '{"v":1,"ts":0.5}'))  # the other start won
        write = NodeSignalsWriter(api_client(server=api.url), "gpu-1")
        write('{"v":1,"ts":1.0}')
        methods = [m for m, p, _ in api.requests if "nodesignals" in p]
        assert methods == ["PATCH", "POST", "PATCH"]  # 404, 409 AlreadyExists, patched
        assert _stored(api, "gpu-1")["spec"]["document"] == '{"v":1,"ts":1.0}'  # type: ignore[index]


def test_writer_without_its_node_says_what_to_check() -> None:
    with FakeKubeApi() as api:
        write = channel_writer("nodesignals", lambda: api_client(server=api.url), "ghost")
        with pytest.raises(PublishError, match="Node 'ghost' not found: check NODE_NAME"):
            write('{"v":1,"ts":1.0}')
        assert _stored(api, "ghost") is None


def test_writer_without_the_crd_says_how_to_install_it() -> None:
    with FakeKubeApi() as api:
        api.put(make_node("gpu-1"))
        # an API server without the CRD answers 404 on every nodesignals path
        api.fail_next(404, method="PATCH", path_prefix="/apis/kvspread.io/")
        api.fail_next(404, method="POST", path_prefix="/apis/kvspread.io/")
        write = NodeSignalsWriter(api_client(server=api.url), "gpu-1")
        with pytest.raises(PublishError, match=r"kubectl apply -k manifests/crds"):
            write('{"v":1,"ts":1.0}')


def test_annotation_channel_patches_the_node() -> None:
    with FakeKubeApi() as api:
        api.put(make_node("gpu-1"))
        channel_writer("annotation", lambda: api_client(server=api.url), "gpu-1")('{"v":1}')
        node = api.get("Node", "gpu-1")
        assert node["metadata"]["annotations"]["kvspread.io/signals"] == '{"v":1}'  # type: ignore[index]
        assert _stored(api, "gpu-1") is None
