"""The picker's /metrics against the catalogue (observability/catalog.py, source "router",
which renders docs/metrics.md): every family catalogued for the router is served, with the
catalogue's type and labels, and nothing kvspread_router_* or llm_d_epp_* (llm-d's
families, router/llmdmetrics.py) is served that is not catalogued.
Read from a running picker over HTTP, parsed by prometheus_client's own text parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from observability.catalog import CATALOG
from tests.router.conftest import router_config, wait, wait_fresh
from tests.router.test_router_extproc import duplex

CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hello"}]}'


def _families(text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (type, label names of its samples) as a scraper reads them; counters under
    their `_total` name, as the catalogue writes them."""
    out = {}
    for fam in text_string_to_metric_families(text):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        labels = {k for s in fam.samples for k in s.labels if k != "le"}
        out[name] = (fam.type, labels)
    return out


def test_metrics_serves_every_router_family_of_the_catalogue(engines, start_router) -> None:  # type: ignore[no-untyped-def]
    (idle,) = engines("idle")
    router = start_router(router_config([idle.address]))
    wait_fresh(router, 1)
    duplex(router.grpc_port, CHAT)  # one pick, so the labelled picks family has a series
    text = httpx.get(f"http://127.0.0.1:{router.http_port}/metrics").text
    # prometheus_client's `_created` timestamps are no families of their own
    served = {
        n: v
        for n, v in _families(text).items()
        if n.startswith(("kvspread_router_", "llm_d_epp_")) and not n.endswith("_created")
    }
    listed = {m.name: m for m in CATALOG if m.source == "router"}
    assert set(served) == set(listed)
    for name, (kind, labels) in served.items():
        m = listed[name]
        assert kind == m.type, name
        assert labels <= set(m.labels), name  # a family without series yet shows none
    assert served["kvspread_router_picks_total"][1] == {"endpoint", "reason"}
    # both refusal codes are there before any refusal
    assert served["kvspread_router_body_refusals_total"][1] == {"code"}
    assert 'kvspread_router_body_refusals_total{code="413"} 0.0' in text
    assert 'kvspread_router_body_refusals_total{code="429"} 0.0' in text
    assert "kvspread_router_body_held_bytes 0.0" in text


def test_the_grpc_servers_bounds_show_in_the_metrics(engines, start_router) -> None:  # type: ignore[no-untyped-def]
    """server.max_connections on a running picker: one connection served, a second (the
    first busy) refused with GOAWAY; both show in /metrics, as the connections gauge does."""
    import socket

    import hpack

    from router.extproc import PROCESS_PATH
    from tests.router.test_router_h2errors import HEADERS, PREFACE, REQUEST, frame, settings
    from tests.router.test_router_h2limits import _frames

    (idle,) = engines("idle")
    router = start_router(router_config([idle.address], server={"max_connections": 1}))
    url = f"http://127.0.0.1:{router.http_port}/metrics"
    busy = socket.create_connection(("127.0.0.1", router.grpc_port), timeout=10)
    try:  # a stream begun on it: busy, not idle
        process = [(k, PROCESS_PATH if k == ":path" else v) for k, v in REQUEST]
        busy.sendall(PREFACE + settings() + frame(HEADERS, 0x4, 1, hpack.Encoder().encode(process)))
        wait(lambda: "kvspread_router_grpc_connections 1.0" in httpx.get(url).text)
        with socket.create_connection(("127.0.0.1", router.grpc_port), timeout=10) as second:
            second.sendall(PREFACE + settings())
            assert any(f[0] == 7 for f in _frames(second))  # GOAWAY
        text = httpx.get(url).text
        assert 'kvspread_router_grpc_limits_total{limit="connection_refused"} 1.0' in text
        assert 'kvspread_router_grpc_limits_total{limit="message_late"} 0.0' in text
        assert "kvspread_router_grpc_buffered_bytes 0.0" in text
    finally:
        busy.close()
