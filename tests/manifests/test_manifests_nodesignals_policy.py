"""The NodeSignals ValidatingAdmissionPolicy (issue 26, point 3): its CEL, evaluated with a
CEL implementation (cel-python) as the API server does (matchConditions, then variables,
then each validation; the first false validation denies), against AdmissionReview requests
in the k8s wire format (tests/fixtures/k8s-wire/nodesignals-admission-reviews.jsonl): a
collector may create and update only its own node's NodeSignals, naming only that node.
No 1.30+ API server can run here, so the policy object itself is not exercised by one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "manifests/crds/nodesignals-policy.yaml"
REVIEWS = ROOT / "tests/fixtures/k8s-wire/nodesignals-admission-reviews.jsonl"


def policy() -> dict[str, Any]:
    docs = list(yaml.safe_load_all(POLICY.read_text()))
    (vap,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    return vap


class EvaluationError(Exception):
    """A CEL expression errored (an absent field, a type mismatch): with failurePolicy
    Fail the API server refuses the request with this error instead of the policy's
    message."""


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    try:
        out = program.evaluate(celpy.json_to_cel(activation))
    except (celpy.CELEvalError, TypeError) as exc:
        raise EvaluationError(f"{expression!r}: {exc}") from None
    if isinstance(out, celpy.CELEvalError):
        raise EvaluationError(f"{expression!r}: {out}")
    return out


def decide(vap: dict[str, Any], request: dict[str, Any]) -> tuple[bool, str]:
    """(allowed, message) of the policy for one admission request."""
    spec = vap["spec"]
    rule = spec["matchConstraints"]["resourceRules"][0]
    if request["operation"] not in rule["operations"] or (
        request["resource"]["resource"] not in rule["resources"]
        or request["resource"]["group"] not in rule["apiGroups"]
    ):
        return True, "not matched"
    act = {
        "request": request,
        "object": request["object"],
        "oldObject": request.get("oldObject"),
    }
    if not all(bool(evaluate(c["expression"], act)) for c in spec.get("matchConditions", [])):
        return True, "not matched"
    act["variables"] = {
        v["name"]: str(evaluate(v["expression"], act)) for v in spec.get("variables", [])
    }
    for v in spec["validations"]:
        if not bool(evaluate(v["expression"], act)):
            msg = v.get("message") or str(evaluate(v["messageExpression"], act))
            return False, msg
    return True, "allowed"


CASES = [json.loads(line) for line in REVIEWS.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_a_collector_writes_only_its_own_nodes_nodesignals(case: dict[str, Any]) -> None:
    review = case["review"]
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    allowed, message = decide(policy(), review["request"])
    assert allowed is (case["expect"] == "allow"), message


def test_the_denials_say_why() -> None:
    by_case = {c["case"]: c["review"]["request"] for c in CASES}
    _, msg = decide(policy(), by_case["another node's object"])
    assert msg == "a collector on node gpu-1 may write only the NodeSignals named gpu-1, not gpu-2"
    for case in (
        "a pod-bound token without node (Kubernetes 1.26 to 1.29)",
        "a token with no extra at all (a legacy Secret token)",  # no error: has() guards it
    ):
        _, msg = decide(policy(), by_case[case])
        assert "authentication.kubernetes.io/node-name" in msg


def test_the_policy_matches_what_the_collector_writes_and_ships_with_the_crd() -> None:
    vap = policy()
    rule = vap["spec"]["matchConstraints"]["resourceRules"][0]
    assert rule["apiGroups"] == ["kvspread.io"] and rule["resources"] == ["nodesignals"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}  # a PATCH is an UPDATE here
    assert vap["spec"]["failurePolicy"] == "Fail"
    kustomization = yaml.safe_load((ROOT / "manifests/crds/kustomization.yaml").read_text())
    assert "nodesignals-policy.yaml" in kustomization["resources"]
    # the username the policy matches is the collector's ServiceAccount
    sa = yaml.safe_load((ROOT / "manifests/collector/base/serviceaccount.yaml").read_text())
    expected = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    assert expected in vap["spec"]["matchConditions"][0]["expression"]
