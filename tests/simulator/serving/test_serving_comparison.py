"""The comparison: kube-default placement, the four autoscalers, paired statistics."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kvspread.names import SLI_SLO_PRESSURE
from simulator.progress import WorkProgress
from simulator.serving.autoscalers import (
    AUTOSCALERS,
    hpa_metrics,
    parse_autoscalers,
    peak_replicas,
)
from simulator.serving.config import config_from_mapping
from simulator.serving.experiment import run_experiment
from simulator.serving.kubedefault import KubeDefault, scores
from simulator.serving.placement import POLICIES, BoundPod, ClusterSnapshot, make_policy
from simulator.serving.sim import simulate
from simulator.serving.stats import compare, paired, t_quantile_975
from simulator.serving.workload import generate_requests
from tests.simulator.serving.test_serving_placement import WANT, cluster


def bound(node_pods: dict[int, list[str]]) -> dict[int, list[BoundPod]]:
    return {
        n: [BoundPod(m, "image", "realtime", 32.0, name=f"{m}-{i}") for i, m in enumerate(models)]
        for n, models in node_pods.items()
    }


def test_kube_default_is_registered() -> None:
    assert POLICIES[0] == "kube-default"
    assert isinstance(make_policy("kube-default", np.random.default_rng(0)), KubeDefault)


def test_kube_default_spreads_a_service_over_nodes() -> None:
    nodes = cluster([[0, 0], [0, 0], [0, 0]])
    # node 0 already runs two replicas of the model: topology spread and least-allocated
    # both point away from it
    feasible, total = scores(nodes, 4, bound({0: [WANT.model, WANT.model]}), WANT.model)
    assert [n.index for n in feasible] == [0, 1, 2]
    assert total[0] < total[1] == total[2]


def test_kube_default_ignores_gpu_memory() -> None:
    # node 0's GPUs are nearly full of other tenants' memory; a free slot is all it checks
    # (one pod per GPU); node 1's GPUs hold three small pods each, so it has more pods'
    # CPU and memory requests and LeastAllocated prefers the nearly full node 0
    nodes = cluster([[78, 78], [1, 1]])
    for g in nodes[1].gpus:
        for k in range(2):
            g.claims[f"y-{g.index}-{k}"] = 1.0
            g.occupants.append(f"y-{g.index}-{k}")
    pol = KubeDefault(np.random.default_rng(1))
    picks = {pol.choose(WANT, ClusterSnapshot(nodes, 4)) for _ in range(5)}
    assert picks == {(0, 0)}
    assert nodes[0].gpus[0].free_gib < WANT.request_gib  # it does not fit in memory


def test_kube_default_fills_slots_then_refuses() -> None:
    nodes = cluster([[1], [1]])
    pol = KubeDefault(np.random.default_rng(0))
    assert pol.choose(WANT, ClusterSnapshot(nodes, 1)) is None  # every slot taken


def test_autoscaler_metrics() -> None:
    cfg = config_from_mapping({})
    chat = cfg.services["chat"]
    assert hpa_metrics("none", chat) is None
    (pressure,) = hpa_metrics("slo", chat)  # type: ignore[misc]
    assert (pressure.metric, pressure.type, pressure.value) == (SLI_SLO_PRESSURE, "Value", 1.0)
    assert hpa_metrics("fixed-peak", chat) is None
    (rate,) = hpa_metrics("request-rate", chat)  # type: ignore[misc]
    assert rate.metric == "kvspread_requests_per_second" and rate.type == "AverageValue"
    (queue,) = hpa_metrics("queue-depth", chat)  # type: ignore[misc]
    assert queue.metric == "kvspread_queue_depth" and queue.value == chat.queue_target
    with pytest.raises(ValueError, match="unknown autoscaler"):
        hpa_metrics("magic", chat)
    assert parse_autoscalers("slo,none,slo") == ["slo", "none"]
    with pytest.raises(ValueError, match="--autoscalers"):
        parse_autoscalers("keda")


def test_fixed_peak_holds_the_request_rate_hpas_peak_proposal() -> None:
    """fixed-peak: ceil(most arrivals in any 60 s / 60 / the rps target), held all run."""
    cfg = config_from_mapping({"duration_s": 300.0, "warmup_s": 30.0})
    reqs = generate_requests(cfg, 1)
    peak = peak_replicas(cfg, reqs)
    for name, spec in cfg.services.items():
        times = sorted(r.arrival for r in reqs if r.service == name)
        most = max(sum(1 for u in times if t - 60.0 < u <= t) for t in times)
        want = math.ceil(most / 60.0 / spec.metrics[0].value)
        assert peak[name] == max(spec.min_replicas, min(spec.max_replicas, want)), name
    run = simulate(cfg, "round-robin", 1, autoscaler="fixed-peak")
    assert run.scale_events == [] and run.autoscaler == "fixed-peak"
    assert all(row.replicas == peak for row in run.timeline)
    assert {s: spec.initial_replicas for s, spec in run.config.services.items()} == peak


def test_none_keeps_replicas_fixed_and_others_scale() -> None:
    cfg = config_from_mapping({"duration_s": 300.0, "warmup_s": 30.0})
    fixed = simulate(cfg, "round-robin", 1, autoscaler="none")
    assert fixed.scale_events == [] and fixed.autoscaler == "none"
    assert all(
        row.replicas == {s: spec.initial_replicas for s, spec in cfg.services.items()}
        for row in fixed.timeline
    )
    scaled = simulate(cfg, "round-robin", 1, autoscaler="queue-depth")
    assert scaled.scale_events  # bursty traffic moves the queue past its target


def test_every_pair_sees_the_same_arrivals() -> None:
    cfg = config_from_mapping({"duration_s": 150.0, "warmup_s": 30.0})
    exp = run_experiment(
        cfg, ["kube-default", "kvspread"], [3], progress=None, autoscalers=["none", "slo"]
    )
    arrivals = {
        (r.policy, r.autoscaler): [(q.arrival, q.prompt, q.out) for q in r.requests]
        for r in exp.results
    }
    assert len(arrivals) == 4 and len({tuple(v) for v in arrivals.values()}) == 1
    assert {(a["policy"], a["autoscaler"]) for a in exp.summary} == set(arrivals)


def test_t_quantiles() -> None:
    assert t_quantile_975(1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile_975(9) == pytest.approx(2.262, abs=1e-3)
    assert math.isnan(t_quantile_975(0))


def test_paired_differences_and_verdicts() -> None:
    # diffs 1, 2, 3: mean 2, sd 1, half-width t(0.975, 2) x 1 / sqrt(3) = 2.484 -> contains 0
    p = paired("slo_realtime", [2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert p.mean == pytest.approx(2.0)
    assert (p.low, p.high) == pytest.approx((2 - 2.4841, 2 + 2.4841), abs=1e-3)
    # +200 pp is material (>= 1 pp): the interval contains 0 because 3 seeds cannot tell
    assert p.verdict == "inconclusive"
    # t(0.975, 3) x 1 / sqrt(4) = 1.59 < 2: four seeds of this spread would exclude 0
    assert p.seeds_needed == 4 and p.baseline_mean == pytest.approx(2.0)
    small = paired("slo_realtime", [0.901, 0.898, 0.904], [0.9, 0.9, 0.9])
    assert small.verdict == "no significant difference"  # +0.1 pp: under the 1 pp
    up = paired("slo_realtime", [0.9, 0.91, 0.92, 0.9], [0.8, 0.8, 0.81, 0.8])
    assert up.verdict == "better"
    # lower is better for latency: a consistent increase is worse
    slow = paired("mean_e2e_s", [5.0, 5.2, 5.1], [4.0, 4.1, 4.0])
    assert slow.verdict == "worse"
    assert paired("mean_e2e_s", [3.0], [4.0]).verdict == "one seed: no CI"
    assert paired("mean_e2e_s", [math.nan], [1.0]).verdict == "no data"


def test_compare_pairs_by_seed() -> None:
    rows = []
    for seed in (1, 2, 3, 4):
        rows.append({"policy": "kube-default", "autoscaler": "request-rate", "seed": seed,
                     "slo_realtime": 0.80 + 0.01 * seed})  # fmt: skip
        rows.append({"policy": "kvspread", "autoscaler": "slo", "seed": seed,
                     "slo_realtime": 0.85 + 0.01 * seed})  # fmt: skip
    rows.append({"policy": "kvspread", "autoscaler": "slo", "seed": 9, "slo_realtime": 0.0})
    (c,) = compare(rows, ("kube-default", "request-rate"), ["slo_realtime"])
    assert c["seeds"] == 4  # seed 9 has no baseline to pair with
    assert c["mean_diff"] == pytest.approx(0.05) and c["verdict"] == "better"


def test_one_seed_report_says_so(tmp_path: Path) -> None:
    from simulator.serving.experiment import write_outputs

    cfg = config_from_mapping({"duration_s": 100.0, "warmup_s": 20.0})
    exp = run_experiment(cfg, ["kube-default"], [4], progress=None, autoscalers=AUTOSCALERS[:2])
    md = write_outputs(exp, tmp_path, "x")
    assert "Mean over seeds" not in md and "one seed: values are that run's" in md


class _Log:
    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_progress_prints_a_line_every_ten_percent_off_a_terminal() -> None:
    log = _Log()
    bar = WorkProgress(["a"] * 40, log, "serving")  # type: ignore[arg-type]
    for _ in range(40):
        bar.finished("a", 1.0)
    lines = log.text.splitlines()
    assert len(lines) == 10 and lines[-1].startswith("serving: 100% of the work (40/40 runs, ")
    assert lines[-1].endswith("s elapsed, eta 0 s)")
    assert "\r" not in log.text
