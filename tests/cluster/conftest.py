"""One real control plane for the whole tests/cluster/ run (starting one takes seconds);
every test skips when $KVSPREAD_K8S_BIN names no built kube-apiserver (tools/k8s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.controlplane import ControlPlane, binaries


@pytest.fixture(scope="session")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    b = binaries()
    if b is None:
        pytest.skip("no Kubernetes binaries: set KVSPREAD_K8S_BIN (tools/k8s/README.md)")
    plane = ControlPlane(b, Path(tmp_path_factory.mktemp("k8s"))).start()
    try:
        yield plane
    finally:
        plane.stop()
