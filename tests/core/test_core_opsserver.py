"""kvspread.opsserver: the operator endpoints' HTTP side (collector and router)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from kvspread.opsserver import (
    HEAD_TIMEOUT_S,
    MAX_CONNECTIONS,
    READ_TIMEOUT_S,
    OpsServer,
    Reply,
    json_reply,
    text_reply,
)


def _route(path: str, query: dict[str, str]) -> Reply:
    if path == "/healthz":
        return text_reply(200, "ok\n")
    if path == "/echo":
        return json_reply(200, query, indent=1)
    if path == "/boom":
        raise RuntimeError("broken source")
    return json_reply(404, {"error": f"no such path {path}"})


@pytest.fixture
def server() -> Iterator[str]:
    srv = OpsServer("127.0.0.1", 0, _route, "test-ops")
    srv.start()
    try:
        yield f"http://127.0.0.1:{srv.port}"
    finally:
        srv.stop()


def test_routes_answer_with_type_and_length(server: str) -> None:
    r = httpx.get(server + "/healthz")
    assert (r.status_code, r.text, r.headers["content-type"]) == (200, "ok\n", "text/plain")
    assert r.headers["content-length"] == "3"
    r = httpx.get(server + "/echo?a=1&b=x")
    assert r.json() == {"a": "1", "b": "x"}
    assert r.headers["content-type"] == "application/json"
    assert httpx.get(server + "/nope").json() == {"error": "no such path /nope"}


def test_head_has_the_headers_and_no_body(server: str) -> None:
    r = httpx.head(server + "/healthz")
    assert r.status_code == 200 and r.headers["content-length"] == "3" and r.content == b""


def test_a_failing_route_is_a_json_500_not_a_dropped_connection(server: str) -> None:
    r = httpx.get(server + "/boom")
    assert r.status_code == 500
    assert r.json() == {"error": "RuntimeError: broken source"}
    assert httpx.get(server + "/healthz").status_code == 200  # still serving


def test_stop_without_start_returns() -> None:
    srv = OpsServer("127.0.0.1", 0, _route, "test-ops")
    srv.stop()


def test_json_reply_is_compact_by_default() -> None:
    assert json_reply(200, {"a": [1, 2]}).body == b'{"a":[1,2]}'


@pytest.mark.parametrize("method", ["POST", "DELETE", "PUT", "PATCH", "OPTIONS", "BREW"])
def test_other_methods_are_a_json_405_naming_get(server: str, method: str) -> None:
    r = httpx.request(method, server + "/healthz?x=1", content=b"x")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, HEAD"
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"error": f"method {method} not allowed on /healthz; use GET, HEAD"}
    assert r.text.count("\n") == 1 and r.text.endswith("\n")  # one JSON line
    assert httpx.get(server + "/healthz").status_code == 200  # still serving


def _raw(server: str, request: bytes) -> tuple[bytes, bytes]:
    """(status line and headers, body) of one raw request: httpx refuses long URLs."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        raw = s.makefile("rb").read()  # the server closes after an error
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, body


def test_a_long_url_is_a_json_414(server: str) -> None:
    head, body = _raw(server, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414 ")
    assert b"Content-Type: application/json" in head
    assert json.loads(body) == {"error": "request line over 65536 bytes: shorten the URL"}
    assert httpx.get(server + "/healthz").status_code == 200


def test_a_malformed_request_line_is_a_json_400(server: str) -> None:
    head, body = _raw(server, b"GET / x HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(body)["error"].startswith("Bad request syntax")


def test_an_ipv6_host_is_served() -> None:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    srv = OpsServer("::1", 0, _route, "test-ops6")
    srv.start()
    try:
        assert httpx.get(f"http://[::1]:{srv.port}/healthz").text == "ok\n"
    finally:
        srv.stop()


def _idle_connections(port: int, n: int) -> list[socket.socket]:
    """`n` open connections that send nothing."""
    held = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        held.append(s)
    return held


def _wait_served(srv: OpsServer, n: int) -> None:
    """Until the server has `n` connections in its handler threads (a bound, not a timing)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if srv.connections == n:
            return
        time.sleep(0.01)
    raise AssertionError(f"the server did not take {n} connections")


def test_connections_over_the_bound_get_a_json_503_and_the_rest_keep_working() -> None:
    srv = OpsServer("127.0.0.1", 0, _route, "test-ops-bound", max_connections=4)
    srv.start()
    server = f"http://127.0.0.1:{srv.port}"
    held = _idle_connections(srv.port, 4)
    try:
        _wait_served(srv, 4)
        head, body = _raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ")
        assert b"Retry-After: 1" in head and b"Content-Type: application/json" in head
        assert "4 connections at once" in json.loads(body)["error"]
        held.pop().close()  # one slot frees once its thread sees the close
        _wait_served(srv, 3)
        assert httpx.get(server + "/healthz").text == "ok\n"
    finally:
        for s in held:
            s.close()
        srv.stop()


def test_a_silent_connection_is_closed_after_the_read_timeout() -> None:
    srv = OpsServer("127.0.0.1", 0, _route, "test-ops-idle", read_timeout_s=0.2)
    srv.start()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(b"GET /heal")  # half a request line, then nothing
            assert s.recv(100) == b""  # the server closed it (not the client's 30 s)
        _wait_served(srv, 0)
        # a keep-alive connection that goes quiet after a request is closed the same way
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while not got.endswith(b"ok\n"):
                got += s.recv(1000)
            assert got.startswith(b"HTTP/1.1 200 ")
            assert s.recv(100) == b""
    finally:
        srv.stop()


def test_a_head_that_trickles_in_is_cut_at_its_deadline_and_frees_the_slot() -> None:
    """Found black-box: clients sending a header byte every 5 s never idle 30 s, and 64 of
    them held every slot of the router's port (/healthz 503 while they ran)."""
    srv = OpsServer(
        "127.0.0.1", 0, _route, "test-ops-head", max_connections=2, read_timeout_s=5.0,
        head_timeout_s=0.5,
    )  # fmt: skip
    srv.start()
    try:
        slow = [socket.create_connection(("127.0.0.1", srv.port), timeout=30) for _ in range(2)]
        try:
            closed = [False, False]
            deadline = time.monotonic() + 30
            for s in slow:
                s.sendall(b"GET /healthz HTTP/1.1\r\n")
            while not all(closed):  # a byte every 0.1 s: never idle past read_timeout_s
                assert time.monotonic() < deadline, "the trickling heads were not cut"
                for i, s in enumerate(slow):
                    try:
                        s.sendall(b"X")
                    except OSError:
                        closed[i] = True
                time.sleep(0.1)
        finally:
            for s in slow:
                s.close()
        _wait_served(srv, 0)
        assert httpx.get(f"http://127.0.0.1:{srv.port}/healthz", timeout=30).status_code == 200
        # a keep-alive connection idle between requests longer than the head timeout is kept
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            for _ in range(2):
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                got = b""
                while not got.endswith(b"ok\n"):
                    got += s.recv(1000)
                assert got.startswith(b"HTTP/1.1 200 ")
                time.sleep(1.0)
    finally:
        srv.stop()


def test_the_bounds_default_to_the_module_constants() -> None:
    srv = OpsServer("127.0.0.1", 0, _route, "test-ops-defaults")
    try:
        assert srv.httpd.max_connections == MAX_CONNECTIONS == 64  # type: ignore[attr-defined]
        assert srv.httpd.RequestHandlerClass.timeout == READ_TIMEOUT_S == 30.0
        assert HEAD_TIMEOUT_S == 10.0
    finally:
        srv.stop()
