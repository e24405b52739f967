"""Per-pod GPU memory end to end in the agent: the fake NVML reader's per-process memory,
host pids joined to pods through the real-shaped /proc fixtures (tests/fixtures/proc) and
the pods of a fake API server, out through the signals document (`/signals`, NodeSignals),
the Prometheus exposition and OTLP; and absent, never zero, without a driver."""

from __future__ import annotations

import logging
import threading
from http.server import ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from bpf.agent import Agent
from bpf.gpu import FakeGpuReader, GpuProcess, GpuSample
from kvspread import names, nodesignals
from kvspread.signals import PodMemory, decode_signals
from tests.bpf.test_bpf_agent import PROC, _Receiver, base_config, cluster_config
from tests.fake_kube import FakeKubeApi, make_node, make_pod

GIB = 1 << 30
MIB = 1 << 20
CHAT = "3fcb4b70-f79a-4ffc-a71b-9592244ececa"  # pid 2101
SGLANG = "4dfc3c3b-18c1-402b-a946-a04e9ff35ab3"  # pid 2103 and its CRI-O conmon 2104
MPS_DAEMON = "23eb7164-3ac5-4727-95d2-5341edc5fe85"  # pid 2102: nvidia-cuda-mps-server
EMBED = "d755df98-8d89-40a3-9903-f4cb5455eb3a"  # pid 2105: an MPS client
TRTLLM = "5d5428b3-82da-4138-9b1b-a5b4960e55ce"  # pid 2106: an MPS client, pod not listed
STATIC_HASH = "94e5e19e8b2a32bbd0fcdf45e1defb12"  # pid 2110: a static pod's cgroup

GPUS = [
    GpuSample(  # time-sliced between two pods, plus an X server outside any pod
        0,
        "GPU-0",
        "H100",
        80 * GIB,
        29 * GIB,
        0.6,
        (
            GpuProcess(2101, 20 * GIB),
            GpuProcess(2103, 7 * GIB),
            GpuProcess(2104, 0),
            GpuProcess(2110, 1 * GIB),
            GpuProcess(2193, 256 * MIB, "graphics"),
        ),
    ),
    GpuSample(  # MPS: the server in its pod, two clients; NVML cannot tell one's memory
        1,
        "GPU-1",
        "H100",
        80 * GIB,
        7 * GIB,
        0.3,
        (
            GpuProcess(2102, 300 * MIB),
            GpuProcess(2105, 6 * GIB, "mps"),
            GpuProcess(2106, None, "mps"),
        ),
    ),
    GpuSample(2, "GPU-2", "H100", 80 * GIB, 9 * GIB, 0.1, None),  # processes not listed
]


def _pod(name: str, ns: str, uid: str, **kw: Any) -> dict[str, Any]:
    pod = make_pod(name, ns, node_name="gpu-1", **kw)
    pod["metadata"]["uid"] = uid
    return pod


def _cluster(api: FakeKubeApi) -> None:
    api.put(make_node("gpu-1"))
    api.put(_pod("vllm-chat-0", "llm", CHAT))
    api.put(_pod("sglang-vl-0", "llm", SGLANG))
    api.put(_pod("mps-control-daemon", "nvidia", MPS_DAEMON))
    api.put(_pod("embed-0", "emb", EMBED))
    mirror = {"kubernetes.io/config.mirror": STATIC_HASH}
    api.put(_pod("kube-apiserver-gpu-1", "kube-system", "0b5c9d1e-mirror", annotations=mirror))


def test_shared_gpus_carry_memory_per_pod_in_signals_metrics_and_otlp() -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Receiver.bodies = []
    with FakeKubeApi() as api:
        _cluster(api)
        cfg = cluster_config(
            api.url,
            otlp_interval_s=60,
            otlp_endpoints=(f"http://127.0.0.1:{srv.server_address[1]}",),
        )
        agent = Agent(cfg, gpu_reader=FakeGpuReader(GPUS))
        agent.refresh_pods()
        agent.cycle()
        res = api.get("NodeSignals", "gpu-1", api_version=nodesignals.API_VERSION)
        assert res is not None
        published = decode_signals(res["spec"]["document"])
        agent.server.start()
        try:
            base = f"http://127.0.0.1:{agent.server.port}"
            served = decode_signals(httpx.get(f"{base}/signals").text)
            text = httpx.get(f"{base}/metrics").text
        finally:
            agent.server.stop()
        assert agent.otlp is not None and agent.otlp.flush()
        agent.otlp.shutdown()
        srv.shutdown()
        srv.server_close()

    assert served == published and published.gpus is not None
    g0, g1, g2 = published.gpus
    assert g0.pods == (
        PodMemory(STATIC_HASH, "kube-system", "kube-apiserver-gpu-1", 1024.0),  # via its mirror
        PodMemory(SGLANG, "llm", "sglang-vl-0", 7 * 1024.0),  # container + conmon
        PodMemory(CHAT, "llm", "vllm-chat-0", 20 * 1024.0),
        PodMemory("", "", "", 256.0),  # the X server: in no pod, reported as such
    )
    assert g1.pods == (
        PodMemory(EMBED, "emb", "embed-0", 6 * 1024.0),
        PodMemory(MPS_DAEMON, "nvidia", "mps-control-daemon", 300.0),
        PodMemory(TRTLLM, "", "", None),  # not in the pod table, memory unknown: no 0
    )
    assert g2.pods is None and "gpu_pods" in published.absent  # GPU 2: absent, not empty

    used = sorted(x for x in text.splitlines() if x.startswith("kvspread_gpu_memory_used_bytes"))
    assert 'kvspread_gpu_memory_used_bytes{gpu_index="2",gpu_uuid="GPU-2"} 9.663676416e+09' in used
    assert (
        'kvspread_gpu_memory_used_bytes{gpu_index="0",gpu_uuid="GPU-0",'
        'k8s_namespace_name="llm",k8s_pod_name="vllm-chat-0",'
        f'k8s_pod_uid="{CHAT}",kvspread_gpu_memory_owner="pod"}} 2.147483648e+10'
    ) in used
    assert (
        'kvspread_gpu_memory_used_bytes{gpu_index="0",gpu_uuid="GPU-0",'
        'kvspread_gpu_memory_owner="no_pod"} 2.68435456e+08'
    ) in used
    assert not [x for x in used if TRTLLM in x]  # unknown memory has no series
    assert len(used) == 3 + 4 + 2  # three GPUs, four parts on GPU 0, two known on GPU 1

    # the same per-pod figures under dcgm-exporter's name, MiB and Kubernetes-mode labels
    dcgm = sorted(x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_FB_USED"))
    assert "# TYPE DCGM_FI_DEV_FB_USED gauge" in text
    assert (
        'DCGM_FI_DEV_FB_USED{Hostname="gpu-1",UUID="GPU-0",container="",gpu="0",'
        'modelName="H100",namespace="llm",pod="vllm-chat-0"} 20480.0'
    ) in [_sorted_labels(x) for x in dcgm]
    pods = sorted(_label(x, "pod") for x in dcgm)
    # pods only: no X server (no pod), no TRTLLM (unknown memory, no pod name)
    assert pods == [
        "embed-0",
        "kube-apiserver-gpu-1",
        "mps-control-daemon",
        "sglang-vl-0",
        "vllm-chat-0",
    ]

    req = ExportMetricsServiceRequest()
    req.ParseFromString(_Receiver.bodies[0])
    (metric,) = [
        m
        for rm in req.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == names.GPU_MEMORY_USED.name
    ]
    points = {
        tuple(sorted((a.key, a.value.string_value or a.value.int_value) for a in p.attributes)): (
            p.as_int or p.as_double
        )
        for p in metric.gauge.data_points
    }
    assert len(points) == len(used)
    embed = (
        (names.ATTR_GPU_INDEX, 1),
        (names.ATTR_GPU_UUID, "GPU-1"),
        (names.ATTR_K8S_NAMESPACE, "emb"),
        (names.ATTR_K8S_POD, "embed-0"),
        (names.ATTR_K8S_POD_UID, EMBED),
        (names.ATTR_GPU_MEMORY_OWNER, "pod"),
    )
    assert points[tuple(sorted(embed))] == 6 * GIB


def _labels(line: str) -> dict[str, str]:
    inner = line[line.index("{") + 1 : line.rindex("}")]
    return dict(kv.split("=", 1) for kv in inner.split(","))


def _label(line: str, key: str) -> str:
    return _labels(line)[key].strip('"')


def _sorted_labels(line: str) -> str:
    """An exposition line with its labels in name order (the exporter keeps its own)."""
    name, value = line[: line.index("{")], line[line.rindex("}") + 1 :]
    body = ",".join(f"{k}={v}" for k, v in sorted(_labels(line).items()))
    return f"{name}{{{body}}}{value}"


def test_no_driver_per_pod_memory_is_absent_and_said_so(caplog: pytest.LogCaptureFixture) -> None:
    agent = Agent(
        base_config(bpf={"enabled": False}, proc_root=PROC),
        gpu_reader=FakeGpuReader(error="NVML Shared Library Not Found"),
    )
    caplog.set_level(logging.WARNING, logger="kvspread.collector")
    for _ in range(3):
        sig = agent.cycle()
    assert sig.gpus is None and {"nvml", "gpu_pods"} <= set(sig.absent)
    assert agent.state.gpu_pods == {}
    agent.server.start()
    try:
        text = httpx.get(f"http://127.0.0.1:{agent.server.port}/metrics").text
    finally:
        agent.server.stop()
    assert "kvspread_gpu_memory_used_bytes{" not in text  # no series at all, never zeros
    assert "DCGM_FI_DEV_FB_USED{" not in text
    said = [r for r in caplog.records if r.getMessage() == "per-pod GPU memory absent"]
    assert len(said) == 1  # once per reason, not per cycle
    assert "NVML Shared Library Not Found" in said[0].kv["reason"]  # type: ignore[attr-defined]
