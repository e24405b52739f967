"""A real Prometheus for the adapter tests: a scrape target of TTFT histograms and queue
gauges with the collector's labels, Debian's `prometheus` scraping it, and the PromQL
overlay's rules as shipped. Shared by the adapter's PromQL tests and the cluster test that
puts the overlay behind the real aggregator and HPA controller."""

from __future__ import annotations

import contextlib
import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from kvspread import names
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
TTFT_LE = (*(f"{b:g}" for b in names.GEN_AI_TTFT_BUCKETS), "+Inf")
"""The collector's TTFT bucket bounds as Prometheus `le` values."""


@contextlib.contextmanager
def scraping(
    handler: type[http.server.BaseHTTPRequestHandler], tmp_path: Path, ready: str, want: int
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real Prometheus on loopback scraping `handler` every second; yields (its URL, its
    process) once the query `ready` returns at least `want` series with a value > 0."""
    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: test\n    static_configs: [{{targets: ['127.0.0.1:{target.server_address[1]}']}}]\n"
    )
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"{url}/api/v1/query", params={"query": ready}, timeout=2)
                got = [float(x["value"][1]) for x in r.json()["data"]["result"]]
                if len([v for v in got if v > 0]) >= want:
                    break
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            assert time.monotonic() < deadline, "Prometheus did not scrape the test target"
            time.sleep(0.3)
        yield url, prom
    finally:
        if prom.poll() is None:
            prom.terminate()
            prom.wait(20)
        target.shutdown()


DURATION_LE = (*(f"{b:g}" for b in names.LATENCY_BUCKETS), "+Inf")
TPOT_LE = (*(f"{b:g}" for b in names.GEN_AI_TPOT_BUCKETS), "+Inf")
NORMALIZED_LE = (*(f"{b:g}" for b in names.NORMALIZED_LATENCY_BUCKETS), "+Inf")
TPOT_S = 0.015
"""Every stream's time per output token: p95 0.02425 s, under every term that decides."""


def _histogram(name: str, labels: str, bounds: tuple[str, ...], at: float, n: int) -> list[str]:
    """Exposition lines of a cumulative histogram with `n` observations, all at `at`."""
    out = [f'{name}_bucket{{{labels},le="{le}"}} {n if at <= float(le) else 0}' for le in bounds]
    return [*out, f"{name}_sum{{{labels}}} {n * at}", f"{name}_count{{{labels}}} {n}"]


class Histograms(http.server.BaseHTTPRequestHandler):
    """A scrape target with the collector's metrics and labels (llm_qos included), growing 10
    observations a second per pod: request durations (TTFT + 1 s, status 200), TTFT, TPOT
    (`TPOT_S`), normalized latency (TTFT / 10), and the engines' queue and KV-usage (0.3)
    gauges."""

    started = time.monotonic()
    # (service, pod, qos, TTFT of every observation s, bounds as le strings, waiting)
    pods = [
        ("assistant", "assistant-0", "batch", 3.0, TTFT_LE, 20),
        ("chat", "chat-0", "realtime", 0.8, TTFT_LE, 1),
        ("mixed", "mixed-0", "batch", 0.8, TTFT_LE, 20),
        ("mixed", "mixed-1", "realtime", 0.8, TTFT_LE, 0),
        ("coarse", "coarse-0", "realtime", 0.8, ("0.1", "10", "+Inf"), 0),
    ]

    def do_GET(self) -> None:  # noqa: N802
        n = int(10 * (time.monotonic() - self.started)) + 1
        ttft, tpot = (
            "gen_ai_server_time_to_first_token_seconds",
            "gen_ai_server_time_per_output_token_seconds",
        )
        dur = "http_server_request_duration_seconds"
        norm = "kvspread_gen_ai_server_normalized_latency_seconds"
        lines = [f"# TYPE {t} histogram" for t in (ttft, tpot, dur, norm)]
        for svc, pod, qos, at, bounds, _ in self.pods:
            ls = f'k8s_namespace_name="llm",service_name="{svc}",k8s_pod_name="{pod}",llm_qos="{qos}"'
            lines += _histogram(ttft, ls, bounds, at, n)
            lines += _histogram(tpot, ls, TPOT_LE, TPOT_S, n)
            # a tenth of the TTFT per output token: chat's 80 ms, over 50 ms, under 120 ms
            lines += _histogram(norm, ls, NORMALIZED_LE, at / 10, n)
            lines += _histogram(
                dur, f'{ls},http_response_status_code="200"', DURATION_LE, at + 1, n
            )
        lines += [
            "# TYPE kvspread_engine_requests_waiting gauge",
            "# TYPE kvspread_kv_cache_usage_ratio gauge",
        ]
        for svc, pod, _, _, _, waiting in self.pods:
            ls = f'k8s_namespace_name="llm",service_name="{svc}",k8s_pod_name="{pod}"'
            lines.append(f"kvspread_engine_requests_waiting{{{ls}}} {waiting}")
            lines.append(f"kvspread_kv_cache_usage_ratio{{{ls}}} 0.3")
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def overlay_rules() -> list[dict[str, object]]:
    """The rules of the PromQL overlay's adapter.yaml, as shipped."""
    doc = yaml.safe_load(
        (ROOT / "manifests/overlays/promql-adapter/adapter-promql.yaml").read_text()
    )
    return list(yaml.safe_load(doc["data"]["adapter.yaml"])["rules"])
