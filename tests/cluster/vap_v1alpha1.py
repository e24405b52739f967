"""The shipped ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.30+)
rewritten for kube-apiserver 1.26, whose only policy API is v1alpha1 without
matchConditions (1.27), messageExpression (1.27), variables (1.28) and the binding's
validationActions (1.27; 1.26 always denies). Why: to run the shipped CEL on the one real
API server the tests can build. Each rewrite keeps the decision: a match condition becomes a
guard `!(condition) || (validation)`, a variable is inlined in parentheses, a message
expression becomes a fixed message that quotes it."""

from __future__ import annotations

import copy
import re
from typing import Any

V1ALPHA1 = "admissionregistration.k8s.io/v1alpha1"


def _inline(expression: str, variables: dict[str, str]) -> str:
    return re.sub(
        r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)\b",
        lambda m: f"({variables[m.group(1)]})",
        expression,
    )


def convert_policy(policy: dict[str, Any]) -> dict[str, Any]:
    """A v1alpha1 ValidatingAdmissionPolicy deciding as the v1 `policy` does."""
    spec = policy["spec"]
    variables: dict[str, str] = {}
    for v in spec.get("variables", []):  # in order: a later one may use an earlier one
        variables[v["name"]] = _inline(v["expression"].strip(), variables)
    guards = [_inline(c["expression"].strip(), variables) for c in spec.get("matchConditions", [])]
    validations = []
    for v in spec["validations"]:
        expr = _inline(v["expression"].strip(), variables)
        if guards:
            expr = f"!({' && '.join(f'({g})' for g in guards)}) || ({expr})"
        message = v.get("message") or f"denied ({v['messageExpression'].strip()})"
        out = {"expression": expr, "message": message.strip()}
        if "reason" in v:
            out["reason"] = v["reason"]
        validations.append(out)
    return {
        "apiVersion": V1ALPHA1,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": copy.deepcopy(policy["metadata"]),
        "spec": {
            "failurePolicy": spec.get("failurePolicy", "Fail"),
            "matchConstraints": copy.deepcopy(spec["matchConstraints"]),
            "validations": validations,
        },
    }


def convert_binding(binding: dict[str, Any]) -> dict[str, Any]:
    """A v1alpha1 binding (it denies; v1's validationActions must be exactly Deny)."""
    spec = binding["spec"]
    if spec.get("validationActions", ["Deny"]) != ["Deny"]:
        raise ValueError("1.26 bindings can only deny")
    out = {k: copy.deepcopy(v) for k, v in spec.items() if k != "validationActions"}
    return {
        "apiVersion": V1ALPHA1,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": copy.deepcopy(binding["metadata"]),
        "spec": out,
    }
