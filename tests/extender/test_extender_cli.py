"""`kvspread extender serve`: help, config precedence, errors, and a real run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from extender.cli import config_from_args
from kvspread.cli import build_parser, main
from tests.ports import free_port, wait_http_ok

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-wire"


def parse(argv: list[str], environ: dict[str, str]):  # noqa: ANN201
    return config_from_args(build_parser(environ).parse_args(argv), environ)


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["extender", "serve", "--help"], environ={})
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--host",
        "--port",
        "--config",
        "--tls-cert",
        "--tls-key",
        "--log-level",
        "--standalone",
        "--kubeconfig",
        "--kube-api-server",
        "--filter-verb",
        "--prioritize-verb",
        "--ledger-ttl",
        "--explain",
    ):
        assert flag in out
    assert "examples:" in out and "KVSPREAD_EXTENDER_SERVER_PORT" in out


def test_precedence_flag_over_env_over_yaml_over_default(tmp_path: Path) -> None:
    cfg_file = tmp_path / "extender.yaml"
    cfg_file.write_text(
        "server:\n  port: 7000\n  host: 0.0.0.0\n  log_level: warning\n"
        "scoring:\n  rho_threshold: 0.5\n"
    )
    env = {"KVSPREAD_EXTENDER_SERVER_PORT": "7100", "KVSPREAD_EXTENDER_SERVER_LOG_LEVEL": "debug"}
    cfg = parse(["extender", "serve", "--config", str(cfg_file), "--port", "7200"], env)
    assert cfg.server.port == 7200  # flag
    assert cfg.server.log_level == "debug"  # env over YAML
    assert cfg.server.host == "0.0.0.0"  # YAML over default
    assert cfg.scoring.rho_threshold == 0.5
    assert cfg.server.filter_verb == "filter"  # default
    cfg = parse(["extender", "serve", "--config", str(cfg_file)], env)
    assert cfg.server.port == 7100
    assert parse(["extender", "serve", "--standalone"], {}).server.standalone is True
    on = parse(["extender", "serve"], {"KVSPREAD_EXTENDER_SERVER_STANDALONE": "on"})
    assert on.server.standalone is True
    assert parse(["extender", "serve", "--explain", "false"], {}).explain.enabled is False
    off = parse(["extender", "serve"], {"KVSPREAD_EXTENDER_EXPLAIN_ENABLED": "no"})
    assert off.explain.enabled is False


def test_bad_configuration_exits_2_with_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("scoring:\n  weights:\n    fragmentaton: 1\n")
    assert main(["extender", "serve", "--config", str(bad)], environ={}) == 2
    assert "scoring.weights.fragmentaton: unknown key" in capsys.readouterr().err
    assert main(["extender", "serve", "--port", "x"], environ={}) == 2
    assert "--port: server.port: expected an integer, got 'x'" in capsys.readouterr().err
    assert main(["extender", "serve", "--explain", "maybe"], environ={}) == 2
    assert "--explain: explain.enabled: expected true or false, got 'maybe'" in (
        capsys.readouterr().err
    )


def test_serve_standalone_as_a_process() -> None:
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvspread",
            "extender",
            "serve",
            "--standalone",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(url + "/readyz", 30, proc)
        body = (WIRE / "prioritize-request.nodeCacheCapable-false.json").read_bytes()
        r = httpx.post(url + "/prioritize", content=body)
        assert r.status_code == 200 and [h["Host"] for h in r.json()] == [
            "lab-node-a",
            "lab-node-b",
        ]
    finally:
        proc.terminate()
        proc.wait(10)
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert '"msg":"extender serving"' in err


def test_serve_on_ipv6_any_takes_both_families_and_stops_its_watches_on_sigterm() -> None:
    """asyncio binds `::` IPv6-only, so `--host ::` refused IPv4 clients; and uvicorn
    re-raises SIGTERM after its shutdown, so the shutdown work after run() never ran."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvspread", "extender", "serve", "--standalone"]
        + ["--host", "::", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", 30, proc)
        assert httpx.get(f"http://[::1]:{port}/readyz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(10)
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert '"msg":"extender stopped"' in err and "Traceback" not in err, err
