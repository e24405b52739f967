"""llm-d's objective headers (router/objectives.py): current and deprecated names, the
priorities of `objectives.classes`, sheddable requests refused with 429 and llm-d's
dropped-reason header when the pool is saturated, malformed values refused with 400; the
wire tests drive the picker over real gRPC as Envoy does."""

from __future__ import annotations

import json

import httpx
import pytest

from kvspread.settings import ConfigError
from router.config import RouterConfig
from router.objectives import (
    DEFAULT_FAIRNESS_ID,
    MAX_NAME_CHARS,
    ObjectiveError,
    ObjectivesConfig,
    read_objective,
)
from router.proto import ext_proc_pb2 as pb
from tests.router.conftest import router_config, wait_fresh
from tests.router.test_router_extproc import CHAT, duplex

CLASSES = ObjectivesConfig(classes={"premium": 100, "batch": -1})


def test_current_names_are_read() -> None:
    o = read_objective(
        {
            "x-llm-d-inference-objective": "premium",
            "x-llm-d-slo-ttft-ms": "250",
            "x-llm-d-slo-tpot-ms": "12.5",
            "x-llm-d-inference-fairness-id": "tenant-a",
        },
        CLASSES,
    )
    assert (o.name, o.priority, o.ttft_ms, o.tpot_ms, o.fairness_id) == (
        "premium",
        100,
        250.0,
        12.5,
        "tenant-a",
    )
    assert not o.sheddable


def test_deprecated_names_are_read_and_current_ones_win() -> None:
    old = read_objective(
        {"x-gateway-inference-objective": "batch", "x-slo-ttft-ms": "1e3", "x-slo-tpot-ms": "0"},
        CLASSES,
    )
    assert (old.name, old.priority, old.ttft_ms, old.tpot_ms) == ("batch", -1, 1000.0, None)
    assert old.sheddable
    both = read_objective(
        {"x-gateway-inference-objective": "batch", "x-llm-d-inference-objective": "premium"},
        CLASSES,
    )
    assert both.priority == 100


def test_absent_or_unknown_objective_gets_the_default_priority() -> None:
    assert read_objective({}, CLASSES).priority == 0
    assert read_objective({}, CLASSES).fairness_id == DEFAULT_FAIRNESS_ID
    assert read_objective({"x-llm-d-inference-objective": "gold"}, CLASSES).priority == 0
    low = ObjectivesConfig(classes={"premium": 5}, default_priority=-2)
    assert read_objective({"x-llm-d-inference-objective": "gold"}, low).sheddable
    assert read_objective({}, low).priority == -2
    assert read_objective({"x-llm-d-inference-objective": "premium"}, low).priority == 5


@pytest.mark.parametrize("value", ["abc", "-5", "inf", "nan", "1_000", "0x10", "", "12ms", "1e999"])
def test_malformed_targets_are_refused(value: str) -> None:
    with pytest.raises(ObjectiveError, match="x-llm-d-slo-ttft-ms: expected milliseconds"):
        read_objective({"x-slo-ttft-ms": value}, CLASSES)


def test_overlong_or_unprintable_names_are_refused() -> None:
    with pytest.raises(ObjectiveError, match="at most 253"):
        read_objective({"x-llm-d-inference-objective": "a" * (MAX_NAME_CHARS + 1)}, CLASSES)
    with pytest.raises(ObjectiveError, match="x-llm-d-inference-fairness-id"):
        read_objective({"x-llm-d-inference-fairness-id": "a\x01b"}, CLASSES)


def test_classes_config_is_checked() -> None:
    cfg = RouterConfig.from_mapping(
        {"endpoints": {"static": ["10.0.0.1:8000"]}, "objectives": {"classes": {"batch": -1}}}
    )
    assert cfg.objectives.classes == {"batch": -1}
    with pytest.raises(ConfigError, match="objectives.classes.batch"):
        RouterConfig.from_mapping(
            {"endpoints": {"static": ["10.0.0.1:8000"]}, "objectives": {"classes": {"batch": "x"}}}
        )


def _headers(resp: pb.ProcessingResponse) -> dict[str, str]:
    return {
        h.header.key: h.header.raw_value.decode()
        for h in resp.immediate_response.headers.set_headers
    }


@pytest.mark.parametrize("name", ["x-llm-d-inference-objective", "x-gateway-inference-objective"])
def test_sheddable_objective_gets_429_when_saturated(saturated, name: str) -> None:  # type: ignore[no-untyped-def]
    (resp,) = duplex(saturated.grpc_port, CHAT, extra={name: "batch"})
    imm = resp.immediate_response
    assert imm.status.code == 429
    assert _headers(resp)["x-llm-d-request-dropped-reason"] == "rejected-saturated"
    assert "sheddable" in json.loads(imm.body)["error"]["message"]
    text = httpx.get(f"http://127.0.0.1:{saturated.http_port}/metrics").text
    assert "kvspread_router_sheds_total 1.0" in text


def test_protected_objective_is_routed_when_saturated(saturated) -> None:  # type: ignore[no-untyped-def]
    for extra in ({"x-llm-d-inference-objective": "premium"}, {}):
        first = duplex(saturated.grpc_port, CHAT, extra=extra)[0]
        assert first.WhichOneof("response") == "request_headers"


def test_sheddable_objective_is_routed_when_an_endpoint_has_room(engines, start_router) -> None:  # type: ignore[no-untyped-def]
    a, b = engines("a", "b")
    a.set(waiting=20)
    b.set(waiting=0)
    router = start_router(
        router_config([a.address, b.address], objectives={"classes": {"batch": -1}})
    )
    wait_fresh(router, 2)
    first = duplex(router.grpc_port, CHAT, extra={"x-llm-d-inference-objective": "batch"})[0]
    assert first.WhichOneof("response") == "request_headers"


def test_malformed_target_is_400_naming_the_header(saturated) -> None:  # type: ignore[no-untyped-def]
    (resp,) = duplex(saturated.grpc_port, CHAT, extra={"x-llm-d-slo-tpot-ms": "fast"})
    assert resp.immediate_response.status.code == 400
    msg = json.loads(resp.immediate_response.body)["error"]["message"]
    assert "x-llm-d-slo-tpot-ms" in msg and "'fast'" in msg
    assert "x-llm-d-request-dropped-reason" not in _headers(resp)


def test_no_endpoint_503_says_rejected_no_endpoints(saturated) -> None:  # type: ignore[no-untyped-def]
    (resp,) = duplex(saturated.grpc_port, CHAT, subset=[])
    assert resp.immediate_response.status.code == 503
    assert _headers(resp)["x-llm-d-request-dropped-reason"] == "rejected-no-endpoints"


def test_explain_shows_the_objective(saturated) -> None:  # type: ignore[no-untyped-def]
    duplex(
        saturated.grpc_port,
        CHAT,
        extra={"x-llm-d-inference-objective": "premium", "x-llm-d-slo-ttft-ms": "300"},
    )
    doc = httpx.get(f"http://127.0.0.1:{saturated.http_port}/debug/explain/req-1").json()
    assert doc["objective"]["priority"] == 10
    assert doc["objective"]["ttft_ms"] == 300.0
