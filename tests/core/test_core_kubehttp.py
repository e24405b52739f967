"""kvspread/kubehttp.py, the list+watch client without the `kubernetes` package: in-cluster
credentials over real TLS (a trustme CA as the service account's ca.crt, the bearer token
re-read after rotation), error statuses as the Reflector reads them, and its bounds."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trustme

from kvspread import kube, kubehttp
from kvspread.kube import Backoff, Reflector, path_list_call
from kvspread.kubehttp import ApiError, LightClient, connect, in_cluster
from tests.fake_kube import FakeKubeApi, make_node

POD = {"metadata": {"name": "p", "namespace": "n", "resourceVersion": "7"}}


class _Api(BaseHTTPRequestHandler):
    """A list of one pod at resourceVersion 7, a watch that sends one MODIFIED event and
    ends; `status` on the server makes every answer that status instead."""

    server: Any

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        if self.server.status != 200:
            body = json.dumps({"kind": "Status", "code": self.server.status}).encode() + b" " * 999
            self.send_response(self.server.status)
        elif "watch=true" in self.path:
            event = {"type": "MODIFIED", "object": {**POD, "spec": {"x": "y" * self.server.pad}}}
            body = json.dumps(event).encode() + b"\n"
            self.send_response(200)
        else:
            body = json.dumps({"items": [POD], "metadata": {"resourceVersion": "7"}}).encode()
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def tls_api(tmp_path: Path) -> Iterator[tuple[ThreadingHTTPServer, Path]]:
    """An HTTPS API on 127.0.0.1 and a service account directory (token, ca.crt) for it."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.seen, server.status, server.pad = [], 200, 0  # type: ignore[attr-defined]
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("token-1\n")
    ca.cert_pem.write_to_path(str(sa / "ca.crt"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, sa
    server.shutdown()
    server.server_close()


def _in_cluster_client(
    server: ThreadingHTTPServer, sa: Path, monkeypatch: pytest.MonkeyPatch
) -> LightClient:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.server_address[1]))
    assert in_cluster(sa)
    return LightClient.in_cluster(sa)


def test_in_cluster_lists_over_tls_with_the_token_and_rereads_it(tls_api, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    server, sa = tls_api
    client = _in_cluster_client(server, sa, monkeypatch)
    call = path_list_call(client, "/api/v1/pods", [("labelSelector", "a=b")])
    got: list[list[dict[str, Any]]] = []
    r = Reflector("pods", call, got.append, lambda t, o: None)
    assert r.list_once() == "7" and got == [[POD]]
    path, auth = server.seen[-1]
    assert path.startswith("/api/v1/pods?") and "labelSelector=a%3Db" in path
    assert auth == "Bearer token-1"
    (sa / "token").write_text("token-2")  # the kubelet rotated it
    monkeypatch.setattr(kubehttp, "TOKEN_REREAD_S", 0.0)
    r.list_once()
    assert server.seen[-1][1] == "Bearer token-2"
    client.close()


def test_a_server_cert_not_from_the_service_account_ca_is_refused(tls_api, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    server, sa = tls_api
    trustme.CA().cert_pem.write_to_path(str(sa / "ca.crt"))  # another CA
    client = _in_cluster_client(server, sa, monkeypatch)
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        client.get("/api/v1/pods", [], 5)


def test_an_error_status_is_an_api_error_with_its_status_quoted_briefly(
    tls_api, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    server, sa = tls_api
    client = _in_cluster_client(server, sa, monkeypatch)
    server.status = 403
    with pytest.raises(ApiError) as err:
        client.get("/api/v1/pods", [], 5)
    assert err.value.status == 403 and len(err.value.reason) < 330
    assert kube.http_status(err.value) == 403  # what the Reflector reads: 410 lists again


def test_a_watch_line_over_the_bound_fails_the_watch(tls_api, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    server, sa = tls_api
    client = _in_cluster_client(server, sa, monkeypatch)
    monkeypatch.setattr(kube, "MAX_LINE_BYTES", 4096)
    call = path_list_call(client, "/api/v1/pods")
    events: list[str] = []
    r = Reflector("pods", call, lambda items: None, lambda t, o: events.append(t))
    rv = r.list_once()
    server.pad = 100
    r._watch(rv)
    assert events == ["MODIFIED"]
    server.pad = 10_000  # one event line of 10 kB, no newline within the bound
    with pytest.raises(ValueError, match="over 4096 bytes"):
        r._watch(rv)


def test_a_list_over_the_bound_is_refused(tls_api, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    server, sa = tls_api
    client = _in_cluster_client(server, sa, monkeypatch)
    monkeypatch.setattr(kubehttp, "MAX_LIST_BYTES", 10)
    with pytest.raises(ApiError, match="over 10 bytes"):
        body = client.get("/api/v1/pods", [], 5).data
        raise AssertionError(f"read {len(body)} bytes")


def test_connect_picks_the_light_client_except_for_a_kubeconfig(tmp_path: Path) -> None:
    assert isinstance(connect(None, "http://127.0.0.1:9"), LightClient)
    assert not in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})  # no token
    (tmp_path / "token").write_text("t")
    assert in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert not in_cluster(tmp_path, {})


def test_in_cluster_ipv6_service_host_is_bracketed(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    (tmp_path / "token").write_text("t")
    assert LightClient.in_cluster(tmp_path).server == "https://[fd00::1]:6443"


def test_a_reflector_on_the_light_client_follows_the_fake_api_and_relists_on_410() -> None:
    with FakeKubeApi() as api:
        api.put(make_node("n1"))
        client = connect(None, api.url)
        nodes: dict[str, dict[str, Any]] = {}

        def on_list(items: list[dict[str, Any]]) -> None:
            nodes.clear()
            nodes.update({i["metadata"]["name"]: i for i in items})

        def on_event(etype: str, obj: dict[str, Any]) -> None:
            nodes[obj["metadata"]["name"]] = obj

        r = Reflector(
            "nodes",
            path_list_call(client, "/api/v1/nodes"),
            on_list,
            on_event,
            backoff=Backoff(base_s=0.01, cap_s=0.05),
        )
        r.start()
        try:
            assert api.wait_for(lambda: "n1" in nodes and api.open_watches() == 1)
            api.put(make_node("n2"))
            assert api.wait_for(lambda: "n2" in nodes)
            api.compact()
            api.break_watches(gone=True)
            api.put(make_node("n3"))
            assert api.wait_for(lambda: "n3" in nodes and r.stats.lists >= 2)
            assert r.stats.gone >= 1
        finally:
            r.stop()
        assert r._thread is not None and not r._thread.is_alive()  # stop unblocked the watch
