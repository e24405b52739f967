"""`kvspread adapter preflight`: before the adapter's manifests are applied, it refuses when
another server (KEDA here) owns APIService v1beta1.external.metrics.k8s.io, naming it and
pointing to the KEDA overlay; a free or kvspread-owned APIService passes.

The real command runs against FakeKubeApi (a kube-apiserver cannot run here), which serves
the APIService over real HTTP with the real wire shape.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from metrics_adapter.apiservice import APISERVICE
from tests.fake_kube import FakeKubeApi


def _apiservice(namespace: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "service": {"namespace": namespace, "name": name, "port": 443},
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        fake.register_kind("apiregistration.k8s.io/v1", "APIService", "apiservices", False)
        yield fake


def _preflight(api: FakeKubeApi) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSPREAD_")}
    return subprocess.run(
        [sys.executable, "-m", "kvspread", "adapter", "preflight", "--kube-api-server", api.url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_refuses_to_take_the_apiservice_from_keda(api: FakeKubeApi) -> None:
    api.put(_apiservice("keda", "keda-operator-metrics-apiserver"))
    proc = _preflight(api)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert "served by Service keda/keda-operator-metrics-apiserver (KEDA)" in line
    assert "apply manifests/overlays/keda/ instead" in line
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("present", [False, True])
def test_passes_when_free_or_already_kvspread(api: FakeKubeApi, present: bool) -> None:
    if present:
        api.put(_apiservice("kvspread", "kvspread-adapter"))
    proc = _preflight(api)
    assert proc.returncode == 0, proc.stderr
    assert ("already kvspread's" if present else "not registered") in proc.stdout
