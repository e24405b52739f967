"""Shared fixtures for the placement-replay tests (tests/simulator/serving has its own)."""

from __future__ import annotations

import pytest

from simulator.replay.placement import Trace, load_trace


@pytest.fixture(scope="session")
def default_trace() -> Trace:
    """The bundled default trace with the 1213-node cluster (loaded once per session)."""
    return load_trace("default")
