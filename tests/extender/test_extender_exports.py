"""The extender package imports without pulling in the HTTP server or the Kubernetes
client (the simulator imports it); tests/core/test_core_exports.py checks `__all__`."""

from __future__ import annotations

import subprocess
import sys


def test_pure_api_imports_no_server() -> None:
    code = (
        "import sys, extender, extender.scoring, extender.fit;"
        "bad = [m for m in ('fastapi', 'uvicorn', 'kubernetes', 'prometheus_client') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
