"""FakeKubeApi: a small in-memory stand-in for kube-apiserver, for tests only.

A real kube-apiserver cannot run here, so this fake serves the few API calls kvspread's
parts make, with the real wire shapes, over real HTTP on 127.0.0.1 (the `kubernetes`
client and httpx talk to it unchanged). It is generic: an in-memory store of JSON
objects keyed by resource path, one global resourceVersion counter, an event history
per resource for watches.

Served (core `/api/v1/...` and group `/apis/<group>/<version>/...` paths):
- list:   GET /api/v1/nodes, /api/v1/pods (all namespaces), /api/v1/namespaces/NS/pods
          (`labelSelector` a=b,c!=d,e / `fieldSelector` metadata.name=, metadata.namespace=,
          spec.nodeName= and != are honoured); answers a `<Kind>List` with
          metadata.resourceVersion.
- watch:  the same with `?watch=1&resourceVersion=RV[&timeoutSeconds=N]`: chunked JSON lines
          `{"type": ADDED|MODIFIED|DELETED|ERROR, "object": {...}}` for every change after
          RV, then new changes as they happen, until timeoutSeconds (default 30 s), a break or
          stop(). RV older than the compacted history -> an ERROR event carrying a Status
          with code 410 (reason Expired), as the real apiserver does.
- get/put/patch/delete of one object: GET/PUT/PATCH/DELETE .../nodes/NAME,
          .../namespaces/NS/configmaps/NAME, etc. PATCH accepts
          application/merge-patch+json and application/strategic-merge-patch+json (applied
          as a JSON merge patch: right for the maps kvspread patches, labels and annotations;
          strategic list merging is not modelled) and application/json-patch+json is refused
          with 415.
- create: POST to a collection path.
- POST /apis/authorization.k8s.io/v1/subjectaccessreviews: answers with status.allowed /
          status.reason from `sar_decider(spec) -> (allowed, reason)` (default: allow all).

Known kinds: Node, Pod, ConfigMap, Service, Namespace, Lease (coordination.k8s.io/v1),
NodeSignals (kvspread.io/v1alpha1, cluster-scoped: served under
/apis/kvspread.io/v1alpha1/nodesignals like the API server serves a custom resource once
its CRD is established); add others with `register_kind`.

Optimistic concurrency as the API server does it: a PUT whose metadata.resourceVersion is
set and differs from the stored one, or a PATCH that carries a different
metadata.resourceVersion, gets 409 Conflict; without one the write is unconditional.

Failure injection:
- `compact()`: forget the event history; a watch from an older resourceVersion gets 410.
- `break_watches(gone=True)`: every open watch receives an ERROR 410 event (gone=True) or
  is simply closed (gone=False).
- `fail_next(status, method="GET", path_prefix="/", count=1, watch=None)`: the next
  matching requests get an HTTP error with a Status body (e.g. 410 on a list or watch,
  500, 503); `watch=True/False` restricts it to watch / non-watch requests. Status 200
  on a watch answers an empty stream that ends at once (a dropped connection, a proxy
  that cuts long requests).

Usage::

    from tests.fake_kube import FakeKubeApi
    with FakeKubeApi() as api:                     # starts on 127.0.0.1:<free port>
        api.put(node("gpu-1", annotations={...}))  # create or replace; returns the stored copy
        client = kvspread.kube.api_client(server=api.url)
        ...
        api.compact(); api.break_watches()         # force re-list via 410
        api.requests                               # [(method, path, query dict), ...]

Helpers `make_node(name, labels, annotations)`, `make_pod(name, namespace, ...)` and
`make_configmap(name, namespace, data)` build minimal objects. Thread-safe (one lock).
"""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from metrics_adapter.errors import status_object
from tests.http_fake import QuietHandler

__all__ = ["FakeKubeApi", "make_node", "make_pod", "make_configmap", "KindInfo"]


@dataclass(frozen=True)
class KindInfo:
    api_version: str  # "v1" or "group/version"
    kind: str
    plural: str
    namespaced: bool

    @property
    def prefix(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"


_DEFAULT_KINDS = (
    KindInfo("v1", "Node", "nodes", False),
    KindInfo("v1", "Pod", "pods", True),
    KindInfo("v1", "ConfigMap", "configmaps", True),
    KindInfo("v1", "Service", "services", True),
    KindInfo("v1", "Namespace", "namespaces", False),
    KindInfo("coordination.k8s.io/v1", "Lease", "leases", True),
    # kvspread's own custom resource (manifests/crds/nodesignals/nodesignals.yaml), cluster-scoped.
    KindInfo("kvspread.io/v1alpha1", "NodeSignals", "nodesignals", False),
)

SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
    503: "ServiceUnavailable",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes a key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _match_labels(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.strip().rstrip("=")) != v.strip().lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for p in path.split("."):
        cur = cur.get(p) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def _match_fields(selector: str, obj: dict[str, Any]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if _field_value(obj, k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if _field_value(obj, k.strip().rstrip("=")) != v.strip().lstrip("="):
                return False
    return True


@dataclass
class _Route:
    kind: KindInfo
    namespace: str | None  # None: all namespaces (or cluster-scoped)
    name: str | None


class _Watcher:
    def __init__(self) -> None:
        self.closed = False
        self.gone = False


class FakeKubeApi:
    """In-memory fake kube-apiserver on 127.0.0.1 (see the module docstring)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Condition()
        self._kinds: list[KindInfo] = list(_DEFAULT_KINDS)
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural-key, ns, name)
        self._events: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, kindkey, type, obj)
        self._rv = 100
        self._compacted_rv = 0
        self._watchers: set[_Watcher] = set()
        self._failures: list[dict[str, Any]] = []
        self._stopping = False
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.sar_decider: Callable[[dict[str, Any]], tuple[bool, str]] = lambda spec: (
            True,
            "allowed by FakeKubeApi",
        )
        self.sar_requests: list[dict[str, Any]] = []
        self.default_watch_timeout_s = 30.0
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKubeApi:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="FakeKubeApi",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            for w in self._watchers:
                w.closed = True
            self._lock.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- store --------------------------------------------------------------------------
    def register_kind(self, api_version: str, kind: str, plural: str, namespaced: bool) -> None:
        with self._lock:
            self._kinds.append(KindInfo(api_version, kind, plural, namespaced))

    def _kind_of(self, obj: dict[str, Any]) -> KindInfo:
        for k in self._kinds:
            if k.kind == obj.get("kind") and k.api_version == obj.get("apiVersion", "v1"):
                return k
        raise KeyError(f"FakeKubeApi: unknown kind {obj.get('apiVersion')}/{obj.get('kind')}")

    @staticmethod
    def _key(k: KindInfo) -> str:
        return f"{k.api_version}/{k.plural}"

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def _record(self, k: KindInfo, etype: str, obj: dict[str, Any]) -> None:
        self._events.append((self._rv, self._key(k), etype, copy.deepcopy(obj)))
        self._lock.notify_all()

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (ADDED or MODIFIED event); returns the stored copy."""
        with self._lock:
            return self._put(copy.deepcopy(obj))

    def _put(self, obj: dict[str, Any]) -> dict[str, Any]:
        k = self._kind_of(obj)
        meta = obj.setdefault("metadata", {})
        ns = meta.get("namespace", "default") if k.namespaced else ""
        if k.namespaced:
            meta["namespace"] = ns
        key = (self._key(k), ns, meta["name"])
        existed = key in self._objects
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        meta.setdefault("uid", f"fake-uid-{self._rv}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self._objects[key] = obj
        self._record(k, "MODIFIED" if existed else "ADDED", obj)
        return copy.deepcopy(obj)

    def delete(self, kind: str, name: str, namespace: str = "", api_version: str = "v1") -> bool:
        with self._lock:
            k = self._kind_of({"kind": kind, "apiVersion": api_version})
            ns = (namespace or "default") if k.namespaced else ""
            obj = self._objects.pop((self._key(k), ns, name), None)
            if obj is None:
                return False
            self._rv += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._record(k, "DELETED", obj)
            return True

    def get(
        self, kind: str, name: str, namespace: str = "", api_version: str = "v1"
    ) -> dict[str, Any] | None:
        with self._lock:
            k = self._kind_of({"kind": kind, "apiVersion": api_version})
            ns = (namespace or "default") if k.namespaced else ""
            obj = self._objects.get((self._key(k), ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, kind: str, api_version: str = "v1") -> list[dict[str, Any]]:
        with self._lock:
            key = self._key(self._kind_of({"kind": kind, "apiVersion": api_version}))
            return [copy.deepcopy(o) for (kk, _, _), o in self._objects.items() if kk == key]

    # --- failure injection ----------------------------------------------------------------
    def compact(self) -> None:
        """Forget history: watches from a resourceVersion before now get 410 Gone."""
        with self._lock:
            self._events.clear()
            self._compacted_rv = self._rv

    def break_watches(self, gone: bool = True) -> None:
        """End every open watch, with an ERROR 410 event first when `gone`."""
        with self._lock:
            for w in self._watchers:
                w.closed = True
                w.gone = gone
            self._lock.notify_all()

    def fail_next(
        self,
        status: int,
        method: str = "GET",
        path_prefix: str = "/",
        count: int = 1,
        watch: bool | None = None,
    ) -> None:
        """Answer the next `count` matching requests with HTTP `status` and a Status body."""
        with self._lock:
            self._failures.append(
                {
                    "status": status,
                    "method": method,
                    "prefix": path_prefix,
                    "count": count,
                    "watch": watch,
                }
            )

    def open_watches(self) -> int:
        with self._lock:
            return len(self._watchers)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Poll `predicate` until true or timeout (for tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.01)
        return predicate()

    # --- routing --------------------------------------------------------------------------
    def _route(self, path: str) -> _Route | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
            api_version, rest = "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return None
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 2:
            if len(rest) == 2 and rest[0] == "namespaces" and ns is None:
                pass
            else:
                return None
        for k in self._kinds:
            if k.api_version == api_version and k.plural == rest[0]:
                if ns is not None and not k.namespaced:
                    return None
                return _Route(k, ns, rest[1] if len(rest) == 2 else None)
        return None

    def _take_failure(self, method: str, path: str, is_watch: bool) -> int | None:
        with self._lock:
            for f in self._failures:
                if f["method"] != method or not path.startswith(f["prefix"]):
                    continue
                if f["watch"] is not None and f["watch"] != is_watch:
                    continue
                f["count"] -= 1
                if f["count"] <= 0:
                    self._failures.remove(f)
                return int(f["status"])
        return None

    def _select(self, route: _Route, query: dict[str, str]) -> list[dict[str, Any]]:
        key = self._key(route.kind)
        out = []
        for (kk, ns, _), obj in sorted(self._objects.items()):
            if kk != key or (route.namespace is not None and ns != route.namespace):
                continue
            if not self._matches(obj, query):
                continue
            out.append(copy.deepcopy(obj))
        return out

    @staticmethod
    def _matches(obj: dict[str, Any], query: dict[str, str]) -> bool:
        ls = query.get("labelSelector")
        if ls and not _match_labels(ls, obj.get("metadata", {}).get("labels") or {}):
            return False
        fs = query.get("fieldSelector")
        return not (fs and not _match_fields(fs, obj))

    def _watch_events(
        self, route: _Route, query: dict[str, str], watcher: _Watcher, since: int
    ) -> Iterator[dict[str, Any]]:
        key = self._key(route.kind)
        timeout = float(query.get("timeoutSeconds") or self.default_watch_timeout_s)
        deadline = time.monotonic() + timeout
        cursor = since
        with self._lock:
            expired = since < self._compacted_rv
            compacted = self._compacted_rv
        if expired:  # only a watch *starting* before the compacted history is refused
            yield {
                "type": "ERROR",
                "object": status_object(
                    410, "Expired", f"too old resource version: {since} ({compacted})"
                ),
            }
            return
        while True:
            with self._lock:
                batch = []
                for rv, kk, etype, obj in self._events:
                    if rv <= cursor or kk != key:
                        continue
                    ns = obj.get("metadata", {}).get("namespace", "")
                    if route.namespace is not None and ns != route.namespace:
                        continue
                    if self._matches(obj, query):
                        batch.append({"type": etype, "object": copy.deepcopy(obj)})
                if self._events:
                    cursor = max(cursor, self._events[-1][0])
                if not batch:
                    if watcher.closed or self._stopping:
                        if watcher.gone:
                            yield {
                                "type": "ERROR",
                                "object": status_object(
                                    410, "Expired", f"too old resource version: {since}"
                                ),
                            }
                        return
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self._lock.wait(min(remaining, 0.5))
                    continue
            yield from batch

    def _sar(self, body: dict[str, Any]) -> dict[str, Any]:
        spec = body.get("spec") or {}
        with self._lock:
            self.sar_requests.append(copy.deepcopy(body))
        allowed, reason = self.sar_decider(spec)
        out = copy.deepcopy(body)
        out.setdefault("apiVersion", "authorization.k8s.io/v1")
        out.setdefault("kind", "SubjectAccessReview")
        out.setdefault("metadata", {})
        out["status"] = {"allowed": bool(allowed), "reason": reason}
        if not allowed:
            out["status"]["denied"] = False
        return out

    # --- HTTP -----------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(QuietHandler):
            def _send_json(self, code: int, doc: Any) -> None:
                self.send_body(code, "application/json", json.dumps(doc).encode())

            def _error(self, code: int, message: str) -> None:
                self._send_json(code, status_object(code, _REASONS.get(code, "Unknown"), message))

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                return json.loads(raw) if raw else None

            def _parse(self) -> tuple[str, dict[str, str]]:
                u = urllib.parse.urlsplit(self.path)
                q = {k: v[-1] for k, v in urllib.parse.parse_qs(u.query).items()}
                with api._lock:
                    api.requests.append((self.command, u.path, q))
                return u.path, q

            def _handle(self) -> None:
                path, query = self._parse()
                is_watch = query.get("watch", "").lower() in ("1", "true")
                failure = api._take_failure(self.command, path, is_watch)
                if failure == 200 and is_watch:
                    self.send_body(200, "application/json", b"")
                    return
                if failure is not None:
                    # read the unread body: it would otherwise be taken for the next request
                    # on this keep-alive connection
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self._error(failure, f"injected failure {failure} by FakeKubeApi")
                    return
                if path == SAR_PATH and self.command == "POST":
                    try:
                        body = self._body()
                    except ValueError as exc:
                        self._error(400, f"body is not JSON: {exc}")
                        return
                    if not isinstance(body, dict):
                        self._error(400, "body must be a SubjectAccessReview object")
                        return
                    self._send_json(201, api._sar(body))
                    return
                route = api._route(path)
                if route is None:
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self._error(404, f"the server could not find the requested resource {path}")
                    return
                try:
                    if self.command == "GET":
                        self._get(route, query, is_watch)
                    elif self.command == "POST" and route.name is None:
                        self._create(route)
                    elif self.command == "PUT" and route.name is not None:
                        self._replace(route)
                    elif self.command == "PATCH" and route.name is not None:
                        self._patch(route)
                    elif self.command == "DELETE" and route.name is not None:
                        self._delete(route)
                    else:
                        self._error(405, f"{self.command} not supported on {path}")
                except ValueError as exc:
                    self._error(400, str(exc))

            def _ns(self, route: _Route) -> str:
                return (route.namespace or "default") if route.kind.namespaced else ""

            def _get(self, route: _Route, query: dict[str, str], is_watch: bool) -> None:
                if route.name is not None:
                    with api._lock:
                        obj = api._objects.get((api._key(route.kind), self._ns(route), route.name))
                        obj = copy.deepcopy(obj)
                    if obj is None:
                        self._error(404, f'{route.kind.plural} "{route.name}" not found')
                    else:
                        self._send_json(200, obj)
                    return
                if is_watch:
                    self._watch(route, query)
                    return
                with api._lock:
                    items = api._select(route, query)
                    rv = api._rv
                self._send_json(
                    200,
                    {
                        "kind": route.kind.kind + "List",
                        "apiVersion": route.kind.api_version,
                        "metadata": {"resourceVersion": str(rv)},
                        "items": items,
                    },
                )

            def _watch(self, route: _Route, query: dict[str, str]) -> None:
                rv_text = query.get("resourceVersion") or ""
                with api._lock:
                    since = int(rv_text) if rv_text.isdigit() else api._rv
                    watcher = _Watcher()
                    api._watchers.add(watcher)
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.flush()
                    for event in api._watch_events(route, query, watcher, since):
                        line = json.dumps(event).encode() + b"\n"
                        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with api._lock:
                        api._watchers.discard(watcher)
                self.close_connection = True

            def _create(self, route: _Route) -> None:
                obj = self._body()
                if not isinstance(obj, dict) or not obj.get("metadata", {}).get("name"):
                    raise ValueError("body must be an object with metadata.name")
                obj.setdefault("kind", route.kind.kind)
                obj.setdefault("apiVersion", route.kind.api_version)
                if route.kind.namespaced:
                    obj["metadata"]["namespace"] = route.namespace or "default"
                with api._lock:
                    key = (api._key(route.kind), self._ns(route), obj["metadata"]["name"])
                    if key in api._objects:
                        msg = f'{route.kind.plural} "{key[2]}" already exists'
                        self._send_json(409, status_object(409, "AlreadyExists", msg))
                        return
                    stored = api._put(obj)
                self._send_json(201, stored)

            def _replace(self, route: _Route) -> None:
                obj = self._body()
                if not isinstance(obj, dict):
                    raise ValueError("body must be an object")
                obj.setdefault("metadata", {})["name"] = route.name
                obj.setdefault("kind", route.kind.kind)
                obj.setdefault("apiVersion", route.kind.api_version)
                if route.kind.namespaced:
                    obj["metadata"]["namespace"] = self._ns(route)
                with api._lock:
                    key = (api._key(route.kind), self._ns(route), route.name)
                    if self._conflict(route, api._objects.get(key), obj):
                        return
                    stored = api._put(obj)
                self._send_json(200, stored)

            def _conflict(
                self, route: _Route, cur: dict[str, Any] | None, body: dict[str, Any]
            ) -> bool:
                """Answer 409 when the body's resourceVersion precondition fails."""
                want = (body.get("metadata") or {}).get("resourceVersion")
                if want in (None, "") or cur is None:
                    return False
                have = cur["metadata"].get("resourceVersion")
                if str(want) == have:
                    return False
                self._error(
                    409,
                    f'Operation cannot be fulfilled on {route.kind.plural} "{route.name}": the '
                    "object has been modified; please apply your changes to the latest version "
                    "and try again",
                )
                return True

            def _patch(self, route: _Route) -> None:
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                if ctype not in (
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                ):
                    self._error(415, f"unsupported patch content type {ctype!r}")
                    return
                patch = self._body()
                if not isinstance(patch, dict):
                    raise ValueError("patch body must be a JSON object")
                with api._lock:
                    key = (api._key(route.kind), self._ns(route), route.name)
                    cur = api._objects.get(key)
                    if cur is None:
                        self._error(404, f'{route.kind.plural} "{route.name}" not found')
                        return
                    if self._conflict(route, cur, patch):
                        return
                    merged = merge_patch(cur, patch)
                    merged["metadata"]["name"] = route.name
                    stored = api._put(merged)
                self._send_json(200, stored)

            def _delete(self, route: _Route) -> None:
                ok = api.delete(
                    route.kind.kind, route.name or "", self._ns(route), route.kind.api_version
                )
                if not ok:
                    self._error(404, f'{route.kind.plural} "{route.name}" not found')
                else:
                    self._send_json(200, status_object(200, "", "deleted") | {"status": "Success"})

            def do_GET(self) -> None:  # noqa: N802
                self._handle()

            def do_POST(self) -> None:  # noqa: N802
                self._handle()

            def do_PUT(self) -> None:  # noqa: N802
                self._handle()

            def do_PATCH(self) -> None:  # noqa: N802
                self._handle()

            def do_DELETE(self) -> None:  # noqa: N802
                self._handle()

        return Handler


# --- object builders -----------------------------------------------------------------------


def make_node(
    name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A minimal v1 Node (Ready) in the shape the apiserver returns."""
    alloc = {"cpu": "64", "memory": "256Gi", "pods": "110"} | (allocatable or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name} | (labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {},
        "status": {
            "capacity": dict(alloc),
            "allocatable": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def make_pod(
    name: str,
    namespace: str = "default",
    node_name: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpus: int = 0,
    phase: str = "Running",
    scheduler_name: str = "default-scheduler",
) -> dict[str, Any]:
    """A minimal v1 Pod with one container; `gpus` sets the nvidia.com/gpu limit."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "containers": [
            {"name": "engine", "image": "registry.invalid/engine:1", "resources": resources}
        ],
        "schedulerName": scheduler_name,
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def make_configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    """A v1 ConfigMap."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }
