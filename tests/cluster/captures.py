"""Real-server answers the cluster tests rely on, kept as tests/fixtures/k8s-wire/v1.26-*.json
so that CI (which has no control plane) checks the same facts
(tests/manifests/test_manifests_k8s126_captures.py). A run with KVSPREAD_K8S_RECORD=1 writes
them; every other run only asserts against the live server."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-wire"


def record(name: str, data: Any) -> None:
    """Write capture v1.26-`name`.json when recording is on (sorted keys, one trailing newline)."""
    if os.environ.get("KVSPREAD_K8S_RECORD") == "1":
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        (WIRE / f"v1.26-{name}.json").write_text(text)


def capture(name: str) -> Any:
    """The recorded capture v1.26-`name`.json."""
    return json.loads((WIRE / f"v1.26-{name}.json").read_text())
