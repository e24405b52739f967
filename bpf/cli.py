"""`kvspread collector run`: the node collector DaemonSet agent."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Mapping
from typing import Any

from kvspread.settings import PartCommand, Setting, gather

__all__ = ["register", "SETTINGS", "build_config"]

PART = "collector"

SETTINGS: list[Setting] = [
    Setting("port", "port of /metrics, /signals, /healthz, /readyz (default 9435)"),
    Setting("listen", "address to listen on (default 127.0.0.1; 0.0.0.0: every address)"),
    Setting(
        "http_ports",
        "server ports to trace, comma list, or 'all' (default all)",
        flag="--http-ports",
    ),
    Setting(
        "standalone", "no Kubernetes API: skip signals publishing and pod lookups", is_flag=True
    ),
    Setting(
        "node_name",
        "this node's name (default $NODE_NAME from the downward API)",
        flag="--node-name",
    ),
    Setting("kubeconfig", "kubeconfig file (default: in-cluster, then ~/.kube/config)"),
    Setting(
        "kube_api_server",
        "API server URL without credentials (kubectl proxy, tests)",
        flag="--kube-api-server",
    ),
    Setting("log_level", "debug | info | warning | error (default info)", flag="--log-level"),
    Setting("bpf.tracefs", "tracefs mount point (default /sys/kernel/tracing)"),
    Setting("bpf.header_cache", "cache folder of the BTF header tree", flag="--header-cache"),
]

EPILOG = """examples:
  kvspread collector run --standalone --port 9435
  kvspread collector run --http-ports 8000,8080 --otlp-endpoint dns:///kvspread-adapter-otlp.kvspread.svc:4318
  kvspread collector run --print-bpf --http-ports 8000
  curl -s localhost:9435/readyz; curl -s localhost:9435/signals
"""


def build_config(args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    from bpf.config import from_mapping

    merged = gather(PART, SETTINGS, args, environ, args.config)
    eps = list(args.otlp_endpoint or [])
    env_eps = environ.get("KVSPREAD_COLLECTOR_OTLP_ENDPOINTS", "")
    if eps:  # repeatable, each maybe a comma list: text, split by the loader
        merged.put("otlp_endpoints", ",".join(eps), "--otlp-endpoint")
    elif env_eps:
        merged.put("otlp_endpoints", env_eps, "KVSPREAD_COLLECTOR_OTLP_ENDPOINTS")
    if args.engine_target:
        merged.put("engines.targets", list(args.engine_target), "--engine-target")
    if args.no_bpf:
        merged.put("bpf.enabled", False, "--no-bpf")
    if args.no_nvml:
        merged.put("nvml.enabled", False, "--no-nvml")
    return from_mapping(merged, environ)


def _run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from kvspread import logs, preflight

    config = build_config(args, environ)
    if args.print_bpf:
        from bpf import loader

        pc = loader.probe_config(config)
        features = loader.detect_features(config.bpf.tracefs)
        if not features.programs:
            print(
                f"no programs can load: tracepoints missing under {config.bpf.tracefs}",
                file=sys.stderr,
            )
            features = loader.Features(frozenset(), tuple(loader.PROGRAMS), {})
        print(loader.render(pc, features))
        return 0
    if config.kubeconfig and not config.standalone:
        preflight.check_kube_access(config.kubeconfig, config.kube_api_server, "--standalone")
    config.check_node_name()  # before any thread starts
    if not config.kubeconfig and not config.standalone:  # in-cluster or ~/.kube/config
        preflight.check_kube_access(None, config.kube_api_server, "--standalone")
    # the port last: a default port taken on this machine must hide no other mistake
    preflight.check_port(config.listen, config.port, "--port", "--listen")
    logs.configure(config.log_level)
    from bpf.agent import Agent

    agent = Agent(config)

    def _term(signum: int, frame: Any) -> None:
        agent._stop.set()

    signal.signal(signal.SIGTERM, _term)
    agent.run_forever()
    return 0


def _flags(run: argparse.ArgumentParser) -> None:
    """The verb's flags that are no setting: repeatable lists and switches."""
    run.add_argument(
        "--otlp-endpoint",
        action="append",
        metavar="URL",
        help="OTLP/HTTP endpoint; repeatable or comma list; dns:///name:port "
        "pushes to every address [env KVSPREAD_COLLECTOR_OTLP_ENDPOINTS]",
    )
    run.add_argument(
        "--engine-target",
        action="append",
        metavar="URL",
        help="engine metrics URL to scrape (repeatable), besides annotated pods",
    )
    run.add_argument("--no-bpf", action="store_true", help="do not load BPF programs")
    run.add_argument("--no-nvml", action="store_true", help="do not use NVML")
    run.add_argument(
        "--print-bpf", action="store_true", help="print the final BPF C with its cflags and exit"
    )


register = PartCommand(
    PART,
    SETTINGS,
    help="node collector: eBPF, NVML, engine metrics -> signals",
    description=None,
    verb="run",
    verb_help="run the collector agent (DaemonSet)",
    verb_description="Measure HTTP latency, TCP and accept queues with eBPF, GPU memory with "
    "NVML and engine KV-cache metrics; publish node signals and export metrics.",
    epilog=EPILOG,
    config_help="YAML config file (see docs/collector.md)",
    flags=_flags,
    run=_run,
)
"""`kvspread collector run`."""
