"""Inference-engine /metrics: parse vLLM, Triton TensorRT-LLM, trtllm-serve, SGLang and
TGI exposition text into one `EngineSample` per served model.

Names differ by engine and version (tests/fixtures/engine-metrics/SOURCES.md): vLLM's
KV gauge is `vllm:kv_cache_usage_perc` from 0.9.2 and `vllm:gpu_cache_usage_perc` before;
Triton builds before 2025-04 have no `fraction` block type and no `waiting` request type
(usage is then used/max); SGLang reports one series per rank. Parsing uses
prometheus_client's text parser; anything unreadable raises `EngineParseError`.
`scrape()` is the I/O around it.

Every number read here (KV usage and blocks, request counts, TTFT histograms) is a gauge or
counter that cannot be negative: a NaN, +Inf, -Inf or negative sample (an engine bug, a
division by zero at start-up) is never passed on. The field it feeds is absent for that
model, and named in `EngineSample.dropped`, so that a sum over a model's series or over the
models of one endpoint or GPU can tell "not reported" (leave it out) from "reported but
unusable" (the sum is unknown): summing the rest would make the endpoint look emptier than
it is. The rest of the scrape is used. A sample's name still counts for engine detection.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:  # imported where a scrape needs it: httpx (and through it rich, when
    import httpx  # installed) costs a starting picker a quarter of a second

__all__ = [
    "EngineSample",
    "EngineParseError",
    "ENGINES",
    "detect_engine",
    "parse_engine_metrics",
    "scrape",
]

ENGINES = ("vllm", "trtllm", "trtllm-serve", "sglang", "tgi")


class EngineParseError(ValueError):
    """The text is not Prometheus exposition of a known engine."""


@dataclass(frozen=True)
class EngineSample:
    """One model served by one engine instance. Absent numbers are None, never 0."""

    engine: str
    model: str
    kv_usage: float | None = None  # 0..1
    kv_blocks_total: int | None = None
    kv_blocks_used: int | None = None
    block_size: int | None = None  # tokens per KV block
    running: float | None = None
    waiting: float | None = None
    ttft_buckets: tuple[tuple[float, float], ...] = ()  # (le, cumulative count)
    ttft_sum: float | None = None
    ttft_count: float | None = None
    dropped: tuple[str, ...] = ()
    """Fields above left absent because a sample they come from was unusable (NaN, an
    infinity, negative): unknown, not unreported."""


_COUNT_FIELDS = ("kv_blocks_total", "kv_blocks_used", "block_size")


def _sample(engine: str, model: str, **raw: Any) -> EngineSample:
    """The sample from the builders' numbers, where NaN marks a value that came from an
    unusable sample: such a field becomes absent and is named in `dropped`."""
    dropped = []
    for name, value in raw.items():
        if name == "ttft_buckets":
            bad = any(math.isnan(c) for _, c in value)
        else:
            bad = isinstance(value, float) and math.isnan(value)
        if bad:
            dropped.append(name)
            raw[name] = () if name == "ttft_buckets" else None
        elif name in _COUNT_FIELDS and value is not None:
            raw[name] = int(value)
    return EngineSample(engine=engine, model=model, dropped=tuple(dropped), **raw)


@dataclass
class _Acc:
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    buckets: dict[float, float] = field(default_factory=lambda: defaultdict(float))
    ttft_sum: float | None = None
    ttft_count: float | None = None


Series = list[tuple[str, dict[str, str], float]]


def _usable(value: float) -> bool:
    """A value the engine gauges and counters can have: finite and not negative."""
    return math.isfinite(value) and value >= 0


def _samples(text: str) -> tuple[Series, set[str]]:
    """(the samples, every sample name); an unusable value is read as NaN, which every
    sum, maximum and product below carries to the field it feeds (see the module's note)."""
    try:
        out: Series = []
        seen: set[str] = set()
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                seen.add(s.name)
                value = float(s.value)
                out.append((s.name, dict(s.labels), value if _usable(value) else math.nan))
        return out, seen
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError and others
        raise EngineParseError(f"not Prometheus text exposition: {exc}") from exc


def detect_engine(names: Iterable[str]) -> str | None:
    """The engine a set of sample names comes from, by its metric prefixes."""
    names = list(names)
    if any(n.startswith("vllm:") for n in names):
        return "vllm"
    if any(n.startswith("sglang:") for n in names):
        return "sglang"
    if any(n.startswith("nv_trt_llm_") for n in names):
        return "trtllm"
    if any(n.startswith("trtllm_") for n in names) or "kv_cache_utilization" in names:
        return "trtllm-serve"
    if any(n.startswith("tgi_") for n in names):
        return "tgi"
    return None


def _first_rank(labels: dict[str, str]) -> bool:
    """SGLang repeats scheduler gauges per tensor/pipeline rank: keep rank 0 only."""
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


def _ttft(acc: _Acc, name: str, labels: dict[str, str], value: float, base: str) -> None:
    if name == base + "_bucket":
        try:
            le = float(labels.get("le", ""))
        except ValueError:
            return
        if not math.isnan(le):
            acc.buckets[le] += value
    elif name == base + "_sum":
        acc.ttft_sum = (acc.ttft_sum or 0.0) + value
    elif name == base + "_count":
        acc.ttft_count = (acc.ttft_count or 0.0) + value


def _one(acc: _Acc, key: str) -> float | None:
    vals = acc.values.get(key)
    return vals[0] if vals else None


def _sum(acc: _Acc, key: str) -> float | None:
    vals = acc.values.get(key)
    return sum(vals) if vals else None  # a NaN among them makes the sum NaN


def _max(acc: _Acc, key: str) -> float | None:
    vals = acc.values.get(key)
    if not vals:
        return None
    return math.nan if any(math.isnan(v) for v in vals) else max(vals)


def _count(v: float | str | None) -> float | None:
    """A count (a number or a label's text): None when absent or not a number, NaN when
    a number that is not finite and non-negative (unusable: dropped)."""
    if v is None:
        return None
    try:
        f = float(v)
    except ValueError:
        return None  # label text such as vLLM's "None": not reported
    return f if _usable(f) else math.nan


def _blocks_used(usage: float | None, total: float | None) -> float | None:
    """Blocks in use from the usage fraction and the total (NaN when either is unusable)."""
    if usage is None or total is None:
        return None
    product = usage * total
    return product if math.isnan(product) else float(round(product))


def _vllm(series: Series) -> dict[str, _Acc]:
    accs: dict[str, _Acc] = defaultdict(_Acc)
    cache_info: dict[str, str] = {}
    for name, labels, value in series:
        if name == "vllm:cache_config_info":
            cache_info = labels
            continue
        model = labels.get("model_name")
        if model is None:
            continue
        acc = accs[model]
        short = name.removeprefix("vllm:")
        if short in (
            "kv_cache_usage_perc",
            "gpu_cache_usage_perc",
            "num_requests_running",
            "num_requests_waiting",
        ):
            acc.values[short].append(value)
        _ttft(acc, name, labels, value, "vllm:time_to_first_token_seconds")
    for acc in accs.values():
        acc.labels["cache"] = cache_info
    return accs


def _build_vllm(model: str, acc: _Acc) -> EngineSample:
    usage = _max(acc, "kv_cache_usage_perc")
    if usage is None:
        usage = _max(acc, "gpu_cache_usage_perc")
    info = acc.labels.get("cache", {})
    total = _count(info.get("num_gpu_blocks"))
    return _sample(
        "vllm",
        model,
        kv_usage=usage,
        kv_blocks_total=total,
        kv_blocks_used=_blocks_used(usage, total),
        block_size=_count(info.get("block_size")),
        running=_sum(acc, "num_requests_running"),
        waiting=_sum(acc, "num_requests_waiting"),
        **_ttft_fields(acc),
    )


class _TtftFields(TypedDict):
    ttft_buckets: tuple[tuple[float, float], ...]
    ttft_sum: float | None
    ttft_count: float | None


def _ttft_fields(acc: _Acc) -> _TtftFields:
    return {
        "ttft_buckets": tuple(sorted(acc.buckets.items())),
        "ttft_sum": acc.ttft_sum,
        "ttft_count": acc.ttft_count,
    }


def _per_model(
    series: Series, accs: dict[str, _Acc], label: str, default: str | None = None
) -> Iterator[tuple[_Acc, str, dict[str, str], float]]:
    """The samples that name a model in `label` (or count as `default`), each with that
    model's accumulator in `accs` (a defaultdict)."""
    for name, labels, value in series:
        model = labels.get(label, default)
        if model is not None:
            yield accs[model], name, labels, value


def _sglang(series: Series) -> list[EngineSample]:
    accs: dict[str, _Acc] = defaultdict(_Acc)
    for acc, name, labels, value in _per_model(series, accs, "model_name"):
        short = name.removeprefix("sglang:")
        if short in ("token_usage", "num_running_reqs", "num_queue_reqs", "max_total_num_tokens"):
            if _first_rank(labels):
                acc.values[short].append(value)
        _ttft(acc, name, labels, value, "sglang:time_to_first_token_seconds")
    out = []
    for model, acc in accs.items():
        usage = _max(acc, "token_usage")
        capacity = _count(_max(acc, "max_total_num_tokens"))
        out.append(
            _sample(
                "sglang",
                model,
                kv_usage=usage,
                # SGLang pages are one token (page_size 1 by default): blocks are tokens
                kv_blocks_total=capacity,
                kv_blocks_used=_blocks_used(usage, capacity),
                block_size=1 if capacity is not None else None,
                running=_sum(acc, "num_running_reqs"),
                waiting=_sum(acc, "num_queue_reqs"),
                **_ttft_fields(acc),
            )
        )
    return out


def _triton(series: Series) -> list[EngineSample]:
    accs: dict[str, _Acc] = defaultdict(_Acc)
    for acc, name, labels, value in _per_model(series, accs, "model"):
        if name == "nv_trt_llm_kv_cache_block_metrics":
            acc.values["kv_" + labels.get("kv_cache_block_type", "")].append(value)
        elif name == "nv_trt_llm_request_metrics":
            acc.values["req_" + labels.get("request_type", "")].append(value)
        elif name == "nv_inference_pending_request_count":
            acc.values["pending"].append(value)
    out = []
    for model, acc in accs.items():
        if not any(k.startswith(("kv_", "req_")) for k in acc.values):
            continue  # a non-TRT-LLM model on the same Triton server
        total = _count(_sum(acc, "kv_max"))
        used = _count(_sum(acc, "kv_used"))
        usage = _max(acc, "kv_fraction")
        if usage is None and total and used is not None:
            usage = used / total  # legacy builds: no "fraction" block type
        waiting = _sum(acc, "req_waiting")
        if waiting is None:
            waiting = _sum(acc, "pending")
        out.append(
            _sample(
                "trtllm",
                model,
                kv_usage=usage,
                kv_blocks_total=total,
                kv_blocks_used=used,
                block_size=_count(_one(acc, "kv_tokens_per")),
                running=_sum(acc, "req_active"),
                waiting=waiting,
            )
        )
    return out


def _trtllm_serve(series: Series) -> list[EngineSample]:
    accs: dict[str, _Acc] = defaultdict(_Acc)
    for acc, name, labels, value in _per_model(series, accs, "model_name", ""):
        short = name.removeprefix("trtllm_")
        if short in (
            "kv_cache_utilization",
            "num_requests_running",
            "num_requests_waiting",
            "kv_cache_max_blocks",
            "kv_cache_used_blocks",
            "kv_cache_tokens_per_block",
        ):
            acc.values[short].append(value)
        base = "trtllm_time_to_first_token_seconds"
        _ttft(acc, name, labels, value, base if name.startswith("trtllm_") else base[7:])
    out = []
    for model, acc in accs.items():
        if not acc.values and not acc.buckets:
            continue
        out.append(
            _sample(
                "trtllm-serve",
                model,
                kv_usage=_max(acc, "kv_cache_utilization"),
                kv_blocks_total=_count(_sum(acc, "kv_cache_max_blocks")),
                kv_blocks_used=_count(_sum(acc, "kv_cache_used_blocks")),
                block_size=_count(_one(acc, "kv_cache_tokens_per_block")),
                running=_sum(acc, "num_requests_running"),
                waiting=_sum(acc, "num_requests_waiting"),
                **_ttft_fields(acc),
            )
        )
    return out


def _tgi(series: Series, model: str) -> list[EngineSample]:
    acc = _Acc()
    for name, _labels, value in series:
        if name in ("tgi_batch_current_size", "tgi_queue_size"):
            acc.values[name].append(value)
    return [
        _sample(
            "tgi",
            model,
            running=_sum(acc, "tgi_batch_current_size"),
            waiting=_sum(acc, "tgi_queue_size"),
        )
    ]


def parse_engine_metrics(
    text: str, engine: str | None = None, model: str = ""
) -> list[EngineSample]:
    """Parse one engine's /metrics text. `engine` overrides detection (pod annotation);
    `model` names the model for engines whose metrics carry none (TGI)."""
    series, seen = _samples(text)
    kind = engine or detect_engine(seen)
    if kind is None:
        raise EngineParseError("no vLLM, SGLang, TensorRT-LLM or TGI metrics in the text")
    if kind == "vllm":
        return [_build_vllm(m, a) for m, a in _vllm(series).items()]
    if kind == "sglang":
        return _sglang(series)
    if kind == "trtllm":
        return _triton(series)
    if kind == "trtllm-serve":
        return _trtllm_serve(series)
    if kind == "tgi":
        return _tgi(series, model)
    raise EngineParseError(f"unknown engine {kind!r} (known: {', '.join(ENGINES)})")


def scrape(
    url: str,
    *,
    engine: str | None = None,
    model: str = "",
    timeout_s: float = 2.0,
    max_bytes: int = 8 << 20,
    client: httpx.Client | None = None,
) -> list[EngineSample]:
    """GET an engine's metrics endpoint and parse it. A caller that scrapes often passes
    its own `client` (building one loads the CA bundle: milliseconds of CPU each time).

    `timeout_s` bounds each connect and read, and the body as a whole (as Prometheus's
    scrape_timeout does): an engine that sends its body a byte at a time, each within the
    read timeout, would otherwise hold the scrape, and the picker's round or the
    collector's loop with it, for as long as it likes.

    Raises EngineParseError for garbage, TimeoutError for a body not complete in time and
    httpx.HTTPError for other transport failures.
    """
    if client is None:
        import httpx

        with httpx.Client(timeout=timeout_s) as own:
            return scrape(
                url, engine=engine, model=model, timeout_s=timeout_s, max_bytes=max_bytes,
                client=own,
            )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    with client.stream("GET", url, headers={"Accept": "text/plain"}, timeout=timeout_s) as resp:
        resp.raise_for_status()
        body = bytearray()
        for chunk in resp.iter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise EngineParseError(f"metrics body over {max_bytes} bytes")
            if time.monotonic() > deadline:
                raise TimeoutError(f"metrics body not complete within {timeout_s:g} s")
    return parse_engine_metrics(body.decode("utf-8", "replace"), engine, model)
