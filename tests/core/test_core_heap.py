"""kvspread.heap: glibc malloc thresholds for the long-running numpy servers."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from kvspread.heap import keep_freed_memory


@pytest.mark.skipif(
    platform.system() != "Linux" or ctypes.util.find_library("c") is None, reason="glibc only"
)
def test_thresholds_are_set_on_glibc() -> None:
    assert platform.libc_ver()[0] == "glibc"
    assert keep_freed_memory() is True


def test_an_operators_own_tunable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert keep_freed_memory() is False
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert keep_freed_memory() is False
