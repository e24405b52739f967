"""The extender v1 wire format: parsing in any letter case, exact output keys, 400 texts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extender.decisions import FilterDecision, PrioritizeDecision
from extender.wire import WireError, encode_filter, encode_prioritize, parse_args

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-wire"


@pytest.mark.parametrize("mode", ["false", "true"])
def test_captured_requests_parse(mode: str) -> None:
    args = parse_args((WIRE / f"filter-request.nodeCacheCapable-{mode}.json").read_bytes())
    assert args.pod["metadata"]["name"] == "lab-pod-1"
    if mode == "false":
        assert not args.names_only and args.node_names is None
        assert args.names == ["lab-node-a", "lab-node-b", "lab-node-c"]
    else:
        assert args.names_only and args.nodes is None
        assert args.names == ["lab-node-a", "lab-node-c", "lab-node-b"]


@pytest.mark.parametrize(
    "keys",
    [("pod", "nodenames"), ("POD", "NODENAMES"), ("pOd", "NodeNAMES"), ("Pod", "NodeNames")],
)
def test_keys_in_any_letter_case(keys: tuple[str, str]) -> None:
    body = json.dumps({keys[0]: {"metadata": {"name": "p"}}, keys[1]: ["a", "b"], "Extra": 1})
    args = parse_args(body.encode())
    assert args.names == ["a", "b"] and args.names_only


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"", "request body is empty", id="empty"),
        pytest.param(b"   ", "request body is empty", id="blank"),
        pytest.param(b"{not json", "request body is not JSON", id="not JSON"),
        pytest.param(b"[1, 2]", "ExtenderArgs must be a JSON object", id="array"),
        pytest.param(
            b"null",
            "ExtenderArgs must be a JSON object with Pod and Nodes or NodeNames, got null",
            id="null",
        ),
        pytest.param(b'{"NodeNames": []}', "ExtenderArgs.Pod is missing", id="no Pod"),
        pytest.param(
            b'{"Pod": null, "NodeNames": []}', "ExtenderArgs.Pod is missing", id="null Pod"
        ),
        pytest.param(
            b'{"Pod": [], "NodeNames": []}',
            "ExtenderArgs.Pod must be a v1 Pod object",
            id="Pod list",
        ),
        pytest.param(
            b'{"Pod": {"metadata": 1}}', "Pod.metadata must be an object", id="bad metadata"
        ),
        pytest.param(
            b'{"Pod": {}, "Nodes": []}', "ExtenderArgs.Nodes must be a v1 NodeList", id="Nodes list"
        ),
        pytest.param(
            b'{"Pod": {}, "Nodes": {"items": {}}}', "Nodes.items must be a list", id="items object"
        ),
        pytest.param(
            b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}',
            "ExtenderArgs.Nodes.items[0].metadata.name is missing",
            id="node without name",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNames": "a"}',
            "ExtenderArgs.NodeNames must be a list",
            id="names string",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNames": ["a", 1]}',
            "ExtenderArgs.NodeNames[1] must be a string, got a number (1)",
            id="name int",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNames": ["a", null]}',
            "ExtenderArgs.NodeNames[1] must be a string, got null",
            id="name null",
        ),
        pytest.param(
            b'{"Pod": "p", "NodeNames": []}',
            "ExtenderArgs.Pod must be a v1 Pod object, got a string ('p')",
            id="Pod string",
        ),
    ],
)
def test_bad_bodies_say_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(WireError) as err:
        parse_args(body)
    assert message in str(err.value)


def test_empty_and_absent_node_lists_are_fine() -> None:
    assert parse_args(b'{"Pod": {}, "NodeNames": []}').names == []
    assert parse_args(b'{"Pod": {}, "Nodes": {"items": null}}').names == []
    assert parse_args(b'{"Pod": {}}').names == []


def test_filter_response_names_only_has_exact_keys() -> None:
    args = parse_args(b'{"Pod": {}, "NodeNames": ["a", "b", "c"]}')
    doc = json.loads(encode_filter(args, FilterDecision([True, False, True], {"b": "why"})))
    assert list(doc) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
    assert doc == {
        "Nodes": None,
        "NodeNames": ["a", "c"],
        "FailedNodes": {"b": "why"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_filter_response_full_mode_echoes_the_node_objects() -> None:
    body = (WIRE / "filter-request.nodeCacheCapable-false.json").read_bytes()
    args = parse_args(body)
    doc = json.loads(encode_filter(args, FilterDecision([True, True, False], {"lab-node-c": "x"})))
    assert doc["NodeNames"] is None
    assert doc["Nodes"]["items"] == json.loads(body)["Nodes"]["items"][:2]


def test_filter_error_sets_error_and_no_nodes() -> None:
    args = parse_args(b'{"Pod": {}, "NodeNames": ["a", "b"]}')
    doc = json.loads(encode_filter(args, FilterDecision.failure(2, "boom")))
    assert doc == {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "boom",
    }


def test_prioritize_response() -> None:
    args = parse_args(b'{"Pod": {}, "NodeNames": ["a", "b"]}')
    assert json.loads(encode_prioritize(args, PrioritizeDecision([3, 10]))) == [
        {"Host": "a", "Score": 3},
        {"Host": "b", "Score": 10},
    ]
