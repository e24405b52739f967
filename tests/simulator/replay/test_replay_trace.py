"""Trace loading: the bundled files as published, and clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.replay.trace import (
    TraceError,
    bundled_pod_lists,
    load_nodes,
    load_pods,
    resolve_pod_list,
)

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"


def test_bundled_cluster_is_the_papers() -> None:
    nodes = load_nodes()
    assert len(nodes) == 1213
    assert nodes.total_gpus == 6212
    assert set(nodes.models) == {"P100", "T4", "V100M16", "V100M32", "A10", "G2", "G3"}


def test_bundled_pod_lists_by_name() -> None:
    names = bundled_pod_lists()
    assert {"default", "gpushare40", "multigpu20"} <= set(names)
    pods = load_pods("default")
    assert len(pods) == 8152
    assert int((pods.num_gpu == 0).sum()) == 1088  # CPU-only pods
    assert pods.gpu_milli.max() == 1000
    assert len(load_pods("multigpu50")) == 9061


def test_a_csv_path_works_like_a_name(tmp_path: Path) -> None:
    f = tmp_path / "mine.csv"
    f.write_text(f"{POD_HEADER}\np0,2000,4096,1,500\np1,8000,16384,2,1000\np2,1000,1024,0,0\n")
    pods = load_pods(str(f))
    assert pods.name == "mine"
    assert pods.num_gpu.tolist() == [1, 2, 0]
    assert pods.gpu_milli.tolist() == [500, 1000, 0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param("name,cpu_milli\np0,1\n", "header lacks column(s) memory_mib", id="column"),
        pytest.param(f"{POD_HEADER}\np0,abc,1,1,500\n", ":2: column 'cpu_milli' is not", id="nan"),
        pytest.param(f"{POD_HEADER}\np0,1,1,9,1000\n", "must be in 0..8, got 9", id="9 GPUs"),
        pytest.param(f"{POD_HEADER}\np0,1,1,2,500\n", "must use whole GPUs", id="partial multi"),
        pytest.param(f"{POD_HEADER}\np0,1,1,1,0\n", "with gpu_milli 0", id="zero share"),
        pytest.param(f"{POD_HEADER}\np0,1,1,0,0\n", "no pod asks for a GPU", id="no GPU pod"),
        pytest.param(f"{POD_HEADER}\n", "no data rows", id="empty"),
        pytest.param(f"{POD_HEADER}\np0,-5,1,1,100\n", "must be >= 0", id="negative"),
    ],
)
def test_bad_pod_lists_say_what_is_wrong(tmp_path: Path, body: str, message: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(body)
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_pods(str(f))


def test_unknown_trace_lists_the_bundled_ones() -> None:
    with pytest.raises(TraceError, match="not a bundled trace name .*default"):
        resolve_pod_list("nosuchtrace")


def test_missing_node_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        load_nodes(tmp_path / "nodes.csv")


def test_node_list_rejects_a_gpu_node_without_model(tmp_path: Path) -> None:
    f = tmp_path / "nodes.csv"
    f.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n")
    with pytest.raises(TraceError, match="empty 'model'"):
        load_nodes(f)
