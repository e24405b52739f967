"""The agent end to end without a GPU or a cluster: degrade-never-die, NVML absence,
engine scrapes, /metrics, /signals, /readyz, publishing to a fake API server, OTLP push."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest

from bpf.agent import Agent
from bpf.config import CollectorConfig, EnginesConfig, EngineTarget, SignalsConfig
from bpf.events import RTT_SLOTS, TcpStats
from bpf.gpu import FakeGpuReader, GpuProcess, GpuSample, GpuUnavailable, NvmlReader
from bpf.gpupods import PodGpuMemory
from bpf.node import MIB
from bpf.state import SourceStatus
from bpf.tracker import RequestRecord
from kvspread import names, nodesignals
from kvspread.clock import FakeClock
from kvspread.signals import decode_signals
from tests.bpf.conftest import wait_for
from tests.fake_kube import FakeKubeApi, make_node, make_pod

_UP = SourceStatus(True)
FIXTURES = Path(__file__).parents[1] / "fixtures" / "engine-metrics"
PROC = Path(__file__).parents[1] / "fixtures" / "proc"  # real-shaped /proc/<pid>/cgroup


class _Engine(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/garbage":
            body = b"{{{ not metrics"
        else:
            body = (FIXTURES / "vllm-0.11-metrics.txt").read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def engine_url() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def base_config(**kw: Any) -> CollectorConfig:
    """Fast intervals; a section given as a dict (`bpf={"enabled": False}`) overrides fields."""
    base = CollectorConfig(
        port=0,
        listen="127.0.0.1",
        standalone=True,
        signals=SignalsConfig(interval_s=0.2),
        engines=EnginesConfig(interval_s=0.2),
        nice=0,  # never renice the test process
    )
    changes = {
        k: replace(getattr(base, k), **v) if isinstance(v, dict) else v for k, v in kw.items()
    }
    return replace(base, **changes)


def cluster_config(api_url: str, **kw: Any) -> CollectorConfig:
    """Node gpu-1 of the fake API server at `api_url`, no BPF, the fixture /proc tree."""
    return base_config(
        standalone=False,
        node_name="gpu-1",
        kube_api_server=api_url,
        bpf={"enabled": False},
        proc_root=PROC,
        **kw,
    )


def test_nvml_without_driver_reports_absence() -> None:
    try:
        samples = NvmlReader().read()
    except GpuUnavailable as exc:
        assert str(exc)
    else:  # pragma: no cover - a machine with a GPU driver
        pytest.skip(f"an NVIDIA driver is present ({len(samples)} GPUs)")


def test_bpf_unavailable_collector_runs_on(
    tmp_path: Path, engine_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    empty_tracefs = tmp_path / "tracefs"
    empty_tracefs.mkdir()
    cfg = base_config(
        bpf={"tracefs": empty_tracefs},
        engines={
            "targets": (
                EngineTarget(f"{engine_url}/metrics"),
                EngineTarget(f"{engine_url}/garbage"),
                EngineTarget("http://127.0.0.1:1/metrics"),
            )
        },
    )
    agent = Agent(cfg, gpu_reader=FakeGpuReader(error="NVML Shared Library Not Found"))
    caplog.set_level(logging.INFO, logger="kvspread.collector")
    agent.start()
    try:
        base = f"http://127.0.0.1:{agent.server.port}"
        assert wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 200)
        ready = httpx.get(f"{base}/readyz").json()
        assert ready["missing"] == ["bpf", "kubernetes", "nvml"]
        assert "tracefs is not mounted" in ready["sources"]["bpf"]["reason"]
        assert ready["sources"]["engine"]["up"] is True
        metrics = httpx.get(f"{base}/metrics").text
        assert 'kvspread_collector_source_up{source="bpf"} 0.0' in metrics
        assert 'kvspread_collector_source_up{source="nvml"} 0.0' in metrics
        assert 'kvspread_collector_source_up{source="engine"} 1.0' in metrics
        assert "kvspread_gpu_memory_used_bytes{" not in metrics  # absent, never zeros
        assert (
            'kvspread_kv_cache_usage_ratio{k8s_namespace_name="",k8s_pod_name="",'
            'llm_engine="vllm",llm_model="meta-llama/Llama-3.1-8B-Instruct"} 0.4218'
        ) in metrics
        sig = decode_signals(httpx.get(f"{base}/signals").text)
        assert sig.gpus is None and set(sig.absent) == {"bpf", "gpu_pods", "kubernetes", "nvml"}
        assert sig.streams == 4  # engine: 3 running + 1 waiting
        assert sig.p95_s is None and sig.image_token_share is None
        time.sleep(0.6)  # several more cycles: reasons are logged once, not per sample
    finally:
        agent.stop()
    missing = [r for r in caplog.records if r.getMessage() == "source missing"]
    assert sorted(r.kv["source"] for r in missing) == ["bpf", "kubernetes", "nvml"]  # type: ignore[attr-defined]
    failing = [r for r in caplog.records if r.getMessage() == "engine endpoint failing"]
    assert len(failing) == 2


def test_all_engines_failing_marks_engine_source_down(engine_url: str) -> None:
    agent = Agent(base_config(engines={"targets": (EngineTarget(f"{engine_url}/garbage"),)}))
    agent.scrape_engines()
    st = agent.state.sources["engine"]
    assert not st.up and "not Prometheus text" in st.reason
    agent.server.httpd.server_close()


class _TextEngine(BaseHTTPRequestHandler):
    """An engine whose /metrics text the test sets (`server.text`)."""

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        body = self.server.text.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_nan_from_an_engine_is_absent_and_the_signals_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _TextEngine)
    srv.text = (  # type: ignore[attr-defined]
        'vllm:num_requests_running{model_name="m"} NaN\n'
        'vllm:num_requests_running{model_name="m2"} 3\n'
    )
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    cfg = base_config(
        bpf={"enabled": False}, nvml={"enabled": False}, engines={"targets": (EngineTarget(url),)}
    )
    agent = Agent(cfg)
    caplog.set_level(logging.INFO, logger="kvspread.collector")
    agent.start()
    base = f"http://127.0.0.1:{agent.server.port}"
    try:
        assert wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 200)
        sig = decode_signals(httpx.get(f"{base}/signals").text)
        # NaN is absent, never a number; nor is the other model's 3 the node's streams
        assert sig.streams is None
        assert httpx.get(f"{base}/readyz").json()["sources"]["engine"]["up"] is True
        warned = [r for r in caplog.records if "unusable values" in r.getMessage()]
        assert len(warned) == 1 and warned[0].kv["dropped"] == ["m:running"]  # type: ignore[attr-defined]
        srv.text = 'vllm:num_requests_running{model_name="m"} 3\n'  # type: ignore[attr-defined]
        assert wait_for(lambda: decode_signals(httpx.get(f"{base}/signals").text).streams == 3)
    finally:
        agent.stop()
        srv.shutdown()
        srv.server_close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class _FailingGpuReader:
    """A fake NVML reader that raises what GpuReader does not promise (an NVMLError of an
    unexpected kind, say) until `healed` is set; then one GPU."""

    def __init__(self) -> None:
        self.healed = threading.Event()

    def read(self) -> list[GpuSample]:
        if not self.healed.is_set():
            raise RuntimeError("NVML returned garbage")
        return [GpuSample(0, "GPU-0", "H100", 80 * 1024 * MIB, 20 * 1024 * MIB)]


def test_a_failing_signals_cycle_is_reported_and_the_next_one_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = _FailingGpuReader()
    agent = Agent(base_config(bpf={"enabled": False}), gpu_reader=reader)
    caplog.set_level(logging.INFO, logger="kvspread.collector")
    agent.start()
    base = f"http://127.0.0.1:{agent.server.port}"

    def signals_source() -> dict[str, Any]:
        return dict(httpx.get(f"{base}/readyz").json()["sources"].get("signals", {}))

    try:
        assert wait_for(lambda: signals_source().get("up") is False)
        r = httpx.get(f"{base}/readyz")
        assert r.status_code == 503 and "signals" in r.json()["missing"]
        assert signals_source()["reason"] == "cycle failed: RuntimeError: NVML returned garbage"
        metrics = httpx.get(f"{base}/metrics").text
        assert 'kvspread_collector_source_up{source="signals"} 0.0' in metrics
        time.sleep(0.5)  # more failing cycles: the thread goes on, the error is logged once
        reader.healed.set()
        assert wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 200)
        assert signals_source() == {"up": True}
        sig = decode_signals(httpx.get(f"{base}/signals").text)
        assert sig.gpus is not None and len(sig.gpus) == 1
        assert "signals" not in sig.absent
    finally:
        agent.stop()
    failed = [r for r in caplog.records if r.getMessage() == "source cycle failed"]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert failed[0].kv == {  # type: ignore[attr-defined]
        "source": "signals",
        "thread": "collector-signals",
        "reason": "RuntimeError: NVML returned garbage",
    }


class _FlakyPollSession:
    """A fake ProbeSession (no BPF objects) whose poll raises until `healed` is set: what
    the agent does with a failing event loop, not what the kernel does."""

    lost = 0

    def __init__(self) -> None:
        self.healed = threading.Event()
        self.polls = 0

    def open_batches(self, on_http: Any, on_accept: Any) -> None:
        pass

    def poll(self, timeout_ms: int) -> None:
        self.polls += 1
        if not self.healed.is_set():
            raise OSError("perf buffer poll failed")
        time.sleep(timeout_ms / 1000)

    def lost_events(self) -> dict[str, int]:
        return {}

    def read_tcp_stats(self) -> None:
        return None

    def read_unsampled(self) -> dict[str, int]:
        return {}

    def conn_last_write_ns(self, tgid: int, fd: int) -> int | None:
        return None

    def conn_held(self, tgid: int, fd: int, conn_id: int) -> int | None:
        return None

    def close(self) -> None:
        pass


def test_a_failing_bpf_poll_marks_bpf_down_and_polling_goes_on() -> None:
    session = _FlakyPollSession()
    agent = Agent(base_config(nvml={"enabled": False}), probe_loader=lambda pc: session)  # type: ignore[arg-type,return-value]
    agent.start()
    try:
        assert wait_for(lambda: not agent.state.sources.get("bpf", _UP).up)
        assert agent.state.sources["bpf"].reason == "cycle failed: OSError: perf buffer poll failed"
        assert wait_for(lambda: session.polls >= 2)  # the thread lives on
        session.healed.set()
        assert wait_for(lambda: agent.state.sources["bpf"].up)
    finally:
        agent.stop()


def test_gpu_signals_from_fake_reader() -> None:
    gpus = [
        GpuSample(0, "GPU-0", "H100", 80 * 1024 * MIB, 20 * 1024 * MIB, 0.3),
        GpuSample(1, "GPU-1", "H100", 80 * 1024 * MIB, 70 * 1024 * MIB, 0.9),
    ]
    agent = Agent(base_config(bpf={"enabled": False}), gpu_reader=FakeGpuReader(gpus))
    sig = agent.cycle()
    assert sig.gpus is not None and [g.mem_used_mib for g in sig.gpus] == [20480, 71680]
    assert agent.state.fragmentation == pytest.approx(1 - 60 / 70)
    assert agent.state.largest_free_mib == 60 * 1024
    agent.server.start()
    try:
        text = httpx.get(f"http://127.0.0.1:{agent.server.port}/metrics").text
    finally:
        agent.server.stop()
    assert (
        'kvspread_gpu_memory_used_bytes{gpu_index="1",gpu_uuid="GPU-1"} 7.516192768e+10' in text
    ), [line for line in text.splitlines() if "gpu_memory_used" in line]
    assert "kvspread_node_fragmentation_ratio" in text
    assert 'kvspread_collector_source_up{source="nvml"} 1.0' in text


def test_server_routes() -> None:
    agent = Agent(base_config(bpf={"enabled": False}, nvml={"enabled": False}))
    agent.server.start()
    base = f"http://127.0.0.1:{agent.server.port}"
    try:
        assert httpx.get(f"{base}/readyz").status_code == 503  # no cycle yet
        assert httpx.get(f"{base}/signals").status_code == 503
        r = httpx.get(f"{base}/nope")
        assert r.status_code == 404 and "/metrics" in r.json()["error"]
        assert httpx.get(f"{base}/healthz").text == "ok\n"
        agent.cycle()
        assert httpx.get(f"{base}/readyz").status_code == 200
        for method, path in (("POST", "/signals"), ("DELETE", "/metrics")):
            r = httpx.request(method, base + path, content=b"x")
            assert (r.status_code, r.headers["allow"]) == (405, "GET, HEAD")
            assert r.json() == {"error": f"method {method} not allowed on {path}; use GET, HEAD"}
        assert httpx.get(f"{base}/signals").status_code == 200
    finally:
        agent.server.stop()


def _record(**kw: Any) -> RequestRecord:
    d: dict[str, Any] = dict(
        tgid=1,
        port=8000,
        method="POST",
        route="/v1/chat/completions",
        status=200,
        modality="image",
        images=1,
        start_ns=0,
        ttfb_s=0.05,
        duration_s=0.2,
        streaming=False,
        response_bytes=10,
    )
    d.update(kw)
    return RequestRecord(**d)


@pytest.mark.parametrize("channel", ["nodesignals", "annotation"])
def test_publishes_signals_to_fake_api_server(engine_url: str, channel: str) -> None:
    clock = FakeClock()
    with FakeKubeApi() as api:
        api.put(make_node("gpu-1"))
        pod = make_pod(
            "vllm-0",
            "llm",
            node_name="gpu-1",
            labels={names.LABEL_MODEL: "llama"},
            annotations={names.ANNOTATION_METRICS_PORT: engine_url.rsplit(":", 1)[1]},
        )
        pod["metadata"]["uid"] = "3fcb4b70-f79a-4ffc-a71b-9592244ececa"  # pid 2101's cgroup
        pod["status"]["podIP"] = "127.0.0.1"
        api.put(pod)
        api.put(
            make_pod(
                "other", "llm", node_name="gpu-2", annotations={names.ANNOTATION_METRICS_PORT: "1"}
            )
        )
        gpus = [
            GpuSample(
                0, "GPU-0", "H100", 80 * 1024 * MIB, 20 * 1024 * MIB, 0.3, (GpuProcess(2101, 1),)
            )
        ]
        cfg = cluster_config(api.url, publish={"channel": channel})
        reader = FakeGpuReader(gpus)
        agent = Agent(cfg, gpu_reader=reader, clock=clock)
        agent.refresh_pods()
        targets = agent.engine_targets()
        assert [t.pod_name for t in targets] == ["vllm-0"]
        agent.scrape_engines()
        assert agent.state.sources["engine"].up
        sig = agent.cycle()
        assert sig.gpus is not None and sig.gpus[0].models == ("llama",)
        assert sig.gpus[0].kv_blocks_total == 27434  # pid 2101 runs in pod vllm-0
        assert agent.state.gpu_pods == {
            0: (PodGpuMemory(pod["metadata"]["uid"], "llm", "vllm-0", 1, 1),)
        }
        node = api.get("Node", "gpu-1")
        assert node is not None
        if channel == "annotation":
            text = node["metadata"]["annotations"][names.ANNOTATION_SIGNALS]
            path = "/api/v1/nodes/gpu-1"
            first = 1  # one PATCH
        else:
            assert names.ANNOTATION_SIGNALS not in node["metadata"]["annotations"]
            res = api.get("NodeSignals", "gpu-1", api_version=nodesignals.API_VERSION)
            assert res is not None
            owner = {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"}
            assert res["metadata"]["ownerReferences"] == [owner | {"uid": node["metadata"]["uid"]}]
            text = res["spec"]["document"]
            path = "/apis/kvspread.io/v1alpha1/nodesignals"
            first = 2  # PATCH answered 404, then the create (POST)
        doc = decode_signals(text)
        assert doc.node == "gpu-1" and doc.gpus is not None and doc.streams == 4

        def patches() -> int:
            return sum(1 for m, p, _ in api.requests if m in ("PATCH", "POST") and path in p)

        assert patches() == first
        clock.advance(5)
        agent.cycle()
        assert patches() == first  # rate limited
        clock.advance(6)
        agent.cycle()
        assert patches() == first  # nothing moved
        reader.samples[0] = GpuSample(
            0, "GPU-0", "H100", 80 * 1024 * MIB, 50 * 1024 * MIB, 0.3, (GpuProcess(2101, 1),)
        )
        agent.cycle()
        assert patches() == first + 1  # one merge patch, the object exists now
        # request attribution uses the pod table: namespace, pod and service name
        agent.record_request(_record(tgid=2101))
        (labels,) = agent.state.requests.snapshot()
        d = dict(labels)
        assert (d[names.ATTR_K8S_NAMESPACE], d[names.ATTR_K8S_POD]) == ("llm", "vllm-0")
        agent.server.httpd.server_close()


def test_the_pod_table_follows_watch_events_without_relisting() -> None:
    with FakeKubeApi() as api:
        api.put(make_node("gpu-1"))
        cfg = base_config(
            standalone=False,
            node_name="gpu-1",
            kube_api_server=api.url,
            bpf={"enabled": False},
            nvml={"enabled": False},
        )
        agent = Agent(cfg)
        watcher = agent._pods_watcher()
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        try:
            assert wait_for(lambda: watcher.stats.synced)
            pod = make_pod(
                "vllm-1", "llm", node_name="gpu-1", annotations={names.ANNOTATION_METRICS_PORT: "9"}
            )
            pod["metadata"]["uid"] = "0c4e2f1a-9b3d-4e5f-8a6b-1c2d3e4f5a6b"
            pod["status"]["podIP"] = "10.0.0.7"
            api.put(pod)
            api.put(make_pod("elsewhere", "llm", node_name="gpu-2"))
            assert wait_for(lambda: [t.pod_name for t in agent.engine_targets()] == ["vllm-1"])
            assert agent.state.sources["kubernetes"].up
            # being deleted (a graceful termination): it drains, so it is no engine to
            # scrape, and its gauges stop counting it as a serving replica
            pod["metadata"]["deletionTimestamp"] = "2026-12-07T15:00:00Z"
            api.put(pod)
            assert wait_for(lambda: agent.engine_targets() == [])
            pod["metadata"].pop("deletionTimestamp")
            api.put(pod)  # not a real transition; shows the table follows the field
            assert wait_for(lambda: [t.pod_name for t in agent.engine_targets()] == ["vllm-1"])
            api.delete("Pod", "vllm-1", "llm")
            assert wait_for(lambda: agent.engine_targets() == [])
            assert watcher.stats.lists == 1  # changes came as events, not re-lists
        finally:
            watcher.stop()
            thread.join(5)
            agent.server.httpd.server_close()


def unreachable_api_agent(**kw: Any) -> Agent:
    """A cluster-mode collector of node n whose API server does not answer."""
    cfg = base_config(
        standalone=False,
        node_name="n",
        kube_api_server="http://127.0.0.1:1",
        bpf={"enabled": False},
        nvml={"enabled": False},
        **kw,
    )
    return Agent(cfg)


@pytest.mark.parametrize(
    ("channel", "what"),
    [("nodesignals", "NodeSignals write failed"), ("annotation", "annotation patch failed")],
)
def test_api_server_down_is_reported_not_fatal(channel: str, what: str) -> None:
    agent = unreachable_api_agent(publish={"channel": channel})
    sig = agent.cycle()  # tries to publish: fails, logged, counted
    assert agent.state.publish_failures == 1
    assert agent.publish(sig) is False
    assert agent.state.publish_failures == 2
    assert what in agent.state.sources["kubernetes"].reason
    agent.server.httpd.server_close()


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        _Receiver.bodies.append(self.rfile.read(n))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_otlp_push_with_semantic_attributes() -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Receiver.bodies = []
    try:
        cfg = base_config(
            bpf={"enabled": False},
            node_name="gpu-1",
            otlp_interval_s=60,
            otlp_endpoints=(f"http://127.0.0.1:{srv.server_address[1]}",),
        )
        agent = Agent(cfg, gpu_reader=FakeGpuReader(error="no driver"))
        agent.record_request(_record())
        asked = b'POST /v1/chat/completions HTTP/1.1\r\n\r\n{"model":"qwen","messages":[]}'
        agent.record_request(
            _record(streaming=True, ttft_s=0.08, tpot_s=0.02, request=asked, tokens=4)
        )  # 0.2 s / 4 tokens: 50 ms per token, at the realtime budget (le=0.05)
        agent.record_request(_record(streaming=True, ttft_s=0.3, request=asked, tokens=1))
        # kernel TCP statistics of one server process and one accepted-connection edge
        agent.state.tcp[(4242, 8000)] = TcpStats(3, 900, 2, (0,) * RTT_SLOTS)
        agent.state.edges.add(
            ((names.ATTR_CLIENT_ADDRESS, "127.0.0.1"), (names.ATTR_CLIENT_POD, ""),
             (names.ATTR_SERVER_PORT, "8000"), (names.ATTR_K8S_NAMESPACE, ""), (names.ATTR_K8S_POD, ""))
        )  # fmt: skip
        agent.cycle()
        assert agent.otlp is not None and agent.otlp.flush()
        agent.otlp.shutdown()
        agent.server.httpd.server_close()
        text = generate_latest(agent.registry).decode()
    finally:
        srv.shutdown()
        srv.server_close()
    # /metrics: the same advised bounds and the provider label
    ttft_le = [
        x.split('le="')[1].split('"')[0]
        for x in text.splitlines()
        if x.startswith("gen_ai_server_time_to_first_token_seconds_bucket{")
    ]
    assert ttft_le == [repr(float(b)) for b in names.GEN_AI_TTFT_BUCKETS] + ["+Inf"]
    assert 'gen_ai_provider_name="openai"' in text
    assert 'gen_ai_request_model="qwen"' in text
    assert 'kvspread_collector_request_models_total{outcome="named"} 2.0' in text
    assert _Receiver.bodies
    req = ExportMetricsServiceRequest()
    req.ParseFromString(_Receiver.bodies[0])
    metrics = {
        m.name: m for rm in req.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    hist = metrics[names.HTTP_SERVER_REQUEST_DURATION.name]
    assert hist.unit == "s"
    (point,) = hist.histogram.data_points
    assert point.count == 3
    ttft = metrics[names.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN.name]
    (tp,) = ttft.histogram.data_points
    assert ttft.unit == "s" and tp.count == 2 and tp.sum == pytest.approx(0.38)
    tattrs = {a.key: (a.value.string_value or a.value.int_value) for a in tp.attributes}
    assert tattrs[names.ATTR_GEN_AI_OPERATION] == "chat" and tattrs[names.ATTR_HTTP_STATUS] == 200
    assert tattrs[names.ATTR_GEN_AI_PROVIDER] == "openai"  # semconv: required
    assert tattrs[names.ATTR_GEN_AI_REQUEST_MODEL] == "qwen"  # semconv: if available
    # the semconv's advised boundaries (docs/gen-ai/gen-ai-metrics.md), on the wire
    assert list(tp.explicit_bounds) == list(names.GEN_AI_TTFT_BUCKETS)
    assert list(tp.explicit_bounds)[:3] == [0.001, 0.005, 0.01] and tp.explicit_bounds[-1] == 10.0
    # 0.08 s at or under le=0.08; 0.3 s in (0.25, 0.5]
    assert sum(tp.bucket_counts[:7]) == 1 and tp.bucket_counts[9] == 1
    (op,) = metrics[names.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN.name].histogram.data_points
    assert op.count == 1 and op.sum == pytest.approx(0.02)
    assert list(op.explicit_bounds) == list(names.GEN_AI_TPOT_BUCKETS)
    assert op.explicit_bounds[0] == 0.01 and op.explicit_bounds[-1] == 2.5
    oattrs = {a.key: (a.value.string_value or a.value.int_value) for a in op.attributes}
    assert oattrs[names.ATTR_GEN_AI_PROVIDER] == "openai"
    # normalized latency: request duration / data events, on bounds holding both budgets
    (nl,) = metrics[names.GEN_AI_SERVER_NORMALIZED_LATENCY.name].histogram.data_points
    assert metrics[names.GEN_AI_SERVER_NORMALIZED_LATENCY.name].unit == "s"
    assert nl.count == 2 and nl.sum == pytest.approx(0.05 + 0.2)
    assert list(nl.explicit_bounds) == list(names.NORMALIZED_LATENCY_BUCKETS)
    assert 0.05 in nl.explicit_bounds and 0.12 in nl.explicit_bounds
    at = list(nl.explicit_bounds).index(0.05)
    assert sum(nl.bucket_counts[: at + 1]) == 1 and sum(nl.bucket_counts[at + 1 :]) == 1
    assert "kvspread_gen_ai_server_normalized_latency_seconds_bucket{" in text
    attrs = {a.key: (a.value.string_value or a.value.int_value) for a in point.attributes}
    assert attrs == {
        names.ATTR_HTTP_METHOD: "POST",
        names.ATTR_HTTP_STATUS: 200,
        names.ATTR_HTTP_ROUTE: "/v1/chat/completions",
        names.ATTR_SERVER_PORT: 8000,
        names.ATTR_MODALITY: "image",
    }
    assert point.sum == pytest.approx(0.6)
    assert names.GPU_MEMORY_USED.name not in metrics  # no driver: no GPU points at all
    up = metrics[names.COLLECTOR_SOURCE_UP.name].gauge.data_points
    by_source = {p.attributes[0].value.string_value: p.as_int for p in up}
    assert by_source["nvml"] == 0 and by_source["bpf"] == 0
    (retr,) = metrics[names.TCP_RETRANSMITS.name].sum.data_points
    assert metrics[names.TCP_RETRANSMITS.name].sum.is_monotonic and retr.as_int == 2
    (edge,) = metrics[names.CONNECTION_EDGES.name].sum.data_points
    assert edge.as_int == 1
    assert {a.key: a.value.string_value for a in edge.attributes}[
        names.ATTR_CLIENT_ADDRESS
    ] == "127.0.0.1"
    res = {a.key: a.value.string_value for a in req.resource_metrics[0].resource.attributes}
    assert res[names.ATTR_K8S_NODE] == "gpu-1"


def test_request_carries_service_and_qos_from_the_pod_labels() -> None:
    """The SLO rules select by service and QoS class: both come from the serving pod's labels."""
    from bpf.attribution import PodRef

    agent = Agent(base_config(bpf={"enabled": False}, nvml={"enabled": False}))
    labels = {"app.kubernetes.io/name": "qwen2-vl", names.LABEL_QOS: "realtime"}
    md = {"uid": "u-1", "namespace": "llm", "name": "qwen-0", "labels": labels}
    agent._pods.event("ADDED", {"metadata": md})  # as the pod watch delivers it
    agent.attributor.resolve = lambda tgid: PodRef(uid="u-1", namespace="llm", name="qwen-0")  # type: ignore[method-assign, assignment]
    rec = _record(tgid=42, ttfb_s=0.02, duration_s=0.3)
    agent.record_request(rec)
    (labels,) = agent.state.requests.snapshot().keys()
    got = dict(labels)
    assert got[names.ATTR_SERVICE_NAME] == "qwen2-vl"
    assert got[names.ATTR_QOS] == "realtime"
    assert got[names.ATTR_K8S_NAMESPACE] == "llm" and got[names.ATTR_MODALITY] == "image"


def test_engine_reading_carries_the_engine_pods_service(engine_url: str) -> None:
    """kvspread_kv_cache_usage_ratio and the queue depth are selected by service in the adapter."""

    target = EngineTarget(f"{engine_url}/vllm", pod_uid="u-9", pod_name="vllm-0", namespace="llm")
    agent = Agent(
        base_config(bpf={"enabled": False}, nvml={"enabled": False}, engines={"targets": (target,)})
    )
    md = {"uid": "u-9", "namespace": "llm", "name": "vllm-0", "labels": {"app": "chat"}}
    agent._pods.event("ADDED", {"metadata": md})  # as the pod watch delivers it
    agent.scrape_engines()
    (reading,) = agent.state.engines.values()
    assert reading.service == "chat" and reading.pod == "vllm-0"
    agent.server.httpd.server_close()


def test_requests_over_the_budget_are_exported_from_the_kernel_histogram() -> None:
    """The kernel's per-(process, port) histogram of requests that got no event: log2 slots
    of microseconds become cumulative second buckets, summed per pod:port."""
    agent = Agent(base_config(bpf={"enabled": False}, nvml={"enabled": False}))
    slots = [0] * RTT_SLOTS
    slots[13] = 3  # [8.192, 16.384) ms
    slots[16] = 1  # [65.5, 131) ms
    agent.state.unsampled[(4242, 8000)] = TcpStats(4, 3 * 10_000 + 70_000, 0, tuple(slots))
    text = generate_latest(agent.registry).decode()
    name = "kvspread_http_server_unsampled_request_duration_seconds"
    assert f'{name}_count{{k8s_namespace_name="",k8s_pod_name="",server_port="8000"}} 4.0' in text
    assert (
        f'{name}_bucket{{k8s_namespace_name="",k8s_pod_name="",le="0.016384",server_port="8000"}} 3.0'
        in text
    )
    assert f'{name}_sum{{k8s_namespace_name="",k8s_pod_name="",server_port="8000"}} 0.1' in text
    agent.server.httpd.server_close()


def test_readiness_says_when_the_kubernetes_source_fails() -> None:
    """Issue 26: the collector reported ready while every NodeSignals write failed."""
    from bpf.server import readiness

    agent = unreachable_api_agent()
    try:
        agent.cycle()  # the write fails: the kubernetes source goes down
        status, body = readiness(agent.state, True)
        assert status == 503 and body["ready"] is False
        assert body["why"].startswith("kubernetes: ") and "NodeSignals write failed" in body["why"]
        agent._source("kubernetes", True)  # the next write works again
        assert readiness(agent.state, True)[0] == 200
    finally:
        agent.server.httpd.server_close()
