"""Fuzzed paths, selectors, methods and headers against the API shell: never a 5xx."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st

from kvspread import names
from kvspread.clock import FakeClock
from kvspread.settings import ConfigError
from metrics_adapter.apiserver import ApiServer
from metrics_adapter.auth import AllowListAuthorizer, RequestHeaderAuthenticator
from metrics_adapter.httpserver import Request
from metrics_adapter.provider import RuleProvider
from metrics_adapter.rules import default_rules, parse_rules
from metrics_adapter.sources.otlp import OtlpSource
from metrics_adapter.sources.store import GAUGE, Point, SeriesStore

CLOCK = FakeClock()
STORE = SeriesStore()
STORE.add(
    [
        Point(
            names.ENGINE_REQUESTS_WAITING.name,
            GAUGE,
            (("k8s.namespace.name", "llm"), ("service.name", "text")),
            CLOCK.now(),
            0,
            (3.0,),
        )
    ],
    CLOCK.now(),
)
API = ApiServer(
    RuleProvider(default_rules(), {"otlp": OtlpSource(STORE, CLOCK.now)}),
    RequestHeaderAuthenticator(["front-proxy-client"]),
    AllowListAuthorizer(groups=["system:authenticated"]),
)
CERT = {"subject": ((("commonName", "front-proxy-client"),),)}
LOOP = asyncio.new_event_loop()

segments = st.sampled_from(
    [
        "apis",
        "external.metrics.k8s.io",
        "v1beta1",
        "namespaces",
        "llm",
        names.SLI_QUEUE_DEPTH,
        names.SLI_LATENCY_P95,
        "openapi",
        "v2",
        "v3",
        "healthz",
        "..",
        ".",
        "",
        "%00",
        "%2F",
        "ünï",
        "a" * 300,
    ]  # fmt: skip
) | st.text(max_size=12)
selector_text = st.text(
    alphabet=st.sampled_from(list("svcenam=!(),iotx-_./ <>\\\"'%9")), max_size=40
) | st.text(max_size=20)


def _ask(method: str, target: str, cert: dict | None, headers: list[tuple[str, str]]) -> int:
    req = Request(method, target, headers, b"", cert)
    resp = LOOP.run_until_complete(API.handle(req))
    json.loads(resp.body) if resp.content_type == "application/json" else None
    return resp.status


@settings(max_examples=300, deadline=None)
@given(
    st.lists(segments, max_size=7),
    selector_text,
    st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]),
    st.booleans(),
    st.lists(
        st.tuples(
            st.sampled_from(["x-remote-user", "x-remote-group", "accept", "x-junk"]),
            st.text(max_size=20),
        ),
        max_size=4,
    ),
)
def test_fuzzed_requests_never_get_5xx(segs, sel, method, with_cert, headers) -> None:
    target = "/" + "/".join(quote(s, safe="%/.") for s in segs) + "?labelSelector=" + quote(sel)
    status = _ask(method, target, CERT if with_cert else None, [("x-remote-user", "hpa"), *headers])
    assert status < 500, (method, target)


@settings(max_examples=300, deadline=None)
@given(selector_text)
def test_fuzzed_selectors_on_a_metric_read(sel: str) -> None:
    target = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/{names.SLI_QUEUE_DEPTH}?labelSelector={quote(sel)}"
    status = _ask("GET", target, CERT, [("x-remote-user", "hpa")])
    assert status in (200, 400), (sel, status)


def test_fuzzed_raw_http_never_gets_5xx(pki) -> None:  # noqa: ANN001 - fixture
    """Random request lines and headers at the HTTP layer (the OTLP port: same server code)."""
    import socket

    from hypothesis import HealthCheck

    from metrics_adapter.server import AdapterThread
    from tests.metrics_adapter.adapter_testing import base_config

    with AdapterThread(base_config(pki)) as a:
        port = a.adapter.otlp_port

        @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
        @given(
            st.sampled_from(["GET", "POST", "PUT", "X", "", "GET GET"]),
            st.text(max_size=30),
            st.lists(st.tuples(st.text(max_size=10), st.text(max_size=20)), max_size=3),
            st.binary(max_size=64),
        )
        def run(method, target, headers, body) -> None:  # noqa: ANN001
            raw = f"{method} /{target} HTTP/1.1\r\nHost: x\r\n".encode("utf-8", "replace")
            for k, v in headers:
                raw += f"{k}: {v}\r\n".encode("utf-8", "replace")
            raw += f"Content-Length: {len(body)}\r\n\r\n".encode() + body
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(raw)
                s.shutdown(socket.SHUT_WR)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            if data:
                status = int(data.split(b" ", 2)[1])
                assert status < 500, (raw, data[:200])

        run()


_YAMLISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(["off", "q", "over-ratio", "0.05", "2m"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
"""What a YAML rules file can hold: scalars, lists and mappings of them."""


_TARGETS = st.dictionaries(st.sampled_from(["q", "x"]), _YAMLISH, max_size=2)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "terms": _TARGETS | _YAMLISH,
            "classes": st.dictionaries(st.sampled_from(["batch", "x"]), _TARGETS | _YAMLISH),
            "services": st.dictionaries(st.sampled_from(["chat", "x"]), _TARGETS | _YAMLISH),
            "holdOnly": st.lists(_YAMLISH, max_size=3) | _YAMLISH,
        },
    ),
    st.dictionaries(st.sampled_from(["threshold", "window", "aggregation"]), _YAMLISH, max_size=2),
)
def test_fuzzed_pressure_and_over_ratio_rules_are_config_errors(pressure, over) -> None:  # noqa: ANN001
    """Any value under a pressure rule's keys (terms, targets, `off`, holdOnly) or an
    over-ratio rule's either parses or raises ConfigError naming the key: never a
    TypeError from an unhashable list or mapping where a name was expected."""
    q = {"name": "q", "metric": "m", "aggregation": "over-ratio", "threshold": 0.05, **over}
    p = {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 0.05}, **pressure}
    try:
        parse_rules([q, p])
    except ConfigError as exc:
        assert str(exc).startswith("rules[")
