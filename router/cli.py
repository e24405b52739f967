"""`kvspread router serve`: flags, environment and YAML merged by kvspread.settings
(`gather`), read strictly by the shared loader (`RouterConfig.from_mapping`), then served
(router/run.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from kvspread import logs, preflight
from kvspread.settings import KUBERNETES_SETTINGS, PartCommand, Setting, from_args
from router.config import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, RouterConfig

__all__ = ["register", "SETTINGS", "config_from_args"]

PART = "router"

SETTINGS: list[Setting] = [
    Setting("server.host", "address to listen on (default 127.0.0.1; 0.0.0.0 in a pod)"),
    Setting(
        "server.grpc_port",
        f"ext_proc gRPC port (default {DEFAULT_GRPC_PORT})",
        metavar="PORT",
    ),
    Setting(
        "server.http_port",
        f"HTTP port of /metrics, /debug/explain, /healthz (default {DEFAULT_HTTP_PORT})",
        metavar="PORT",
    ),
    Setting("server.tls_cert", "serve gRPC over TLS with this PEM certificate", metavar="FILE"),
    Setting("server.tls_key", "private key of --tls-cert (PEM)", metavar="FILE"),
    Setting("server.log_level", "debug | info | warning | error; debug logs every pick"),
    Setting(
        "server.max_message_bytes",
        "largest gRPC message, so large base64 bodies pass (default 64 MiB)",
        metavar="BYTES",
    ),
    Setting(
        "server.drain_timeout_s",
        "seconds in-flight streams get after SIGTERM; readiness NOT_SERVING at once (default 30)",
        flag="--drain-timeout",
        metavar="SECONDS",
    ),
    Setting(
        "server.max_body_bytes",
        "largest request body held; past it 413 (default 64 MiB)",
        metavar="BYTES",
    ),
    Setting(
        "server.max_bodies_bytes",
        "request body bytes held over all requests; past it 429 (default 256 MiB)",
        metavar="BYTES",
    ),
    Setting(
        "server.conformance_hooks",
        "serve GIE's conformance hooks: test-epp-endpoint-selection steers the pick (test only)",
        is_flag=True,
    ),
    Setting(
        "server.grpc_server",
        "gRPC server: h2 (default: the picker's own HTTP/2 server) or grpcio",
        metavar="KIND",
    ),
    Setting(
        "endpoints.static",
        "fixed endpoints ip:port,ip:port (IPv4, or [IPv6]:port; no host names; no cluster needed)",
        flag="--endpoints",
        metavar="LIST",
    ),
    Setting(
        "endpoints.selector",
        "pods by label selector (a=b,c=d), without Gateway API",
        flag="--endpoint-selector",
        metavar="LABELS",
    ),
    Setting("endpoints.target_port", "port of the selected pods", metavar="PORT"),
    Setting(
        "endpoints.namespace",
        "namespace of --endpoint-selector pods (default: all)",
        flag="--endpoint-namespace",
        metavar="NS",
    ),
    Setting(
        "endpoints.metrics_port",
        "port of the engines' /metrics (default: the endpoint's port, or the pod's "
        "kvspread.io/metrics-port annotation)",
        metavar="PORT",
    ),
    Setting(
        "pool.name",
        "watch this InferencePool (inference.networking.k8s.io/v1)",
        flag="--pool-name",
        metavar="NAME",
    ),
    Setting(
        "pool.namespace",
        "namespace of the InferencePool (default default)",
        flag="--pool-namespace",
        metavar="NS",
    ),
    *KUBERNETES_SETTINGS,
    Setting(
        "metrics.interval_s",
        "seconds between engine /metrics scrapes (default 0.5)",
        flag="--scrape-interval",
        metavar="SECONDS",
    ),
    Setting(
        "metrics.stale_after_s",
        "metrics older than this rank the endpoint after every fresh one (default 2)",
        flag="--stale-after",
        metavar="SECONDS",
    ),
    Setting("scoring.fallbacks", "fallback endpoints after the chosen one (default 2)"),
    Setting(
        "scoring.shed_queue",
        "answer 429 when every endpoint has this many requests waiting (default 0: never)",
        metavar="N",
    ),
]

EPILOG = """examples:
  kvspread router serve --endpoints 10.0.0.5:8000,10.0.0.6:8000
      fixed vLLM endpoints; Envoy's ext_proc filter points at 127.0.0.1:9002
  kvspread router serve --host 0.0.0.0 --pool-name qwen-vl --pool-namespace llm
      in a pod: watch the InferencePool and its Ready pods
  kvspread router serve --endpoint-selector app=vllm --target-port 8000 --log-level debug
      pods by label without Gateway API, one log line per pick
  curl 127.0.0.1:9090/debug/explain?request_id=ID

configuration precedence: flag > KVSPREAD_ROUTER_* variable > --config YAML > defaults;
the YAML also holds the scoring weights, see docs/router.md.
"""


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> RouterConfig:
    """Merge flag > env > YAML > defaults and validate strictly."""
    return from_args(PART, SETTINGS, args, environ, RouterConfig.from_mapping)


def _serve(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Check the key pair and, when endpoints come from the cluster, the cluster access
    first (as the extender does): each mistake is one line saying what to give."""
    cfg = config_from_args(args, environ)
    srv, kube = cfg.server, cfg.kubernetes
    preflight.check_tls_pair(srv.tls_cert, srv.tls_key, "--tls-cert", "--tls-key")
    preflight.check_port(srv.host, srv.grpc_port, "--grpc-port")
    preflight.check_port(srv.host, srv.http_port, "--http-port")
    if cfg.mode != "static":
        from kvspread.kubehttp import connect

        preflight.check_kube_access(
            kube.kubeconfig, kube.api_server, "--endpoints IP:PORT,...", connect
        )
    logs.configure(cfg.server.log_level)
    from router.run import serve as serve_forever

    return serve_forever(cfg)


register = PartCommand(
    PART,
    SETTINGS,
    help="endpoint picker for the Gateway API Inference Extension (Envoy ext_proc)",
    description="Per-request endpoint picker: Envoy asks it over ext_proc which "
    "model-server pod serves each request, by GPU memory, queue, KV cache, modality "
    "and context affinity.",
    verb_help="serve ext_proc gRPC plus /metrics and /debug/explain over HTTP",
    verb_description="Serve the endpoint picker.",
    epilog=EPILOG,
    run=_serve,
)
"""`kvspread router serve`."""
