"""Named setups of the serving simulation: the bundled real workloads on three clusters.

`real_workload_mapping(cluster)` is a YAML-shaped mapping (the same keys as `--config`)
that `config_from_mapping` turns into a SimConfig; a user's `--config` is applied on top.

Services (all three driven by bundled real data, simulator/data/workloads/SOURCE.md):
- `chat`: Azure LLM inference trace 2023 (conversation), Llama-3-8B, realtime (on
  `whole-gpu`: Llama-3-70B at tensor parallel 4).
- `vision`: ServeGen mm-image (25 clients of a Qwen-VL-class model; up to dozens of images
  per request, hence the 32k-context Qwen2-VL-7B), realtime.
- `assistant`: ServeGen language m-small (8 clients), Llama-3-8B, batch.

Clusters (`--cluster`):
- `small`: 3 nodes x 4 A100-80GB, 4 time-sliced replicas per GPU (the quick run).
- `shared`: 16 such nodes.
- `whole-gpu`: 16 nodes x 8 A100-80GB, whole GPUs only (`slots_per_gpu` 1, each replica
  asks for 80 GiB on each of its GPUs): the common vLLM deployment. 10 nodes are NVSwitch
  boards (HGX A100: all 8 GPUs one NVLink island, label `kvspread.io/nvlink: "true"`),
  6 PCIe-only servers (nodes 1, 4, 6, 9, 11, 14). `chat` is Llama-3-70B at
  tensor parallel 4 (`nvidia.com/gpu: 4`, its all-reduces slower across PCIe); vision and
  assistant take one GPU each. Nothing is shared, so kvspread's per-GPU memory terms
  only tell free GPUs from taken ones (other tenants' whole-GPU jobs, a quarter of the
  GPUs), and fragmentation counts whole free GPUs, i.e. where a 4-GPU replica still
  fits; its load, spread, pool and NVLink terms still apply.
The day part is ServeGen's 10:00-11:00 (the start of the daytime peak of both ServeGen
sets); the Azure trace replays its own hour. One `rate_scale` per cluster scales every rate.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLUSTERS", "DEFAULT_CLUSTER", "real_workload_mapping", "DAY_START_S"]

CLUSTERS = ("small", "shared", "whole-gpu")
DEFAULT_CLUSTER = "small"
DAY_START_S = 10 * 3600.0

RPS = "kvspread_requests_per_second"
P95 = "kvspread_request_latency_p95_seconds"


def _service(
    kind: str, model: str, qos: str, mem: float, rps: float, p95: float, max_r: int, init: int
) -> dict[str, Any]:
    return {
        "kind": kind,
        "model": model,
        "qos": qos,
        "gpu_memory_gib": mem,
        "min_replicas": 1,
        "max_replicas": max_r,
        "initial_replicas": init,
        "metrics": [
            {"metric": RPS, "type": "AverageValue", "value": rps},
            {"metric": P95, "type": "Value", "value": p95},
        ],
    }


_CLUSTER: dict[str, dict[str, Any]] = {
    "small": {
        "cluster": {"nodes": 3, "gpus_per_node": 4, "slots_per_gpu": 4},
        "rate_scale": 0.15,
        "max_replicas": 8,
        "initial": 2,
        "whole": False,
    },
    "shared": {
        "cluster": {"nodes": 16, "gpus_per_node": 4, "slots_per_gpu": 4},
        "rate_scale": 0.4,
        "max_replicas": 32,
        "initial": 6,
        "whole": False,
    },
    "whole-gpu": {
        "cluster": {
            "nodes": 16,
            "gpus_per_node": 8,
            "slots_per_gpu": 1,
            "pools": ["language", "mixed", "vision", "mixed"],
            # 10 NVSwitch nodes, 6 PCIe-only; a period of 5 shares no factor with the
            # 4 pools or the 3 services' turn order, so no policy lands a service on
            # NVLink nodes by construction
            "nvlink": [True, False, True, True, False],
            "nvlink_island_gpus": [0],
        },
        # other tenants hold whole GPUs too (training jobs), a quarter of them
        "background": {"gpu_fraction": 0.25, "mem_gib": [80.0], "busy_p": 1.0},
        "rate_scale": 0.6,
        "max_replicas": 40,
        "initial": 6,
        "whole": True,
        # the large model: Llama-3-70B, TP 4, about 2.4x the step time of an 8B replica,
        # hence a lower per-replica request-rate target
        "chat": {"model": "llama-3-70b", "tensor_parallel": 4, "rps": 1.5, "max": 16, "init": 3},
    },
}


def real_workload_mapping(cluster: str = DEFAULT_CLUSTER) -> dict[str, Any]:
    """The bundled real-workload setup on `cluster` (one of CLUSTERS)."""
    if cluster not in _CLUSTER:
        raise ValueError(f"--cluster: unknown cluster {cluster!r} (one of {', '.join(CLUSTERS)})")
    c = _CLUSTER[cluster]
    whole = c["whole"]
    mx, init = c["max_replicas"], c["initial"]

    def mem(shared_gib: float) -> float:
        return 80.0 if whole else shared_gib

    chat = _service("text", "llama-3-8b", "realtime", mem(24.0), 2.5, 10.0, mx, init)
    if "chat" in c:
        big = c["chat"]
        chat = _service(
            "text", big["model"], "realtime", mem(24.0), big["rps"], 10.0, big["max"], big["init"]
        )
        chat["tensor_parallel"] = big["tensor_parallel"]
    out: dict[str, Any] = {
        "cluster": c["cluster"],
        "services": {
            "chat": chat,
            "vision": _service(
                "image", "qwen2-vl-7b-32k", "realtime", mem(32.0), 2.0, 10.0, mx, init
            ),
            "assistant": _service("text", "llama-3-8b", "batch", mem(24.0), 4.0, 30.0, mx, init),
            "docs": None,  # the synthetic multi-image service: no real data for it
        },
        "workloads": {
            "chat": {"path": "azure-conv"},
            "vision": {"path": "servegen-mm-image"},
            "assistant": {"path": "servegen-language"},
        },
        "workload_start_s": DAY_START_S,
        "rate_scale": c["rate_scale"],
    }
    if "background" in c:
        out["background"] = c["background"]
    return out
