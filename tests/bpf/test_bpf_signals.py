"""Node signals (docs/design.md section 4) and when to publish them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bpf.gpu import GpuProcess, GpuSample
from bpf.gpupods import PodGpuMemory
from bpf.node import (
    MIB,
    SignalInputs,
    build_signals,
    fit_signals,
    image_token_share,
)
from bpf.publish import PublishConfig, should_publish
from kvspread.engine import EngineSample
from kvspread.signals import GpuSignal, NodeSignals, PodMemory, decode_signals


def test_image_token_share_estimate() -> None:
    img, total = image_token_share(
        image_parts=2, requests=4, tokens_per_image=576, text_tokens_per_request=700
    )
    assert (img, total) == (1152, 1152 + 2800)


GPUS = [
    GpuSample(1, "GPU-b", "H100", 80 * 1024 * MIB, 20 * 1024 * MIB, 0.5, (GpuProcess(11, 1),)),
    GpuSample(0, "GPU-a", "H100", 80 * 1024 * MIB, 60 * 1024 * MIB, None, ()),
]


def test_build_signals_absent_sources_leave_fields_out() -> None:
    sig = build_signals(
        SignalInputs("n1", 1000.0, None, {}, {}, None, None, None, ("nvml", "bpf", "nvml"))
    )
    assert sig.gpus is None and sig.streams is None and sig.p95_s is None
    assert sig.absent == ("bpf", "gpu_pods", "nvml")  # no NVML: no per-pod memory either
    doc = decode_signals(fit_signals(sig)[1])
    assert doc.gpus is None and doc.absent == ("bpf", "gpu_pods", "nvml")


def test_build_signals_with_gpus_and_engines() -> None:
    eng = EngineSample("vllm", "llava", 0.5, 1000, 500, 16)
    sig = build_signals(
        SignalInputs("n1", 1000.0, GPUS, {1: ["llava", "llava"]}, {1: [eng]}, 7, 0.25, 0.12)
    )
    assert sig.gpus is not None
    g0, g1 = sig.gpus
    assert (g0.index, g0.mem_used_mib, g0.util, g0.kv_blocks_total) == (0, 60 * 1024, None, None)
    assert (g1.index, g1.models, g1.kv_blocks_total, g1.kv_blocks_used) == (
        1,
        ("llava",),
        1000,
        500,
    )
    doc = decode_signals(fit_signals(sig)[1])
    assert doc.streams == 7 and doc.image_token_share == 0.25 and doc.p95_s == 0.12


def test_a_gpu_kv_figure_the_parser_dropped_is_unknown_not_the_other_engines_sum() -> None:
    """Two engines share GPU 1; one served a NaN block count (bpf.engine drops it): the
    GPU's total is unknown. An engine that reports no blocks at all (TGI) is left out."""
    good = EngineSample("vllm", "llava", 0.5, 1000, 500, 16)
    broken = EngineSample("vllm", "qwen", None, None, None, 16, dropped=("kv_blocks_total",))
    silent = EngineSample("tgi", "t5", running=1.0)
    sig = build_signals(
        SignalInputs("n1", 1000.0, GPUS, {}, {0: [good, silent], 1: [good, broken]}, 1, 0, 0)
    )
    assert sig.gpus is not None
    g0, g1 = sig.gpus
    assert (g0.kv_blocks_total, g0.kv_blocks_used) == (1000, 500)
    assert (g1.kv_blocks_total, g1.kv_blocks_used) == (None, 500)


def test_build_signals_carries_per_pod_memory_in_mib_and_names_unlisted_gpus() -> None:
    pods = {
        1: (
            PodGpuMemory("u-1", "llm", "vllm-0", 12 * 1024 * MIB, 2),
            PodGpuMemory("u-2", "", "", None, 1),
            PodGpuMemory("", "", "", 300 * MIB, 1),
        )
    }  # GPU 0's processes were not listed
    sig = build_signals(SignalInputs("n1", 1000.0, GPUS, {}, {}, None, None, None, gpu_pods=pods))
    assert sig.gpus is not None
    g0, g1 = sig.gpus
    assert g0.pods is None and sig.absent == ("gpu_pods",)
    assert g1.pods == (
        PodMemory("u-1", "llm", "vllm-0", 12 * 1024.0),
        PodMemory("u-2", "", "", None),
        PodMemory("", "", "", 300.0),
    )
    listed = build_signals(
        SignalInputs("n1", 1000.0, GPUS, {}, {}, None, None, None, gpu_pods={**pods, 0: ()})
    )
    assert listed.absent == () and listed.gpus is not None and listed.gpus[0].pods == ()


def test_fit_signals_drops_per_pod_memory_after_models_and_says_so() -> None:
    pods = tuple(
        PodMemory(f"{p:08x}-9b3d-4e5f-8a6b-1c2d3e4f5a6b", "llm-serving", f"vllm-{p}", 4096.0)
        for p in range(6)
    )
    gpus = tuple(GpuSignal(i, 81559, 100, uuid=f"GPU-{i:032d}", pods=pods) for i in range(8))
    slim, text = fit_signals(NodeSignals(ts=1.0, node="n", gpus=gpus))
    assert len(text) <= 4096 and slim.gpus is not None
    assert all(g.pods is None and g.uuid for g in slim.gpus)  # UUIDs kept
    assert decode_signals(text).absent == ("gpu_pods",)


def test_more_pod_entries_than_readers_accept_are_dropped_not_published() -> None:
    pods = tuple(PodMemory(f"{p:08x}-9b3d-4e5f-8a6b-1c2d3e4f5a6b") for p in range(65))
    sig = NodeSignals(ts=1.0, node="n", gpus=(GpuSignal(0, 81559, 100, pods=pods),))
    slim, text = fit_signals(sig)
    assert len(text) <= 4096 and decode_signals(text).absent == ("gpu_pods",)


def test_fit_signals_drops_model_lists_to_fit_4kib() -> None:
    gpus = tuple(
        GpuSignal(
            i,
            81559,
            100,
            uuid=f"GPU-{i:032d}",
            models=tuple(f"some-org/a-very-long-model-name-{j}-instruct-awq" for j in range(12)),
        )
        for i in range(8)
    )
    sig = NodeSignals(ts=1.0, node="n", gpus=gpus)
    slim, text = fit_signals(sig)
    assert len(text) <= 4096 and slim.gpus is not None and all(not g.models for g in slim.gpus)


BASE = NodeSignals(
    ts=1000.0,
    node="n",
    gpus=(GpuSignal(0, 81920, 30000, util=0.5, kv_blocks_total=1000, kv_blocks_used=400),),
    streams=10,
    image_token_share=0.2,
    p95_s=0.1,
)
CFG = PublishConfig()


def at(t: float, **kw: object) -> NodeSignals:
    return replace(BASE, ts=t, **kw)  # type: ignore[arg-type]


def gpu(**kw: object) -> tuple[GpuSignal, ...]:
    assert BASE.gpus is not None
    return (replace(BASE.gpus[0], **kw),)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "previous,current,now,expected",
    [
        (None, BASE, 1000.0, True),
        (BASE, at(1005, gpus=gpu(mem_used_mib=60000)), 1005.0, False),
        (BASE, at(1011), 1011.0, False),
        (BASE, at(1011, gpus=gpu(mem_used_mib=31000)), 1011.0, True),
        (BASE, at(1011, gpus=gpu(mem_used_mib=30400)), 1011.0, False),
        (BASE, at(1011, gpus=gpu(util=0.7)), 1011.0, True),
        (BASE, at(1011, gpus=gpu(kv_blocks_used=500)), 1011.0, True),
        (BASE, at(1011, gpus=gpu(models=("m",))), 1011.0, True),
        (BASE, at(1011, streams=12), 1011.0, True),
        (BASE, at(1011, streams=11), 1011.0, False),
        (BASE, at(1011, image_token_share=0.3), 1011.0, True),
        (BASE, at(1011, p95_s=0.2), 1011.0, True),
        (BASE, at(1011, absent=("nvml",), gpus=None), 1011.0, True),
        (BASE, at(1000 + CFG.max_interval_s), 1000 + CFG.max_interval_s, True),
    ],
    ids=[
        "first",
        "rate limited despite change",
        "no change",
        "memory moved",
        "small memory move",
        "util moved",
        "kv moved",
        "models changed",
        "streams moved",
        "one more stream of 10",
        "image share moved",
        "p95 moved",
        "source lost",
        "heartbeat",
    ],
)
def test_should_publish(
    previous: NodeSignals | None, current: NodeSignals, now: float, expected: bool
) -> None:
    ok, why = should_publish(previous, current, now, CFG)
    assert ok is expected, why
    assert why
