"""Engine /metrics: every fixture in tests/fixtures/engine-metrics, parsed and scraped."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvspread.engine import (
    EngineParseError,
    EngineSample,
    detect_engine,
    parse_engine_metrics,
    scrape,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engine-metrics"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"

# file -> (engine, model, kv_usage, blocks total, blocks used, block size, running, waiting,
#          ttft count)
EXPECTED: dict[str, tuple] = {
    "vllm-0.5-metrics.txt": ("vllm", "facebook/opt-125m", 0.0, 7281, 0, 16, 0.0, 0.0, 1.0),
    "vllm-0.6-metrics.txt": ("vllm", LLAMA, 0.4218, 27434, 11572, 16, 3.0, 1.0, 24.0),
    "vllm-0.8-v1-excerpt.txt": (
        "vllm",
        "Qwen/Qwen2.5-Coder-32B-Instruct",
        0.0,
        None,
        None,
        None,
        0.0,
        0.0,
        None,
    ),
    "vllm-0.10-metrics.txt": ("vllm", LLAMA, 0.4218, 27434, 11572, 16, 3.0, 1.0, 24.0),
    "vllm-0.11-metrics.txt": ("vllm", LLAMA, 0.4218, 27434, 11572, 16, 3.0, 1.0, 24.0),
    "vllm-0.33-metrics.txt": ("vllm", LLAMA, 0.4218, 27434, 11572, 16, 3.0, 1.0, 24.0),
    "triton-trtllm-metrics.txt": ("trtllm", "tensorrt_llm", 0.4875, 6239, 1, 64, 0.0, 1.0, None),
    "triton-trtllm-legacy-metrics.txt": (
        "trtllm",
        "tensorrt_llm",
        1 / 6239,
        6239,
        1,
        64,
        0.0,
        0.0,
        None,
    ),
    "trtllm-serve-metrics.txt": (
        "trtllm-serve",
        "undefined",
        0.4218,
        101256,
        42709,
        32,
        3.0,
        1.0,
        24.0,
    ),
    "sglang-0.4-metrics.txt": ("sglang", LLAMA, 0.28, None, None, None, 162.0, 2826.0, 11008.0),
    "sglang-0.5-metrics.txt": ("sglang", LLAMA, 0.4218, 438944, 185147, 1, 3.0, 1.0, 24.0),
    "tgi-metrics.txt": ("tgi", "", None, None, None, None, 0.0, 0.0, None),
}


def test_every_fixture_is_covered() -> None:
    assert {p.name for p in FIXTURES.glob("*.txt")} == set(EXPECTED)


def _check(s: EngineSample, exp: tuple) -> None:
    engine, model, usage, total, used, bsize, running, waiting, ttft = exp
    assert (s.engine, s.model) == (engine, model)
    assert s.kv_usage == (pytest.approx(usage) if usage is not None else None)
    assert (s.kv_blocks_total, s.kv_blocks_used, s.block_size) == (total, used, bsize)
    assert (s.running, s.waiting, s.ttft_count) == (running, waiting, ttft)
    if ttft is not None:
        les = [le for le, _ in s.ttft_buckets]
        counts = [c for _, c in s.ttft_buckets]
        assert les == sorted(les) and les[-1] == float("inf")
        assert counts == sorted(counts) and counts[-1] == ttft


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_fixture(name: str) -> None:
    samples = parse_engine_metrics((FIXTURES / name).read_text())
    assert len(samples) == 1
    _check(samples[0], EXPECTED[name])


def test_vllm_prefers_new_kv_name_over_deprecated() -> None:
    text = (
        'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n'
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.1\n'
    )
    (s,) = parse_engine_metrics(text)
    assert s.kv_usage == 0.5


def test_sglang_ranks_are_not_double_counted() -> None:
    text = (
        "\n".join(f'sglang:num_running_reqs{{model_name="m",tp_rank="{r}"}} 4.0' for r in range(4))
        + "\n"
    )
    (s,) = parse_engine_metrics(text)
    assert s.running == 4.0


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "-1"])
def test_non_finite_or_negative_values_are_absent_not_passed_on(bad: str) -> None:
    text = (
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="BAD"} 1.0\n'
        'vllm:num_requests_running{model_name="m",engine="0"} BAD\n'
        'vllm:num_requests_running{model_name="m",engine="1"} 2.0\n'
        'vllm:num_requests_waiting{model_name="m"} BAD\n'
        'vllm:kv_cache_usage_perc{model_name="m"} BAD\n'
        'vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} BAD\n'
        'vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 3.0\n'
        'vllm:time_to_first_token_seconds_count{model_name="m"} 3.0\n'
        'vllm:time_to_first_token_seconds_sum{model_name="m"} BAD\n'
    ).replace("BAD", bad)
    (s,) = parse_engine_metrics(text)
    # one engine's series unusable: the model's sum is unknown, not the other engine's 2
    assert s.running is None
    assert s.waiting is None and s.kv_usage is None and s.kv_blocks_used is None
    assert s.kv_blocks_total is None and s.block_size == 16
    # one bucket unusable: the histogram is not cumulative any more, so none of it is used
    assert s.ttft_buckets == () and s.ttft_sum is None
    assert s.ttft_count == 3.0
    assert set(s.dropped) == {
        "running",
        "waiting",
        "kv_usage",
        "kv_blocks_total",
        "kv_blocks_used",
        "ttft_buckets",
        "ttft_sum",
    }


def test_usable_values_drop_nothing_and_vllm_none_text_is_not_reported() -> None:
    text = (
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
        'vllm:num_requests_running{model_name="m",engine="0"} 1.0\n'
        'vllm:num_requests_running{model_name="m",engine="1"} 2.0\n'
        'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n'
    )
    (s,) = parse_engine_metrics(text)
    assert s.running == 3.0 and s.kv_usage == 0.5
    assert s.kv_blocks_total is None and s.kv_blocks_used is None  # "None": not reported
    assert s.dropped == ()


@pytest.mark.parametrize(
    "text",
    [
        'vllm:num_requests_running{model_name="m"} NaN\n',
        'sglang:num_running_reqs{model_name="m"} NaN\nsglang:token_usage{model_name="m"} -0.5\n',
        'nv_trt_llm_request_metrics{model="m",request_type="active"} NaN\n'
        'nv_trt_llm_kv_cache_block_metrics{model="m",kv_cache_block_type="fraction"} +Inf\n',
        'trtllm_num_requests_running{model_name="m"} -Inf\n',
    ],
    ids=["vllm", "sglang", "trtllm", "trtllm-serve"],
)
def test_an_engine_of_only_unusable_values_is_detected_with_nothing_measured(text: str) -> None:
    samples = parse_engine_metrics(text)
    for s in samples:
        assert (s.running, s.waiting, s.kv_usage) == (None, None, None)


def test_engine_hint_and_model_for_tgi() -> None:
    (s,) = parse_engine_metrics((FIXTURES / "tgi-metrics.txt").read_text(), "tgi", "bloom")
    assert (s.engine, s.model) == ("tgi", "bloom")


@pytest.mark.parametrize(
    "text,match",
    [
        ("this is { not prometheus", "not Prometheus"),
        ("node_cpu_seconds_total 1\n", "no vLLM"),
        ("", "no vLLM"),
    ],
    ids=["garbage", "foreign metrics", "empty"],
)
def test_bad_text(text: str, match: str) -> None:
    with pytest.raises(EngineParseError, match=match):
        parse_engine_metrics(text)


def test_detect_engine() -> None:
    assert detect_engine(["vllm:num_requests_running"]) == "vllm"
    assert detect_engine(["kv_cache_utilization"]) == "trtllm-serve"  # TRT-LLM 1.0 unprefixed
    assert detect_engine(["up"]) is None


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        name = self.path.strip("/")
        if name == "trickle":  # a byte at a time, each well within any read timeout
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 20))
            self.end_headers()
            for _ in range(TRICKLE_BYTES):
                try:
                    self.wfile.write(b"#")
                    self.wfile.flush()
                except OSError:
                    return  # the client gave up: what the test wants
                time.sleep(0.05)
            return
        if name == "garbage":
            body, code = b"\x00\xff<html>oops</html>{{{", 200
        elif (FIXTURES / name).is_file():
            body, code = (FIXTURES / name).read_bytes(), 200
        else:
            body, code = b"not found", 404
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def engine_server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scrape_each_engine_over_http(engine_server: str, name: str) -> None:
    (s,) = scrape(f"{engine_server}/{name}")
    _check(s, EXPECTED[name])


TRICKLE_BYTES = 400
"""What the trickling engine sends at most (then it ends the answer short), so that its
thread ends even when a scrape does not give up."""


def test_a_body_that_trickles_is_cut_at_the_scrape_timeout(engine_server: str) -> None:
    """Each byte comes well within the read timeout, so only a bound on the whole body ends
    the scrape (before, it lasted as long as the engine kept sending)."""
    with pytest.raises(TimeoutError, match="not complete within 0.3 s"):
        scrape(f"{engine_server}/trickle", timeout_s=0.3)


def test_scrape_failures(engine_server: str) -> None:
    import httpx

    with pytest.raises(EngineParseError):
        scrape(f"{engine_server}/garbage")
    with pytest.raises(httpx.HTTPStatusError):
        scrape(f"{engine_server}/missing")
    with pytest.raises(httpx.HTTPError):
        scrape("http://127.0.0.1:1/metrics", timeout_s=0.5)
