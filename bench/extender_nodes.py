"""Synthetic but realistic inputs for the extender benchmark: v1 Node objects shaped like
the captured ones (tests/fixtures/k8s-wire, managedFields included) with a
`kvspread.io/signals` annotation for 8 GPUs, kvspread pods bound to a fifth of them,
and the pod being scheduled (the captured pod plus kvspread labels and annotations)."""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path
from typing import Any

from extender.cache import ClusterState
from extender.config import ExtenderConfig
from extender.run import Running, build
from kvspread.signals import GpuSignal, NodeSignals, encode_signals

WIRE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "k8s-wire"
GPUS_PER_NODE = 8
GPU_MIB = 81559.0


def _captured() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        (WIRE / "filter-request.nodeCacheCapable-false.json").read_text()
    )
    return doc


def synthetic_nodes(n: int, seed: int = 1, ts: float | None = None) -> list[dict[str, Any]]:
    """n Node objects (deterministic for a seed and `ts`), signals measured at `ts` (default
    now). The bench's server and client pass the same `ts`, so the NodeList a request
    carries is the one the server's watch cache holds, as with a real API server."""
    rng = random.Random(seed)
    template = _captured()["Nodes"]["items"][0]
    now = time.time() if ts is None else ts
    out = []
    for i in range(n):
        node = copy.deepcopy(template)
        name = f"gpu-node-{i:05d}"
        node["metadata"]["name"] = name
        node["metadata"]["uid"] = f"00000000-0000-0000-0000-{i:012d}"
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        node["metadata"]["labels"]["kvspread.io/pool"] = rng.choice(["language", "mixed", "vision"])
        node["metadata"]["labels"]["kvspread.io/nvlink"] = rng.choice(["true", "false"])
        gpus = tuple(
            GpuSignal(
                index=j,
                uuid=f"GPU-{i:05d}-{j}",
                mem_total_mib=GPU_MIB,
                mem_used_mib=rng.choice([420.0, 18000.0, 40000.0, 62000.0, 81000.0]),
                util=round(rng.random(), 3),
                models=("llama-3-8b",) if rng.random() < 0.3 else (),
            )
            for j in range(GPUS_PER_NODE)
        )
        sig = NodeSignals(
            ts=now,
            node=name,
            gpus=gpus,
            streams=rng.randint(0, 64),
            image_token_share=round(rng.random(), 3),
            p95_s=round(rng.uniform(0.02, 0.2), 4),
        )
        node["metadata"]["annotations"]["kvspread.io/signals"] = encode_signals(sig)
        node["status"]["capacity"]["nvidia.com/gpu"] = str(GPUS_PER_NODE)
        node["status"]["allocatable"]["nvidia.com/gpu"] = str(GPUS_PER_NODE)
        out.append(node)
    return out


def synthetic_pods(n: int, seed: int = 2) -> list[dict[str, Any]]:
    """kvspread pods bound to every fifth node."""
    rng = random.Random(seed)
    pods = []
    for i in range(0, n, 5):
        pod = scheduling_pod(f"bound-{i}")
        pod["spec"]["nodeName"] = f"gpu-node-{i:05d}"
        pod["status"] = {"phase": "Running"}
        pod["metadata"]["labels"]["kvspread.io/model"] = rng.choice(["llama-3-8b", "qwen2-vl-7b"])
        pods.append(pod)
    return pods


def scheduling_pod(name: str = "llm-0") -> dict[str, Any]:
    """The captured pod, turned into a kvspread inference pod (1 GPU, 24 GiB)."""
    pod: dict[str, Any] = copy.deepcopy(_captured()["Pod"])
    pod["metadata"]["name"] = name
    pod["metadata"]["namespace"] = "serving"
    pod["metadata"]["labels"] = {
        "kvspread.io/model": "llama-3-8b",
        "kvspread.io/modality": "text",
        "kvspread.io/qos": "realtime",
    }
    pod["metadata"]["annotations"] = {"kvspread.io/gpu-memory": "24Gi"}
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    pod["spec"]["schedulerName"] = "kvspread-scheduler"
    return pod


def request_body(nodes: list[dict[str, Any]], names_only: bool) -> bytes:
    """ExtenderArgs as kube-scheduler sends it in either nodeCacheCapable mode."""
    pod = scheduling_pod()
    if names_only:
        doc = {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
    else:
        doc = {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    return json.dumps(doc).encode()


def filled_extender(
    n: int, nodes: list[dict[str, Any]] | None = None, ts: float | None = None
) -> Running:
    """The extender as `kvspread extender` builds it (its reflectors not started), the watch
    cache filled the way a first list fills it: `nodes` (default `synthetic_nodes(n)`) and
    their bound pods (`ts`: see synthetic_nodes). Signals come from the nodes' annotation (no NodeSignals watch: that
    needs an API server with the CRD)."""
    cfg = ExtenderConfig.from_mapping(
        {"kubernetes": {"api_server": "http://127.0.0.1:9", "node_signals": False}}
    )
    running = build(cfg)
    state = running.state
    assert isinstance(state, ClusterState)
    state.replace_nodes(synthetic_nodes(n, ts=ts) if nodes is None else nodes)
    state.replace_pods(synthetic_pods(n))
    return running
