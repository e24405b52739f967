"""Wiring: build the extender from an `ExtenderConfig` and serve it with uvicorn.

    running = build(cfg)          # Extender, app, cache and reflectors (not started)
    running.start()               # start the list+watch threads (no-op standalone)
    serve(cfg)                    # build + start + uvicorn until SIGTERM/SIGINT

Tests use `build()` with an injected clock and `api_server=` a FakeKubeApi URL.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from dataclasses import dataclass, field

from extender.cache import ClusterState, NodeSource, StaticState
from extender.config import ExtenderConfig
from extender.ledger import Ledger
from extender.server import ExtenderApp, create_app
from extender.service import Extender
from extender.signals_watch import node_signals_reflector
from kvspread.clock import SYSTEM_CLOCK, Clock
from kvspread.heap import keep_freed_memory
from kvspread.kube import Backoff, Reflector
from kvspread.preflight import bind_message
from kvspread.settings import ConfigError

__all__ = ["Running", "build", "serve"]

log = logging.getLogger("kvspread.extender")

POD_FIELD_SELECTOR = "spec.nodeName!="
"""Only bound pods hold GPUs; unscheduled pods are what the scheduler asks about."""


@dataclass
class Running:
    cfg: ExtenderConfig
    extender: Extender
    app: ExtenderApp
    state: NodeSource
    reflectors: list[Reflector] = field(default_factory=list)

    def ready(self) -> bool:
        return self.state.ready

    def start(self) -> None:
        for r in self.reflectors:
            r.start()

    def stop(self) -> None:
        for r in self.reflectors:
            r.stop()


def build(cfg: ExtenderConfig, clock: Clock = SYSTEM_CLOCK) -> Running:
    """Assemble everything; the Kubernetes client is created only when not standalone."""
    ledger = Ledger(clock, cfg.ledger.ttl_s)
    state: NodeSource = StaticState(cfg.scoring, ledger, clock)
    reflectors: list[Reflector] = []
    if not cfg.server.standalone:
        from kubernetes import client

        from kvspread.kube import api_client

        kube = api_client(cfg.kubernetes.kubeconfig, cfg.kubernetes.api_server)
        api = client.CoreV1Api(kube)
        cluster = ClusterState(cfg.scoring, ledger, clock)
        state = cluster
        reflectors = [
            Reflector(
                "nodes",
                api.list_node,
                cluster.replace_nodes,
                cluster.node_event,
                watch_timeout_s=cfg.kubernetes.watch_timeout_s,
                backoff=Backoff(cfg.kubernetes.backoff_base_s, cfg.kubernetes.backoff_max_s),
            ),
            Reflector(
                "pods",
                api.list_pod_for_all_namespaces,
                cluster.replace_pods,
                cluster.pod_event,
                field_selector=POD_FIELD_SELECTOR,
                watch_timeout_s=cfg.kubernetes.watch_timeout_s,
                backoff=Backoff(cfg.kubernetes.backoff_base_s, cfg.kubernetes.backoff_max_s),
            ),
        ]
        if cfg.kubernetes.node_signals:
            reflectors.append(node_signals_reflector(kube, cluster.watch_node_signals(), cfg))
    ext = Extender(cfg, clock, state)
    return Running(cfg, ext, create_app(ext, lambda: state.ready), state, reflectors)


def serve(cfg: ExtenderConfig) -> int:
    """Run until interrupted; returns the process exit code."""
    import uvicorn

    from extender.connections import bounded_protocol

    keep_freed_memory()  # no page faults on every request's arrays (kvspread/heap.py)
    srv = cfg.server
    sock = _listen(srv.host, srv.port)  # bound before the watches start: port 0 is known
    running = build(cfg)
    running.start()
    log.info(
        "extender serving",
        extra={
            "kv": {
                "host": srv.host,
                "port": sock.getsockname()[1],
                "tls": cfg.server.tls_cert is not None,
                "standalone": cfg.server.standalone,
                "filter": "/" + cfg.server.filter_verb,
                "prioritize": "/" + cfg.server.prioritize_verb,
            }
        },
    )

    class _Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # uvicorn re-raises SIGTERM/SIGINT once it has shut down (exit status 143/130),
            # so a `finally` after run() never runs then: stop the watches here
            await super().shutdown(sockets)
            running.stop()
            log.info("extender stopped")

    protocol = bounded_protocol(
        srv.max_connections, srv.header_timeout_s, srv.max_header_bytes, srv.body_timeout_s
    )
    refused: dict[str, int] = protocol.refused  # type: ignore[attr-defined]
    running.extender.metrics.connections_refused.source = lambda: dict(refused)
    server = _Server(
        uvicorn.Config(
            running.app,
            host=cfg.server.host,
            port=cfg.server.port,
            ssl_certfile=cfg.server.tls_cert,
            ssl_keyfile=cfg.server.tls_key,
            http=protocol,
            log_level="warning",
            access_log=False,
            log_config=None,
            # past this after a SIGTERM, requests still open are cut: inside Kubernetes'
            # default 30 s grace period, so the pod stops rather than being killed
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
    )
    try:
        server.run(sockets=[sock])
    finally:
        running.stop()
    return 0


SHUTDOWN_GRACE_S = 20
"""Seconds a SIGTERM waits for open requests before cutting them (uvicorn's
`timeout_graceful_shutdown`); without it one client that stopped mid-body held the
shutdown until it closed (found black-box)."""


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket: dual-stack for `::` as the collector's, the router's and the
    adapter's are (asyncio would bind it IPv6-only: no IPv4 client could reach `--host ::`).
    Bound here, not by uvicorn, so that the log names the port a `--port 0` got and a bind
    that fails after the start-up check (a race for the port) is one configuration error."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        ip = None
    v6 = ip is not None and ip.version == 6
    try:
        return socket.create_server(
            (str(ip) if v6 else host, port),
            family=socket.AF_INET6 if v6 else socket.AF_INET,
            dualstack_ipv6=v6 and ip == ipaddress.IPv6Address("::") and socket.has_dualstack_ipv6(),
            reuse_port=False,
        )
    except OSError as exc:
        raise ConfigError(bind_message(host, port, "--port", "--host", exc)) from None
