"""The committed dashboards, rules and generated docs are what the generator makes now."""

from __future__ import annotations

from pathlib import Path

import pytest

from observability import generate

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("rel", sorted(generate.artefacts()))
def test_committed_file_matches_generator(rel: str) -> None:
    path = ROOT / rel
    assert path.exists(), f"{rel} is missing: run `python -m observability.generate`"
    expected = generate.artefacts()[rel]()
    assert path.read_text() == expected, (
        f"{rel} is out of date: run `python -m observability.generate` and commit the result"
    )


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    """--check on an empty tree lists every file and writes nothing."""
    assert generate.main(["--check"], root=tmp_path) == 1
    assert not any(tmp_path.iterdir())


def test_write_mode_then_check_mode_agree(tmp_path: Path) -> None:
    assert generate.main([], root=tmp_path) == 0
    assert generate.main(["--check"], root=tmp_path) == 0
    assert (tmp_path / "manifests/dashboards/kvspread-slo.json").exists()
