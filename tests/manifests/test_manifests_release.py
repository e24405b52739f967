"""Release artifacts: one version everywhere, the licence texts, the data terms, the image's
data exclusion, and the CI steps that build and install the wheel."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kvspread import __version__
from kvspread.settings import ConfigError

ROOT = Path(__file__).resolve().parents[2]

APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
"""sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt (Debian's common-licenses copy)."""


def test_version_is_set_in_one_place() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "kvspread.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_image_references_match_the_version() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "sync-version"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = {line.split()[1].split(":")[0] for line in proc.stdout.splitlines()}
    for must in (
        "Dockerfile",
        "manifests/extender/deployment-extender.yaml",
        "manifests/metrics-adapter/deployment.yaml",
        "manifests/collector/base/daemonset.yaml",
        "manifests/overlays/all/kustomization.yaml",
        "docs/install.md",
    ):
        assert must in listed, f"{must}: no image reference found by .ci/sync-version"
    label = re.search(
        r'org\.opencontainers\.image\.version="([^"]+)"', (ROOT / "Dockerfile").read_text()
    )
    assert label and label.group(1) == __version__


def test_every_kvspread_image_in_the_manifests_is_found_by_the_sync() -> None:
    """No image reference escapes the check (a new manifest with another tag form)."""
    for path in ROOT.glob("manifests/**/*.yaml"):
        for m in re.finditer(r"image:\s*ghcr\.io/kvspread/kvspread(\S*)", path.read_text()):
            assert m.group(1) == f":{__version__}", f"{path}: {m.group(0)}"


def test_cli_prints_the_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kvspread", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == f"kvspread {__version__}"


def test_changelog_has_this_release_and_the_first() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "Keep a Changelog" in text
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    versions = [v for v, _ in headings]
    assert versions[:1] == ["Unreleased"]
    assert versions[1] == __version__, "the newest release section is not __version__"
    assert "0.1.0" in versions
    assert all(date for v, date in headings if v != "Unreleased")
    for v in versions:
        assert re.search(rf"^\[{re.escape(v)}\]: https://", text, re.M), f"no link for {v}"
    sections = re.findall(r"^### (\w+)$", text, re.M)
    assert set(sections) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_licence_is_the_apache_2_text() -> None:
    data = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(data).hexdigest() == APACHE_2_SHA256
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert set(project["license-files"]) == {"LICENSE", "NOTICE"}


def test_every_bundled_data_set_is_documented() -> None:
    """Each folder of data in the package is named, with its terms, in the licence page."""
    page = (ROOT / "docs" / "data-licences.md").read_text()
    notice = (ROOT / "NOTICE").read_text()
    data = ROOT / "simulator" / "data"
    folders = [p for kind in ("traces", "workloads") for p in sorted((data / kind).glob("*"))]
    assert folders, "no bundled data found"
    for folder in folders:
        if folder.is_dir():
            rel = folder.relative_to(ROOT).as_posix()
            assert f"`{rel}/" in page, f"{rel} is not in docs/data-licences.md"
            assert rel in notice, f"{rel} is not in NOTICE"
            terms = [p for p in folder.iterdir() if p.stem.upper() in ("LICENSE", "SOURCE")]
            assert terms, f"{rel}: no LICENSE or SOURCE file next to the data"
    for phrase in ("study and research", "Apache-2.0", "CC BY 4.0", "Weng", "Splitwise"):
        assert phrase in page
    for phrase in ("study and research", "Apache License 2.0", "CC BY 4.0"):
        assert phrase in notice


def test_image_leaves_the_research_only_trace_out() -> None:
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "simulator/data/traces" in ignored
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "sys.exit(t.TRACE_DIR.exists())" in dockerfile, "the build does not prove it"
    assert "LICENSE" in dockerfile and "NOTICE" in dockerfile


def test_simulate_without_the_trace_says_where_to_run(monkeypatch, tmp_path) -> None:
    from simulator import cli
    from simulator.replay import trace

    monkeypatch.setattr(trace, "TRACE_DIR", tmp_path / "absent")
    monkeypatch.setattr(trace, "DEFAULT_NODE_LIST", tmp_path / "absent" / "nodes.csv")
    with pytest.raises(ConfigError, match="run from a clone of https://github.com/kvspread"):
        cli.require_trace_data()


def test_the_trace_stays_out_of_the_wheel_and_the_sdist() -> None:
    """Research-only data in an Apache-2.0 package would be passed on by every mirror."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = project["tool"]["setuptools"]["package-data"]["simulator"]
    assert data and not [d for d in data if "traces" in d], data
    manifest = (ROOT / "MANIFEST.in").read_text().splitlines()
    assert "prune simulator/data/traces" in manifest
    for folder in ("tests", "docs", "manifests"):
        assert f"graft {folder}" in manifest, f"the sdist lacks {folder}/"


def test_simulate_finds_the_trace_in_the_clone_it_was_installed_from(monkeypatch, tmp_path) -> None:
    """`pip install .` from a clone: the installed package has no trace, the clone has."""
    from simulator.replay import trace

    clone = tmp_path / "clone"
    (clone / trace.TRACE_IN_REPO).mkdir(parents=True)
    site = tmp_path / "site-packages"  # the installed package's root, without the trace

    class Dist:
        def read_text(self, name: str) -> str:
            assert name == "direct_url.json"
            return json.dumps({"url": clone.as_uri(), "dir_info": {}})

    monkeypatch.setattr(trace.importlib.metadata, "distribution", lambda name: Dist())
    assert trace.install_source() == clone
    assert trace.find_trace_dir(site) == clone / trace.TRACE_IN_REPO
    assert trace.find_trace_dir(ROOT) == ROOT / trace.TRACE_IN_REPO  # a checkout: its own

    class Wheel:  # installed from a wheel file: no folder to look in
        def read_text(self, name: str) -> str:
            return json.dumps({"url": (tmp_path / "k.whl").as_uri(), "archive_info": {}})

    monkeypatch.setattr(trace.importlib.metadata, "distribution", lambda name: Wheel())
    assert trace.install_source() is None
    assert trace.find_trace_dir(site) == site / trace.TRACE_IN_REPO  # absent: said so


def test_ci_waits_for_apt_and_checks_the_wheel() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert "DPkg::Lock::Timeout=" in run
    assert run.count('"${apt_wait[@]}"') == 2, "both apt-get calls wait for the lock"
    assert "bash .ci/check-wheel" in run
    check = (ROOT / ".ci" / "check-wheel").read_text()
    for step in (
        "python3 -m build",
        "twine check --strict",
        "venv",
        "--version",
        "simulate --help",
    ):
        assert step in check
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = " ".join(project["optional-dependencies"]["test"])
    assert "build" in extras and "twine" in extras
