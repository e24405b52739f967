"""The kvspread policies run through the extender's own functions."""

from __future__ import annotations

import numpy as np

from extender.model import GpuState, NodeState, PodShape
from extender.scoring import score_nodes
from simulator.kubescore import Requested, balanced_allocation, least_allocated
from simulator.replay.placement import Trace, run_replay
from simulator.replay.policies import Replay
from simulator.replay.policies.kvspread import KvspreadK8sPolicy, KvspreadPolicy


def _policy(trace: Trace, cls: type = KvspreadPolicy) -> KvspreadPolicy:
    captured: dict[str, KvspreadPolicy] = {}

    def factory(r: Replay) -> KvspreadPolicy:
        captured["p"] = cls(r)
        return captured["p"]

    run_replay(trace, "kvspread", 3, stop_at_percent=12, policy_factory=factory)
    return captured["p"]


def test_scores_are_the_extenders(default_trace: Trace) -> None:
    policy = _policy(default_trace)
    c = policy.r.cluster
    pod = next(p for p in default_trace.pod_objects if p.is_share)
    rows = np.arange(40)
    got = policy.score(pod, rows)
    # the same nodes, built as NodeStates and scored by extender.scoring.score_nodes
    states = [
        NodeState(
            name=c.nodes.names[i],
            gpus=tuple(
                GpuState(1000.0, allocated_mib=float(1000 - f))
                for f in c.gpu_free[i, : c.n_gpu[i]].tolist()
            ),
            cpu_free_milli=float(c.cpu_free[i]),
        )
        for i in rows
    ]
    shape = PodShape(gpus=1, mem_per_gpu_mib=float(pod.gpu_milli), cpu_milli=float(pod.cpu_milli))
    want = score_nodes(shape, states, policy.cfg, policy.shapes)
    fits = [s.fits for s in want]
    assert [int(g) for g, f in zip(got, fits, strict=True) if f] == [
        s.score for s in want if s.fits
    ]
    assert set(got.tolist()) <= set(range(-1, 11))
    fitting = got[got >= 0]
    # candidate normalisation: the best gets 10 unless all candidates are equal
    assert fitting.max() == 10 or len(set(fitting.tolist())) == 1


def test_kube_scheduler_default_plugins() -> None:
    cap_c, cap_m = np.array([100000]), np.array([100000])
    free_c, free_m = np.array([60000]), np.array([20000])
    requested = Requested(cap_c - free_c + 10000, cap_m - free_m + 10000, cap_c, cap_m)
    # LeastAllocated: cpu (100000 - 50000) * 100 // 100000 = 50, mem (100000 - 90000) = 10
    assert least_allocated(requested).tolist() == [30]
    # Balanced: fractions 0.5 and 0.9, std 0.2 -> 80
    assert balanced_allocation(requested).tolist() == [80]
    over = Requested(np.array([120000]), np.array([50000]), cap_c, cap_m)
    assert least_allocated(over).tolist() == [25]  # an over-requested resource scores 0
    assert balanced_allocation(over).tolist() == [75]  # its fraction counts as 1


def test_k8s_mode_adds_the_extender_at_its_weight(default_trace: Trace) -> None:
    policy = _policy(default_trace, KvspreadK8sPolicy)
    pod = next(p for p in default_trace.pod_objects if p.num_gpu == 1 and not p.is_share)
    rows = np.arange(60)
    total = policy.score(pod, rows)
    _, ext = policy.extender_scores(pod, rows)
    ok = ext >= 0
    assert (total[ok] >= ext[ok] * 10 * policy.weight).all()
    assert (total[ok] <= ext[ok] * 10 * policy.weight + 200).all()
