"""Request routing: each policy's choice on hand-built replica states, the metrics the
pickers see (one scrape old, through the engine-metrics parser), the kvspread picker
through the router's own code, and the routing column, comparison and CLI errors."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import router.scoring
from kvspread.engine import EngineParseError, parse_engine_metrics
from router.request import parse_request
from simulator.serving import routing
from simulator.serving.cluster import Pod
from simulator.serving.config import config_from_mapping, default_config
from simulator.serving.engine import Engine
from simulator.serving.experiment import run_experiment, write_outputs
from simulator.serving.routing import (
    KvQueue,
    KvspreadPicker,
    LeastRequest,
    RoundRobin,
    engine_sample,
    kv_queue_scores,
    make_router,
    parse_routings,
    request_body,
    vllm_metrics_text,
)
from simulator.serving.routing_report import ROUTING_METRICS, compare_routing
from simulator.serving.sim import Simulation
from simulator.serving.workload import Request

CFG = default_config()
MODEL = CFG.models["llama-3-8b"]
POOL_TOKENS = 16 * 1000  # 1000 blocks


def pod(pid: str, service: str = "chat", node: int = 0, tiebreak: float = 0.5) -> Pod:
    p = Pod(pid, service, 24.0, 0.0, state="ready", node=node, tiebreak=tiebreak)
    p.engine = Engine(CFG.cost, CFG.gpu, MODEL, POOL_TOKENS)
    return p


def load(p: Pod, waiting: int = 0, running: int = 0, used_blocks: int = 0) -> Pod:
    """Put requests into a replica's engine without running it."""
    eng = p.engine
    assert eng is not None
    for k in range(waiting):
        eng.waiting.append(request(1000 + k))
    for k in range(running):
        eng.running.append(request(2000 + k))
    eng.used_blocks = used_blocks
    return p


def request(
    rid: int, service: str = "chat", prompt: int = 100, images: tuple[int, ...] = ()
) -> Request:
    return Request(rid, service, "text", 0.0, prompt, images, 50)


MODELS = {"chat": "llama-3-8b"}
KINDS = {"chat": "text"}
NODES = {0: "gpu-node-0", 1: "gpu-node-1", 2: "gpu-node-2"}


# ---- the policies' choices on constructed states ----


def test_round_robin_takes_turns_per_service_blind_to_load() -> None:
    rr = RoundRobin()
    pods = [load(pod("a"), waiting=50), pod("b"), pod("c")]
    picks = [rr.pick(request(i), pods, 0.0).pid for i in range(6)]
    assert picks == ["a", "b", "c", "a", "b", "c"]
    other = [pod("x", "vision"), pod("y", "vision")]
    assert rr.pick(request(9, "vision"), other, 0.0).pid == "x"  # its own turn counter


def test_least_request_counts_running_and_waiting_live() -> None:
    lr = LeastRequest()
    a, b, c = (
        load(pod("a"), waiting=1, running=2),
        load(pod("b"), running=2),
        pod("c", tiebreak=0.9),
    )
    assert lr.pick(request(1), [a, b, c], 0.0).pid == "c"
    load(c, running=3)  # live: the next request sees it at once, no scrape needed
    assert lr.pick(request(2), [a, b, c], 0.0).pid == "b"
    d = pod("d", tiebreak=0.1)
    e = pod("e", tiebreak=0.2)
    assert lr.pick(request(3), [e, d], 0.0).pid == "d"  # equal load: the lower tie-break


def test_kv_queue_scores_are_llm_d_normalised() -> None:
    # queue: 1 - (q - qmin)/(qmax - qmin); kv: 1 - usage; weights 2 and 2
    s = kv_queue_scores([(0.0, 0.5), (4.0, 0.0), (2.0, 0.25)])
    assert s == pytest.approx([2 * 1.0 + 2 * 0.5, 2 * 0.0 + 2 * 1.0, 2 * 0.5 + 2 * 0.75])
    assert kv_queue_scores([(3.0, 0.2), (3.0, 0.6)]) == pytest.approx([2 + 1.6, 2 + 0.8])


def test_kv_queue_picks_the_best_scraped_replica_ties_at_random() -> None:
    kq = KvQueue(MODELS, np.random.default_rng(1), 0.5)
    a = load(pod("a"), waiting=4, used_blocks=100)
    b = load(pod("b"), waiting=0, used_blocks=900)
    c = load(pod("c"), waiting=2, used_blocks=100)
    kq.scrape({"chat": [a, b, c]}, NODES, 0.0)
    # a: 0 + 1.8 = 1.8; b: 2 + 0.2 = 2.2; c: 1 + 1.8 = 2.8
    assert kq.pick(request(1), [a, b, c], 0.1).pid == "c"
    x, y = pod("x"), pod("y")
    kq.scrape({"chat": [x, y]}, NODES, 1.0)
    seen = {kq.pick(request(i), [x, y], 1.1).pid for i in range(40)}
    assert seen == {"x", "y"}  # equal scores: GIE's max-score picker shuffles ties


def test_kvspread_picks_through_the_router_scoring(monkeypatch: pytest.MonkeyPatch) -> None:
    # the router's function, not a copy
    assert routing.choose is router.scoring.choose  # type: ignore[attr-defined]
    calls: list[tuple[Any, ...]] = []
    real = router.scoring.choose

    def spy(*args: Any, **kw: Any) -> router.scoring.Decision:
        calls.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(routing, "choose", spy)
    ks = KvspreadPicker(MODELS, KINDS)
    busy = load(pod("busy", node=0), waiting=6, running=10, used_blocks=600)
    idle = load(pod("idle", node=1), running=1, used_blocks=50)
    ks.scrape({"chat": [busy, idle]}, NODES, 0.0)
    chosen = ks.pick(request(1), [busy, idle], 0.1)
    assert chosen.pid == "idle"
    assert len(calls) == 1
    info, views, cfg = calls[0]
    assert info.modality == "text" and info.prompt_tokens == 100
    assert {v.address: (v.waiting, v.running, v.fresh) for v in views} == {
        "busy": (6.0, 10.0, True),
        "idle": (0.0, 1.0, True),
    }
    assert cfg == ks.scoring
    ks.close()


def test_kvspread_counts_its_picks_between_scrapes_kv_queue_herds() -> None:
    """Between two scrapes kv-queue sends every request to the replica that looked best;
    the kvspread picker adds its own picks since the scrape to the queue it saw."""
    pods = [pod("a"), pod("b"), pod("c")]
    kq = KvQueue(MODELS, np.random.default_rng(0), 0.5)
    load(pods[0], waiting=2)
    load(pods[1], waiting=1)
    kq.scrape({"chat": pods}, NODES, 0.5)
    herd = [kq.pick(request(i), pods, 0.6).pid for i in range(6)]
    assert herd == ["c"] * 6  # c looked best at the scrape; it goes on looking so
    fresh = [pod("a"), pod("b"), pod("c")]
    ks = KvspreadPicker(MODELS, KINDS)
    ks.scrape({"chat": fresh}, NODES, 0.0)
    spread = [ks.pick(request(i), fresh, 0.1).pid for i in range(6)]
    assert sorted(spread) == ["a", "a", "b", "b", "c", "c"]
    ks.close()


def test_kvspread_never_ranks_an_unscraped_or_stale_replica_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ks = KvspreadPicker(MODELS, KINDS)
    busy = load(pod("busy"), waiting=5, running=20, used_blocks=800)  # busy, not saturated
    ks.scrape({"chat": [busy]}, NODES, 0.0)
    idle = pod("idle")  # ready after the scrape: idle, but never scraped
    assert ks.pick(request(1), [busy, idle], 0.2).pid == "busy"
    ks.scrape({"chat": [busy, idle]}, NODES, 1.0)  # now both are scraped; idle looks idle
    real = ks._scrape

    def failing(ep: Any) -> Any:
        if ep.address == "idle":
            raise EngineParseError("connection refused")  # its /metrics stops answering
        return real(ep)

    monkeypatch.setattr(ks, "_scrape", failing)
    ks.sets["chat"]._scraper = failing
    t = 1.0 + ks.metrics.stale_after_s + 0.5
    ks.scrape({"chat": [busy, idle]}, NODES, t)
    views = {v.address: v for v in ks.sets["chat"].views()}
    assert not views["idle"].fresh and views["idle"].waiting == 0.0  # stale, looks idle
    assert ks.pick(request(2), [busy, idle], t + 0.1).pid == "busy"
    ks.close()


@pytest.mark.parametrize("name", ["kv-queue", "kvspread"])
def test_metric_pickers_see_the_last_scrape_not_the_live_engine(name: str) -> None:
    """A whole run: at every pick, what kv-queue and kvspread read equals the replicas'
    state at the last scrape; and the live state often differs (staleness is real)."""
    cfg = config_from_mapping(
        {"duration_s": 120.0, "warmup_s": 30.0, "arrivals": {"rate_rps": 6.0}}
    )
    sim = Simulation(cfg, "kvspread", 5, routing=name)
    r = sim.router
    snap: dict[str, tuple[float, float]] = {}
    checked = {"picks": 0, "differs": 0}
    real_scrape, real_pick = r.scrape, r.pick

    def scrape(ready: dict[str, list[Pod]], nodes: dict[int, str], now: float) -> None:
        snap.clear()
        for pods in ready.values():
            for p in pods:
                e = p.engine
                assert e is not None
                snap[p.pid] = (float(len(e.waiting)), e.kv_usage)
        real_scrape(ready, nodes, now)

    def seen(p: Pod, router: Any = r) -> tuple[float, float] | None:
        if isinstance(router, KvQueue):
            return router._seen.get(p.pid)
        v = {x.address: x for x in router.sets[p.service].views()}.get(p.pid)
        if v is None or v.waiting is None or v.kv_usage is None:
            return None
        return (v.waiting, v.kv_usage)

    def pick(req: Request, pods: Sequence[Pod], now: float) -> Pod:
        for p in pods:
            got = seen(p)
            if got is not None:
                assert got == snap[p.pid]
                e = p.engine
                assert e is not None
                checked["differs"] += (float(len(e.waiting)), e.kv_usage) != got
        checked["picks"] += 1
        return real_pick(req, pods, now)

    r.scrape = scrape  # type: ignore[method-assign]
    r.pick = pick  # type: ignore[method-assign]
    sim.run()
    assert checked["picks"] > 100
    assert checked["differs"] > 0


# ---- the metrics text and the request body the router reads ----


def test_engine_sample_is_what_the_parser_reads_from_the_metrics_text() -> None:
    p = load(pod("a"), waiting=3, running=7, used_blocks=333)
    eng = p.engine
    assert eng is not None
    text = vllm_metrics_text("llama-3-8b", eng)
    assert parse_engine_metrics(text) == [engine_sample("llama-3-8b", eng)]


@pytest.mark.parametrize(
    ("images", "modality"), [((), "text"), ((1200,), "image"), ((300, 400, 500), "multi-image")]
)
def test_request_body_reads_back_as_the_simulated_request(
    images: tuple[int, ...], modality: str
) -> None:
    req = Request(1, "vision", "image", 0.0, 2000 + sum(images), images, 80)
    info = parse_request(request_body(req, "qwen2-vl-7b", 28))
    assert info.modality == modality
    assert info.text_tokens == 2000
    assert [i.tokens for i in info.images] == list(images)
    assert info.max_tokens == 256  # the router's default: traces do not say what was asked


# ---- interface ----


def test_parse_routings() -> None:
    assert parse_routings("round-robin, kvspread,round-robin") == ["round-robin", "kvspread"]
    with pytest.raises(ValueError, match=r"--routing: unknown policy 'random'"):
        parse_routings("random")
    with pytest.raises(ValueError, match="no policy given"):
        parse_routings(" , ")
    with pytest.raises(ValueError, match="unknown routing policy"):
        make_router("nope", MODELS, KINDS, np.random.default_rng(0))


def test_default_routing_is_least_request_the_behaviour_before_routing() -> None:
    cfg = config_from_mapping(
        {"duration_s": 120.0, "warmup_s": 30.0, "arrivals": {"rate_rps": 4.0}}
    )
    a = Simulation(cfg, "kvspread", 2)
    b = Simulation(cfg, "kvspread", 2, routing="least-request")
    ra, rb = a.run(), b.run()
    assert ra.routing == "least-request"
    assert [(q.status, q.finish) for q in ra.requests] == [
        (q.status, q.finish) for q in rb.requests
    ]
    assert ra.events == rb.events  # no scrape events for a policy that reads no metrics


def test_routing_column_and_comparison(tmp_path: Path) -> None:
    cfg = config_from_mapping({"duration_s": 60.0, "warmup_s": 20.0, "arrivals": {"rate_rps": 3.0}})
    names = ["round-robin", "least-request", "kv-queue", "kvspread"]
    exp = run_experiment(cfg, ["kvspread"], [1, 2], progress=None, routings=names)
    assert [r.routing for r in exp.results] == [n for n in names for _ in (1, 2)]
    md = write_outputs(exp, tmp_path, "kvspread simulate serving --routing " + ",".join(names))
    with (tmp_path / "serving_summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["routing"] for r in rows] == names
    assert rows[0]["policy"] == "kvspread" and rows[0]["seeds"] == "2"
    with (tmp_path / "serving_routing_comparison.csv").open() as f:
        cmp = list(csv.DictReader(f))
    assert {c["routing"] for c in cmp} == set(names[1:])
    assert {c["baseline"] for c in cmp} == {"round-robin"}
    assert "### Request routing (paired by seed, against round-robin)" in md
    assert "| design notes | round-robin | 1842 |" in md
    assert "| this run | kvspread |" in md
    # one routing: no routing section, no comparison file
    one = run_experiment(cfg, ["kvspread"], [1], progress=None)
    assert compare_routing(one.rows) == []


def test_compare_routing_verdicts_follow_the_interval() -> None:
    def row(routing: str, seed: int, e2e: float) -> dict[str, Any]:
        base = {m: 0.5 for m in ROUTING_METRICS}
        return {
            **base,
            "policy": "p",
            "autoscaler": "a",
            "routing": routing,
            "seed": seed,
            "mean_e2e_s": e2e,
        }

    rows = [row("round-robin", s, 2.0 + 0.1 * s) for s in range(5)]
    rows += [row("kvspread", s, 1.5 + 0.1 * s + 0.01 * (s % 2)) for s in range(5)]
    rows += [row("kv-queue", s, 2.0 + 0.1 * s + (0.2 if s % 2 else -0.2)) for s in range(5)]
    by = {(c["routing"], c["metric"]): c for c in compare_routing(rows)}
    assert by[("kvspread", "mean_e2e_s")]["verdict"] == "better"
    assert by[("kv-queue", "mean_e2e_s")]["verdict"] == "no significant difference"


def test_cli_unknown_routing_is_one_line_and_exit_2(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "kvspread", "simulate", "serving"]
        + ["--routing", "round-robin,fastest", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "--routing: unknown policy 'fastest'" in lines[0]
    assert "round-robin, least-request, kv-queue, llm-d, kvspread" in lines[0]
    assert not (tmp_path / "o").exists()  # nothing ran, nothing written


def test_picker_scoring_from_the_config_reaches_the_kvspread_picker() -> None:
    """`picker_scoring:` is the router's own `scoring:` section: its values reach the
    simulated picker (and so its choices), its keys and bounds are the router's."""
    base = {"duration_s": 120.0, "warmup_s": 30.0, "arrivals": {"rate_rps": 6.0}}
    cfg = config_from_mapping({**base, "picker_scoring": {"w_prefill": 0.0, "w_kv": 3.0}})
    picker = Simulation(cfg, "kvspread", 5, routing="kvspread").router
    assert isinstance(picker, routing.KvspreadPicker)
    assert (picker.scoring.w_prefill, picker.scoring.w_kv) == (0.0, 3.0)
    assert picker.scoring.w_queue == router.scoring.ScoringConfig().w_queue
    default = Simulation(config_from_mapping(base), "kvspread", 5, routing="kvspread").router
    assert isinstance(default, routing.KvspreadPicker)
    assert default.scoring == router.scoring.ScoringConfig()
    with pytest.raises(ValueError, match="picker_scoring.w_prefil: unknown key"):
        config_from_mapping({**base, "picker_scoring": {"w_prefil": 0.0}})
    with pytest.raises(ValueError, match="picker_scoring.w_kv: expected a number >= 0"):
        config_from_mapping({**base, "picker_scoring": {"w_kv": -1}})
