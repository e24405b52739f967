"""Request generation: determinism, the kind mix, size distributions, burstiness."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.serving.config import config_from_mapping
from simulator.serving.workload import burst_episodes, generate_requests

STATIONARY = {
    "duration_s": 12_000.0,
    "warmup_s": 0.0,
    "arrivals": {"peak_extra": 0.0, "burst_factor": 1.0, "rate_rps": 3.0},
}


def test_same_seed_same_requests_other_seed_differs() -> None:
    cfg = config_from_mapping({"duration_s": 600.0})
    a = generate_requests(cfg, 7)
    b = generate_requests(cfg, 7)
    c = generate_requests(cfg, 8)
    key = [(r.arrival, r.kind, r.prompt, r.images, r.out) for r in a]
    assert key == [(r.arrival, r.kind, r.prompt, r.images, r.out) for r in b]
    assert key != [(r.arrival, r.kind, r.prompt, r.images, r.out) for r in c]
    assert [r.rid for r in a] == list(range(len(a)))
    assert all(x.arrival <= y.arrival for x, y in zip(a, a[1:], strict=False))


def test_mix_rate_and_sizes_follow_the_configuration() -> None:
    cfg = config_from_mapping(STATIONARY)
    reqs = generate_requests(cfg, 1)
    n = len(reqs)
    assert n / cfg.duration_s == pytest.approx(3.0, rel=0.1)
    share = {k: sum(r.kind == k for r in reqs) / n for k in ("text", "image", "multi-image")}
    assert share["text"] == pytest.approx(0.50, abs=0.04)
    assert share["image"] == pytest.approx(0.33, abs=0.04)
    assert share["multi-image"] == pytest.approx(0.17, abs=0.03)
    text = [r for r in reqs if r.kind == "text"]
    assert np.median([r.prompt for r in text]) == pytest.approx(1020, rel=0.08)
    assert np.median([r.out for r in text]) == pytest.approx(129, rel=0.1)
    image = [r for r in reqs if r.kind == "image"]
    assert all(len(r.images) == 1 and r.images[0] in (256, 1024) for r in image)
    assert all(r.prompt > r.images[0] for r in image)  # text tokens come on top
    multi = [r for r in reqs if r.kind == "multi-image"]
    counts = [len(r.images) for r in multi]
    assert min(counts) >= 8 and max(counts) <= 48
    tail = sum(c > 16 for c in counts) / len(counts)
    assert tail == pytest.approx(0.1, abs=0.04)
    assert all(256 <= t <= 1280 and t % 4 == 0 for r in multi for t in r.images)


def test_gamma_gaps_have_the_configured_cv() -> None:
    cfg = config_from_mapping(STATIONARY)
    reqs = [r for r in generate_requests(cfg, 3) if r.kind == "text"]
    gaps = np.diff([r.arrival for r in reqs])
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(2.5, rel=0.2)


def test_bursts_raise_the_image_rate() -> None:
    cfg = config_from_mapping(
        {"duration_s": 20_000.0, "warmup_s": 0.0, "arrivals": {"peak_extra": 0.0}}
    )
    episodes = burst_episodes(cfg, 5, 20_000.0)
    assert episodes and all(45 <= b - a <= 120 for a, b in episodes)
    reqs = generate_requests(cfg, 5)

    def inside(t: float) -> bool:
        return any(a <= t < b for a, b in episodes)

    burst_time = sum(b - a for a, b in episodes)
    calm_time = 20_000.0 - burst_time
    img_in = sum(1 for r in reqs if r.kind == "image" and inside(r.arrival)) / burst_time
    img_out = sum(1 for r in reqs if r.kind == "image" and not inside(r.arrival)) / calm_time
    txt_in = sum(1 for r in reqs if r.kind == "text" and inside(r.arrival)) / burst_time
    txt_out = sum(1 for r in reqs if r.kind == "text" and not inside(r.arrival)) / calm_time
    assert img_in / img_out > 2.5  # 5x configured; Gamma noise and episode edges blur it
    assert math.isclose(txt_in / txt_out, 1.0, rel_tol=0.5)
