"""What the simulated collector publishes (GPU utilisation, when a pod becomes visible,
the collector's publish rule) and the device plugin's GPU choice, the same for every
policy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvspread.signals import decode_signals
from simulator.serving.cluster import NVML_UTIL_WINDOW_S, Gpu, Node, device_plugin_gpu
from simulator.serving.config import SimConfig
from simulator.serving.placement import POLICIES
from simulator.serving.sim import Simulation


def test_util_is_the_busy_share_of_the_nvml_window() -> None:
    g = Gpu(0, 0, 80.0)
    assert g.util(5.0) == 0.0
    g.set_busy("a", True, 10.0)
    g.set_busy("b", True, 10.2)  # still busy: no new transition
    g.set_busy("a", False, 10.5)
    g.set_busy("b", False, 10.6)
    assert NVML_UTIL_WINDOW_S == 1.0
    assert g.util(10.6) == pytest.approx(0.6)
    assert g.util(11.0) == pytest.approx(0.6)
    assert g.util(11.3) == pytest.approx(0.3)
    assert g.util(12.0) == 0.0
    g.set_busy("c", True, 20.0)
    assert g.util(25.0) == 1.0
    assert len(g.busy_log) <= 3  # old transitions are dropped


def test_device_plugin_takes_the_gpu_with_the_fewest_pods() -> None:
    gpus = [Gpu(0, j, 80.0) for j in range(3)]
    gpus[0].occupants += ["x", "y"]
    gpus[1].occupants += ["z"]
    gpus[2].occupants += ["w"]
    node = Node("n", 0, "mixed", False, gpus)
    assert device_plugin_gpu(node, 4).index == 1  # fewest pods, then the lower index
    gpus[1].occupants += ["v", "u", "t"]
    assert device_plugin_gpu(node, 4).index == 2
    for g in gpus:
        g.occupants += ["s"] * (4 - len(g.occupants))
    assert device_plugin_gpu(node, 4) is None


def _sim(policy: str) -> Simulation:
    sim = Simulation(SimConfig(), policy, 1, requests=[])
    sim._retired = []
    sim._build_cluster()
    sim._publish(0.0)
    return sim


def test_signals_carry_measured_util_and_no_absent_marker() -> None:
    sim = _sim("kvspread")
    for index, view in sim.views.items():
        doc = decode_signals(view.annotation())
        assert "util" not in doc.absent
        node = sim.nodes[index]
        for g, sig in zip(node.gpus, doc.gpus or (), strict=True):
            # background tenants are busy all the time or never
            assert sig.util == (1.0 if g.busy else 0.0)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_gets_the_device_plugins_gpu(policy: str) -> None:
    sim = _sim(policy)
    # four 48 GiB pods fit on the GPUs the device plugin picks; a fifth would land on a GPU
    # with 32 GiB free, which kvspread (signals still fresh: 300 s) rightly refuses
    for k in range(4):
        pod = sim._new_pod("docs", 100.0 + k)
        assert sim._try_place(pod, 100.0 + k)
        node = sim.nodes[pod.node]
        assert pod.pid in node.gpus[pod.gpu].occupants
        others = [len(g.occupants) for g in node.gpus if g.index != pod.gpu]
        # the pod's GPU had the fewest pods before it came (so at most one more now)
        assert len(node.gpus[pod.gpu].occupants) - 1 <= min(others)


def test_a_starting_pod_shows_in_the_signals_only_once_nvml_sees_it() -> None:
    sim = _sim("round-robin")
    st = sim.cfg.startup
    pod = sim._new_pod("chat", 100.0)
    assert sim._try_place(pod, 100.0)
    model = sim.cfg.services["chat"].model
    visible = st.cold_visible_s  # a bare cluster: no node has run the model yet
    assert pod.visible_at == pytest.approx(100.0 + visible)

    def listed(now: float) -> bool:
        sim._publish(now)
        doc = decode_signals(sim.views[pod.node].annotation())
        return model in (doc.gpus or ())[pod.gpu].models

    assert not listed(100.0 + visible - 1.0)
    assert listed(100.0 + visible + 10.0)


def test_the_collector_publishes_only_on_change_or_heartbeat() -> None:
    sim = _sim("memory-weighted")
    first = {i: v.ts for i, v in sim.views.items()}
    sim._publish(10.0)  # nothing moved: the old documents stay
    assert {i: v.ts for i, v in sim.views.items()} == first
    beat = sim.publish_cfg.max_interval_s
    assert beat == 120.0  # the collector's default heartbeat
    sim._publish(beat - 1.0)  # still nothing moved, no heartbeat due
    assert {i: v.ts for i, v in sim.views.items()} == first
    sim._publish(beat)  # the heartbeat
    assert all(v.ts == beat for v in sim.views.values())


def test_the_first_document_shows_the_busy_background_tenants() -> None:
    """Background tenants drawn busy have computed since before the run, so the t = 0
    document (read before the initial replicas are placed) shows them at 100 %; starting
    their busy time at 0 hid them from the first placement (every GPU read 0 %)."""
    base = SimConfig()
    cfg = replace(base, background=replace(base.background, gpu_fraction=0.5, busy_p=0.5))
    sim = Simulation(cfg, "kvspread", 3, requests=[])
    sim._retired = []
    sim._build_cluster()
    sim._publish(0.0)
    busy = idle = 0
    for index, view in sim.views.items():
        doc = decode_signals(view.annotation())
        for g, sig in zip(sim.nodes[index].gpus, doc.gpus or (), strict=True):
            assert sig.util == (1.0 if g.busy else 0.0)
            busy += bool(g.busy)
            idle += not g.busy
    assert busy and idle  # both kinds drawn, so the check above discriminates
