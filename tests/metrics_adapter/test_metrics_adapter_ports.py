"""A port another process holds fails the start with one clear line (no SO_REUSEPORT
silent start, where the kernel would split OTLP pushes between two adapters)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import pytest

from kvspread.settings import ConfigError
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_testing import Pki, base_config


def test_second_adapter_on_the_same_otlp_port_fails(adapter: AdapterThread, pki: Pki) -> None:
    taken = adapter.adapter.otlp_port
    with pytest.raises(
        ConfigError, match=rf"--otlp-port {taken}: 127\.0\.0\.1:{taken} is already in use"
    ):
        AdapterThread(base_config(pki, otlp_port=taken)).start()
    with pytest.raises(
        ConfigError, match=r"--secure-port .*choose another port with --secure-port"
    ):
        AdapterThread(base_config(pki, secure_port=adapter.adapter.api_port)).start()


def test_ca_rotation_keeps_the_one_listener(adapter: AdapterThread) -> None:
    """The context swap re-serves a duplicate of the same socket: the port stays exclusive."""
    port = adapter.adapter.api_port
    ctx = adapter.adapter.api_http.ssl_context
    assert ctx is not None
    asyncio.run_coroutine_threadsafe(
        adapter.adapter.api_http.set_ssl_context(ctx), adapter._loop
    ).result(10)
    with socket.socket() as s, pytest.raises(OSError):
        s.bind(("127.0.0.1", port))
    assert adapter.adapter.api_port == port


def test_cli_says_the_port_is_taken_in_one_line(pki: Pki) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        cmd = [
            sys.executable, "-m", "kvspread", "adapter", "serve",
            "--secure-port", "0", "--bind-address", "127.0.0.1",
            "--otlp-port", str(port), "--otlp-bind-address", "127.0.0.1",
            "--tls-cert-file", pki.serving_cert, "--tls-private-key-file", pki.serving_key,
            "--requestheader-client-ca-file", pki.front_proxy_ca_file,
            "--authorization-mode", "AlwaysAllow",
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=os.environ)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    # the CLI's start-up check (kvspread.preflight) names the flag before the server binds
    assert lines[-1].startswith(f"kvspread: configuration error: --otlp-port {port}:")
    assert "already in use" in lines[-1]
    assert "Traceback" not in out.stderr


def _cli_error(pki: Pki, *extra: str) -> str:
    """The last stderr line of `kvspread adapter serve` (free ports, the test PKI) with
    `extra` flags, which must fail at start."""
    cmd = [
        sys.executable, "-m", "kvspread", "adapter", "serve",
        "--secure-port", "0", "--bind-address", "127.0.0.1",
        "--otlp-port", "0", "--otlp-bind-address", "127.0.0.1",
        "--requestheader-client-ca-file", pki.front_proxy_ca_file,
        "--authorization-mode", "AlwaysAllow", *extra,
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=os.environ)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "adapter serving" not in out.stderr, out.stderr
    return out.stderr.strip().splitlines()[-1]


def _keda_cli_error(pki: Pki, *extra: str) -> str:
    """`_cli_error` with the KEDA scaler on (a free port on 127.0.0.1) and `extra` flags."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return _cli_error(pki, "--keda-port", str(port), "--keda-bind-address", "127.0.0.1", *extra)


def test_a_junk_keda_key_pair_is_named_not_a_port_in_use(pki: Pki, tmp_path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    last = _keda_cli_error(
        pki, "--keda-tls-cert-file", str(junk), "--keda-tls-private-key-file", str(junk)
    )
    assert last.startswith(
        f"kvspread: configuration error: --keda-tls-cert-file {junk} / "
        f"--keda-tls-private-key-file {junk}: not a PEM certificate"
    ), last


def test_a_keda_client_ca_without_a_certificate_is_named(pki: Pki, tmp_path) -> None:
    empty = tmp_path / "empty-ca.pem"
    empty.write_text("")
    last = _keda_cli_error(
        pki, "--keda-tls-cert-file", pki.serving_cert, "--keda-tls-private-key-file",
        pki.serving_key, "--keda-client-ca-file", str(empty),
    )  # fmt: skip
    assert last == (
        f"kvspread: configuration error: --keda-client-ca-file {empty}: it holds no PEM "
        "certificate (-----BEGIN CERTIFICATE-----)"
    ), last
