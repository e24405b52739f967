"""A Kubernetes API client for list and watch only, over httpx: the router's pool watch.

Why: the `kubernetes` package imports every API and model class (0.44 s of CPU, 0.77 s on a
loaded core), and a restarted picker in pool mode routes nothing until its first pod list
(issue 27: start to first pick under 1.5 s). The router only GETs collections (list, and
watch as a stream of JSON lines), so it needs neither the models nor the generated APIs;
httpx is imported by the scraper anyway. This client covers the two ways the Deployment and
the tests reach the API: an explicit `server` URL (fakes, `kubectl proxy`; no credentials)
and the in-cluster service account (bearer token re-read every `TOKEN_REREAD_S`, as bound
tokens rotate; the service account's CA). A kubeconfig (exec plugins, client certificates,
contexts) stays with the `kubernetes` package: `connect` hands those to
kvspread/kube.py's `api_client`.

Bounded: a list body at most `MAX_LIST_BYTES`, a watch event line at most `MAX_LINE_BYTES`;
past either the request fails with `ApiError` and the Reflector backs off and lists again.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvspread.kube import MAX_LINE_BYTES  # the Reflector's bound on a watch event line

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ApiError",
    "LightClient",
    "connect",
    "in_cluster",
    "MAX_LIST_BYTES",
    "MAX_LINE_BYTES",
    "TOKEN_REREAD_S",
]

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_S = 60.0
"""The token file is read again after this long: the kubelet rotates bound service account
tokens (the `kubernetes` client re-reads it each minute too)."""
MAX_LIST_BYTES = 256 << 20
"""The largest list response read (a quarter of the picker's 1 GiB limit; a 5,000-node list
with full objects is some tens of MiB)."""
MAX_CONNECTIONS = 16
"""Concurrent connections to the API (the router runs four list+watch loops)."""


class ApiError(Exception):
    """A status other than 200 (or a body over a bound); `status` as `ApiException`'s, which
    is what kvspread/kube.py's Reflector reads (410 means list again)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"({status}) {reason}")
        self.status = status
        self.reason = reason


def in_cluster(sa_dir: Path = SA_DIR, environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs in a pod with a service account token mounted."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST")) and (sa_dir / "token").is_file()


class _Token:
    """The service account's bearer token, re-read from its file every TOKEN_REREAD_S."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._value = ""
        self._read_at = float("-inf")

    def get(self) -> str:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= TOKEN_REREAD_S:
                self._value = self._path.read_text().strip()
                self._read_at = now
            return self._value


class Response:
    """One streamed GET's answer, in the shape the Reflector reads: `data` (the whole body,
    bounded), `stream()` (raw chunks), `release_conn()`, and `abort()` to unblock a reader
    from another thread (shuts the socket down under it)."""

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self.status = resp.status_code

    @property
    def data(self) -> bytes:
        out = bytearray()
        for chunk in self._resp.iter_raw():
            out += chunk
            if len(out) > MAX_LIST_BYTES:
                raise ApiError(413, f"list response over {MAX_LIST_BYTES} bytes")
        return bytes(out)

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        """The body as it arrives (the API server sends no content encoding unasked)."""
        return self._resp.iter_raw()

    def release_conn(self) -> None:
        self._resp.close()

    def abort(self) -> None:
        stream = self._resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            import socket

            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class LightClient:
    """GET on collection paths, with the bearer token when there is one. Thread-safe (one
    httpx client; each call its own connection from the pool)."""

    def __init__(
        self, server: str, token: _Token | None = None, ca_file: str | None = None
    ) -> None:
        import httpx

        self.server = server.rstrip("/")
        self._token = token
        verify: ssl.SSLContext | bool = False
        if ca_file is not None:
            verify = ssl.create_default_context(cafile=ca_file)
        self._http = httpx.Client(
            base_url=self.server,
            verify=verify,
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS),
            trust_env=False,  # the API server is reached directly, never through a proxy
        )

    @classmethod
    def in_cluster(cls, sa_dir: Path = SA_DIR) -> LightClient:
        """The pod's service account: KUBERNETES_SERVICE_HOST/PORT, its token and CA."""
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host
        ca = sa_dir / "ca.crt"
        return cls(
            f"https://{host}:{port}", _Token(sa_dir / "token"), str(ca) if ca.is_file() else None
        )

    def get(self, path: str, params: Iterable[tuple[str, str]], timeout: Any = None) -> Response:
        """GET `path` streamed; `ApiError` on any status but 200 (its first 300 bytes said)."""
        import httpx

        if isinstance(timeout, tuple):
            connect, read = timeout
            limit = httpx.Timeout(read, connect=connect)
        else:
            limit = httpx.Timeout(timeout)
        headers = {"Accept": "application/json"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token.get()}"
        request = self._http.build_request(
            "GET", path, params=list(params), headers=headers, timeout=limit
        )
        resp = self._http.send(request, stream=True)
        if resp.status_code != 200:
            try:
                text = b"".join(_head(resp.iter_raw(), 300))[:300].decode("utf-8", "replace")
            finally:
                resp.close()
            raise ApiError(resp.status_code, f"{path}: {text}")
        return Response(resp)

    def close(self) -> None:
        self._http.close()


def _head(chunks: Iterator[bytes], n: int) -> Iterator[bytes]:
    """Chunks until n bytes are had (an error body is only quoted, never read whole)."""
    got = 0
    for chunk in chunks:
        yield chunk
        got += len(chunk)
        if got >= n:
            return


def connect(kubeconfig: str | None = None, server: str | None = None) -> Any:
    """A client for the router's list+watch loops, in kvspread/kube.py's `api_client` order:
    `server` (no credentials) and the in-cluster service account get a `LightClient`; an
    explicit kubeconfig, or the default one outside a cluster, a `kubernetes` ApiClient."""
    if server:
        return LightClient(server)
    if not kubeconfig and in_cluster():
        return LightClient.in_cluster()
    from kvspread.kube import api_client

    return api_client(kubeconfig, None)
