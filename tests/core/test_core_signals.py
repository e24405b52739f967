import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvspread.gpumem import free_mib
from kvspread.signals import (
    MAX_DOCUMENT_BYTES,
    GpuSignal,
    NodeSignals,
    PodMemory,
    SignalsError,
    SignalState,
    decode_signals,
    encode_signals,
    read_signals,
)

NOW = 1_800_000_000.0


def _node(n_gpus: int = 8, **kw) -> NodeSignals:
    gpus = tuple(
        GpuSignal(
            index=i,
            uuid=f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}",
            mem_total_mib=81559.0,
            mem_used_mib=1000.0 * i,
            util=0.5,
            kv_blocks_total=16384,
            kv_blocks_used=100 * i,
            models=("qwen2-vl-7b-instruct", "llava-1.6-vicuna-7b"),
        )
        for i in range(n_gpus)
    )
    return NodeSignals(
        ts=NOW,
        node="gpu-node-1",
        gpus=gpus,
        streams=12,
        image_token_share=0.31,
        p95_s=0.142,
        ttft_p95_s=0.081,
        **kw,
    )


def test_round_trip_keeps_every_field():
    s = _node()
    assert decode_signals(encode_signals(s)) == s


def test_ttft_p95_is_absent_not_zero_without_streams():
    s = NodeSignals(ts=NOW, node="n", p95_s=0.1)
    doc = json.loads(encode_signals(s))
    assert "ttft_p95_s" not in doc and decode_signals(encode_signals(s)).ttft_p95_s is None
    assert decode_signals(encode_signals(_node())).ttft_p95_s == 0.081


def test_an_eight_gpu_node_fits_in_4_kib():
    assert len(encode_signals(_node(8)).encode()) <= MAX_DOCUMENT_BYTES


def _shared(n_gpus: int, pods_per_gpu: int) -> NodeSignals:
    """Shared GPUs: each with `pods_per_gpu` pods and the processes in no pod."""
    base = _node(n_gpus)
    assert base.gpus is not None
    gpus = tuple(
        dataclasses.replace(
            g,
            pods=(
                *(
                    PodMemory(
                        f"{g.index:08x}-9b3d-4e5f-8a6b-{p:012x}",
                        "llm-serving",
                        f"vllm-qwen2-vl-7b-{p}",
                        24576.0,
                    )
                    for p in range(pods_per_gpu)
                ),
                PodMemory("", mem_used_mib=512.0),
            ),
        )
        for g in base.gpus
    )
    return dataclasses.replace(base, gpus=gpus)


def test_per_pod_memory_round_trips_with_unknown_and_no_pod_entries() -> None:
    base = _node(2)
    assert base.gpus is not None
    pods = (
        PodMemory("3fcb4b70-f79a-4ffc-a71b-9592244ececa", "llm", "vllm-chat-0", 20480.0),
        PodMemory("5d5428b3-82da-4138-9b1b-a5b4960e55ce"),  # name unknown yet, memory unknown
        PodMemory("", mem_used_mib=0.0),  # processes in no pod that hold nothing: a real 0
    )
    s = dataclasses.replace(base, gpus=(dataclasses.replace(base.gpus[0], pods=pods), base.gpus[1]))
    text = encode_signals(s)
    assert decode_signals(text) == s
    g0, g1 = json.loads(text)["gpus"]
    assert g0["pods"][1] == {"uid": "5d5428b3-82da-4138-9b1b-a5b4960e55ce"}  # no 0 made up
    assert g0["pods"][2] == {"uid": "", "mem_used_mib": 0.0}
    assert "pods" not in g1  # not listed: absent, not empty


def test_shared_gpus_fit_in_4_kib_one_pod_on_eight_or_two_on_four() -> None:
    assert len(encode_signals(_shared(8, 1)).encode()) <= MAX_DOCUMENT_BYTES
    assert len(encode_signals(_shared(4, 2)).encode()) <= MAX_DOCUMENT_BYTES


def test_oversized_document_is_refused_not_truncated():
    with pytest.raises(SignalsError, match="limit"):
        encode_signals(_node(40))


def test_absent_gpu_signals_stay_absent_not_zero():
    s = NodeSignals(ts=NOW, node="cpu-only", absent=("nvml",))
    doc = json.loads(encode_signals(s))
    assert "gpus" not in doc and doc["absent"] == ["nvml"]
    assert decode_signals(encode_signals(s)).gpus is None


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json", "not JSON"),
        ("[]", "object"),
        ('{"v": 2, "ts": 1}', "version"),
        ('{"v": 1}', "ts must be a number"),
        (
            '{"v": 1, "ts": 1, "gpus": [{"mem_total_mib": "80G", "mem_used_mib": 1}]}',
            r"gpus\[0\].mem_total_mib",
        ),
        ('{"v": 1, "ts": 1, "gpus": [{"mem_total_mib": 1, "mem_used_mib": -1}]}', ">= 0"),
        ('{"v": 1, "ts": 1, "p95_s": NaN}', "finite"),
        (
            '{"v": 1, "ts": 1, "gpus": [{"mem_total_mib": 1, "mem_used_mib": 1, "pods": {}}]}',
            r"gpus\[0\].pods must be a list",
        ),
        (
            '{"v": 1, "ts": 1, "gpus": [{"mem_total_mib": 1, "mem_used_mib": 1, "pods": [{}]}]}',
            r"gpus\[0\].pods\[0\].uid must be a string",
        ),
        (
            '{"v": 1, "ts": 1, "gpus": [{"mem_total_mib": 1, "mem_used_mib": 1,'
            ' "pods": [{"uid": "", "mem_used_mib": -5}]}]}',
            r"gpus\[0\].pods\[0\].mem_used_mib must be >= 0",
        ),
        ('{"v": 1, "ts": 1, "image_token_share": 2}', "<= 1"),
    ],
)
def test_decode_names_the_bad_field(text, match):
    with pytest.raises(SignalsError, match=match):
        decode_signals(text)


def test_read_signals_classifies_without_raising():
    good = encode_signals(_node(2))
    assert read_signals(good, NOW + 5, 60).state is SignalState.FRESH
    stale = read_signals(good, NOW + 61, 60)
    assert stale.state is SignalState.STALE and stale.age_s == pytest.approx(61)
    assert read_signals(None, NOW, 60).state is SignalState.MISSING
    assert read_signals("", NOW, 60).state is SignalState.MISSING
    assert read_signals("{", NOW, 60).state is SignalState.INVALID


@given(st.text(max_size=300))
def test_read_signals_never_raises_on_any_text(text):
    assert read_signals(text, NOW, 60).state in SignalState


def test_used_memory_is_capped_at_total():
    doc = '{"v":1,"ts":1,"gpus":[{"i":0,"mem_total_mib":100,"mem_used_mib":150}]}'
    g = decode_signals(doc).gpus[0]
    assert g.mem_used_mib == 100 and free_mib(g.mem_total_mib, g.mem_used_mib) == 0
