"""A real Kubernetes control plane for tests/cluster/: etcd and kube-apiserver (and, on
request, kube-scheduler) from $KVSPREAD_K8S_BIN (tools/k8s/build.sh), on free loopback
ports, with certificates made in a temporary folder. Why: the unit tests' fake API server
cannot tell whether a real one authorises the calls the code makes (RBAC), evaluates the
admission policy, prints the CRD's columns or drives the scheduler extender as the code
expects. No kubelet, no controller-manager: objects are created directly, ServiceAccounts
explicitly, and pods bind without running."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90.0
"""How long etcd plus kube-apiserver may take to become ready (about 5-15 s on 2 cores)."""


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
"""


def binaries() -> Path | None:
    """The folder $KVSPREAD_K8S_BIN names when it holds kube-apiserver and kube-scheduler
    and etcd is installed; else None (the tests skip)."""
    d = os.environ.get("KVSPREAD_K8S_BIN")
    if not d or not shutil.which("etcd"):
        return None
    p = Path(d)
    ok = all(os.access(p / b, os.X_OK) for b in ("kube-apiserver", "kube-scheduler"))
    return p if ok else None


# --- certificates -------------------------------------------------------------------


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write(path: Path, key: rsa.RSAPrivateKey, cert: x509.Certificate | None) -> None:
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    if cert is not None:
        path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _cert(
    cn: str,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Certificate, rsa.RSAPrivateKey] | None,
    *,
    orgs: Iterable[str] = (),
    server: bool = False,
) -> x509.Certificate:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    name = x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
    )
    if issuer is None:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        usage = x509.oid.ExtendedKeyUsageOID
        b = b.add_extension(
            x509.ExtendedKeyUsage([usage.SERVER_AUTH if server else usage.CLIENT_AUTH]),
            critical=False,
        )
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    return b.sign(issuer[1] if issuer else key, hashes.SHA256())


def make_pki(d: Path) -> None:
    """Cluster CA, serving cert, admin client cert (system:masters), SA signing key, and a
    front-proxy CA with the aggregator's client cert (front-proxy-client)."""
    d.mkdir(parents=True, exist_ok=True)
    for ca_name, leaves in (
        (
            "ca",
            [
                ("apiserver", "kube-apiserver", (), True),
                ("admin", "admin", ("system:masters",), False),
            ],
        ),
        ("front-proxy-ca", [("front-proxy-client", "front-proxy-client", (), False)]),
    ):
        ca_key = _key()
        ca = _cert(ca_name, ca_key, None)
        _write(d / f"{ca_name}.crt", ca_key, ca)
        for fname, cn, orgs, server in leaves:
            k = _key()
            _write(d / f"{fname}.crt", k, _cert(cn, k, (ca, ca_key), orgs=orgs, server=server))
    sa = _key()
    _write(d / "sa.key", sa, None)
    (d / "sa.pub").write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _end(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (etcd and the kube binaries shut down cleanly on it), SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- the control plane ----------------------------------------------------------------


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver; `request` talks to it as the admin, a token's
    holder or an impersonated user."""

    bin: Path
    tmp: Path
    port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _client: httpx.Client | None = None
    _kinds: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pki(self) -> Path:
        return self.tmp / "pki"

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(p)
        return p

    def start(self) -> ControlPlane:
        make_pki(self.pki)
        etcd_port, peer_port = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                "etcd",
                "--data-dir",
                str(self.tmp / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
                "--quota-backend-bytes",
                str(512 << 20),
            ],
        )
        self.port = free_port()
        p = self.pki
        (self.tmp / "audit-policy.yaml").write_text(AUDIT_POLICY)
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.tmp / 'certs'}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--client-ca-file={p / 'ca.crt'}",
                f"--service-account-key-file={p / 'sa.pub'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=RBAC",
                # 1.26 has ValidatingAdmissionPolicy as v1alpha1 only, off by default
                "--feature-gates=ValidatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1alpha1=true",
                # the aggregator: its client cert and the CA the adapter trusts for it
                f"--requestheader-client-ca-file={p / 'front-proxy-ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
                # one line per finished request: what a test counts as "requests made"
                f"--audit-policy-file={self.tmp / 'audit-policy.yaml'}",
                f"--audit-log-path={self.tmp / 'audit.log'}",
                "--audit-log-maxsize=200",
                "--profiling=false",
                "--v=1",
            ],
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"pid {proc.pid} exited: see {self.tmp}/*.log")
            try:
                r = self.request("GET", "/readyz")
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kube-apiserver not ready in {START_TIMEOUT_S} s: {self.tmp}")
            time.sleep(0.5)
        return self

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
        for proc in reversed(self.procs):
            _end(proc)
        self.procs.clear()

    def audit(self, username: str) -> list[dict[str, Any]]:
        """The API server's audit events of `username`'s finished requests, oldest first."""
        out = []
        with open(self.tmp / "audit.log", encoding="utf-8") as f:
            for line in f:
                ev = json.loads(line)
                if ev.get("user", {}).get("username") == username:
                    out.append(ev)
        return out

    # --- HTTP -------------------------------------------------------------------------

    def ssl_context(self, client: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        if client:
            ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(base_url=self.url, verify=self.ssl_context(), timeout=30)
        return self._client

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        as_user: str | None = None,
        extra: dict[str, list[str]] | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One request: as the admin (client cert), as a bearer `token` (no client cert),
        or as the admin impersonating `as_user` with `extra` user-info values."""
        h: list[tuple[str, str]] = list((headers or {}).items())
        if body is not None:
            h.append(("Content-Type", content_type))
        if as_user:
            h.append(("Impersonate-User", as_user))
            for k, vs in (extra or {}).items():
                for v in vs:
                    h.append((f"Impersonate-Extra-{urllib.parse.quote(k, safe='')}", v))
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        if token is not None:
            h.append(("Authorization", f"Bearer {token}"))
            with httpx.Client(
                base_url=self.url, verify=self.ssl_context(client=False), timeout=30
            ) as c:
                return c.request(method, path, content=data, headers=h, params=params)
        return self.client().request(method, path, content=data, headers=h, params=params)

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        r = self.request(method, path, body, **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text[:500]}"
        return r.json()

    # --- objects ----------------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from discovery (cached per group version)."""
        if (api_version, kind) not in self._kinds:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for res in self.ok("GET", base)["resources"]:
                if "/" not in res["name"]:
                    self._kinds[(api_version, res["kind"])] = (res["name"], res["namespaced"])
        return self._kinds[(api_version, kind)]

    def path(self, obj: dict[str, Any], named: bool = False) -> str:
        av, kind = obj["apiVersion"], obj["kind"]
        plural, namespaced = self.resource(av, kind)
        base = "/api/v1" if av == "v1" else f"/apis/{av}"
        if namespaced:
            base += f"/namespaces/{obj['metadata'].get('namespace', 'default')}"
        out = f"{base}/{plural}"
        return f"{out}/{obj['metadata']['name']}" if named else out

    def create(self, obj: dict[str, Any], **kw: Any) -> httpx.Response:
        """POST one object (an existing one is left as it is: 409 is returned, not raised)."""
        r = self.request("POST", self.path(obj), obj, **kw)
        assert r.status_code in (200, 201, 409), f"{obj['kind']} {r.status_code} {r.text[:500]}"
        return r

    def apply_files(self, *paths: str) -> list[httpx.Response]:
        """Create every object of these manifest files (relative to the repository), in order."""
        out = []
        for rel in paths:
            for doc in yaml.safe_load_all((ROOT / rel).read_text()):
                if doc:
                    out.append(self.create(doc))
        return out

    def wait_established(self, crd: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            obj = self.ok("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
            conds = {
                c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []
            }
            if conds.get("Established") == "True":
                # discovery lags the condition a little
                try:
                    group, ver = obj["spec"]["group"], obj["spec"]["versions"][0]["name"]
                    self.resource(f"{group}/{ver}", obj["spec"]["names"]["kind"])
                    return
                except (KeyError, AssertionError):
                    pass
            time.sleep(0.2)
        raise AssertionError(f"CRD {crd} not established in {timeout_s} s")

    def service_account(self, namespace: str, name: str) -> None:
        """The ServiceAccount (no controller-manager creates any here) and its namespace."""
        self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        self.create(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": namespace},
            }
        )

    def token(
        self, namespace: str, name: str, bound_pod: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A TokenRequest for the ServiceAccount (bound to `bound_pod` when given, as the
        kubelet asks for a pod's projected token); the whole TokenRequest answer."""
        spec: dict[str, Any] = {"expirationSeconds": 3600}
        if bound_pod is not None:
            md = bound_pod["metadata"]
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": md["name"],
                "uid": md["uid"],
            }
        answer: dict[str, Any] = self.ok(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return answer

    def kubeconfig(self, token: str, name: str) -> Path:
        """A kubeconfig file with this bearer token, for the parts' own kubernetes client."""
        path = self.tmp / f"kubeconfig-{name}"
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "c",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority": str(self.pki / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": name}}],
            "current-context": "c",
        }
        path.write_text(yaml.safe_dump(cfg))
        return path

    def kubeconfig_admin(self) -> Path:
        """A kubeconfig with the admin client certificate."""
        path = self.kubeconfig("", "admin")
        cfg = yaml.safe_load(path.read_text())
        cfg["users"][0]["user"] = {
            "client-certificate": str(self.pki / "admin.crt"),
            "client-key": str(self.pki / "admin.key"),
        }
        path.write_text(yaml.safe_dump(cfg))
        return path

    def sa_kubeconfig(self, namespace: str, name: str) -> Path:
        self.service_account(namespace, name)
        return self.kubeconfig(self.token(namespace, name)["status"]["token"], name)

    # --- kube-controller-manager -----------------------------------------------------

    @contextmanager
    def controller_manager(
        self, controllers: str, kubeconfig: Path, *flags: str
    ) -> Iterator[subprocess.Popen[bytes]]:
        """kube-controller-manager running only `controllers` (its --controllers list), no
        serving port, no leader election; stopped on exit. Skips the test when the binary
        was not built (tools/k8s/build.sh --all)."""
        binary = self.bin / "kube-controller-manager"
        if not os.access(binary, os.X_OK):
            pytest.skip("no kube-controller-manager: tools/k8s/build.sh SRC OUT --all")
        argv = [str(binary), f"--kubeconfig={kubeconfig}", f"--controllers={controllers}",
                "--leader-elect=false", "--secure-port=0", "--v=2", *flags]  # fmt: skip
        with self._running("kube-controller-manager", argv) as proc:
            yield proc

    @contextmanager
    def _running(self, name: str, argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
        """One more component process for the length of a `with`."""
        proc = self._spawn(name, argv)
        try:
            yield proc
        finally:
            _end(proc)
            self.procs.remove(proc)

    # --- kube-scheduler ---------------------------------------------------------------

    @contextmanager
    def scheduler(
        self, config: dict[str, Any], kubeconfig: Path
    ) -> Iterator[subprocess.Popen[bytes]]:
        """kube-scheduler with this KubeSchedulerConfiguration (its clientConnection set to
        `kubeconfig`), its secure port on a free port; stopped on exit."""
        config = json.loads(json.dumps(config))
        config.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig)
        path = self.tmp / f"scheduler-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = [
            str(self.bin / "kube-scheduler"),
            f"--config={path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--v=2",
        ]
        with self._running("kube-scheduler", argv) as proc:
            yield proc
