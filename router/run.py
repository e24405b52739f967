"""Assemble and run the picker: endpoint source, scraper, gRPC server (ext_proc + health)
and the HTTP debug server. `Router` runs in a background thread with its own event loop so
that tests and benchmarks can start and stop it in-process; `serve` blocks for the CLI.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from grpc_health.v1 import health_pb2

from kvspread import preflight
from kvspread.grpcservice import address as grpc_address
from kvspread.settings import ConfigError
from router.bodybudget import BodyBudget
from router.bodywire import request_body
from router.config import RouterConfig
from router.debug import DebugServer
from router.endpoints import Endpoint, EndpointSet
from router.extproc import PROCESS_PATH, SERVICE, SERVICE_NAME, ExtProcServicer, ExtProcStream
from router.h2grpc import H2GrpcServer, HealthStatus, server_tls
from router.metrics import RouterMetrics
from router.picker import Picker

if TYPE_CHECKING:  # grpcio is imported by _start_grpcio: the default h2 server starts without
    import grpc  # its tenth of a second of imports
    from grpc_health.v1 import health

    from router.kubewatch import PoolWatch

__all__ = ["Router", "serve", "static_endpoints", "HEALTH_SERVICES"]

log = logging.getLogger("kvspread.router")

GIE_PROBE_SERVICE = "inference-extension"
"""The service GIE's chart probes its picker with (config/charts/inferencepool, leader
election off); answered as readiness, as GIE's picker answers every name."""
LIVE_SERVICES = ("", "liveness")
"""Health names answered SERVING while the process runs."""
READY_SERVICES = ("readiness", SERVICE_NAME, GIE_PROBE_SERVICE)
"""Health names answered as readiness: SERVING once the endpoints are synced, NOT_SERVING
before and while draining."""
HEALTH_SERVICES = LIVE_SERVICES + READY_SERVICES


def static_endpoints(cfg: RouterConfig) -> list[Endpoint]:
    out = []
    for addr in cfg.endpoints.static:
        host, _, port = addr.rpartition(":")
        mport = cfg.endpoints.metrics_port or int(port)
        out.append(
            Endpoint(address=addr, metrics_url=f"http://{host}:{mport}{cfg.endpoints.metrics_path}")
        )
    return out


GRPCIO_MAX_RECEIVE_BYTES = 12 << 20
"""The largest message the `grpcio` server receives. grpcio's core holds a message in its own
buffers, then its Cython layer joins them into a bytearray and copies that into the bytes the
handler gets: a message costs 2 to 3 times its size at once, on top of the body held. Envoy
sends a duplex upload in messages up to its listener's per_connection_buffer_limit_bytes plus
a read (33 MiB measured with a 32 MiB limit), and a 300 MiB upload then peaked at the 64 MiB
body budget + 98-168 MiB. With messages of at most 12 MiB (a listener limit of 8 MiB) it
peaked at + 89-100 MiB (10 runs), within issue 27's bound, the body budget + 64 MiB (+ 101-124 MiB
with 16 MiB, too close). The `h2` server reads messages as views and needs no cap."""
GRPCIO_WHY = (
    "grpcio copies each message twice before the picker reads it, and larger messages would "
    "take the picker past its body budget + 64 MiB of memory: keep Envoy's listener "
    "per_connection_buffer_limit_bytes at 8 MiB or less (Envoy's default is 1 MiB) and "
    "BUFFERED bodies under this, or use --grpc-server h2"
)
GRPCIO_OPTIONS = (("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 64 << 10))
"""A fixed 64 KiB stream window: with BDP probing grpcio widens it and its core then holds
several of Envoy's messages ahead of the handler (a 300 MiB upload peaked up to 146 MiB above
rest with it, 86-108 without, one malloc arena, 16 MiB listener limit). A 60 MiB upload
through Envoy took as long (2.2-3.4 s against 2.4-3.0 s on the loaded 2-core machine)."""


def grpcio_receive_limit(max_message_bytes: int) -> int:
    """What the `grpcio` server receives: `server.max_message_bytes`, at most 12 MiB."""
    return min(max_message_bytes, GRPCIO_MAX_RECEIVE_BYTES)


class Router:
    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        self.metrics = RouterMetrics()
        self.endpoints = EndpointSet(
            cfg.metrics, prefill_tokens_per_s=cfg.scoring.prefill_tokens_per_s
        )
        self.picker = Picker(cfg, self.endpoints, self.metrics)
        self.bodies = BodyBudget(cfg.server.max_body_bytes, cfg.server.max_bodies_bytes)
        self.watch: PoolWatch | None = None
        self.grpc_port = 0
        self.http_port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._h2: H2GrpcServer | None = None
        self._health_set: Callable[[str, int], None] = lambda service, status: None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._debug: DebugServer | None = None
        self._draining = False  # stopping: readiness NOT_SERVING while in-flight streams end

    def ready(self) -> bool:
        return self.endpoints.synced and not self._draining

    def _credentials(self) -> grpc.ServerCredentials | None:
        if not self.cfg.server.tls_cert:
            return None
        # grpcio takes any bytes here and only fails in add_secure_port, as a bind error
        preflight.check_tls_pair(
            self.cfg.server.tls_cert, self.cfg.server.tls_key, "server.tls_cert", "server.tls_key"
        )
        try:
            cert = Path(self.cfg.server.tls_cert).read_bytes()
            key = Path(str(self.cfg.server.tls_key)).read_bytes()
        except OSError as exc:
            raise ConfigError(f"server.tls_cert/tls_key: cannot read: {exc}") from exc
        import grpc

        return grpc.ssl_server_credentials([(key, cert)])

    async def _serve(self) -> None:
        if self.cfg.server.grpc_server == "grpcio":
            await self._start_grpcio()
        else:
            await self._start_h2()
        await self._set_health()
        self._started.set()
        while True:  # readiness follows the endpoint set
            await asyncio.sleep(0.2)
            await self._set_health()

    async def _start_h2(self) -> None:
        status = HealthStatus()
        self._health_set = status.set
        server = H2GrpcServer(
            {PROCESS_PATH: lambda: ExtProcStream(self.picker, self.bodies)},
            status,
            max_message_bytes=self.cfg.server.max_message_bytes,
            max_buffered_total=self.cfg.server.max_bodies_bytes,
            max_connections=self.cfg.server.max_connections,
        )
        tls = None
        if self.cfg.server.tls_cert:
            try:
                tls = server_tls(self.cfg.server.tls_cert, str(self.cfg.server.tls_key))
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"server.tls_cert/tls_key: cannot read: {exc}") from exc
        bind = f"{self.cfg.server.host}:{self.cfg.server.grpc_port}"
        try:
            self.grpc_port = await server.start(
                self.cfg.server.host, self.cfg.server.grpc_port, tls
            )
        except OSError as exc:
            raise ConfigError(
                f"server.grpc_port: cannot listen on {bind}: {exc.strerror or exc}"
            ) from exc
        self._h2 = server

    async def _start_grpcio(self) -> None:
        import grpc
        from grpc_health.v1 import health, health_pb2_grpc

        n = self.cfg.server.max_message_bytes
        receive = grpcio_receive_limit(n)
        if receive < n:
            log.warning(
                "grpcio server: messages over %d bytes are refused (RESOURCE_EXHAUSTED)",
                receive,
                extra={"kv": {"max_message_bytes": n, "why": GRPCIO_WHY}},
            )
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", receive),
                ("grpc.max_send_message_length", n),
                ("grpc.so_reuseport", 0),
                ("grpc.max_allowed_incoming_connections", self.cfg.server.max_connections),
                *GRPCIO_OPTIONS,
            ]
        )
        # lenient: bytes that are no ProcessingRequest get INVALID_ARGUMENT naming the
        # message, as from the h2 server, instead of grpcio's UNKNOWN and a logged traceback
        SERVICE.add_to_server(
            ExtProcServicer(self.picker, budget=self.bodies),
            server,
            lenient=True,
            reader=request_body,  # body chunks without protobuf's copies
        )
        servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        bind = grpc_address(self.cfg.server.host, self.cfg.server.grpc_port)
        creds = self._credentials()
        try:
            port = server.add_secure_port(bind, creds) if creds else server.add_insecure_port(bind)
        except RuntimeError as exc:  # grpcio's "Failed to bind"
            raise ConfigError(f"server.grpc_port: cannot listen on {bind} (in use?)") from exc
        if port == 0:
            raise ConfigError(f"server.grpc_port: cannot listen on {bind} (in use?)")
        self.grpc_port = port
        await server.start()
        self._server = server
        self._health = servicer

    async def _set_health(self) -> None:
        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        ready = serving if self.ready() else not_serving
        for service in HEALTH_SERVICES:
            status = serving if service in LIVE_SERVICES else ready
            if self._health is not None:
                await self._health.set(service, status)
            else:
                self._health_set(service, status)

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._started.set()
        finally:
            loop.close()

    def start(self) -> Router:
        """Bind both servers first (a port in use fails before anything runs), then start
        the endpoint source and the scraper."""
        _check_free(self.cfg.server.host, self.cfg.server.grpc_port, "server.grpc_port")
        try:
            self._debug = DebugServer(
                self.cfg.server.host,
                self.cfg.server.http_port,
                self.picker,
                self.endpoints,
                self.metrics,
                self.ready,
                self.bodies,
                lambda: self._h2,
            )
        except OSError as exc:
            raise ConfigError(
                f"server.http_port: cannot listen on {self.cfg.server.host}:{self.cfg.server.http_port}: "
                f"{exc.strerror or exc}"
            ) from exc
        self.http_port = self._debug.port
        self._thread = threading.Thread(target=self._thread_main, name="router-grpc", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            self.stop()
            raise self._error
        self._debug.start()
        if self.cfg.mode == "static":
            self.endpoints.replace(static_endpoints(self.cfg))
        else:
            from router.kubewatch import PoolWatch

            self.watch = PoolWatch(self.cfg, self.endpoints, self.picker.set_objective_priorities)
            self.watch.start()
        self.endpoints.start()
        cache = self.cfg.cache
        if cache.kv_events_port:
            from router.kvevents import KvEventSubscriber

            self.picker.cache.kv_events = KvEventSubscriber(
                self.picker.cache.prefix,
                lambda: [e.address for e in self.endpoints.endpoints()],
                port=cache.kv_events_port,
                topic=cache.kv_events_topic,
                max_blocks=cache.kv_events_max_blocks,
            ).start()
        if self._loop is not None:  # readiness now, not at the next 0.2 s refresh
            asyncio.run_coroutine_threadsafe(self._set_health(), self._loop).result(5)
        log.info(
            "router serving",
            extra={
                "kv": {
                    "grpc_port": self.grpc_port,
                    "http_port": self.http_port,
                    "mode": self.cfg.mode,
                    "tls": bool(self.cfg.server.tls_cert),
                }
            },
        )
        return self

    def stop(self) -> None:
        """Drain, then stop: readiness NOT_SERVING at once (gRPC health and /readyz), the
        streams in flight get `server.drain_timeout_s` to finish, new ones are refused."""
        loop = self._loop
        self._draining = True
        grace = self.cfg.server.drain_timeout_s
        if loop is not None and loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._set_health(), loop).result(5)
            except Exception:  # noqa: BLE001 - stopping anyway
                pass
            if self._server is not None:
                stopping = asyncio.run_coroutine_threadsafe(self._server.stop(grace), loop)
            elif self._h2 is not None:
                stopping = asyncio.run_coroutine_threadsafe(self._h2.stop(grace), loop)
            else:
                stopping = None
            try:
                if stopping is not None:
                    stopping.result(grace + 5)
            except Exception:  # noqa: BLE001 - stopping anyway
                pass
            loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(loop)])
        if self._thread is not None:
            self._thread.join(5)
        if self.watch is not None:
            self.watch.stop()
        self.endpoints.stop()
        if self.picker.cache.kv_events is not None:
            self.picker.cache.kv_events.stop()
        if self._debug is not None:
            self._debug.stop()
            self._debug = None

    def __enter__(self) -> Router:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_free(host: str, port: int, key: str) -> None:
    """Fail with the key's name when the port is taken (grpcio would only log it)."""
    if port == 0:
        return
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"{key}: cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from exc


SIGNAL_POLL_S = 0.2
"""The main thread waits for SIGTERM in slices this long. The kernel hands a signal sent to
the process to any of its threads that does not block it; when that is not the main thread,
CPython's C handler only sets a flag, and the Python handler runs once the main thread runs
Python code again: a single blocking wait never would (issue 27: a SIGTERM that needed a
second one)."""
STOP_MARGIN_S = 15.0
"""After the drain timeout, how long the rest of stopping (threads joined, sockets closed) may
take before the process exits regardless, logging that it did."""


def _exit_now(code: int, why: str, **kv: object) -> None:
    """Leave at once: os._exit skips the interpreter's shutdown, which joins threads."""
    log.error(why, extra={"kv": kv})
    os._exit(code)


def serve(cfg: RouterConfig) -> int:
    """Run until SIGINT/SIGTERM, then drain for `server.drain_timeout_s` and exit, within
    STOP_MARGIN_S more whatever any peer or thread does; a second signal exits at once."""
    done = threading.Event()
    got: list[str] = []

    def _stop(signum: int, frame: object) -> None:
        if got:  # the operator does not want to wait for the drain
            _exit_now(128 + signum, "second signal: exiting without finishing the drain")
        got.append(signal.Signals(signum).name)
        done.set()

    for sig in (signal.SIGINT, signal.SIGTERM):  # before start: a signal then stops it cleanly
        signal.signal(sig, _stop)
    try:
        router = Router(cfg).start()
    except OSError as exc:
        raise ConfigError(f"cannot start: {exc}") from exc
    while not done.wait(SIGNAL_POLL_S):
        pass
    log.info("router stopping", extra={"kv": {"signal": got[0]}})
    bound = cfg.server.drain_timeout_s + STOP_MARGIN_S
    watchdog = threading.Timer(
        bound, _exit_now, (1, "stopping took too long: exiting"), {"seconds": bound}
    )
    watchdog.daemon = True  # it outlives the interpreter's thread joins, not the process
    watchdog.start()
    router.stop()
    log.info("router stopped")
    return 0
