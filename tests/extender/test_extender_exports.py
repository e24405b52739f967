"""Every extender module's `__all__` names things that exist, and the package imports
without pulling in the HTTP server or the Kubernetes client (the simulator imports it)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MODULES = [
    "extender",
    "extender.batch",
    "extender.cache",
    "extender.cli",
    "extender.config",
    "extender.fit",
    "extender.ledger",
    "extender.metrics",
    "extender.model",
    "extender.objects",
    "extender.run",
    "extender.scoring",
    "extender.server",
    "extender.service",
    "extender.shapes",
    "extender.state",
    "extender.wire",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist(name: str) -> None:
    mod = importlib.import_module(name)
    assert mod.__all__, name
    for attr in mod.__all__:
        assert hasattr(mod, attr), f"{name}.{attr}"


def test_pure_api_imports_no_server() -> None:
    code = (
        "import sys, extender, extender.scoring, extender.fit;"
        "bad = [m for m in ('fastapi', 'uvicorn', 'kubernetes', 'prometheus_client') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
