"""Start-up checks shared by the subcommands, run before a server binds or a run starts.

Each check turns a failure that would otherwise surface as a traceback minutes later (a
taken port, a non-PEM certificate, an unwritable report folder, no cluster credentials)
into a `ConfigError` whose one line names the flag, says what is wrong and what to do.
`kvspread.cli.main` prints it and exits 2.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

from kvspread.settings import ConfigError

__all__ = [
    "check_port",
    "check_distinct_ports",
    "bind_message",
    "check_tls_pair",
    "check_output_dir",
    "check_kube_access",
]

WILDCARDS = frozenset({"0.0.0.0", "::", ""})
"""Addresses that listen on every address of the machine, so overlap any other."""


def check_port(host: str, port: int, flag: str, host_flag: str = "--host") -> None:
    """Bind host:port once (with SO_REUSEADDR, as the servers do) and release it; an error
    names `flag` (the port's) or, when the address is what is wrong, `host_flag`.

    Port 0 (an ephemeral port, as tests use) is never taken, so it checks the address
    alone. The server may still lose a race for the port; this catches the common case
    early."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        raise ConfigError(bind_message(host, port, flag, host_flag, exc)) from None
    except (TypeError, UnicodeError, ValueError):  # a name the resolver cannot even encode
        raise ConfigError(
            f"{host_flag} {host!r}: not an address or host name (an IP address such as "
            "0.0.0.0 or ::, or a name of ASCII letters, digits, dots and dashes)"
        ) from None


def check_distinct_ports(listeners: list[tuple[str, str, int]]) -> None:
    """(flag, host, port) of one process's listeners: two on one port and overlapping
    addresses would make the second fail to bind, and the port check alone (the port is
    still free before the first binds) would blame "another process". Port 0 is never
    shared."""
    for i, (flag, host, port) in enumerate(listeners):
        for other, other_host, other_port in listeners[:i]:
            overlap = host == other_host or host in WILDCARDS or other_host in WILDCARDS
            if port and port == other_port and overlap:
                raise ConfigError(
                    f"{flag} {port}: the same port as {other}; each listener of this process "
                    f"needs its own port, change one of {other} and {flag}"
                )


def bind_message(host: str, port: int, flag: str, host_flag: str, exc: OSError) -> str:
    """The one wording of a failed bind, for the start-up check and for a server that
    lost the race for its port after it."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{flag} {port}: {where} is already in use by another process; stop it "
            f"(ss -ltnp 'sport = :{port}') or choose another port with {flag}"
        )
    if exc.errno == errno.EACCES:
        return (
            f"{flag} {port}: permission denied binding {where}; use a port >= 1024 or run as root"
        )
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return (
            f"{host_flag} {host}: not an address of this machine; use 0.0.0.0 (every address) "
            "or 127.0.0.1"
        )
    return f"{flag} {port}: cannot bind {where}: {exc.strerror or exc}"


def check_tls_pair(cert: str | None, key: str | None, cert_flag: str, key_flag: str) -> None:
    """Load the serving certificate and key the way the server will, before it starts."""
    if not cert and not key:
        return
    if not cert or not key:
        given, missing = (cert_flag, key_flag) if cert else (key_flag, cert_flag)
        raise ConfigError(f"{given} needs {missing} as well (a PEM certificate and its key)")
    for path, flag in ((cert, cert_flag), (key, key_flag)):
        if os.path.isdir(path):
            raise ConfigError(f"{flag} {path}: a folder, not a file; give the PEM file in it")
        if not os.path.isfile(path):
            raise ConfigError(f"{flag} {path}: no such file")
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{flag} {path}: not readable by this user")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

    def no_passphrase() -> str:  # else OpenSSL asks on the terminal, and waits there
        raise ConfigError(
            f"{key_flag} {key}: the private key is encrypted; the servers take an unencrypted "
            "PEM key (openssl pkey -in KEY -out PLAIN.key, then keep PLAIN.key in a Secret)"
        )

    try:
        ctx.load_cert_chain(cert, key, password=no_passphrase)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"{cert_flag} {cert} / {key_flag} {key}: not a PEM certificate and matching private "
            f"key ({exc.reason or exc}); check both files begin with '-----BEGIN' and belong "
            "together (openssl x509 -noout -modulus -in CERT vs openssl rsa -noout -modulus -in KEY)"
        ) from None


def check_output_dir(path: Path, flag: str) -> None:
    """Create the report folder and prove a file can be written there, before the run."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".kvspread-write-test-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EEXIST:
            reason = "it is a file, not a folder"
        elif exc.errno == errno.ENOTDIR:
            reason = "a parent of it is a file, not a folder"
        raise ConfigError(
            f"{flag} {path}: cannot write the report there ({reason}); choose a folder you can "
            "write, e.g. --out ./kvspread-report"
        ) from None


def check_kube_access(
    kubeconfig: str | None,
    api_server: str | None,
    standalone_flag: str,
    connect: Callable[[str | None, str | None], object] | None = None,
) -> None:
    """Fail early, with what to do, when no Kubernetes credentials can be found; `connect`
    is the part's own client maker (default kvspread/kube.py's `api_client`)."""
    if api_server:
        return
    if kubeconfig and not os.path.isfile(kubeconfig):
        raise ConfigError(
            f"--kubeconfig {kubeconfig}: no such file; give an existing kubeconfig, or "
            f"{standalone_flag} to run without a cluster"
        )
    if connect is None:
        from kvspread.kube import api_client

        connect = api_client
    try:
        connect(kubeconfig, None)
    except Exception as exc:  # noqa: BLE001 - ConfigException, YAML and key errors alike
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "no in-cluster service account"
        if not kubeconfig:
            where += " and no kubeconfig ($KUBECONFIG, ~/.kube/config)"
        raise ConfigError(
            f"cannot reach a Kubernetes cluster: {where} ({str(exc)[:160]}); give "
            f"--kubeconfig FILE, or {standalone_flag} to run without a cluster"
        ) from None
