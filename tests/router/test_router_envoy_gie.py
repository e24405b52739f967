"""GIE's interfaces behind a real Envoy 1.40: both ways the picker's answer routes (the
`x-gateway-destination-endpoint` header, the `envoy.lb` dynamic metadata that Envoy lets in
only with `receiving_namespaces`), the conformance suite's hooks on and off, and the load
credited to the endpoint that served when a retry moved down the fallback list."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from router.conformance import SELECTION_HEADER, SERVED_HEADER
from tests.router.envoy_harness import envoy_skip_reason
from tests.router.gateway import HOSTS, LABELS, Gateway, chat, open_gateway, post, served_by

_SKIP = envoy_skip_reason()
pytestmark = [
    pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""),
    pytest.mark.slow,
]


@pytest.mark.parametrize("route_by", ["header", "metadata"])
def test_the_picker_routes_by_header_and_by_metadata(route_by: str) -> None:
    """`metadata`: the route strips the header before the ORIGINAL_DST cluster reads the
    metadata, so only the metadata (received through `receiving_namespaces`) can steer."""
    with open_gateway(HOSTS, LABELS, "h2", envoy={"route_by": route_by}) as gw:
        for busy in ("text_0", "text_1"):
            gw.reset(**{busy: 12})
            for i in range(4):
                rid = f"{route_by}-{busy}-{i}"
                name = served_by(post(gw, chat(), rid=rid))
                assert gw.explain(rid)["destination"] == gw.addr(name)
                assert name == ("text-1" if busy == "text_0" else "text-0")
                _, headers, _ = gw.fakes[name].requests[-1]
                if route_by == "header":
                    assert headers["x-gateway-destination-endpoint"] == gw.addr(name)
                else:
                    assert "x-gateway-destination-endpoint" not in headers


@pytest.fixture(scope="module")
def hooked() -> Iterator[Gateway]:
    """The picker with the conformance hooks, Envoy sending it the response headers."""
    with open_gateway(
        HOSTS,
        LABELS,
        "h2",
        envoy={"response_headers": True},
        server={"conformance_hooks": True},
    ) as gw:
        yield gw


def test_the_selection_header_steers_and_the_served_endpoint_is_echoed(hooked: Gateway) -> None:
    gw = hooked
    gw.reset(text_1=12)  # the scoring would avoid text-1
    for value in (
        HOSTS["text-1"],
        gw.addr("text-1"),
        f"{gw.addr('text-1')} , {HOSTS['text-0']}",  # order kept
        f"10.255.0.1, {HOSTS['text-1']}, {HOSTS['text-1']}",  # no match skipped, deduplicated
    ):
        resp = post(gw, chat(), **{SELECTION_HEADER: value})
        assert served_by(resp) == "text-1", value
        assert resp.headers[SERVED_HEADER] == gw.addr("text-1")
    resp = post(gw, chat(), **{SELECTION_HEADER: HOSTS["image-0"]})
    assert served_by(resp) == "image-0"  # a text request, steered to the image pod
    for value in ("10.255.0.1", f"{HOSTS['text-0']}:1", ", ,"):
        resp = post(gw, chat(), **{SELECTION_HEADER: value})
        assert resp.status_code == 503, value
        assert SELECTION_HEADER in resp.json()["error"]["message"]
    resp = post(gw, chat())  # no header: the scoring decides
    assert served_by(resp) != "text-1"
    assert resp.headers[SERVED_HEADER] == gw.addr(served_by(resp))


def test_without_the_flag_the_selection_header_is_ignored() -> None:
    with open_gateway(HOSTS, LABELS, "h2", envoy={"response_headers": True}) as gw:
        gw.reset(text_1=12)
        for value in (HOSTS["text-1"], "10.255.0.1"):
            resp = post(gw, chat(), **{SELECTION_HEADER: value})
            assert served_by(resp) == "text-0"
            assert SERVED_HEADER not in resp.headers


def test_the_load_goes_to_the_endpoint_that_served() -> None:
    """The picker names a dead pod first and text-1 as its fallback (steered, so the
    choice is known); Envoy's override_host policy tries the dead pod, retries on the
    refused connection to text-1, and reports text-1 as `upstream.address` in the response
    headers: the picker moves the pick's load and its prefix blocks to text-1."""
    hosts = {**HOSTS, "dead-0": "127.0.0.5"}
    labels = {**LABELS, "dead-0": "text"}
    envoy = {"route_by": "override_host", "retries": 2, "response_headers": True}
    with open_gateway(
        hosts,
        labels,
        "h2",
        envoy=envoy,
        dead=("dead-0",),
        server={"conformance_hooks": True},
        scoring={"fallbacks": 1},
    ) as gw:
        gw.reset()
        before = gw.router.picker.served_elsewhere
        rid = "served-elsewhere-1"
        steer = f"{gw.addr('dead-0')},{gw.addr('text-1')}"
        prompt = "Describe the gateway's retry path in detail. " * 12  # 2 prefix blocks
        resp = post(gw, chat(prompt), rid=rid, **{SELECTION_HEADER: steer})
        assert served_by(resp) == "text-1"
        assert resp.headers[SERVED_HEADER] == gw.addr("text-1")
        prefix = gw.router.picker.cache.prefix  # the blocks were computed where it served
        assert prefix.blocks_of(gw.addr("dead-0")) == 0
        assert prefix.blocks_of(gw.addr("text-1")) == 2
        decision = gw.explain(rid)
        assert decision["destination"] == steer
        assert decision["served_by"] == gw.addr("text-1")
        assert gw.router.picker.served_elsewhere == before + 1
        scraped = httpx.get(f"http://127.0.0.1:{gw.router.http_port}/metrics", timeout=5).text
        assert f"kvspread_router_served_elsewhere_total {before + 1}.0" in scraped
        # served where picked: nothing moves
        rid = "served-where-picked-1"
        resp = post(gw, chat(), rid=rid, **{SELECTION_HEADER: gw.addr("text-0")})
        assert served_by(resp) == "text-0"
        assert gw.explain(rid)["served_by"] == gw.addr("text-0")
        assert gw.router.picker.served_elsewhere == before + 1
