"""One way to reach the Kubernetes API for every part, and one way to follow a resource.

`api_client`: in a pod, the in-cluster service account; elsewhere a kubeconfig
(`--kubeconfig` or $KUBECONFIG); tests: `server=` a fake API server's URL
(tests/fake_kube.py), no auth.

`Reflector` runs the classic list-then-watch loop for one resource through the
`kubernetes` client (raw JSON, no model deserialisation: 5,000 nodes must stay cheap):
list -> remember metadata.resourceVersion -> watch from it (`allowWatchBookmarks`) ->
apply ADDED/MODIFIED/DELETED and move the resourceVersion -> when the watch ends
(server timeout), watch again from the last resourceVersion. Everything else is a
failure and goes through one `Backoff` for list and watch together: 410 Gone (an ERROR
event with a Status code 410, or an HTTP 410), any other HTTP or network error, and a
"very short watch" (ended within `SHORT_WATCH_S` with no event, as client-go's reflector
counts one). After a failure the loop waits (exponential, full jitter, capped) and lists
again; the backoff is reset only once a watch has run healthily for `HEALTHY_AFTER_S`,
never by a successful list (issue 26: a list that works and a watch that fails must not
retry every 0.1 s). `Reflector.state` is "starting", "healthy" or "failing"; each change
is counted (`stats.state_changes`) and logged once, not every retry.

The bound, with the defaults (base 1 s, cap 30 s): failure k waits at least
`min(cap, base * 2**(k-1)) / 2`, each wait is followed by at most one list and one watch,
so a reflector whose watch always fails makes at most 12 requests in its first 30 s and
at most 10 a minute once the cap is reached (`Backoff.max_requests`; tested).
The extender follows nodes, pods and NodeSignals with it, the collector its own node's
pods, the router its pool, pods, nodes and NodeSignals.

The `kubernetes` client is imported lazily so that pure modules stay import-light, and the
Reflector never imports it (it reads any response with `data`, `stream()` and
`release_conn()`, and an HTTP error's `status`): the router reaches the API through
kvspread/kubehttp.py's `LightClient` instead, without the package's 0.44 s of imports.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "api_client",
    "http_status",
    "MAX_LINE_BYTES",
    "path_list_call",
    "lookup",
    "lookup_str",
    "Reflector",
    "ReflectorStats",
    "Backoff",
    "WatchedTable",
    "HEALTHY_AFTER_S",
    "SHORT_WATCH_S",
    "DEFAULT_BACKOFF_BASE_S",
    "DEFAULT_BACKOFF_CAP_S",
]

DEFAULT_BACKOFF_BASE_S = 1.0
"""First retry delay after a failed list or watch (1 s, with jitter [0.5, 1] s): client-go's
reflector starts at 800 ms (k8s.io/client-go/tools/cache/reflector.go,
`wait.NewExponentialBackoffManager(800*time.Millisecond, 30*time.Second, 2*time.Minute,
2.0, 1.0, ...)`); 1 s keeps the extender's three reflectors within 36 requests in the first
30 s of a refused watch."""
DEFAULT_BACKOFF_CAP_S = 30.0
"""Longest retry delay, as client-go's."""
HEALTHY_AFTER_S = 120.0
"""A watch streak (watches renewed without a failure between them) this long resets the
backoff: client-go's backoff manager resets after 2 minutes without a backoff."""
SHORT_WATCH_S = 1.0
"""A watch that ends normally within this many seconds having delivered no event is a
failure (client-go: "very short watch"), so a server that closes every watch at once is
retried with backoff, not in a tight loop."""

T = TypeVar("T")

log = logging.getLogger("kvspread.kube")


def lookup(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]... while each step is a mapping, else None: API objects are
    untrusted JSON, so every reader walks them this way."""
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def lookup_str(obj: Any, *path: str) -> str:
    """The string at `path` in an API object, "" when it is absent or not a string."""
    value = lookup(obj, *path)
    return value if isinstance(value, str) else ""


def api_client(kubeconfig: str | None = None, server: str | None = None) -> Any:
    """Return a `kubernetes.client.ApiClient`.

    Order: explicit `server` URL (no credentials; for fakes and kubectl proxy), then an
    explicit kubeconfig file, then in-cluster config, then the default kubeconfig.
    Raises `kubernetes.config.ConfigException` when none is available.
    """
    from kubernetes import client, config

    if server:
        cfg = client.Configuration()
        cfg.host = server.rstrip("/")
        cfg.verify_ssl = False
        return client.ApiClient(cfg)
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()


_QUERY_NAMES = {
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "watch": "watch",
    "resource_version": "resourceVersion",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
}


def path_list_call(
    api: Any, path: str, query: Iterable[tuple[str, str]] = ()
) -> Callable[..., Any]:
    """A `Reflector` list call for any collection path (a custom resource of a group the
    `kubernetes` client has no method for, a label selector): GET `path` with `query` plus
    the Reflector's keywords as query parameters; the raw response, `ApiException` on a
    status other than 200 (410 included, which the Reflector turns into a re-list)."""
    fixed = list(query)

    def call(**kw: Any) -> Any:
        params = list(fixed)
        for key, value in kw.items():
            if key in _QUERY_NAMES and value is not None:
                text = str(value).lower() if isinstance(value, bool) else str(value)
                params.append((_QUERY_NAMES[key], text))
        if hasattr(api, "get"):  # kvspread/kubehttp.py's LightClient: no kubernetes import
            return api.get(path, params, kw.get("_request_timeout"))
        from kubernetes.client.exceptions import ApiException

        method, url, headers, _, _ = api.param_serialize(
            "GET",
            path,
            query_params=params,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        resp = api.call_api(
            method, url, header_params=headers, _request_timeout=kw.get("_request_timeout")
        )
        raw = resp.response
        if resp.status != 200:
            try:
                text = raw.data[:300].decode("utf-8", "replace")
            finally:
                raw.release_conn()
            raise ApiException(status=resp.status, reason=f"{path}: {text}")
        return raw

    return call


@dataclass
class Backoff:
    """Exponential backoff with jitter: failure k waits in [top/2, top], top = min(cap,
    base * 2**(k-1)). One per Reflector, shared by its lists and watches."""

    base_s: float = DEFAULT_BACKOFF_BASE_S
    cap_s: float = DEFAULT_BACKOFF_CAP_S
    failures: int = 0

    def next_delay(self, rng: random.Random) -> float:
        self.failures += 1
        return rng.uniform(self._top(self.failures) / 2, self._top(self.failures))

    def _top(self, k: int) -> float:
        return float(min(self.cap_s, self.base_s * (2 ** min(k - 1, 60))))

    def reset(self) -> None:
        self.failures = 0

    def max_requests(self, window_s: float, per_attempt: int = 2) -> int:
        """The most API requests a reflector makes in its first `window_s` seconds of
        failing (each attempt: at most one list and one watch, then a wait of at least
        top/2): the bound the tests check and the docs state."""
        attempts, elapsed, k = 1, 0.0, 1
        while True:
            elapsed += self._top(k) / 2
            if elapsed > window_s:
                return attempts * per_attempt
            attempts, k = attempts + 1, k + 1


@dataclass
class ReflectorStats:
    """Counters a test or /metrics can read."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    gone: int = 0
    errors: int = 0
    resource_version: str = ""
    synced: bool = False
    last_error: str = ""
    state: str = "starting"
    state_changes: int = 0


class _Gone(Exception):
    pass


MAX_LINE_BYTES = 16 << 20
"""The longest watch event line read: etcd keeps objects under 1.5 MiB, so one event's JSON
is far below it; a longer line fails the watch (backoff, list again) instead of growing."""


def _lines(resp: Any) -> Iterator[str]:
    """A watch response's lines (the `kubernetes` package's `iter_resp_lines`, bounded and
    without importing that package): raw chunks split at newlines, decoded as UTF-8."""
    buffer = bytearray()
    scanned = 0  # the bytes of the partial line kept from the last chunk: no newline in them
    for segment in resp.stream(amt=None, decode_content=False):
        buffer += segment.encode("utf-8") if isinstance(segment, str) else segment
        start = 0
        while (nl := buffer.find(b"\n", max(start, scanned))) != -1:
            if nl - start > MAX_LINE_BYTES:
                break
            yield buffer[start:nl].decode("utf-8", errors="replace")
            start = nl + 1
        del buffer[:start]
        scanned = len(buffer)
        if len(buffer) > MAX_LINE_BYTES:
            raise ValueError(f"watch event line over {MAX_LINE_BYTES} bytes")


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed call: `ApiException.status` (kubernetes) or
    `ApiError.status` (kvspread/kubehttp.py); None for a network or parse error."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


class _ShortWatch(Exception):
    pass


class Reflector:
    """List+watch one resource and feed `on_list(items)` / `on_event(type, obj)`.

    `list_call(**kw)` is a `kubernetes` client list method (e.g. `CoreV1Api.list_node`);
    it is called with `_preload_content=False` so the raw JSON is parsed here.
    `on_error(why)` hears every failed list or watch (before the backoff wait).
    `monotonic` and `wait(seconds)` are injectable so a test can run the loop on virtual
    time (the bound on requests per minute is a property of the loop, not of a clock).
    """

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        *,
        field_selector: str | None = None,
        watch_timeout_s: int = 300,
        backoff: Backoff | None = None,
        request_timeout_s: float = 30.0,
        rng: random.Random | None = None,
        on_error: Callable[[str], None] | None = None,
        healthy_after_s: float = HEALTHY_AFTER_S,
        monotonic: Callable[[], float] = time.monotonic,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        self.name = name
        self._list_call = list_call
        self._on_list = on_list
        self._on_event = on_event
        self._field_selector = field_selector
        self._watch_timeout_s = watch_timeout_s
        self._backoff = backoff or Backoff()
        self._request_timeout_s = request_timeout_s
        self._rng = rng or random.Random()
        self._on_error = on_error
        self._healthy_after_s = healthy_after_s
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._resp_lock = threading.Lock()
        self._resp: Any = None
        self._thread: threading.Thread | None = None
        self._streak_since: float | None = None  # when the current run of good watches began
        self.stats = ReflectorStats()

    @property
    def state(self) -> str:
        """ "starting" (no watch has run healthily yet, none failed), "healthy" or "failing"."""
        return self.stats.state

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"reflector-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, join_timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._resp_lock:
            resp = self._resp
        abort = getattr(resp, "abort", None)
        if abort is not None:
            abort()
        elif resp is not None:
            # Unblock the reader thread: shut the socket down under the response (closing
            # the response alone does not interrupt a blocked recv).
            conn = getattr(resp, "connection", None)
            sock = getattr(conn, "sock", None) if conn is not None else None
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(join_timeout_s)

    def _kw(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"_preload_content": False}
        if self._field_selector:
            kw["field_selector"] = self._field_selector
        return kw

    def list_once(self) -> str:
        """One list: feed `on_list` and return the resourceVersion. Raises on failure."""
        resp = self._list_call(**self._kw(), _request_timeout=self._request_timeout_s)
        try:
            doc = json.loads(resp.data)
        finally:
            resp.release_conn()
        items = lookup(doc, "items") or []
        rv = lookup(doc, "metadata", "resourceVersion") or ""
        self._on_list([i for i in items if isinstance(i, dict)])
        self.stats.lists += 1
        self.stats.resource_version = str(rv)
        self.stats.synced = True
        return str(rv)

    def _set_state(self, state: str, **kv: Any) -> None:
        """Count and log a change of state (never a retry within one state)."""
        if state == self.stats.state:
            return
        before, self.stats.state = self.stats.state, state
        self.stats.state_changes += 1
        fields = {"resource": self.name, "from": before, "to": state, **kv}
        if state == "failing":
            log.warning("list/watch failing, backing off", extra={"kv": fields})
        else:
            log.info("list/watch healthy", extra={"kv": fields})

    def _check_healthy(self) -> None:
        """Reset the backoff once the current streak of watches has lasted long enough."""
        since = self._streak_since
        if since is not None and self._monotonic() - since >= self._healthy_after_s:
            self._backoff.reset()
            self._set_state("healthy", errors=self.stats.errors, gone=self.stats.gone)

    def _watch(self, rv: str) -> str:
        kw = self._kw()
        kw.update(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout_s,
            _request_timeout=(self._request_timeout_s, self._watch_timeout_s + 30),
        )
        started = self._monotonic()
        resp = self._list_call(**kw)
        with self._resp_lock:
            self._resp = resp
        self.stats.watches += 1
        if self._streak_since is None:
            self._streak_since = started
        events = 0
        try:
            if self._stop.is_set():
                return rv
            for line in _lines(resp):
                if self._stop.is_set():
                    break
                if not line or not line.strip():
                    continue
                event = json.loads(line)
                etype = lookup(event, "type")
                obj = lookup(event, "object")
                if etype == "ERROR":
                    code = lookup(obj, "code")
                    if code == 410:
                        raise _Gone(lookup(obj, "message") or "410 Gone")
                    raise RuntimeError(f"watch error event: {obj!r}")
                events += 1
                new_rv = lookup(obj, "metadata", "resourceVersion")
                if etype in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, dict):
                    self._on_event(etype, obj)
                    self.stats.events += 1
                if new_rv:
                    rv = str(new_rv)
                    self.stats.resource_version = rv
                self._check_healthy()
        finally:
            with self._resp_lock:
                self._resp = None
            try:
                resp.release_conn()
            except Exception:  # noqa: BLE001
                pass
        if not self._stop.is_set() and events == 0:
            if self._monotonic() - started < SHORT_WATCH_S:
                raise _ShortWatch("very short watch: closed at once with no event")
        self._check_healthy()
        return rv

    def run(self) -> None:
        """The loop; returns after stop()."""
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self.list_once()
                rv = self._watch(rv)
            except _Gone as exc:
                self.stats.gone += 1
                self._failed(f"410 Gone: {exc}", error=False)
                rv = None
            except Exception as exc:  # noqa: BLE001 - HTTP, network, parse; keep the loop alive
                status = http_status(exc)
                if status == 410:
                    self.stats.gone += 1
                    self._failed("HTTP 410: Gone", error=False)
                elif status is not None:
                    self._failed(f"HTTP {status}: {getattr(exc, 'reason', exc)}")
                elif self._stop.is_set():
                    break
                else:
                    self._failed(f"{type(exc).__name__}: {exc}")
                rv = None

    def _failed(self, why: str, *, error: bool = True) -> None:
        """Every failure, 410 Gone included, waits: a watch that keeps failing after a
        good list must not retry at once (the backoff is reset only by a healthy watch)."""
        self._streak_since = None
        if error:
            self.stats.errors += 1
            self.stats.last_error = why
            if self._on_error is not None:
                self._on_error(why)
        delay = self._backoff.next_delay(self._rng)
        self._set_state("failing", error=why, retry_in_s=round(delay, 3))
        log.debug(
            "list/watch retry",
            extra={"kv": {"resource": self.name, "error": why, "retry_in_s": round(delay, 3)}},
        )
        self._wait(delay)


class WatchedTable(Generic[T]):
    """The objects of one resource by key, kept equal to the API's by a list+watch: a
    `Reflector`'s `on_list` is `replace_all`, its `on_event` is `event`. Thread-safe.

    ADDED/MODIFIED set an object, DELETED removes it, a re-list replaces them all; an item
    `parse` returns None for is skipped. `on_change(keys)` runs after each re-list (the keys
    whose object changed, maybe none) and each event it applied (that event's key), outside
    the lock.
    """

    def __init__(
        self,
        parse: Callable[[Any], T | None],
        key: Callable[[T], str],
        on_change: Callable[[set[str]], None] | None = None,
    ) -> None:
        self._parse = parse
        self._key = key
        self._on_change = on_change
        self._lock = threading.Lock()
        self._by_key: dict[str, T] = {}
        self.synced = False  # True after the first list

    def replace_all(self, items: Iterable[Any]) -> None:
        """A full list: these objects and no others."""
        new = {self._key(o): o for o in map(self._parse, items) if o is not None}
        with self._lock:
            old = self._by_key
            changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
            self._by_key = new
            self.synced = True
        if self._on_change is not None:
            self._on_change(changed)

    def event(self, etype: str, obj: Any) -> None:
        """One watch event."""
        o = self._parse(obj)
        if o is None:
            return
        k = self._key(o)
        with self._lock:
            if etype == "DELETED":
                self._by_key.pop(k, None)
            else:
                self._by_key[k] = o
        if self._on_change is not None:
            self._on_change({k})

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._by_key.get(key)

    def find(self, match: Callable[[T], bool]) -> T | None:
        """The first object that `match` accepts, None when none does."""
        with self._lock:
            return next((o for o in self._by_key.values() if match(o)), None)

    def snapshot(self) -> dict[str, T]:
        """Every object by key, as of now (a copy)."""
        with self._lock:
            return dict(self._by_key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)
