"""`kvspread extender serve`: flags, environment and YAML merged by kvspread.settings,
validated by `ExtenderConfig.from_mapping`, then served (extender/run.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from extender.config import DEFAULT_HOST, DEFAULT_PORT, ExtenderConfig
from kvspread import logs, preflight
from kvspread.settings import KUBERNETES_SETTINGS, PartCommand, Setting, from_args

__all__ = ["register", "SETTINGS", "config_from_args"]

PART = "extender"

SETTINGS: list[Setting] = [
    Setting("server.host", f"address to listen on (default {DEFAULT_HOST})"),
    Setting("server.port", f"port to listen on (default {DEFAULT_PORT})"),
    Setting(
        "server.tls_cert", "serve HTTPS with this PEM certificate (with --tls-key)", metavar="FILE"
    ),
    Setting("server.tls_key", "private key of --tls-cert (PEM)", metavar="FILE"),
    Setting(
        "server.log_level",
        "debug | info | warning | error (default info); debug logs one line per decision",
    ),
    Setting(
        "server.standalone",
        "no cluster: no watches; full-NodeList requests are scored from the body alone",
        is_flag=True,
    ),
    Setting("server.filter_verb", "URL path of the filter verb (default filter)", metavar="VERB"),
    Setting(
        "server.prioritize_verb",
        "URL path of the prioritize verb (default prioritize)",
        metavar="VERB",
    ),
    *KUBERNETES_SETTINGS,
    Setting(
        "ledger.ttl_s",
        "seconds a recent placement counts before the pod shows up bound (default 30)",
        flag="--ledger-ttl",
        metavar="SECONDS",
    ),
    Setting(
        "explain.enabled",
        "serve /debug/explain: true (default) or false (404; it shows pod names and node state)",
        flag="--explain",
        metavar="BOOL",
    ),
]

EPILOG = """examples:
  kvspread extender serve --standalone
      serve on 127.0.0.1:8888 without a cluster (full-NodeList requests only)
  kvspread extender serve --host 0.0.0.0 --config /etc/kvspread/extender.yaml
      in a pod: watch nodes and pods with the service account
  kvspread extender serve --kube-api-server http://127.0.0.1:8001 --log-level debug
      through `kubectl proxy`, one log line per decision
  KVSPREAD_EXTENDER_SERVER_PORT=9000 kvspread extender serve --standalone

configuration precedence: flag > KVSPREAD_EXTENDER_* variable > --config YAML > defaults;
the YAML also holds the scoring section (weights, thresholds), see docs/extender.md.
"""


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> ExtenderConfig:
    """Merge flag > env > YAML > defaults and validate strictly."""
    return from_args(PART, SETTINGS, args, environ, ExtenderConfig.from_mapping)


def _serve(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Check the key pair, the cluster access and the port first: each mistake is one line
    (the port last, so that a default port taken on this machine hides no other mistake)."""
    cfg = config_from_args(args, environ)
    srv, kube = cfg.server, cfg.kubernetes
    preflight.check_tls_pair(srv.tls_cert, srv.tls_key, "--tls-cert", "--tls-key")
    if not srv.standalone:
        preflight.check_kube_access(kube.kubeconfig, kube.api_server, "--standalone")
    preflight.check_port(srv.host, srv.port, "--port")
    logs.configure(srv.log_level)
    from extender.run import serve as serve_forever

    return serve_forever(cfg)


register = PartCommand(
    PART,
    SETTINGS,
    help="kube-scheduler extender: filter and prioritize GPU nodes",
    description="kube-scheduler extender (filter + prioritize) placing LLM inference pods "
    "by GPU memory, KV-cache fragmentation, load, model spread, modality and, for realtime "
    "pods, whether their GPU is already shared with a computing tenant.",
    verb_help="serve /filter, /prioritize, /debug/explain, /metrics, /healthz, /readyz",
    verb_description="Serve the scheduler extender over HTTP(S).",
    epilog=EPILOG,
    run=_serve,
)
"""`kvspread extender serve`."""
