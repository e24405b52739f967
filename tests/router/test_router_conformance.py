"""The conformance hooks' header rules (router/conformance.py), where the served endpoint is
read from (router/served.py), moving a pick's load (EndpointSet.move_pick), and the stream
handler with the hooks on and off, without Envoy (tests/router/test_router_envoy_gie.py has
them behind a real one)."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2

from router.config import RouterConfig
from router.conformance import MAX_ITEMS, SELECTION_HEADER, SERVED_HEADER, steered
from router.endpoints import Endpoint, EndpointSet
from router.extproc import StreamHandler
from router.metrics import RouterMetrics
from router.picker import Picker
from router.proto import ext_proc_pb2 as pb
from router.request import RequestInfo, parse_request
from router.served import served_endpoint

POOL = ["10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "[fd00::5]:8000"]


@pytest.mark.parametrize(
    "header,want",
    [
        ("10.0.0.2", ["10.0.0.2:8000"]),
        ("10.0.0.1:8001", ["10.0.0.1:8001"]),  # exact ip:port
        ("10.0.0.1", ["10.0.0.1:8000"]),  # IP only: that IP's endpoint
        ("10.0.0.2:8000, 10.0.0.1:8000", ["10.0.0.2:8000", "10.0.0.1:8000"]),  # order kept
        ("10.0.0.2,10.0.0.2:8000,10.0.0.2", ["10.0.0.2:8000"]),  # deduplicated
        ("[fd00::5]:8000", ["[fd00::5]:8000"]),
        ("[fd00::5]", ["[fd00::5]:8000"]),
        ("fd00::5", ["[fd00::5]:8000"]),  # bare IPv6, no brackets
        ("10.0.0.9, 10.0.0.2:9999, , junk", []),  # no match: no endpoint
        ("", []),
    ],
)
def test_the_selection_header(header: str, want: list[str]) -> None:
    assert steered(header, POOL) == want


def test_the_selection_header_is_read_up_to_its_bound() -> None:
    header = ",".join(["10.9.9.9"] * MAX_ITEMS + ["10.0.0.2"])
    assert steered(header, POOL) == []


def _response_headers(
    served: str | None = None, attribute: str | None = None
) -> pb.ProcessingRequest:
    req = pb.ProcessingRequest(response_headers=pb.HttpHeaders())
    if served is not None:
        ns = req.metadata_context.filter_metadata["envoy.lb"]
        ns.fields["x-gateway-destination-endpoint-served"].string_value = served
    if attribute is not None:
        attrs = struct_pb2.Struct()
        attrs.fields["upstream.address"].string_value = attribute
        req.attributes["envoy.filters.http.ext_proc"].CopyFrom(attrs)
    return req


def test_the_served_endpoint_is_read_from_metadata_then_the_attribute() -> None:
    assert served_endpoint(_response_headers()) is None
    assert served_endpoint(_response_headers(attribute="10.0.0.2:8000")) == "10.0.0.2:8000"
    both = _response_headers(served="10.0.0.1:8000", attribute="10.0.0.2:8000")
    assert served_endpoint(both) == "10.0.0.1:8000"  # GIE's metadata wins
    assert served_endpoint(_response_headers(served="x" * 200)) is None  # bounded
    # the wire form Envoy 1.40 sends (field 9) parses into the attribute
    wire = _response_headers(attribute="[fd00::5]:8000").SerializeToString()
    assert served_endpoint(pb.ProcessingRequest.FromString(wire)) == "[fd00::5]:8000"


def _endpoints(*addresses: str) -> EndpointSet:
    eps = EndpointSet(clock=lambda: 100.0, wall_clock=lambda: 100.0, scraper=lambda ep: [])
    eps.replace([Endpoint(a, f"http://{a}/metrics") for a in addresses])
    return eps


def _view(eps: EndpointSet, address: str) -> tuple[int, int]:
    v = next(v for v in eps.views() if v.address == address)
    return v.picks_since_scrape, v.pending_tokens


def test_a_moved_pick_counts_where_it_was_served() -> None:
    eps = _endpoints("10.0.0.1:8000", "10.0.0.2:8000")
    req = RequestInfo("m", "image", (), 100, 400, 50, False)
    eps.record_pick("10.0.0.1:8000", req, 300)
    eps.record_pick("10.0.0.1:8000", req)
    assert _view(eps, "10.0.0.1:8000") == (2, 300 + 550)
    eps.move_pick("10.0.0.1:8000", "10.0.0.2:8000", req, 300)
    assert _view(eps, "10.0.0.1:8000") == (1, 550)
    assert _view(eps, "10.0.0.2:8000") == (1, 300)
    # a pick a scrape has already shown is not pending any more: nothing to take back
    eps.move_pick("10.0.0.1:8000", "10.0.0.2:8000", req, 999)
    assert _view(eps, "10.0.0.1:8000") == (1, 550)
    assert _view(eps, "10.0.0.2:8000") == (2, 300 + 999)


def _handler(hooks: bool) -> tuple[StreamHandler, Picker]:
    cfg = RouterConfig.from_mapping(
        {
            "server": {"conformance_hooks": hooks},
            "endpoints": {"static": ["10.0.0.1:8000", "10.0.0.2:8000"]},
            "scoring": {"fallbacks": 1},
        }
    )
    eps = _endpoints("10.0.0.1:8000", "10.0.0.2:8000")
    picker = Picker(cfg, eps, RouterMetrics())
    return StreamHandler(picker), picker


def _request_headers(**headers: str) -> pb.ProcessingRequest:
    req = pb.ProcessingRequest(request_headers=pb.HttpHeaders(end_of_stream=True))
    for k, v in {"x-request-id": "r1", **headers}.items():
        h = req.request_headers.headers.headers.add()
        h.key, h.raw_value = k, v.encode()
    return req


def _set_headers(resp: pb.ProcessingResponse) -> dict[str, str]:
    common = resp.response_headers.response
    return {o.header.key: o.header.raw_value.decode() for o in common.header_mutation.set_headers}


def test_with_the_hooks_the_header_steers_and_the_answer_echoes_who_served() -> None:
    h, picker = _handler(hooks=True)
    (answer,) = h.on_message(_request_headers(**{SELECTION_HEADER: "10.0.0.2, 10.0.0.1:8000"}))
    md = answer.dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert md["x-gateway-destination-endpoint"].string_value == "10.0.0.2:8000,10.0.0.1:8000"
    (echo,) = h.on_message(_response_headers(attribute="10.0.0.1:8000"))
    assert _set_headers(echo) == {SERVED_HEADER: "10.0.0.1:8000"}
    assert picker.served_elsewhere == 1
    metric = "kvspread_router_served_elsewhere_total"
    assert picker.metrics.registry.get_sample_value(metric) == 1.0
    assert picker.explain("r1")["served_by"] == "10.0.0.1:8000"  # type: ignore[index]
    h, _ = _handler(hooks=True)
    (refused,) = h.on_message(_request_headers(**{SELECTION_HEADER: "10.0.0.9"}))
    assert refused.immediate_response.status.code == 503
    h, _ = _handler(hooks=True)
    h.on_message(_request_headers())
    (echo,) = h.on_message(_response_headers())
    assert _set_headers(echo)[SERVED_HEADER].startswith("fail:")


def test_without_the_hooks_the_header_is_ignored() -> None:
    h, picker = _handler(hooks=False)
    (answer,) = h.on_message(_request_headers(**{SELECTION_HEADER: "10.0.0.9"}))
    assert answer.WhichOneof("response") == "request_headers"  # picked, not refused
    (echo,) = h.on_message(_response_headers(attribute="10.0.0.1:8000"))
    assert _set_headers(echo) == {}


def test_a_pick_served_elsewhere_moves_its_prefix_blocks_and_images() -> None:
    """The engine that served computed the prompt's blocks and encoded its images: the
    indexes follow it, and the picked pod keeps what it held before the pick."""
    import base64
    import json

    cfg = RouterConfig.from_mapping(
        {"endpoints": {"static": ["10.0.0.1:8000", "10.0.0.2:8000"]}, "cache": {"block_tokens": 16}}
    )
    picker = Picker(cfg, _endpoints("10.0.0.1:8000", "10.0.0.2:8000"), RouterMetrics())
    image = "data:image/png;base64," + base64.b64encode(b"\x89PNG" + b"\x07" * 300).decode()
    system = {"role": "system", "content": "You are terse. " * 30}
    question = {"role": "user", "content": [
        {"type": "text", "text": "what is in it? " * 10},
        {"type": "image_url", "image_url": {"url": image}}]}  # fmt: skip
    first = picker.pick(json.dumps({"model": "m", "messages": [system]}).encode(), {}, None)
    src = first.decision.chosen
    assert src is not None
    dst = next(a for a in ("10.0.0.1:8000", "10.0.0.2:8000") if a != src)
    held = picker.cache.prefix.blocks_of(src)
    body = json.dumps({"model": "m", "messages": [system, question]}).encode()
    out = picker.pick(body, {}, [src])  # the subset hint makes src the pick
    assert out.decision.chosen == src and out.recorded.digests
    assert picker.cache.prefix.blocks_of(src) == held + len(out.recorded.hashes)
    assert picker.served(out, dst)
    assert picker.cache.prefix.blocks_of(src) == held  # what src held before stays
    assert picker.cache.prefix.blocks_of(dst) == len(out.found.hashes)
    assert picker.cache.images.hits(out.found.digests) == {dst: 1}
    hits = picker.cache.lookup(parse_request(body, cfg.request)).hits
    assert hits[dst].prefix_share > hits[src].prefix_share and hits[dst].images == 1
