"""Every kustomization under manifests/ renders with `kubectl kustomize` and every object it
makes validates with `kubernetes-validate --strict` against Kubernetes 1.29 to 1.34.

Kinds that kubernetes-validate has no schema for (custom resources) are skipped explicitly
and listed in NO_SCHEMA; anything else without a schema fails the test.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvspread import __version__

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33", "1.34")
KUBECTL = shutil.which("kubectl")

NO_SCHEMA = {
    # Prometheus Operator CRDs (monitoring.coreos.com/v1): not in the Kubernetes schemas.
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    # Gateway API and its Inference Extension (manifests/router/examples): CRDs as well.
    ("inference.networking.k8s.io/v1", "InferencePool"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ("gateway.networking.k8s.io/v1", "Gateway"),
    ("gateway.networking.k8s.io/v1", "GatewayClass"),
    # KEDA's CRD: validated against its schema in tests/metrics_adapter/test_metrics_adapter_keda_manifests.py.
    ("keda.sh/v1alpha1", "ScaledObject"),
}

SINCE = {
    # GA in 1.30: the NodeSignals write policy (manifests/crds/nodesignals-policy.yaml);
    # clusters before 1.30 apply manifests/crds/nodesignals alone (docs/install.md).
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "1.30",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): "1.30",
}
"""Kinds that exist only from a version on: validated from there, absent before."""

PARTS = {"extender", "metrics-adapter", "collector"}


def _kustomizations() -> list[Path]:
    return sorted(p.parent for p in MANIFESTS.rglob("kustomization.yaml"))


def _missing_parts(directory: Path) -> list[str]:
    """Referenced directories that do not hold a kustomization yet (parts still being built)."""
    doc = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    missing = []
    for res in doc.get("resources", []):
        target = (directory / res).resolve()
        if target.suffix in (".yaml", ".yml"):
            continue
        if not (target / "kustomization.yaml").exists():
            missing.append(str(target.relative_to(ROOT)))
        else:
            missing += _missing_parts(target)
    return missing


def _render(directory: Path) -> list[dict[str, Any]]:
    missing = _missing_parts(directory)
    if missing:
        pytest.skip(f"{directory.relative_to(ROOT)}: part not present yet: {', '.join(missing)}")
    return _kustomize(directory)


@functools.cache
def _kustomize(directory: Path) -> list[dict[str, Any]]:
    """Rendered objects (cached: several tests read the same directories; none mutates)."""
    assert KUBECTL is not None
    res = subprocess.run(
        [KUBECTL, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, f"kubectl kustomize {directory}: {res.stderr}"
    return [d for d in yaml.safe_load_all(res.stdout) if d]


_VALID: set[str] = set()
"""Objects already validated for every version (the overlays repeat the parts' objects)."""


def _validate(doc: dict[str, Any], where: str) -> None:
    key = (doc.get("apiVersion"), doc.get("kind"))
    fingerprint = json.dumps(doc, sort_keys=True)
    if fingerprint in _VALID:
        return
    for version in VERSIONS:
        since = SINCE.get(key)  # type: ignore[arg-type]
        if since is not None and tuple(map(int, version.split("."))) < tuple(
            map(int, since.split("."))
        ):
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            assert key in NO_SCHEMA, f"{where}: no schema for {key} in Kubernetes {version}"
        except kubernetes_validate.ValidationError as exc:
            name = doc.get("metadata", {}).get("name")
            pytest.fail(f"{where}: {key[1]}/{name} invalid for Kubernetes {version}: {exc}")
    _VALID.add(fingerprint)


needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")


@needs_kubectl
@pytest.mark.parametrize(
    "directory", _kustomizations(), ids=lambda p: str(p.relative_to(MANIFESTS)) or "."
)
def test_kustomization_renders_and_validates(directory: Path) -> None:
    docs = _render(directory)
    assert docs, f"{directory} renders nothing"
    seen = set()
    for doc in docs:
        _validate(doc, str(directory.relative_to(ROOT)))
        ident = (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
        assert ident not in seen, f"{ident} rendered twice"
        seen.add(ident)


def _loose_examples() -> list[Path]:
    """YAML objects shipped outside any kustomization (the adapter's HPA examples)."""
    out = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or "prometheus" in path.parts[-2:-1]:
            continue
        if "examples" in path.parts or path.name.startswith("hpa"):
            out.append(path)
    return out


@pytest.mark.parametrize(
    "path",
    _loose_examples() or [None],
    ids=lambda p: str(p.relative_to(MANIFESTS)) if p else "none",
)
def test_examples_validate(path: Path | None) -> None:
    if path is None:
        pytest.skip("no example manifests (manifests/**/examples/, hpa*.yaml) present yet")
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        _validate(doc, str(path.relative_to(ROOT)))


@needs_kubectl
def test_base_holds_every_part_and_the_observability_layer() -> None:
    docs = _render(MANIFESTS)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Namespace", "kvspread") in kinds
    assert ("PrometheusRule", "kvspread") in kinds
    assert ("ConfigMap", "kvspread-prometheus-rules") in kinds
    assert any(k == "DaemonSet" for k, _ in kinds), "the collector DaemonSet is missing"
    assert any(k == "APIService" for k, _ in kinds), "the adapter APIService is missing"
    dashboards = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"].get("labels", {}).get("grafana_dashboard")
    ]
    assert len(dashboards) == 7
    assert all(d["metadata"]["labels"]["grafana_dashboard"] == "1" for d in dashboards)


@needs_kubectl
def test_without_collector_overlay_has_no_daemonset() -> None:
    docs = _render(MANIFESTS / "overlays/without-collector")
    assert not [d for d in docs if d["kind"] == "DaemonSet"]
    assert any(d["kind"] == "APIService" for d in docs)


@needs_kubectl
def test_overlays_pin_the_release_image() -> None:
    for overlay in ("all", "without-collector", "promql-adapter"):
        directory = MANIFESTS / "overlays" / overlay
        if not (directory / "kustomization.yaml").exists():
            pytest.fail(f"overlay {overlay} is missing")
        docs = _render(directory)
        images = {
            c["image"]
            for d in docs
            for c in _containers(d)
            if "kvspread/kvspread" in c.get("image", "")
        }
        assert images == {f"ghcr.io/kvspread/kvspread:{__version__}"}, (overlay, images)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


def _promql_adapter_config() -> dict[str, Any]:
    patch = yaml.safe_load((MANIFESTS / "overlays/promql-adapter/adapter-promql.yaml").read_text())
    return dict(yaml.safe_load(patch["data"]["adapter.yaml"]))


def test_promql_overlay_config_loads_in_the_adapter() -> None:
    """The overlay's adapter.yaml passes the adapter's own strict config loader."""
    config_mod = pytest.importorskip("metrics_adapter.config")
    doc = _promql_adapter_config()
    config = config_mod.AdapterConfig.from_mapping(doc)
    assert config.prometheus_url
    assert {r.source for r in config.rules if r.pressure is None} == {"promql"}
    served = {r.name for r in config.rules}
    from kvspread import names

    assert served == set(names.SLI_NAMES)


@needs_kubectl
def test_promql_overlay_replaces_the_adapter_config() -> None:
    docs = _render(MANIFESTS / "overlays/promql-adapter")
    cms = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kvspread-adapter"
    ]
    assert len(cms) == 1
    rendered = yaml.safe_load(cms[0]["data"]["adapter.yaml"])
    assert rendered == _promql_adapter_config()


@needs_kubectl
def test_base_and_overlays_hold_the_same_parts() -> None:
    """The overlays list the parts themselves (kustomize forbids `../..` here): keep in step."""

    def idents(directory: Path) -> set[tuple[str, str]]:
        return {(d["kind"], d["metadata"]["name"]) for d in _render(directory)}

    base = idents(MANIFESTS)
    assert idents(MANIFESTS / "overlays/all") == base
    assert idents(MANIFESTS / "overlays/promql-adapter") == base
    without = idents(MANIFESTS / "overlays/without-collector")
    assert without < base
    assert {k for k, _ in base - without} >= {"DaemonSet"}
