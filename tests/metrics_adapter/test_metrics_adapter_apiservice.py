"""`kvspread adapter preflight`: before the adapter's manifests are applied, it refuses when
another server (KEDA here) owns APIService v1beta1.external.metrics.k8s.io, naming it and
pointing to the KEDA overlay; a free or kvspread-owned APIService passes.

The real command runs against FakeKubeApi (a kube-apiserver cannot run here), which serves
the APIService over real HTTP with the real wire shape. What the environment gets wrong (no
server at the URL, a server that is not an API server, a URL that is not one) is one line
and exit 2, never an internal error.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from metrics_adapter.apiservice import APISERVICE
from tests.fake_kube import FakeKubeApi


def _apiservice(namespace: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "service": {"namespace": namespace, "name": name, "port": 443},
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        fake.register_kind("apiregistration.k8s.io/v1", "APIService", "apiservices", False)
        yield fake


def _preflight(api: FakeKubeApi | str) -> subprocess.CompletedProcess[str]:
    url = api if isinstance(api, str) else api.url
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPREAD_")}
    return subprocess.run(
        [sys.executable, "-m", "kvspread", "adapter", "preflight", "--kube-api-server", url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_refuses_to_take_the_apiservice_from_keda(api: FakeKubeApi) -> None:
    api.put(_apiservice("keda", "keda-operator-metrics-apiserver"))
    proc = _preflight(api)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert "served by Service keda/keda-operator-metrics-apiserver (KEDA)" in line
    assert "apply manifests/overlays/keda/ instead" in line
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("present", [False, True])
def test_passes_when_free_or_already_kvspread(api: FakeKubeApi, present: bool) -> None:
    if present:
        api.put(_apiservice("kvspread", "kvspread-adapter"))
    proc = _preflight(api)
    assert proc.returncode == 0, proc.stderr
    assert ("already kvspread's" if present else "not registered") in proc.stdout


def _one_clean_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refusal (exit 2): no traceback, no internal error, no
    library warning."""
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("kvspread: configuration error: "), line
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return line


def test_closed_port_is_one_line_naming_the_url() -> None:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    line = _one_clean_line(_preflight(url))
    assert f"cannot reach the Kubernetes API at {url} (Connection refused)" in line
    assert "fix --kube-api-server" in line


class _NotAnApiServer(BaseHTTPRequestHandler):
    """Answers every GET 200 with `body` as `content_type` (a web page, a proxy's error)."""

    body = b""
    content_type = ""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("content_type", "body", "what"),
    [
        ("text/html", b"<html>hello</html>", "is not JSON (text/html: '<html>hello</html>')"),
        ("application/json", b"{not json", "is not JSON (application/json: '{not json')"),
        ("application/json", b"[]", "is JSON but not an object (list)"),
    ],
)
def test_non_json_answer_is_one_line_naming_the_url(
    content_type: str, body: bytes, what: str
) -> None:
    handler = type("H", (_NotAnApiServer,), {"body": body, "content_type": content_type})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        line = _one_clean_line(_preflight(url))
    finally:
        server.shutdown()
        server.server_close()
    assert f"the answer of {url} to GET /apis/apiregistration.k8s.io/v1/apiservices/" in line
    assert what in line
    assert "not a Kubernetes API server; fix --kube-api-server" in line


@pytest.mark.parametrize("url", ["notaurl", "ftp://host", "http://127.0.0.1:99999"])
def test_kube_api_server_must_be_a_url_as_for_serve(url: str) -> None:
    line = _one_clean_line(_preflight(url))
    assert line.endswith(
        f"--kube-api-server: kube_server: expected an http:// or https:// URL with a host "
        f"(http://HOST:PORT), got {url!r}"
    )
