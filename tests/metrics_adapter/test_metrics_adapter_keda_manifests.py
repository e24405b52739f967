"""The KEDA overlay installs the adapter without the APIService, and its ScaledObject
examples validate against KEDA's ScaledObject schema (tests/fixtures/keda/, with its
source) and name only what the adapter accepts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from metrics_adapter.config import AdapterConfig
from metrics_adapter.keda import externalscaler_pb2 as pb
from metrics_adapter.keda.scaler import parse_trigger

ROOT = Path(__file__).parents[2]
OVERLAY = ROOT / "manifests" / "overlays" / "keda"
SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "keda" / "scaledobject-schema.json").read_text())
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (kustomize) not installed")


def _render(path: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True,
                         timeout=60, check=True).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def test_overlay_has_no_apiservice_and_serves_keda() -> None:
    objs = _render(OVERLAY)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert not any(k == "APIService" for k, _ in kinds)
    assert ("Service", "kvspread-adapter-keda") in kinds
    (dep,) = [
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "kvspread-adapter"
    ]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert "--keda-port=6000" in c["args"]
    assert {"name": "keda-grpc", "containerPort": 6000, "protocol": "TCP"} in c["ports"]
    svc = next(o for o in objs if o["metadata"]["name"] == "kvspread-adapter-keda")
    assert svc["spec"]["ports"][0]["targetPort"] == "keda-grpc"
    # the same flags parse as the adapter's config (what `kvspread adapter serve` will get)
    flags = dict(a.removeprefix("--").split("=", 1) for a in c["args"] if a.startswith("--keda"))
    assert AdapterConfig.from_mapping({"keda_port": int(flags["keda-port"])}).keda_port == 6000


def test_scaledobject_examples_validate_against_kedas_schema() -> None:
    objs = _render(OVERLAY / "examples")
    assert len(objs) == 4
    metrics = set()
    for o in objs:
        jsonschema.validate(o, SCHEMA)
        for trig in o["spec"]["triggers"]:
            assert trig["type"] in ("external", "external-push")
            meta = trig["metadata"]
            assert meta["scalerAddress"] == "kvspread-adapter-keda.kvspread.svc:6000"
            ref = pb.ScaledObjectRef(name=o["metadata"]["name"], namespace=o["metadata"]["namespace"],
                                     scalerMetadata=meta)  # fmt: skip
            metrics.add(parse_trigger(ref).metric)  # the adapter accepts the metadata
    assert metrics == {
        "kvspread_request_latency_p95_seconds",
        "kvspread_good_requests_per_second",
        "kvspread_queue_depth",
        "kvspread_slo_pressure",
    }
    for o in objs:  # every example says how fast it scales up and how slowly down
        behavior = o["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleUp"]["policies"] and behavior["scaleDown"]["policies"]
        assert "stabilizationWindowSeconds" in behavior["scaleDown"]


def test_schema_catches_an_unquoted_target() -> None:
    bad = _render(OVERLAY / "examples")[0]
    bad["spec"]["triggers"][0]["metadata"]["targetValue"] = 2  # KEDA wants strings
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)
    bad["spec"]["triggers"][0]["metadata"]["targetValue"] = "2"
    bad["spec"]["minReplicas"] = 1  # the HPA's name, not KEDA's
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)
