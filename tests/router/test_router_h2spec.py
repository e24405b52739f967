"""h2spec (github.com/summerwind/h2spec, the HTTP/2 conformance suite: RFC 9113's and RFC 7541's
rules as 147 cases in strict mode) against router/h2grpc.py, over h2c and over TLS: every case
passes but the one listed in NOT_APPLICABLE, for the reason given there (docs/router.md has the
table). The binary is built by tools/h2spec/build.sh into build/h2spec/, or named by
$KVSPREAD_H2SPEC; without it (no Go sources, as in CI) these tests skip."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from router.h2grpc import HEALTH_CHECK, H2GrpcServer, HealthStatus, server_tls
from tests.router.conftest import h2_serving, issue_tls, tool_binary

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "build" / "h2spec" / "h2spec"
# case (h2spec's package/classname) -> why it does not apply to this server
NOT_APPLICABLE = {
    "http2/4.2/Sends a large size HEADERS frame that exceeds the SETTINGS_MAX_FRAME_SIZE": (
        "the case sends a 20 kB HEADERS frame, over the RFC's initial 16384, but this server"
        " advertises SETTINGS_MAX_FRAME_SIZE 1 MiB, so the frame is legal here"
    ),
}


def _h2spec() -> Path:
    return tool_binary(
        "KVSPREAD_H2SPEC", BUILT, "run tools/h2spec/build.sh SRC (see tools/h2spec/README.md)"
    )


def run_h2spec(srv: H2GrpcServer, tmp_path: Path, *args: str) -> dict[str, str]:
    """Every case h2spec ran: 'package/classname' -> '' (passed), 'skipped' or its failure."""
    report = tmp_path / "h2spec.xml"
    subprocess.run(
        [str(_h2spec()), "-S", "-p", str(srv.port), "-P", HEALTH_CHECK, "-o", "5",
         "-j", str(report), *args],
        capture_output=True,
        timeout=300,
        check=False,  # it exits 1 when a case fails; the report says which
    )  # fmt: skip
    cases: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('package')}/{case.get('classname')}"
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")  # h2spec writes failed cases as <error>
        if failure is not None:
            cases[name] = (failure.text or failure.get("message") or "failed").strip()
        elif case.find("skipped") is not None:
            cases[name] = "skipped"
        else:
            cases[name] = ""
    return cases


def _check(cases: dict[str, str]) -> None:
    assert len(cases) >= 147
    failed = {name: why for name, why in cases.items() if why}
    assert failed.keys() == NOT_APPLICABLE.keys(), failed


def test_h2spec_over_h2c(tmp_path: Path) -> None:
    health = HealthStatus()
    health.set("", 1)
    with h2_serving({}, health) as (srv, _):
        _check(run_h2spec(srv, tmp_path))
        assert srv.internal_errors == 0


def test_h2spec_over_tls(tmp_path: Path) -> None:
    _h2spec()
    issue_tls(tmp_path)
    health = HealthStatus()
    health.set("", 1)
    tls = server_tls(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    with h2_serving({}, health, tls) as (srv, _):
        _check(run_h2spec(srv, tmp_path, "-t", "-k"))
        assert srv.internal_errors == 0
