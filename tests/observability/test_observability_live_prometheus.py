"""Every dashboard panel query against a real Prometheus that scraped kvspread's own parts.

The module starts, on loopback and free ports:
- a small HTTP/1.1 inference-like server (traced port) and an engine /metrics server serving
  a captured vLLM text;
- `kvspread collector run --standalone` tracing the server's port with real eBPF, scraping
  the engine, pushing OTLP to the adapter;
- `kvspread adapter serve` (real TLS; the test is its front proxy, with a test CA);
- `kvspread extender serve --standalone`;
- `kvspread router serve` with the engine /metrics server as its one static endpoint, sent
  chat requests over the real ext_proc gRPC wire;
- Debian's `prometheus` scraping the four every second, with the project's rules loaded
  (group intervals shortened to 1 s for the test).
Then it drives traffic (HTTP requests with known delays and statuses, extender filter and
prioritize calls, external-metrics reads, picks) and runs each panel's query: it must parse, and
return series unless the panel is listed in EXPECTED_ABSENT with the reason this machine
cannot produce it (no GPU, no kube-state-metrics, ...).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from observability import dashboards, rules
from tests.ports import free_port

pytestmark = [pytest.mark.prometheus, pytest.mark.bpf, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures"
PROMETHEUS = shutil.which("prometheus")
NODE = "test-node"

# (dashboard file, panel title) -> why the query is empty on this machine, or a probe that
# returns that reason only while the gap exists (so the panel must have data once it is
# closed). Each entry still has to parse; it is reported as a skip with its reason.
Reason = str | Callable[[str], str | None]
EXPECTED_ABSENT: dict[tuple[str, str], Reason] = {}
_NO_GPU = "no GPU on this machine: the collector reports GPU metrics absent (nvml source 0)"
for _panel in (
    "GPU memory used",
    "GPU memory per pod",
    "GPU memory used share",
    "GPU utilisation",
    "Largest free extent",
    "Node fragmentation rho over time",
    "Node fragmentation rho",
):
    EXPECTED_ABSENT[("kvspread-gpu.json", _panel)] = _NO_GPU
_NO_KSM = "kube-state-metrics is not running here (no cluster): no HPA series"
EXPECTED_ABSENT[("kvspread-autoscaling.json", "Replicas: current, desired, max")] = _NO_KSM
EXPECTED_ABSENT[("kvspread-autoscaling.json", "variable hpa")] = _NO_KSM
EXPECTED_ABSENT[("kvspread-scheduling.json", "Cache synced")] = (
    "the extender runs --standalone here: it keeps no node or pod cache to report"
)
EXPECTED_ABSENT[("kvspread-router.json", "Refusals per second")] = lambda prom: (
    None
    if _series(prom, "kvspread_router_bad_requests_total")
    else "the picker has not been scraped yet"
)
EXPECTED_ABSENT[("kvspread-collector.json", "Dropped per second")] = (
    "nothing was dropped in this run; the collector exposes a dropped counter per reason "
    "only once that reason occurred"
)


def _missing_bucket(le: str, what: str) -> Callable[[str], str | None]:
    def probe(prom: str) -> str | None:
        if _series(prom, f'http_server_request_duration_seconds_bucket{{le="{le}"}}'):
            return None
        return (
            f"collector gap: http.server.request.duration has no {le} s bucket "
            f"(kvspread.names.LATENCY_BUCKETS lists the bounds needed), "
            f"so {what} cannot be computed"
        )

    return probe


def _latency_budget(prom: str) -> str | None:
    batch = _missing_bucket("0.12", "the batch latency SLI")(prom)
    realtime = _series(prom, 'http_server_request_duration_seconds_count{llm_qos="realtime"}')
    if batch and not realtime:
        return batch + "; and no series carries llm_qos=realtime (the realtime SLO's selector)"
    return None


def _adapter_duration(prom: str) -> str | None:
    if _series(prom, '{__name__=~"kvspread_adapter_request_duration_seconds_bucket"}'):
        return None
    return (
        "adapter gap: it does not expose kvspread_adapter_request_duration_seconds "
        "(kvspread.names.ADAPTER_REQUEST_DURATION)"
    )


EXPECTED_ABSENT[("kvspread-slo.json", "Latency budget remaining (30 d)")] = _latency_budget
EXPECTED_ABSENT[("kvspread-autoscaling.json", "Good requests per second (< 200 ms)")] = (
    _missing_bucket("0.2", "the good-requests-per-second panel (threshold 0.2 s)")
)
EXPECTED_ABSENT[("kvspread-autoscaling.json", "Adapter latency p99")] = _adapter_duration


def _can_run_bpf() -> str | None:
    if os.geteuid() != 0:
        return "needs root to load eBPF programs"
    if not Path("/sys/kernel/tracing/events").exists():
        return "tracefs is not mounted at /sys/kernel/tracing"
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.append('/usr/lib/python3/dist-packages'); import bcc",
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return "bcc (Debian python3-bpfcc) is not installed"
    return None


# --- the traced server and the engine endpoint ---------------------------------------------


def _reply(h: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes) -> None:
    """One whole response with its length, for the fake engines below."""
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


class _Inference(BaseHTTPRequestHandler):
    """POST /v1/chat/completions; X-Delay-Ms sets the server-side delay, X-Status the code,
    X-Stream N answers an SSE stream of N chat.completion.chunk events 5 ms apart (chunked)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        time.sleep(int(self.headers.get("X-Delay-Ms") or 0) / 1000)
        status = int(self.headers.get("X-Status") or 200)
        if self.headers.get("X-Stream"):
            self.send_response(status)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(int(self.headers["X-Stream"])):
                delta = json.dumps({"choices": [{"index": 0, "delta": {"content": f"t{i}"}}]})
                ev = f'data: {{"object":"chat.completion.chunk",{delta[1:]}\n\n'.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                self.wfile.flush()
                time.sleep(0.005)
            self.wfile.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            return
        _reply(self, status, "application/json", b'{"choices":[{"message":{"content":"ok"}}]}')

    def log_message(self, *args: Any) -> None:
        pass


ENGINE_TEXT = (FIXTURES / "engine-metrics/vllm-0.10-metrics.txt").read_bytes()


class _Engine(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        _reply(self, 200, "text/plain; version=0.0.4", ENGINE_TEXT)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler], port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- processes --------------------------------------------------------------------------------


@dataclass
class Stack:
    prom: str
    procs: dict[str, subprocess.Popen[bytes]]
    logs: Path


def _get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
        return bytes(resp.read())


def _wait(what: str, check: Any, deadline: float, stack: Stack | None = None) -> None:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        time.sleep(0.3)
    logs = ""
    if stack is not None:
        for f in sorted(stack.logs.glob("*.log")):
            logs += f"\n--- {f.name}\n" + f.read_text()[-1500:]
    raise AssertionError(f"timed out waiting for {what}: {last!r}{logs}")


def _query(prom: str, expr: str) -> dict[str, Any]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        return dict(json.loads(_get(url, timeout=10)))
    except urllib.error.HTTPError as exc:  # 400 for a query that does not parse
        return dict(json.loads(exc.read()))


def _series(prom: str, expr: str) -> list[dict[str, Any]]:
    doc = _query(prom, expr)
    assert doc.get("status") == "success", f"{expr}: {doc}"
    return list(doc["data"]["result"])


def _start(name: str, args: list[str], logs: Path) -> subprocess.Popen[bytes]:
    out = (logs / f"{name}.log").open("wb")
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def _drive_http(port: int) -> int:
    """Requests over keep-alive connections: delays 0..80 ms, every tenth a 500; on the
    third connection token streams: 4 tokens after 10 ms, 1 token after 80 ms."""
    import http.client

    sent = 0
    for conn_no in range(3):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in range(20):
            delay = (0, 10, 30, 80)[i % 4]
            status = 500 if i % 10 == 9 else 200
            modality = "image" if conn_no == 1 else "text"
            conn.request(
                "POST",
                "/v1/chat/completions",
                body=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
                headers={
                    "Content-Type": "application/json",
                    "X-Delay-Ms": str(delay),
                    "X-Status": str(status),
                    "X-Modality": modality,
                    **({"X-Stream": "4"} if conn_no == 2 and i % 4 == 1 else {}),
                    **({"X-Stream": "1"} if conn_no == 2 and i % 4 == 3 else {}),
                },
            )
            conn.getresponse().read()
            sent += 1
        conn.close()
    return sent


def _drive_extender(port: int) -> None:
    import httpx

    body = json.loads(
        (FIXTURES / "k8s-wire/filter-request.nodeCacheCapable-false.json").read_text()
    )
    gpu_pod = copy.deepcopy(body)
    meta = gpu_pod["Pod"]["metadata"]
    meta.setdefault("labels", {})["kvspread.io/model"] = "llava"
    meta.setdefault("annotations", {})["kvspread.io/gpu-memory"] = "8Gi"
    res = gpu_pod["Pod"]["spec"]["containers"][0].setdefault("resources", {})
    res.setdefault("limits", {})["nvidia.com/gpu"] = "1"
    bad_pod = copy.deepcopy(gpu_pod)
    bad_pod["Pod"]["metadata"]["annotations"]["kvspread.io/gpu-memory"] = "lots"
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(timeout=10) as client:
        for doc in (body, gpu_pod, bad_pod):
            for verb in ("filter", "prioritize"):
                r = client.post(f"{base}/{verb}", json=doc)
                assert r.status_code == 200, r.text
        assert client.post(f"{base}/filter", content=b"not json").status_code == 400


def _drive_router(port: int, n: int = 20) -> None:
    """`n` chat requests over the real ext_proc wire (request headers, then the body in one
    message, FULL_DUPLEX_STREAMED as Envoy sends it) and one unparsable body (400)."""
    from router.extproc import SERVICE
    from tests.router.test_router_extproc import DUPLEX, body_msgs, channel, headers_msg

    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]})
    with channel(port) as ch:
        stub = SERVICE.stub(ch)
        for body in [chat.encode()] * n + [b"{not json"]:
            msgs = [headers_msg(DUPLEX), *body_msgs(body, len(body))]
            list(stub.Process(iter(msgs), timeout=10))


def _drive_adapter(port: int, client_cert: Any) -> None:
    import httpx

    url = (
        f"https://127.0.0.1:{port}/apis/external.metrics.k8s.io/v1beta1/namespaces/default/"
        "kvspread_requests_per_second"
    )
    headers = {"X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"}

    def context(with_cert: bool) -> ssl.SSLContext:
        # The serving certificate is the adapter's self-signed one: trust is not under test.
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if with_cert:
            with client_cert.private_key_and_cert_chain_pem.tempfile() as pem:
                ctx.load_cert_chain(pem)
        return ctx

    with httpx.Client(verify=context(True), timeout=10) as client:
        for _ in range(3):
            assert client.get(url, headers=headers).status_code in (200, 404)
    with httpx.Client(verify=context(False), timeout=10) as client:
        assert client.get(url, headers=headers).status_code == 401


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (Debian package prometheus)")
    why = _can_run_bpf()
    if why:
        pytest.skip(f"collector cannot trace here: {why}")
    trustme = pytest.importorskip("trustme")
    tmp = tmp_path_factory.mktemp("live")
    logs = tmp / "logs"
    logs.mkdir()
    ports = {
        k: free_port()
        for k in (
            "http", "engine", "collector", "extender", "api", "otlp", "prom", "grpc", "router"
        )
    }  # fmt: skip
    servers = [_serve(_Inference, ports["http"]), _serve(_Engine, ports["engine"])]

    ca = trustme.CA()
    client_cert = ca.issue_cert("front-proxy-client", common_name="front-proxy-client")
    ca_file = tmp / "front-proxy-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    collector_cfg = tmp / "collector.yaml"
    collector_cfg.write_text(
        yaml.safe_dump(
            {
                "port": ports["collector"],
                "listen": "127.0.0.1",
                "node_name": NODE,
                "standalone": True,
                "http_ports": [ports["http"]],
                "otlp_endpoints": [f"http://127.0.0.1:{ports['otlp']}"],
                "otlp_interval_s": 1,
                "engines": {
                    "targets": [
                        {
                            "url": f"http://127.0.0.1:{ports['engine']}/metrics",
                            "engine": "vllm",
                            "model": "m",
                        }
                    ],
                    "interval_s": 1,
                },
                "signals": {"interval_s": 1},
                "bpf": {"header_cache": str(tmp / "headers")},
            }
        )
    )
    kv = [sys.executable, "-m", "kvspread"]
    procs = {
        "collector": _start("collector", [*kv, "collector", "run", "--config", str(collector_cfg)], logs),
        "adapter": _start(
            "adapter",
            [
                *kv, "adapter", "serve",
                "--secure-port", str(ports["api"]), "--bind-address", "127.0.0.1",
                "--otlp-port", str(ports["otlp"]), "--otlp-bind-address", "127.0.0.1",
                "--requestheader-client-ca-file", str(ca_file),
                "--requestheader-allowed-names", "front-proxy-client",
                "--authorization-mode", "AlwaysAllow",
            ],
            logs,
        ),
        "extender": _start(
            "extender",
            [*kv, "extender", "serve", "--standalone", "--host", "127.0.0.1", "--port", str(ports["extender"])],
            logs,
        ),
        "router": _start(
            "router",
            [
                *kv, "router", "serve", "--host", "127.0.0.1",
                "--grpc-port", str(ports["grpc"]), "--http-port", str(ports["router"]),
                "--endpoints", f"127.0.0.1:{ports['engine']}", "--scrape-interval", "0.5",
            ],
            logs,
        ),
    }  # fmt: skip

    rules_doc = rules.rules_file()
    for group in rules_doc["groups"]:
        group["interval"] = "1s"
    (tmp / "rules.yaml").write_text(yaml.safe_dump(rules_doc, sort_keys=False))
    prom_cfg = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            {
                # What the collector's ServiceMonitor does in a cluster: the node name
                # from the scrape, as `node`.
                "job_name": "kvspread-collector",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{ports['collector']}"],
                        "labels": {"node": NODE},
                    }
                ],
            },
            {
                "job_name": "kvspread-extender",
                "static_configs": [{"targets": [f"127.0.0.1:{ports['extender']}"]}],
            },
            {
                "job_name": "kvspread-adapter",
                "static_configs": [{"targets": [f"127.0.0.1:{ports['otlp']}"]}],
            },
            {
                "job_name": "kvspread-router",
                "static_configs": [{"targets": [f"127.0.0.1:{ports['router']}"]}],
            },
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(prom_cfg, sort_keys=False))
    procs["prometheus"] = _start(
        "prometheus",
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{ports['prom']}",
            "--log.level=warn",
        ],
        logs,
    )
    prom = f"http://127.0.0.1:{ports['prom']}"
    st = Stack(prom, procs, logs)
    try:
        deadline = time.monotonic() + 60
        _wait("prometheus ready", lambda: _get(f"{prom}/-/ready"), deadline, st)
        _wait(
            "collector bpf source up",
            lambda: json.loads(_get(f"http://127.0.0.1:{ports['collector']}/readyz"))["sources"][
                "bpf"
            ]["up"],
            deadline,
            st,
        )
        _wait(
            "extender", lambda: _get(f"http://127.0.0.1:{ports['extender']}/healthz"), deadline, st
        )
        _wait("adapter", lambda: _get(f"http://127.0.0.1:{ports['otlp']}/metrics"), deadline, st)
        _wait("router", lambda: _get(f"http://127.0.0.1:{ports['router']}/readyz"), deadline, st)

        sent = _drive_http(ports["http"])
        _drive_extender(ports["extender"])
        _drive_adapter(ports["api"], client_cert)
        _drive_router(ports["grpc"])

        def counted() -> bool:
            res = _series(prom, "sum(http_server_request_duration_seconds_count)")
            return bool(res) and float(res[0]["value"][1]) >= sent

        _wait(f"{sent} requests counted in Prometheus", counted, time.monotonic() + 40, st)
        # A second round so that rates over the short windows see an increase.
        _drive_http(ports["http"])
        _drive_extender(ports["extender"])
        _drive_router(ports["grpc"])
        for expr in (
            "kvspread:http_requests:rate5m",
            "kvspread:error_budget_remaining:ratio30d",
            "kvspread_kv_cache_usage_ratio",
            "kvspread_extender_requests_total",
            "kvspread_adapter_otlp_points_total > 0",
            "kvspread_router_picks_total > 0",
        ):
            _wait(expr, lambda e=expr: _series(prom, e), time.monotonic() + 30, st)
        time.sleep(2)  # two more scrapes and evaluations after the second round
        yield st
    finally:
        for name, p in procs.items():
            # The kvspread commands stop cleanly on SIGINT (KeyboardInterrupt -> exit 130).
            p.send_signal(signal.SIGTERM if name == "prometheus" else signal.SIGINT)
        stop_by = time.monotonic() + 3
        for p in procs.values():
            try:
                p.wait(timeout=max(0.1, stop_by - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()  # the temporary TSDB and sockets need no graceful shutdown
                p.wait(timeout=5)
        for s in servers:
            s.shutdown()
            s.server_close()


def _substitute(expr: str) -> str:
    """Grafana variables -> what "All" and the time picker give, for an instant query."""
    for var in ("namespace", "service", "modality", "node", "hpa"):
        expr = expr.replace(f"${var}", ".*")
    return expr.replace("$__rate_interval", "1m").replace("$__range", "1m")


def _label_values(expr: str) -> str:
    """Grafana's `label_values(series, label)` as the equivalent PromQL."""
    inner = expr[len("label_values(") : -1]
    series, label = inner.rsplit(",", 1)
    return f"group by ({label.strip()}) ({series.strip()})"


QUERIES = dashboards.panel_queries()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("q", QUERIES, ids=lambda q: f"{q.dashboard}:{q.panel}:{q.ref}")
def test_panel_query_returns_series(stack: Stack, q: dashboards.PanelQuery) -> None:
    expr = _substitute(q.expr)
    if expr.startswith("label_values("):
        expr = _label_values(expr)
    doc = _query(stack.prom, expr)
    assert doc.get("status") == "success", f"{q.panel}: query does not run: {doc} ({expr})"
    result = doc["data"]["result"]
    reason = EXPECTED_ABSENT.get((q.dashboard, q.panel))
    if callable(reason):
        reason = reason(stack.prom)
    if reason is not None:
        assert result == [], (
            f"{q.panel} has data although listed absent ({reason}): update the list"
        )
        pytest.skip(reason)
    assert result, f"{q.dashboard} / {q.panel}: no series for {expr}"


def test_gpu_absence_is_reported_not_zeroed(stack: Stack) -> None:
    """Without a GPU the nvml source says so and no GPU series exist at all."""
    up = {
        r["metric"]["source"]: float(r["value"][1])
        for r in _series(stack.prom, "kvspread_collector_source_up")
    }
    assert up["bpf"] == 1.0
    assert up["nvml"] == 0.0
    assert _series(stack.prom, "kvspread_gpu_memory_used_bytes") == []


def test_sli_rules_see_the_driven_traffic(stack: Stack) -> None:
    """The recorded error ratio is the share of 500s the test sent (one in ten)."""
    ratio = _series(
        stack.prom,
        'sum(increase(http_server_request_duration_seconds_count{http_response_status_code="500"}[10m])) / sum(increase(http_server_request_duration_seconds_count[10m]))',
    )
    assert ratio and abs(float(ratio[0]["value"][1]) - 0.1) < 0.02
    within = 'kvspread:gen_ai_streams_within_budget:ratio_rate5m{slo_class="realtime"}'
    fast = _series(stack.prom, within)
    assert fast, "no realtime per-token attainment"
    # 4 tokens 5 ms apart after 10 ms: within 50 ms per token; 1 token after 80 ms: over.
    # Half of each, as a ratio of two rates that Prometheus extrapolates at the window's
    # edges (the last scrape may hold one stream more of either kind): about 0.5
    (only,) = fast
    assert 0.3 < float(only["value"][1]) < 0.7


def test_rules_load_and_evaluate_without_errors(stack: Stack) -> None:
    doc = json.loads(_get(f"{stack.prom}/api/v1/rules"))
    loaded = {
        r["name"] for g in doc["data"]["groups"] for r in g["rules"] if r["type"] == "alerting"
    }
    assert loaded == set(rules.alert_names())
    for g in doc["data"]["groups"]:
        for r in g["rules"]:
            assert r.get("health") == "ok", f"rule {r['name']} failed: {r.get('lastError')}"


def _promql_rules() -> list[tuple[str, str]]:
    path = ROOT / "manifests/overlays/promql-adapter/adapter-promql.yaml"
    patch = yaml.safe_load(path.read_text())
    config = yaml.safe_load(patch["data"]["adapter.yaml"])
    # a combining rule (aggregation: slo-pressure) has no query of its own: its terms are
    # the other rules, each run here
    return [(r["name"], r["query"]) for r in config["rules"] if "query" in r]


@pytest.mark.parametrize("name,query", _promql_rules(), ids=[n for n, _ in _promql_rules()])
def test_promql_overlay_rule_runs(stack: Stack, name: str, query: str) -> None:
    """The PromQL backend's queries, with the matchers an HPA read would add, on real data."""
    expr = query.replace("<<.LabelMatchers>>", 'k8s_namespace_name=~".*"')
    doc = _query(stack.prom, expr)
    assert doc.get("status") == "success", f"{name}: {doc}"
    if name == "kvspread_good_requests_per_second":
        reason = _missing_bucket("0.2", name)(stack.prom)
        if reason:
            pytest.skip(reason)
    assert doc["data"]["result"], f"{name}: no value from {expr}"


def _families(names: set[str]) -> set[str]:
    """Series names -> metric family names (histogram parts folded)."""
    out = set()
    for name in names:
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix) and name.removesuffix(suffix) + "_bucket" in names:
                name = name.removesuffix(suffix)
        out.add(name)
    return out


# Catalogued metrics a part cannot expose on this machine, and why.
NOT_EXPOSED_HERE = {
    "kvspread_gpu_memory_used_bytes": _NO_GPU,
    "kvspread_gpu_memory_total_bytes": _NO_GPU,
    "kvspread_gpu_utilization_ratio": _NO_GPU,
    "DCGM_FI_DEV_FB_USED": _NO_GPU,
    "kvspread_node_fragmentation_ratio": _NO_GPU,
    "kvspread_node_largest_free_extent_bytes": _NO_GPU,
    "kvspread_collector_dropped_total": "nothing dropped in this run",
    "kvspread_http_server_unsampled_request_duration_seconds": (
        "this run stays under the collector's 5,000 requests/s budget"
    ),
    "kvspread_extender_cache_synced": "the extender runs --standalone (no caches)",
    "kvspread_router_cache_evictions_total": "nothing was evicted in this run (a series per index once one is)",
    "kvspread_router_kv_events_total": "the picker runs in approximate mode (KV events only in precise mode)",
}


@pytest.mark.parametrize("source", ["collector", "extender", "adapter", "router"])
def test_metrics_reference_matches_what_each_part_exposes(stack: Stack, source: str) -> None:
    """docs/metrics.md (the catalogue) lists every kvspread family a part serves, and each
    part serves every family listed for it unless this machine cannot produce it."""
    from observability.catalog import CATALOG

    rows = _series(stack.prom, f'group by (__name__) ({{job="kvspread-{source}"}})')
    exposed = _families({r["metric"]["__name__"] for r in rows})
    # prometheus_client's `_created` timestamps are no metrics of their own.
    exposed = {
        n
        for n in exposed
        if n.startswith(("kvspread_", "http_server_", "gen_ai_server_", "DCGM_", "llm_d_epp_"))
        and not n.endswith("_created")
    }
    listed = {m.name for m in CATALOG if m.source == source}
    assert exposed - listed == set(), f"{source} serves metrics missing from the catalogue"
    missing = listed - exposed - set(NOT_EXPOSED_HERE)
    assert missing == set(), f"catalogued for {source} but not served: {missing}"
    stale = (listed & exposed) & set(NOT_EXPOSED_HERE)
    assert stale == set(), f"served although listed as not exposed here: {stale}"
