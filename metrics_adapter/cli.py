"""`kvspread adapter serve`: the external-metrics API server (docs/adapter.md)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from kvspread import logs
from kvspread.settings import add_settings, gather
from metrics_adapter.config import SETTINGS, AdapterConfig

__all__ = ["register"]

EPILOG = """examples:
  kvspread adapter serve --requestheader-client-ca-file front-proxy-ca.crt \\
      --requestheader-allowed-names front-proxy-client
  kvspread adapter serve --config adapter.yaml --secure-port 6443 --otlp-port 4318
  kvspread adapter serve --authorization-mode AllowList \\
      --authorization-allow-users system:serviceaccount:kube-system:horizontal-pod-autoscaler
"""


def register(sub: argparse._SubParsersAction, environ: Mapping[str, str]) -> None:
    adapter = sub.add_parser(
        "adapter",
        help="external-metrics API server (APIService v1beta1.external.metrics.k8s.io)",
        description="The kvspread external-metrics adapter.",
    )
    verbs = adapter.add_subparsers(dest="verb", metavar="{serve}")
    serve = verbs.add_parser(
        "serve",
        help="serve external.metrics.k8s.io/v1beta1 over HTTPS and receive OTLP metrics",
        description="Serve latency percentiles, good-request rate, error ratio, queue depth and "
        "KV-cache usage to HPAs as external metrics, computed from OTLP pushes (or PromQL).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--config", metavar="FILE", help="YAML config with server keys and rules")
    add_settings(serve, "adapter", SETTINGS)
    serve.set_defaults(func=lambda args: _serve(args, environ))
    adapter.set_defaults(func=lambda args: (adapter.print_help(), 2)[1])


def _serve(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from metrics_adapter.server import run

    merged = gather("adapter", SETTINGS, args, environ, args.config)
    config = AdapterConfig.from_mapping(merged)
    logs.configure(config.log_level)
    return run(config)
