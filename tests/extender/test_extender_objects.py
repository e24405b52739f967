"""Reading Pods and Nodes: shapes, kvspread labels and annotations, and their errors."""

from __future__ import annotations

import pytest

from extender.objects import parse_node, parse_pod
from tests.fake_kube import make_node, make_pod


def test_gpu_pod_with_memory_annotation() -> None:
    pod = make_pod(
        "llm-0",
        "serving",
        node_name="gpu-1",
        gpus=2,
        labels={
            "kvspread.io/model": "qwen2-vl-7b",
            "kvspread.io/modality": "image",
            "kvspread.io/qos": "realtime",
        },
        annotations={"kvspread.io/gpu-memory": "24Gi"},
    )
    info = parse_pod(pod)
    assert info.key == "serving/llm-0" and info.node_name == "gpu-1" and info.active
    assert info.error == ""
    s = info.shape
    assert (s.gpus, s.mem_per_gpu_mib, s.model, s.modality, s.qos) == (
        2,
        24576.0,
        "qwen2-vl-7b",
        "image",
        "realtime",
    )


def test_gpu_pod_without_annotation_needs_whole_gpus() -> None:
    info = parse_pod(make_pod("p", gpus=4))
    assert info.shape.gpus == 4 and info.shape.mem_per_gpu_mib is None


def test_annotation_without_gpu_limit_means_one_gpu() -> None:
    info = parse_pod(make_pod("p", annotations={"kvspread.io/gpu-memory": "16000Mi"}))
    assert info.shape.gpus == 1 and info.shape.mem_per_gpu_mib == 16000.0


def test_init_container_gpus_count_as_the_max() -> None:
    pod = make_pod("p", gpus=1)
    pod["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    ]
    assert parse_pod(pod).shape.gpus == 2


@pytest.mark.parametrize(
    ("labels", "annotations", "message"),
    [
        pytest.param(
            {},
            {"kvspread.io/gpu-memory": "lots"},
            "annotation kvspread.io/gpu-memory='lots' is invalid: expected a Kubernetes quantity",
            id="memory not a quantity",
        ),
        pytest.param({}, {"kvspread.io/gpu-memory": "0"}, "greater than 0", id="memory zero"),
        pytest.param(
            {"kvspread.io/modality": "video"},
            {},
            "label kvspread.io/modality='video' is invalid: expected one of text, image, multi-image, audio",
            id="unknown modality",
        ),
        pytest.param(
            {"kvspread.io/qos": "gold"},
            {},
            "label kvspread.io/qos='gold' is invalid: expected one of realtime, batch, best-effort",
            id="unknown qos",
        ),
    ],
)
def test_invalid_kvspread_fields_name_the_field_and_format(
    labels: dict[str, str], annotations: dict[str, str], message: str
) -> None:
    info = parse_pod(make_pod("p", gpus=1, labels=labels, annotations=annotations))
    assert message in info.error


def test_bad_gpu_limit_is_reported() -> None:
    pod = make_pod("p", gpus=1)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1.5"
    assert "not a whole number of GPUs" in parse_pod(pod).error


@pytest.mark.parametrize(
    "junk",
    [
        None,
        5,
        "x",
        [],
        {"metadata": 3},
        {"spec": {"containers": "x"}},
        {"metadata": {"labels": [1]}},
    ],
)
def test_parse_pod_never_raises(junk: object) -> None:
    info = parse_pod(junk)
    assert info.shape.gpus == 0


def test_keys_in_any_letter_case() -> None:
    pod = {"Metadata": {"Name": "p", "NAMESPACE": "ns"}, "SPEC": {"NodeName": "n"}}
    info = parse_pod(pod)
    assert info.key == "ns/p" and info.node_name == "n"


def test_terminal_pods_hold_nothing() -> None:
    assert not parse_pod(make_pod("p", node_name="n", gpus=1, phase="Succeeded")).active


def test_parse_node_labels_and_signals() -> None:
    info = parse_node(
        make_node(
            "gpu-1",
            labels={"kvspread.io/pool": "vision", "kvspread.io/nvlink": "true"},
            annotations={"kvspread.io/signals": "{}"},
            allocatable={"nvidia.com/gpu": "8"},
        )
    )
    assert (info.name, info.pool, info.nvlink, info.signals_annotation, info.gpu_allocatable) == (
        "gpu-1",
        "vision",
        True,
        "{}",
        8,
    )
    assert parse_node(make_node("x", labels={"kvspread.io/pool": "weird"})).pool is None
    assert parse_node(None).name == ""
