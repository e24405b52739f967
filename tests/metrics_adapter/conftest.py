"""Fixtures for the adapter tests (helpers live in adapter_testing.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_testing import Pki, base_config, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory)


@pytest.fixture
def adapter(pki: Pki) -> Iterator[AdapterThread]:
    with AdapterThread(base_config(pki)) as a:
        yield a
