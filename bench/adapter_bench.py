"""Benchmark of the kvspread metrics adapter: OTLP ingest, GET latency, memory per series.

    python3 bench/adapter_bench.py [--series 10000] [--points 7] [--gets 2000]
        [--ingest-runs 5] [--sdk-runs 2]

1. OTLP ingest: ExportMetricsServiceRequest protobufs of 1,000 explicit-bucket histogram
   points each (15 buckets, the http.server.request.duration bounds) through the receiver's
   handler (protobuf decode, validation, store) in this one process on one core, CPU time,
   INGEST_RUNS times from an empty store (the first push of each series included); then the
   same number of points POSTed over HTTP/1.1 keep-alive to `kvspread adapter serve`
   running in its own process (one sequential client).
2. GET latency: SERIES histogram series (100 namespaces x 100 services, POINTS points each in
   the 1-minute window) stored, then GETS sequential metric reads (p95 over one service,
   labelSelector service=...) over real TLS with a front-proxy client certificate and
   keep-alive; client-side wall time per request, plus the server-side handler time.
3. Memory per series: tracemalloc of the store after loading SERIES series x POINTS points.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import httpx  # noqa: E402
import trustme  # noqa: E402

from kvspread import names  # noqa: E402
from metrics_adapter import sli  # noqa: E402
from metrics_adapter.httpserver import Request  # noqa: E402
from metrics_adapter.receiver import OtlpReceiver  # noqa: E402
from metrics_adapter.sources import otlp_decode  # noqa: E402
from metrics_adapter.sources.store import SeriesStore  # noqa: E402
from tests.metrics_adapter.adapter_otlp_payloads import histogram, request  # noqa: E402
from tests.ports import free_port, wait_http_ok  # noqa: E402

BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
NS_COUNT = 100


def build_requests(series: int, points: int, t0: float, per_request: int = 1000) -> list[bytes]:
    """`points` rounds of cumulative points for `series` series, 10 s apart, chunked."""
    rng = random.Random(1)
    bodies: list[bytes] = []
    counts = [[0] * (len(BOUNDS) + 1) for _ in range(series)]
    for rnd in range(points):
        t = t0 + 10 * (rnd + 1)
        for chunk in range(0, series, per_request):
            pts = []
            for i in range(chunk, min(chunk + per_request, series)):
                c = counts[i]
                for _ in range(20):
                    c[min(int(rng.expovariate(1.5) * 5), len(BOUNDS) - 1)] += 1  # no overflow
                attrs: dict[str, str | int] = {
                    names.ATTR_K8S_NAMESPACE: f"ns-{i % NS_COUNT}",
                    names.ATTR_SERVICE_NAME: f"svc-{i // NS_COUNT}",
                    names.ATTR_K8S_POD: f"pod-{i}",
                    names.ATTR_MODALITY: "text",
                    names.ATTR_HTTP_ROUTE: "/v1/chat/completions",
                    names.ATTR_HTTP_STATUS: 200,
                }
                pts.append((t0, t, tuple(c), attrs))
            m = histogram(names.HTTP_SERVER_REQUEST_DURATION.name, pts, BOUNDS, mean=0.1)
            req = request({names.ATTR_K8S_NODE: "node-1"}, [m])
            bodies.append(req.SerializeToString())
    return bodies


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _points_stored(otlp: str) -> float:
    for line in httpx.get(f"{otlp}/metrics").text.splitlines():
        if line.startswith("kvspread_adapter_otlp_points_total "):
            return float(line.split()[1])
    raise RuntimeError("no kvspread_adapter_otlp_points_total on the adapter's /metrics")


def sdk_ingest(otlp: str, pid: int, series: int = 1900, rounds: int = 25) -> tuple[float, float]:
    """The OTel SDK's own OTLP/HTTP exporter as the client: `series` attribute sets of one
    histogram (namespace `sdk`, so the GET reads below are unaffected), `rounds` exports.
    Returns (points per CPU second of the adapter process, i.e. points/s per core on the
    server; points per second of export wall time).
    1,900 series: the SDK folds attribute sets beyond its default cardinality limit (2,000
    per instrument) into one overflow series."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
    from opentelemetry.sdk.resources import Resource

    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{otlp}/v1/metrics", timeout=60),
        export_interval_millis=3_600_000,  # exports only when flushed below
    )
    view = View(
        instrument_name=names.HTTP_SERVER_REQUEST_DURATION.name,
        aggregation=ExplicitBucketHistogramAggregation(names.LATENCY_BUCKETS),
    )
    provider = MeterProvider(
        resource=Resource.create({names.ATTR_K8S_NODE: "node-1"}),
        metric_readers=[reader],
        views=[view],
    )
    hist = provider.get_meter("bench").create_histogram(
        names.HTTP_SERVER_REQUEST_DURATION.name, unit="s"
    )
    attrs: list[dict[str, str | int]] = [
        {
            names.ATTR_K8S_NAMESPACE: "sdk",
            names.ATTR_SERVICE_NAME: f"svc-{i % 100}",
            names.ATTR_K8S_POD: f"pod-{i}",
            names.ATTR_HTTP_STATUS: 200,
        }
        for i in range(series)
    ]
    rng = random.Random(3)
    before_points, before_cpu = _points_stored(otlp), _cpu_s(pid)
    wall = 0.0
    for _ in range(rounds):
        for a in attrs:
            hist.record(rng.expovariate(8.0), a)
        t = time.perf_counter()
        assert reader.force_flush(60_000), "the SDK's export failed"
        wall += time.perf_counter() - t
    points = _points_stored(otlp) - before_points
    cpu = _cpu_s(pid) - before_cpu
    provider.shutdown()
    assert points == rounds * series, (points, rounds * series)
    return points / cpu, points / wall


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--series", type=int, default=10_000)
    ap.add_argument("--points", type=int, default=7, help="points per series in the window")
    ap.add_argument("--gets", type=int, default=2000)
    ap.add_argument(
        "--ingest-runs", type=int, default=5, help="repetitions of the in-process ingest"
    )
    ap.add_argument(
        "--sdk-runs", type=int, default=2, help="repetitions of the OTel SDK exporter ingest"
    )
    args = ap.parse_args()
    now = time.time()
    t0 = now - 10 * args.points - 5
    built = time.monotonic()
    bodies = build_requests(args.series, args.points, t0)
    build_s = time.monotonic() - built
    total_points = args.series * args.points
    rows: list[tuple[str, str, str]] = []

    # 1a. in-process ingest: decode + validate + store, one core; CPU time (the target is
    # per core, and CPU time moves less than wall time on a shared machine). Each run starts
    # from an empty store and empty decoder caches: the first push of every series counts.
    hdr = [("content-type", "application/x-protobuf")]
    rates = []
    for _ in range(args.ingest_runs):
        otlp_decode.clear_caches()
        store = SeriesStore(retention=90)
        rx = OtlpReceiver(store, time.time, max_body=64 << 20)
        gc.collect()
        t = time.process_time()
        for b in bodies:
            assert rx.handle_sync(Request("POST", "/v1/metrics", hdr, b)).status == 200
        rates.append(total_points / (time.process_time() - t))
    del store, rx
    shown = " / ".join(f"{r:,.0f}" for r in rates)
    rows.append(
        (
            f"OTLP ingest, in process (decode+validate+store), {len(rates)} runs",
            f"{shown} histogram points/s (median {statistics.median(rates):,.0f}, "
            f"{1e6 / statistics.median(rates):.1f} us CPU per point)",
            ">= 50,000",
        )
    )

    # 3. memory per series (a fresh store, same data; the decoder's attribute cache is
    # emptied first, so that its share per series is counted too)
    otlp_decode.clear_caches()
    gc.collect()
    tracemalloc.start()
    store2 = SeriesStore(retention=90)
    rx2 = OtlpReceiver(store2, time.time, max_body=64 << 20)
    base = tracemalloc.take_snapshot()
    for b in bodies:
        rx2.handle_sync(Request("POST", "/v1/metrics", hdr, b))
    gc.collect()
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    used = sum(s.size_diff for s in snap.compare_to(base, "filename"))
    rows.append(
        (
            f"memory per series ({args.points} points x 15 buckets)",
            f"{used / len(store2):,.0f} bytes",
            "<= 2048",
        )
    )
    del store2, rx2

    # 1b + 2. `kvspread adapter serve` in its own process, over real sockets
    with tempfile.TemporaryDirectory() as d:
        ca, fp = trustme.CA(), trustme.CA()
        ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
            f"{d}/serving.pem"
        )
        fp.cert_pem.write_to_path(f"{d}/fp-ca.pem")
        fp.issue_cert(
            "front-proxy-client", common_name="front-proxy-client"
        ).private_key_and_cert_chain_pem.write_to_path(f"{d}/client.pem")
        api_port, otlp_port = free_port(), free_port()
        with open(f"{d}/adapter.yaml", "w") as f:
            f.write("otlp_max_body_bytes: 67108864\nauthorization_mode: AllowList\n")
            f.write("authorization_allow_groups: [system:authenticated]\n")
        cmd = [
            sys.executable, "-m", "kvspread", "adapter", "serve", f"--config={d}/adapter.yaml",
            "--bind-address=127.0.0.1", f"--secure-port={api_port}",
            "--otlp-bind-address=127.0.0.1", f"--otlp-port={otlp_port}",
            f"--tls-cert-file={d}/serving.pem", f"--tls-private-key-file={d}/serving.pem",
            f"--requestheader-client-ca-file={d}/fp-ca.pem",
            "--requestheader-allowed-names=front-proxy-client", "--log-level=warning",
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=os.path.join(os.path.dirname(__file__), ".."))
        try:
            otlp = f"http://127.0.0.1:{otlp_port}"
            wait_http_ok(f"{otlp}/healthz", 60, proc)
            # fresh timestamps: the reads below must find the points inside the 1-min window,
            # so the newest point is "now" when building ends (building takes seconds on a
            # loaded machine), not when it starts
            t_fresh = time.time() + build_s - 10 * args.points - 1
            fresh = build_requests(args.series, args.points, t_fresh)
            with httpx.Client(base_url=otlp) as c:
                t = time.perf_counter()
                for b in fresh:
                    assert c.post("/v1/metrics", content=b, headers=dict(hdr)).status_code == 200
                wall = time.perf_counter() - t
            rows.append(
                (
                    "OTLP ingest over HTTP/1.1 keep-alive (one sequential client)",
                    f"{total_points / wall:,.0f} histogram points/s",
                    "-",
                )
            )
            ctx = ssl.create_default_context()
            ca.configure_trust(ctx)
            ctx.load_cert_chain(f"{d}/client.pem")
            rng = random.Random(2)
            lat: list[float] = []
            # http.client keeps the client's own cost per request small (httpx adds ~1 ms)
            conn = http.client.HTTPSConnection("127.0.0.1", api_port, context=ctx, timeout=10)
            h = {"X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"}
            for i in range(args.gets + 50):
                ns = rng.randrange(NS_COUNT)
                svc = rng.randrange(max(1, args.series // NS_COUNT))
                path = (
                    f"/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-{ns}/"
                    f"{names.SLI_LATENCY_P95}?labelSelector=service%3Dsvc-{svc}"
                )
                t = time.perf_counter()
                conn.request("GET", path, headers=h)
                resp = conn.getresponse()
                data = resp.read()
                dt = time.perf_counter() - t
                assert resp.status == 200 and json.loads(data)["items"], data
                if i >= 50:  # warm-up excluded
                    lat.append(dt)
            conn.close()
            stored = httpx.get(f"{otlp}/metrics").text
            assert f"kvspread_adapter_series {float(args.series)}" in stored
            # server-side time, from the adapter's own histogram (reads only)
            buckets = []
            for line in stored.splitlines():
                if line.startswith("kvspread_adapter_request_duration_seconds_bucket"):
                    le = line.split('le="')[1].split('"')[0]
                    buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
            server_p99 = sli.bucket_quantile(0.99, buckets)
            server_p50 = sli.bucket_quantile(0.50, buckets)
            label = f"{args.series:,} series stored, TLS + client cert, keep-alive"
            rows.append((f"GET p50 ({label})", f"{pct(lat, 50) * 1e3:.2f} ms", "-"))
            rows.append((f"GET p99 ({label})", f"{pct(lat, 99) * 1e3:.2f} ms", "<= 5 ms"))
            rows.append(("GET mean", f"{statistics.fmean(lat) * 1e3:.2f} ms", "-"))
            rows.append(
                (
                    "GET p50 / p99 inside the server (its duration histogram, interpolated)",
                    f"{server_p50 * 1e3:.2f} / {server_p99 * 1e3:.2f} ms",
                    "-",
                )
            )
            # last: it adds series to the store
            sdk = [sdk_ingest(otlp, proc.pid) for _ in range(args.sdk_runs)]
            rows.append(
                (
                    f"OTLP ingest from the OTel SDK's OTLPMetricExporter, adapter CPU per point, "
                    f"{len(sdk)} runs",
                    " / ".join(f"{c:,.0f}" for c, _ in sdk)
                    + " histogram points/s per core of the adapter",
                    ">= 50,000",
                )
            )
            rows.append(
                (
                    "OTLP ingest from the OTel SDK's OTLPMetricExporter, export wall time",
                    " / ".join(f"{w:,.0f}" for _, w in sdk)
                    + " histogram points/s (client encode + POST + server)",
                    "-",
                )
            )
        finally:
            proc.terminate()
            proc.wait(20)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, series={args.series}, points={args.points}, gets={args.gets}\n"
    )
    print("| measurement | result | target |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
