"""The NodeSignals resource (kvspread/nodesignals.py) and its CRD (manifests/crds): the
object the collector creates validates against the CRD's own schema, the schema is
structural, the names agree, and reading never raises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kvspread import nodesignals as ns
from kvspread.signals import GpuSignal, NodeSignals, decode_signals, encode_signals

CRD_PATH = (
    Path(__file__).resolve().parents[2] / "manifests" / "crds" / "nodesignals" / "nodesignals.yaml"
)
DOC = encode_signals(
    NodeSignals(
        ts=1800000000.0,
        node="gpu-1",
        gpus=(GpuSignal(0, 81920, 30000, uuid="GPU-1", util=0.4, models=("qwen2-vl-7b",)),),
        streams=3,
    )
)


def crd() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD_PATH.read_text()))


def schema() -> dict[str, Any]:
    (version,) = crd()["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def test_crd_names_match_the_code() -> None:
    c = crd()
    assert c["metadata"]["name"] == ns.CRD_NAME == "nodesignals.kvspread.io"
    spec = c["spec"]
    assert spec["group"] == ns.GROUP and spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == ns.KIND and spec["names"]["listKind"] == ns.LIST_KIND
    assert spec["names"]["plural"] == ns.PLURAL
    (version,) = spec["versions"]
    assert version["name"] == ns.VERSION and version["served"] and version["storage"]
    assert "subresources" not in version  # one writer, one field: no status subresource


def _structural(node: dict[str, Any], where: str) -> None:
    """Every schema node says its type (apiextensions' structural-schema rule)."""
    assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), where
    for name, child in node.get("properties", {}).items():
        _structural(child, f"{where}.{name}")


def test_schema_is_structural_and_bounds_the_document() -> None:
    s = schema()
    _structural(s, "openAPIV3Schema")
    assert s["properties"]["spec"]["properties"]["document"]["maxLength"] == 4096


def test_the_created_object_validates_against_the_crd() -> None:
    obj = ns.build_resource("gpu-1", "0b6c3f4e-1d2a-4b5c-9e8f-7a6b5c4d3e2f", DOC)
    jsonschema.validate(obj, schema())
    assert obj["apiVersion"] == "kvspread.io/v1alpha1" and obj["kind"] == "NodeSignals"
    assert obj["metadata"]["name"] == "gpu-1"
    assert obj["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "gpu-1",
            "uid": "0b6c3f4e-1d2a-4b5c-9e8f-7a6b5c4d3e2f",
        }
    ]
    assert decode_signals(obj["spec"]["document"]) == decode_signals(DOC)  # same format
    bad = ns.build_resource("gpu-1", "u", DOC)
    bad["spec"]["document"] = "x" * 4097
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())


def test_patch_replaces_only_the_document() -> None:
    assert ns.document_patch(DOC) == {"spec": {"document": DOC, **ns.summary(DOC)}}


@pytest.mark.parametrize(
    ("node", "uid", "document", "message"),
    [
        ("gpu-1", "", DOC, "uid"),
        ("", "u", DOC, "name"),
        ("gpu-1", "u", "", "non-empty"),
        ("gpu-1", "u", "x" * 4097, "4096"),
    ],
)
def test_bad_input_is_refused_with_the_reason(
    node: str, uid: str, document: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ns.build_resource(node, uid, document)


def test_parse_reads_list_items_and_never_raises() -> None:
    obj = ns.build_resource("gpu-1", "u", DOC)
    obj["metadata"]["resourceVersion"] = "4711"
    got = ns.parse_resource(obj)
    assert got == ns.NodeSignalsObject("gpu-1", DOC, "4711")
    assert got.source == "NodeSignals gpu-1 (resourceVersion 4711)"
    # odd objects: not ours, nameless, no spec, a non-string document
    assert ns.parse_resource({"kind": "Node", "metadata": {"name": "x"}}) is None
    assert ns.parse_resource({"kind": "NodeSignals", "metadata": {}}) is None
    assert ns.parse_resource(["not", "a", "dict"]) is None
    assert ns.parse_resource({"metadata": {"name": "x"}}) == ns.NodeSignalsObject("x", "", "")
    weird = {"kind": "NodeSignals", "metadata": {"name": "x"}, "spec": {"document": 3}}
    assert ns.parse_resource(weird) == ns.NodeSignalsObject("x", "", "")


def test_every_write_carries_the_printer_columns_summary() -> None:
    """Issue 26: `kubectl get nodesignals` showed only NAME and AGE. The summary beside the
    document feeds the CRD's printer columns (measured, GPUs, largest free)."""
    doc = encode_signals(
        NodeSignals(
            ts=1_800_000_000.0,
            node="n1",
            gpus=(
                GpuSignal(index=0, mem_total_mib=81920, mem_used_mib=20480),
                GpuSignal(index=1, mem_total_mib=81920, mem_used_mib=81000),
            ),
        )
    )
    want = {"measuredAt": "2027-01-15T08:00:00Z", "gpus": 2, "largestFreeMiB": 61440}
    assert ns.document_patch(doc)["spec"] == {"document": doc, **want}
    assert ns.build_resource("n1", "uid", doc)["spec"] == {"document": doc, **want}
    crd = yaml.safe_load(CRD_PATH.read_text())
    (version,) = crd["spec"]["versions"]
    paths = {c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert {f".spec.{k}" for k in want} <= paths
    props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(want) <= set(props)
