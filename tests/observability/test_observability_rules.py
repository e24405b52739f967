"""Prometheus rules: valid for promtool, unit-tested firing and not firing, documented."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from observability import rules

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "manifests/prometheus/kvspread-rules.yaml"
OPERATOR_RULE = ROOT / "manifests/prometheus/prometheusrule.yaml"
UNIT_TESTS = ROOT / "tests/observability/promtool/kvspread-rules.test.yaml"
RUNBOOKS = ROOT / "docs/runbooks.md"

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus)"
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
def test_promtool_checks_the_plain_rules_file() -> None:
    res = _promtool("check", "rules", str(RULES))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@needs_promtool
def test_promtool_checks_the_prometheusrule_spec(tmp_path: Path) -> None:
    """The operator resource carries the same groups; promtool reads them from spec."""
    doc = yaml.safe_load(OPERATOR_RULE.read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert doc["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    extracted = tmp_path / "spec.yaml"
    extracted.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}))
    res = _promtool("check", "rules", str(extracted))
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    res = _promtool("test", "rules", str(UNIT_TESTS))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def _alert_cases() -> tuple[set[str], set[str]]:
    """Alerts with an expected-firing case, and alerts with an expected-silent case."""
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    firing: set[str] = set()
    silent: set[str] = set()
    for t in tests:
        for case in t.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else silent).add(case["alertname"])
    return firing, silent


@pytest.mark.parametrize("alert", rules.alert_names())
def test_every_alert_is_unit_tested_firing_and_silent(alert: str) -> None:
    firing, silent = _alert_cases()
    assert alert in firing, f"no promtool case expects {alert} to fire"
    assert alert in silent, f"no promtool case expects {alert} to stay silent"


def _anchors(markdown: str) -> set[str]:
    """GitHub heading anchors: lower case, spaces to dashes, punctuation dropped."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            text = m.group(1).strip().lower()
            out.add(re.sub(r"[^a-z0-9 _-]", "", text).replace(" ", "-"))
    return out


@pytest.mark.parametrize("alert", rules.alert_names())
def test_every_alert_has_annotations_and_a_runbook_section(alert: str) -> None:
    anchors = _anchors(RUNBOOKS.read_text())
    for group in rules.rule_groups():
        for rule in group["rules"]:
            if rule.get("alert") != alert:
                continue
            ann = rule["annotations"]
            assert ann["summary"] and ann["description"]
            url = ann["runbook_url"]
            assert url.startswith(rules.RUNBOOK_BASE + "#")
            assert url.split("#", 1)[1] in anchors, f"docs/runbooks.md lacks a {alert} section"
            assert rule["labels"]["severity"] in ("critical", "warning")


def test_burn_rate_windows_follow_the_sre_workbook() -> None:
    """1h/5m x14.4 and 6h/30m x6 page; 1d/2h x3 and 3d/6h x1 file a ticket."""
    page = [(w.long, w.short, w.factor, w.severity) for w in rules.PAGE_WINDOWS]
    ticket = [(w.long, w.short, w.factor, w.severity) for w in rules.TICKET_WINDOWS]
    assert page == [("1h", "5m", 14.4, "critical"), ("6h", "30m", 6, "critical")]
    assert ticket == [("1d", "2h", 3, "warning"), ("3d", "6h", 1, "warning")]
    recorded = set(rules.recorded_names())
    for w in (*rules.PAGE_WINDOWS, *rules.TICKET_WINDOWS):
        for window in (w.long, w.short):
            assert f"kvspread:http_errors:ratio_rate{window}" in recorded
            assert f"kvspread:gen_ai_streams_within_budget:ratio_rate{window}" in recorded


def test_latency_slos_match_the_qos_classes() -> None:
    by_class = {s.qos: s.threshold_s for s in rules.LATENCY_SLOS}
    assert by_class == {"realtime": 0.05, "batch": 0.12}
