"""docs/install.md and the README say what the shipped files do: the versions the manifests
are validated for, the kube-scheduler image, every port with its callers, the commands that
trip new users (sudo with a venv, the request-header CA, `apply -k` twice, the CRDs)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
INSTALL = (ROOT / "docs" / "install.md").read_text()
README = (ROOT / "README.md").read_text()


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_compatibility_lists_the_validated_kubernetes_versions() -> None:
    source = (ROOT / "tests" / "manifests" / "test_kustomize_validate.py").read_text()
    versions = re.findall(r'"(1\.\d+)"', re.search(r"VERSIONS = \(([^)]*)\)", source).group(1))
    table = _section(INSTALL, "Compatibility")
    assert ", ".join(versions) in table
    for needle in ("1.23", "Python", "3.11", "BTF", "kube-scheduler"):
        assert needle in table


def test_docs_name_the_shipped_kube_scheduler_image() -> None:
    dep = yaml.safe_load((ROOT / "manifests/extender/deployment-scheduler.yaml").read_text())
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image in INSTALL
    assert "skew" in INSTALL and "newTag" in INSTALL


def test_every_container_port_is_in_the_ports_table() -> None:
    table = _section(INSTALL, "Ports and who needs them")
    paths = [
        "manifests/extender/deployment-extender.yaml",
        "manifests/extender/deployment-scheduler.yaml",
        "manifests/metrics-adapter/deployment.yaml",
        "manifests/collector/base/daemonset.yaml",
    ]
    for path in paths:
        doc = yaml.safe_load((ROOT / path).read_text())
        name = doc["metadata"]["name"]
        for c in doc["spec"]["template"]["spec"]["containers"]:
            for p in c.get("ports", []):
                row = f"| `{name}` | {p['containerPort']} `{p['name']}`"
                assert row in table, f"{path}: port {p['containerPort']} is not documented"
    assert "explain: {enabled: false}" in table and "explain.enabled" in table
    assert "overlays/keda" in table


def test_first_contact_pitfalls_are_written_down() -> None:
    for text in (INSTALL, README):
        assert 'sudo "$(which kvspread)"' in text
        assert "/etc/kubernetes/pki/front-proxy-ca.crt" in text
        assert "X-Remote-User" in text
        assert "kubectl apply -k <a> -k <b>" in text
    assert "sudo kvspread" not in README + INSTALL
    assert "without-operator" in INSTALL and "PrometheusRule" in INSTALL


def test_every_overlay_the_guide_names_exists() -> None:
    for overlay in set(re.findall(r"manifests/overlays/([a-z-]+)", INSTALL)) - {"keda"}:
        assert (ROOT / "manifests" / "overlays" / overlay / "kustomization.yaml").is_file(), overlay
