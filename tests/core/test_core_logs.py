"""kvspread.logs.configure: JSON lines at the configured level, HTTP client chatter only at
debug (a real httpx request to a local server, its log captured from stderr)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import pytest

from kvspread import logs
from kvspread.opsserver import OpsServer, text_reply


@pytest.fixture
def server() -> Iterator[str]:
    srv = OpsServer("127.0.0.1", 0, lambda path, query: text_reply(200, "ok\n"), "test-logs")
    srv.start()
    try:
        yield f"http://127.0.0.1:{srv.port}/metrics"
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {n: logging.getLogger(n).level for n in logs.CHATTY_LIBRARIES}
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    for n, lvl in levels.items():
        logging.getLogger(n).setLevel(lvl)


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]


@pytest.mark.parametrize("level", ["info", "warning"])
def test_http_client_requests_are_not_logged_above_debug(
    level: str, server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure(level)
    capsys.readouterr()
    httpx.get(server)
    logging.getLogger("kvspread.collector").warning("source missing")
    lines = _lines(capsys)
    assert [d["logger"] for d in lines] == ["kvspread.collector"]
    assert {logging.getLogger(n).getEffectiveLevel() for n in logs.CHATTY_LIBRARIES} == {
        logging.WARNING
    }


def test_http_client_requests_are_logged_at_debug(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("info")
    logs.configure("debug")  # a second configure lifts the hold again
    capsys.readouterr()
    httpx.get(server)
    lines = _lines(capsys)
    requests = [d for d in lines if d["logger"] == "httpx"]
    assert len(requests) == 1 and str(requests[0]["msg"]).startswith("HTTP Request: GET ")
    assert any(str(d["logger"]).startswith("httpcore") for d in lines)


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of debug, info, warning, error"):
        logs.configure("verbose")


def test_warnings_of_the_http_libraries_still_show(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("info")
    capsys.readouterr()
    logging.getLogger("urllib3").warning("retrying")
    assert [(d["logger"], d["msg"]) for d in _lines(capsys)] == [("urllib3", "retrying")]


def test_text_format_is_one_readable_line(capsys: pytest.CaptureFixture[str]) -> None:
    logs.set_format("text")
    try:
        logs.configure("info")
        capsys.readouterr()
        logging.getLogger("kvspread.router").info(
            "router serving", extra={"kv": {"grpc_port": 9002, "why": "a b", "tls": False}}
        )
    finally:
        logs.set_format("json")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(
        ' info    kvspread.router: router serving grpc_port=9002 why="a b" tls=false'
    )
    assert not line.startswith("{")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of json, text"):
        logs.set_format("yaml")


def test_the_cli_takes_log_format_from_flag_and_environment() -> None:
    """`--log-format` on each serving verb, KVSPREAD_LOG_FORMAT as its variable; a bad
    variable is one line and exit 2, before anything starts."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "KVSPREAD_LOG_FORMAT": "yaml"}
    proc = subprocess.run(
        [sys.executable, "-m", "kvspread", "extender", "serve", "--standalone", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "kvspread: configuration error: KVSPREAD_LOG_FORMAT 'yaml': expected json or text"
    )
    from kvspread.cli import build_parser

    for part, verb in (("extender", "serve"), ("adapter", "serve"), ("collector", "run")):
        args = build_parser({}, [part]).parse_args([part, verb, "--log-format", "text"])
        assert args.log_format == "text"
