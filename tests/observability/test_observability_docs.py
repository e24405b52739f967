"""The operator docs: every relative link and anchor resolves, every alert has a runbook, and
the install guide covers each step in order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "docs/architecture.md",
    ROOT / "docs/install.md",
    ROOT / "docs/config.md",
    ROOT / "docs/metrics.md",
    ROOT / "docs/troubleshooting.md",
    ROOT / "docs/runbooks.md",
    ROOT / "docs/evaluation.md",
    ROOT / "manifests/README.md",
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#+\s+(.*)", line)
        if m:
            text = m.group(1).strip().lower()
            out.add(re.sub(r"[^a-z0-9 _-]", "", text).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to missing {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: no #{anchor} in {dest.name}"


def test_install_guide_walks_the_parts_in_order() -> None:
    text = (ROOT / "docs/install.md").read_text()
    steps = [
        "kubectl apply -k manifests/namespace",
        "kubectl apply -k manifests/collector",
        "kubectl apply -k manifests/metrics-adapter",
        "kubectl get apiservice v1beta1.external.metrics.k8s.io",
        "kubectl apply -k manifests/extender",
        "schedulerName: kvspread-scheduler",
        "kind: HorizontalPodAutoscaler",
        "kubectl apply -k manifests/prometheus",
        "kubectl apply -k manifests/dashboards",
    ]
    positions = [text.find(s) for s in steps]
    assert -1 not in positions, [s for s, p in zip(steps, positions, strict=True) if p < 0]
    assert positions == sorted(positions)


def test_install_guide_paths_exist() -> None:
    text = (ROOT / "docs/install.md").read_text()
    for rel in set(re.findall(r"kubectl (?:apply|delete) -k ([\w/.-]*[\w])", text)):
        assert (ROOT / rel / "kustomization.yaml").exists(), rel


def test_troubleshooting_covers_the_required_symptoms() -> None:
    text = (ROOT / "docs/troubleshooting.md").read_text()
    for topic in (
        "FailedDiscoveryCheck",
        "401",
        "403",
        "Extender timeouts",
        "Stale node signals",
        "BPF",
        "Kernel-header errors",
    ):
        assert topic in text, topic
