"""`kvspread adapter serve`: the external-metrics API server (docs/adapter.md)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from kvspread import logs, preflight
from kvspread.settings import ConfigError, add_part, gather, http_urls
from metrics_adapter.config import SETTINGS, AdapterConfig

__all__ = ["register"]

EPILOG = """examples:
  kvspread adapter serve --requestheader-client-ca-file front-proxy-ca.crt \\
      --requestheader-allowed-names front-proxy-client
  kvspread adapter serve --config adapter.yaml --secure-port 6443 --otlp-port 4318
  kvspread adapter serve --authorization-mode AllowList \\
      --authorization-allow-users system:serviceaccount:kube-system:horizontal-pod-autoscaler
"""


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]
) -> None:
    serve = add_part(
        sub,
        "adapter",
        SETTINGS,
        help="external-metrics API server (APIService v1beta1.external.metrics.k8s.io)",
        description="The kvspread external-metrics adapter.",
        verb="serve",
        verb_help="serve external.metrics.k8s.io/v1beta1 over HTTPS and receive OTLP metrics",
        verb_description="Serve latency percentiles, good-request rate, error ratio, queue depth "
        "and KV-cache usage to HPAs as external metrics, computed from OTLP pushes (or PromQL).",
        epilog=EPILOG,
        config_help="YAML config with server keys and rules",
    )
    serve.set_defaults(func=lambda args: _serve(args, environ))
    verbs = next(
        a for a in sub.choices["adapter"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    verbs.metavar = "{serve,preflight}"
    check = verbs.add_parser(
        "preflight",
        help="before kubectl apply: refuse when another server owns the external-metrics API",
        description="Read APIService v1beta1.external.metrics.k8s.io; exit 2 naming its owner "
        "when another server (KEDA, Datadog, prometheus-adapter) serves it, so that applying "
        "the adapter's manifests never takes it silently (use manifests/overlays/keda/ then).",
    )
    check.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)"
    )
    check.add_argument(
        "--kube-api-server",
        metavar="URL",
        help="API URL without credentials (kubectl proxy, tests)",
    )
    check.set_defaults(func=_preflight_apiservice)


def _preflight_apiservice(args: argparse.Namespace) -> int:
    from kvspread.kube import api_client
    from metrics_adapter.apiservice import check_apiservice, fetch_apiservice

    # the URL check of `serve` (AdapterConfig.validate), with its wording
    try:
        http_urls(argparse.Namespace(kube_server=args.kube_api_server), "kube_server")
    except ConfigError as exc:
        raise exc.at("--kube-api-server") from None
    preflight.check_kube_access(args.kubeconfig, args.kube_api_server, "--kube-api-server URL")
    if args.kube_api_server:
        fix = "--kube-api-server"
    elif args.kubeconfig:
        fix = f"the server of --kubeconfig {args.kubeconfig}"
    else:
        fix = "the kubeconfig's server, or give --kubeconfig or --kube-api-server"
    doc = fetch_apiservice(api_client(args.kubeconfig, args.kube_api_server), fix)
    print(f"kvspread: {check_apiservice(doc)}")
    return 0


def _serve(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from metrics_adapter.server import run

    merged = gather("adapter", SETTINGS, args, environ, args.config)
    config = AdapterConfig.from_mapping(merged)
    _preflight(config)
    logs.configure(config.log_level)
    return run(config)


def _preflight(c: AdapterConfig) -> None:
    """Check the serving key pairs, the kubeconfig file and then the API and OTLP ports
    before the server blames anything else (grpcio reports a bad KEDA key pair only as a
    port it cannot bind)."""
    preflight.check_tls_pair(
        c.tls_cert_file, c.tls_private_key_file, "--tls-cert-file", "--tls-private-key-file"
    )
    preflight.check_tls_pair(
        c.otlp_tls_cert_file,
        c.otlp_tls_private_key_file,
        "--otlp-tls-cert-file",
        "--otlp-tls-private-key-file",
    )
    if c.keda_port:  # 0: the KEDA scaler is off and its files are not read
        preflight.check_tls_pair(
            c.keda_tls_cert_file,
            c.keda_tls_private_key_file,
            "--keda-tls-cert-file",
            "--keda-tls-private-key-file",
        )
    if c.kubeconfig and not os.path.isfile(c.kubeconfig):
        raise ConfigError(f"--kubeconfig {c.kubeconfig}: no such file")
    # the ports last among the local checks: a default port taken by something else on
    # this machine must not hide a wrong file (issue 26, point 7)
    listeners = [
        ("--secure-port", c.bind_address, c.secure_port, "--bind-address"),
        ("--otlp-port", c.otlp_bind_address, c.otlp_port, "--otlp-bind-address"),
        ("--keda-port", c.keda_bind_address, c.keda_port, "--keda-bind-address"),
    ]
    preflight.check_distinct_ports([(flag, host, port) for flag, host, port, _ in listeners])
    for flag, host, port, host_flag in listeners:
        # before grpcio, which would log its own multi-line bind error for a taken KEDA port
        preflight.check_port(host, port, flag, host_flag)
    if c.authorization_mode == "SubjectAccessReview" and c.requestheader_client_ca_file:
        # without the CA file the CA comes from a ConfigMap, whose own error names the cluster
        try:
            preflight.check_kube_access(
                c.kubeconfig, c.kube_server, "--authorization-mode AlwaysAllow or AllowList"
            )
        except ConfigError as exc:
            raise ConfigError(
                f"--authorization-mode SubjectAccessReview (the default) asks the API server: {exc}"
            ) from None
