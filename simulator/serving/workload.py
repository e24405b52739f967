"""Requests: the three kinds, their token and image sizes, and bursty arrival times.

Everything is drawn up-front from the seed (one independent random stream per kind and
one for the burst episodes), so a run is deterministic and the same seed offers every
placement policy exactly the same requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.serving.config import KindSpec, SimConfig

__all__ = [
    "Request",
    "generate_requests",
    "burst_episodes",
    "rate_multiplier",
    "check_run_size",
]


@dataclass(slots=True, eq=False)
class Request:
    """One inference request and what happened to it (times in simulated seconds).

    `prompt` counts text plus image tokens; `images` holds the tokens of each image, which
    sit at the start of the prompt (before its text, as chat templates put them).
    `ctx` is the context currently held in the KV cache (prompt + generated tokens once
    prefilled); `done_prefill` counts tokens of the current (re)prefill already computed.

    Content ids, for the engine's caches and the router's scorers (empty: unknown, so
    nothing is shared): `block_hashes` is a hash chain over the prompt's content blocks
    (entry i stands for the whole prefix up to block i, as vLLM's block hashes do) and
    `block_ends` the prompt offset where each block ends (a Mooncake block covers 512
    tokens; simulator.serving.prefixcache); `reply_hash` the chain entry of this request's
    answer (up to its last token, whose KV is never computed), which the next turn of a
    conversation re-sends (0: none); `image_ids` one id
    per entry of `images` (equal ids: the same image).
    """

    rid: int
    service: str
    kind: str
    arrival: float
    prompt: int
    images: tuple[int, ...]
    out: int
    gen: int = 0
    ctx: int = 0
    done_prefill: int = 0
    need_prefill: int = 0
    encoded: bool = False
    blocks: int = 0
    admitted: bool = False
    first_token: float = math.nan
    finish: float = math.nan
    status: str = "pending"  # pending | ok | oom | aborted
    preemptions: int = 0
    instance: int = -1
    node: int = -1
    block_hashes: tuple[int, ...] = ()
    block_ends: tuple[int, ...] = ()
    reply_hash: int = 0
    image_ids: tuple[int, ...] = ()
    # the engine's bookkeeping of its caches for this request
    held: tuple[int, ...] = ()  # cached content blocks it holds a reference on
    shared: int = 0  # engine blocks of those (counted once in the pool, not per request)
    prefix_query_tokens: int = 0  # prompt tokens looked up, summed over its admissions
    prefix_hit_tokens: int = 0  # of those, found cached (not prefilled)
    # of those, found on admissions after a preemption (vLLM counts these apart:
    # PrefixCacheStats.preempted_hits, vllm/v1/metrics/stats.py)
    prefix_rehit_tokens: int = 0
    kv_blocks_new: int = 0  # engine blocks newly taken (not hit), over all its admissions
    images_prefix: int = 0  # images inside the cached prefix: no encoder output needed
    images_encoder_hits: int = 0  # images whose encoder output was still cached
    images_encoded: int = 0  # images encoded

    @property
    def image_tokens(self) -> int:
        return sum(self.images)

    @property
    def total_tokens(self) -> int:
        return self.prompt + self.out


def burst_episodes(cfg: SimConfig, seed: int, end: float) -> list[tuple[float, float]]:
    """Image-burst episodes [(start, stop)]: Poisson starts, uniform lengths."""
    a = cfg.arrivals
    rng = np.random.default_rng([seed, 9001])
    out: list[tuple[float, float]] = []
    t = 0.0
    if a.burst_factor <= 1.0 or a.burst_every_s <= 0:
        return out
    while True:
        t += float(rng.exponential(a.burst_every_s))
        if t >= end:
            return out
        length = float(rng.uniform(a.burst_min_s, a.burst_max_s))
        out.append((t, t + length))
        t += length


def rate_multiplier(cfg: SimConfig, t: float, end: float) -> float:
    """Slow load swell: 1 + peak_extra * sin^2(pi t / end) (one peak mid-run)."""
    return 1.0 + cfg.arrivals.peak_extra * math.sin(math.pi * t / end) ** 2


def _lognormal(rng: np.random.Generator, median: float, sigma: float) -> float:
    return float(median * math.exp(sigma * rng.standard_normal()))


def _sizes(
    rng: np.random.Generator, k: KindSpec, cum: np.ndarray | None
) -> tuple[int, tuple[int, ...], int]:
    """(prompt tokens incl. images, tokens per image, output tokens) of one request."""
    if k.text_sigma > 0 and k.text_median > 0:
        text = max(1, round(_lognormal(rng, k.text_median, k.text_sigma)))
    else:
        text = int(rng.integers(k.text_lo, k.text_hi + 1)) if k.text_hi > 0 else 1
    n_images = 0
    if k.images_max > 0:
        if (
            k.images_tail_p > 0
            and k.images_tail_max > k.images_max
            and rng.random() < k.images_tail_p
        ):
            n_images = int(rng.integers(k.images_max + 1, k.images_tail_max + 1))
        else:
            n_images = int(rng.integers(k.images_min, k.images_max + 1))
    images: tuple[int, ...] = ()
    if n_images:
        if cum is not None:
            idx = np.searchsorted(cum, rng.random(n_images), side="right")
            images = tuple(int(k.image_tokens[min(int(i), len(k.image_tokens) - 1)]) for i in idx)
        else:
            tok = rng.integers(k.image_tok_lo, k.image_tok_hi + 1, size=n_images)
            images = tuple(max(4, 4 * round(int(t) / 4)) for t in tok)
    out = max(1, round(_lognormal(rng, k.out_median, k.out_sigma)))
    return text + sum(images), images, out


def _kind_services(cfg: SimConfig) -> dict[str, str]:
    """Each kind's service: the first one configured for it (synthetic traffic)."""
    kind_service: dict[str, str] = {}
    for name, s in cfg.services.items():
        kind_service.setdefault(s.kind, name)
    return kind_service


def check_run_size(cfg: SimConfig) -> None:
    """Refuse, before any request is made, a run whose services would send more than
    simulator.serving.workloads.MAX_RUN_REQUESTS each (a mistyped --rate-scale or --rate),
    with a ConfigError naming the service and the expected count (the workload's mean rate;
    for synthetic traffic the swell's mean and the bursts' share of the time)."""
    from kvspread.settings import ConfigError
    from simulator.serving.workloads import MAX_RUN_REQUESTS, expected_requests, load_workload

    end = cfg.warmup_s + cfg.duration_s
    counts: dict[str, float] = {}
    if cfg.workloads:
        for name in cfg.services:
            if name in cfg.workloads:
                wl = load_workload(cfg.workloads[name].path)
                counts[name] = expected_requests(wl, cfg.workload_start_s, end, cfg.rate_scale)
    else:  # the expected count: the swell's mean (1 + peak_extra / 2) and the bursts' share
        a = cfg.arrivals
        total = sum(k.share for k in cfg.kinds.values()) or 1.0
        mean_burst = (a.burst_min_s + a.burst_max_s) / 2
        in_burst = mean_burst / (a.burst_every_s + mean_burst) if a.burst_every_s > 0 else 0.0
        kind_service = _kind_services(cfg)
        for kind, spec in cfg.kinds.items():
            service = kind_service.get(kind, kind)
            boost = 1 + (a.burst_factor - 1) * in_burst if kind in a.burst_kinds else 1.0
            rate = a.rate_rps * max(spec.share, 0.0) / total * (1 + a.peak_extra / 2) * boost
            counts[service] = counts.get(service, 0.0) + rate * end
    for name, n in counts.items():
        if n > MAX_RUN_REQUESTS:
            raise ConfigError(
                f"{name}: about {n:,.0f} requests in {end:,.0f} s (warm-up included); a run"
                f" sends at most {MAX_RUN_REQUESTS:,} per service: lower --rate-scale, --rate"
                " or --duration"
            )


def generate_requests(cfg: SimConfig, seed: int) -> list[Request]:
    """All requests of a run (warm-up included), sorted by arrival time.

    Per kind: a renewal process whose gaps are Gamma(shape 1/cv^2, mean 1) divided by the
    current rate (rate_rps x share x swell, x burst factor for `burst_kinds` in an episode).
    Each kind goes to the first service configured for it. With `cfg.workloads` set, each
    service's requests come from its real workload instead (simulator.serving.workloads).
    """
    end = cfg.warmup_s + cfg.duration_s
    if cfg.workloads:
        return _with_sessions(cfg, seed, _real_requests(cfg, seed, end))
    a = cfg.arrivals
    shape = 1.0 / (a.cv * a.cv)
    episodes = burst_episodes(cfg, seed, end)
    kind_service = _kind_services(cfg)
    total_share = sum(k.share for k in cfg.kinds.values())
    reqs: list[Request] = []
    for idx, (kind, spec) in enumerate(sorted(cfg.kinds.items())):
        if spec.share <= 0:
            continue
        rng = np.random.default_rng([seed, idx + 1])
        cum = None
        if spec.image_tokens:
            w = np.asarray(spec.image_weights, dtype=float)
            cum = np.cumsum(w / w.sum())
        base = a.rate_rps * spec.share / total_share
        bursty = kind in a.burst_kinds
        t = 0.0
        ep = 0
        while True:
            rate = base * rate_multiplier(cfg, t, end)
            if bursty:
                while ep < len(episodes) and episodes[ep][1] <= t:
                    ep += 1
                if ep < len(episodes) and episodes[ep][0] <= t < episodes[ep][1]:
                    rate *= a.burst_factor
            t += float(rng.gamma(shape, 1.0 / shape)) / rate
            if t >= end:
                break
            prompt, images, out = _sizes(rng, spec, cum)
            reqs.append(Request(0, kind_service[kind], kind, t, prompt, images, out))
    reqs.sort(key=lambda r: (r.arrival, r.kind))
    for i, r in enumerate(reqs):
        r.rid = i
    return _with_sessions(cfg, seed, reqs)


def _with_sessions(cfg: SimConfig, seed: int, reqs: list[Request]) -> list[Request]:
    """With `sessions.mean_turns` set, each service's requests that carry no content ids
    become multi-turn conversations (simulator.serving.sessions); else unchanged."""
    s = cfg.sessions
    if s.mean_turns <= 0:
        return reqs
    from simulator.serving.sessions import apply_sessions

    for idx, (name, spec) in enumerate(sorted(cfg.services.items())):
        mine = [r for r in reqs if r.service == name and not r.block_hashes]
        if mine:
            rng = np.random.default_rng([seed, 2718, idx])
            limit = cfg.models[spec.model].max_model_len
            apply_sessions(mine, rng, s.mean_turns, s.think_s, limit)
    return reqs


def _real_requests(cfg: SimConfig, seed: int, end: float) -> list[Request]:
    from simulator.serving.workloads import load_workload, workload_requests

    reqs: list[Request] = []
    for idx, (name, spec) in enumerate(sorted(cfg.services.items())):
        wl = load_workload(cfg.workloads[name].path)
        reqs.extend(
            workload_requests(
                wl, name, spec.kind, seed, idx, cfg.workload_start_s, end, cfg.rate_scale
            )
        )
    reqs.sort(key=lambda r: (r.arrival, r.service))
    for i, r in enumerate(reqs):
        r.rid = i
    return reqs
