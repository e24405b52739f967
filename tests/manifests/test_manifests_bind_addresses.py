"""Loopback by default, every address in the cluster: the collector and the adapter listen on
127.0.0.1 unless told (a laptop trial exposes neither the unauthenticated OTLP receiver nor
the collector's /metrics), and the manifests tell them 0.0.0.0 explicitly, as the extender's
and the router's do."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bpf.config import CollectorConfig
from metrics_adapter.config import AdapterConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_defaults_are_loopback() -> None:
    adapter = AdapterConfig()
    assert (adapter.bind_address, adapter.otlp_bind_address, adapter.keda_bind_address) == (
        "127.0.0.1",
        "127.0.0.1",
        "127.0.0.1",
    )
    assert CollectorConfig().listen == "127.0.0.1"


def _args(path: str) -> list[str]:
    docs = [d for d in yaml.safe_load_all((ROOT / path).read_text()) if d]
    (container,) = [c for d in docs for c in d["spec"]["template"]["spec"]["containers"]]
    return list(container["args"])


@pytest.mark.parametrize(
    "path,flags",
    [
        ("manifests/collector/base/daemonset.yaml", ["--listen"]),
        ("manifests/metrics-adapter/deployment.yaml", ["--bind-address", "--otlp-bind-address"]),
        (
            "manifests/overlays/keda/adapter-keda.yaml",
            ["--bind-address", "--otlp-bind-address", "--keda-bind-address"],
        ),
    ],
)
def test_the_manifests_listen_on_every_address(path: str, flags: list[str]) -> None:
    args = _args(path)
    for flag in flags:
        assert f"{flag}=0.0.0.0" in args, f"{path} lacks {flag}=0.0.0.0"
