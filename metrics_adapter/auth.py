"""Authentication and authorisation as a Kubernetes aggregated API server does them.

Authentication (request-header, "front proxy"): the kube-apiserver aggregator connects with
a client certificate signed by the request-header CA (`--requestheader-client-ca-file`, or
key `requestheader-client-ca-file` of ConfigMap kube-system/extension-apiserver-authentication)
and tells us the end user in `X-Remote-User` and repeated `X-Remote-Group` headers. Those
headers count only on a connection whose certificate chains to that CA (checked by the TLS
layer: `ssl.CERT_OPTIONAL` with the CA as the only trust anchor) and whose subject CN is in
the allowed names (empty list: any CN the CA signed). Anything else is 401, whatever
headers were sent -- header spoofing is the attack this stops. A certificate from another
CA fails the TLS handshake itself (alert "unknown CA"), so such a request never reaches HTTP.

Authorisation: `SubjectAccessReviewAuthorizer` asks the Kubernetes API
(authorization.k8s.io/v1 SubjectAccessReview, as kube's delegated authoriser does) and
caches decisions for a TTL; `AllowListAuthorizer` allows a fixed set of users and groups
for clusters that want no API calls; `AlwaysAllowAuthorizer` is for tests and demos.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from metrics_adapter.errors import Forbidden, Unauthorized
from metrics_adapter.httpserver import Request

__all__ = [
    "UserInfo",
    "Attributes",
    "RequestHeaderAuthenticator",
    "RequestHeaderConfig",
    "ClientCA",
    "Authorizer",
    "AllowListAuthorizer",
    "AlwaysAllowAuthorizer",
    "SubjectAccessReviewAuthorizer",
    "serving_context",
    "forbidden",
    "load_extension_apiserver_authentication",
    "holds_certificate",
    "NO_CERTIFICATE",
    "DEFAULT_USERNAME_HEADERS",
    "DEFAULT_GROUP_HEADERS",
]

log = logging.getLogger("kvspread.adapter.auth")

DEFAULT_USERNAME_HEADERS = ("X-Remote-User",)
DEFAULT_GROUP_HEADERS = ("X-Remote-Group",)
AUTHENTICATED_GROUP = "system:authenticated"
CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Attributes:
    """What is being asked: a resource (metric read) or a non-resource path (discovery)."""

    verb: str = "get"
    path: str = ""
    namespace: str | None = None
    group: str | None = None
    version: str | None = None
    resource: str | None = None
    name: str | None = None
    subresource: str | None = None

    @property
    def is_resource(self) -> bool:
        return self.resource is not None


@dataclass(frozen=True)
class RequestHeaderConfig:
    """The request-header settings (flags, or the ConfigMap's keys when flags are unset)."""

    client_ca_pem: str | None
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = DEFAULT_USERNAME_HEADERS
    group_headers: tuple[str, ...] = DEFAULT_GROUP_HEADERS


def _subject_cn(cert: dict[str, Any]) -> str | None:
    for rdn in cert.get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                return str(v)
    return None


class RequestHeaderAuthenticator:
    """Turn a request into a `UserInfo`, or raise `Unauthorized` (module docstring)."""

    def __init__(
        self,
        allowed_names: Iterable[str] = (),
        username_headers: Sequence[str] = DEFAULT_USERNAME_HEADERS,
        group_headers: Sequence[str] = DEFAULT_GROUP_HEADERS,
    ) -> None:
        self.allowed_names = frozenset(allowed_names)
        self.username_headers = tuple(username_headers)
        self.group_headers = tuple(group_headers)

    def authenticate(self, req: Request) -> UserInfo:
        cert = req.peer_cert
        if not cert:
            raise Unauthorized(
                "Unauthorized: no client certificate signed by the request-header CA was presented"
            )
        cn = _subject_cn(cert)
        if self.allowed_names and cn not in self.allowed_names:
            raise Unauthorized(
                f"Unauthorized: client certificate CN {cn!r} is not one of the allowed "
                f"request-header names {sorted(self.allowed_names)}"
            )
        user = ""
        for h in self.username_headers:
            user = (req.header(h) or "").strip()
            if user:
                break
        if not user:
            raise Unauthorized(f"Unauthorized: no user name in {', '.join(self.username_headers)}")
        groups: list[str] = []
        for h in self.group_headers:
            groups.extend(v.strip() for v in req.header_all(h) if v.strip())
        if AUTHENTICATED_GROUP not in groups:
            # as kube's AuthenticatedGroupAdder: every authenticated user is in this group
            groups.append(AUTHENTICATED_GROUP)
        return UserInfo(user, tuple(groups))


def serving_context(cert_file: str, key_file: str, client_ca_pem: str | None) -> ssl.SSLContext:
    """A TLS server context that asks for (and verifies) client certificates from the CA."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_pem:
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(cadata=client_ca_pem)
    return ctx


def load_extension_apiserver_authentication(api_client: Any) -> RequestHeaderConfig:
    """Read kube-system/extension-apiserver-authentication (the request-header keys)."""
    from kubernetes import client

    cm = client.CoreV1Api(api_client).read_namespaced_config_map(
        CONFIGMAP_NAME, CONFIGMAP_NAMESPACE
    )
    data = cm.data or {}

    def lst(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        raw = data.get(key)
        if not raw:
            return default
        try:
            val = json.loads(raw)
        except ValueError:
            return default
        return tuple(str(x) for x in val) if isinstance(val, list) else default

    return RequestHeaderConfig(
        client_ca_pem=data.get("requestheader-client-ca-file") or None,
        allowed_names=lst("requestheader-allowed-names", ()),
        username_headers=lst("requestheader-username-headers", DEFAULT_USERNAME_HEADERS),
        group_headers=lst("requestheader-group-headers", DEFAULT_GROUP_HEADERS),
    )


NO_CERTIFICATE = "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
"""Why a CA file is refused: TLS would start with it and then refuse every client."""


def holds_certificate(pem: str | bytes) -> bool:
    """Whether a CA file's text holds a PEM certificate (an empty one does not)."""
    if isinstance(pem, bytes):
        return b"CERTIFICATE-----" in pem
    return "CERTIFICATE-----" in pem


class ClientCA:
    """Holds the serving TLS context and rebuilds it when the client CA changes.

    `refresh()` loads the request-header settings: from `ca_file`, or without a file from the
    ConfigMap through `configmap_loader`, and rebuilds the context when the CA changed.
    `context()` is what the HTTP server calls for each new connection.
    """

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        ca_file: str | None = None,
        configmap_loader: Callable[[], RequestHeaderConfig] | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.ca_file = ca_file
        self.configmap_loader = configmap_loader
        self._ctx: ssl.SSLContext | None = None
        self._pem: str | None = None
        self._lock = threading.Lock()
        self.config: RequestHeaderConfig = RequestHeaderConfig(None)

    def refresh(self) -> bool:
        """Reload the CA; True when it changed. Raises OSError/ApiException on failure."""
        pem: str | None
        if self.ca_file:
            with open(self.ca_file) as f:  # small; compared by content, not by mtime
                pem = f.read()
            if not holds_certificate(pem):  # an empty file would 401 everything
                raise ValueError(NO_CERTIFICATE)
            cfg = RequestHeaderConfig(pem)
        elif self.configmap_loader is not None:
            cfg = self.configmap_loader()
            pem = cfg.client_ca_pem
        else:
            cfg, pem = RequestHeaderConfig(None), None
        if self._ctx is not None and pem == self._pem:
            return False
        ctx = serving_context(self.cert_file, self.key_file, pem)
        with self._lock:
            self._ctx, self._pem, self.config = ctx, pem, cfg
        log.info(
            "client CA loaded",
            extra={"kv": {"source": self.ca_file or "configmap", "present": bool(pem)}},
        )
        return True

    def context(self) -> ssl.SSLContext:
        with self._lock:
            if self._ctx is None:
                raise RuntimeError("ClientCA.refresh() was never called")
            return self._ctx

    @property
    def has_ca(self) -> bool:
        return self._pem is not None


class Authorizer(Protocol):
    """Decide whether `user` may do `attrs`; returns (allowed, reason).

    `blocking` is True when `authorize` may wait on I/O (a SubjectAccessReview): the shell
    then calls it in a worker thread."""

    @property
    def blocking(self) -> bool: ...

    def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]: ...


class AlwaysAllowAuthorizer:
    blocking = False

    def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        return True, "always allow"


class AllowListAuthorizer:
    """Allow the listed users and members of the listed groups; deny everyone else."""

    blocking = False

    def __init__(self, users: Iterable[str] = (), groups: Iterable[str] = ()) -> None:
        self.users = frozenset(users)
        self.groups = frozenset(groups)

    def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        if user.name in self.users:
            return True, "user in allow list"
        hit = self.groups.intersection(user.groups)
        if hit:
            return True, f"group {sorted(hit)[0]} in allow list"
        return False, f"user {user.name!r} and its groups are not in the allow list"


@dataclass(eq=False)
class SubjectAccessReviewAuthorizer:
    """Ask the Kubernetes API through SubjectAccessReview; cache answers for a TTL.

    Parameters:
        api_client: a kubernetes.client.ApiClient (kvspread.kube.api_client).
        clock: () -> monotonic seconds.
        allow_ttl / deny_ttl: seconds an allowed / denied answer is reused (kube's
            delegated authoriser defaults: 10 s both).
    A failed call denies, is not cached, and says why in the reason.
    """

    blocking = True

    api_client: Any
    clock: Callable[[], float]
    allow_ttl: float = 10.0
    deny_ttl: float = 10.0
    timeout: float = 5.0
    max_entries: int = 10_000
    calls: int = field(default=0, init=False)
    _cache: dict[tuple[Any, ...], tuple[float, bool, str]] = field(
        default_factory=dict, init=False, repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def authorize(self, user: UserInfo, attrs: Attributes) -> tuple[bool, str]:
        key = (user.name, user.groups, attrs)
        now = self.clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1], hit[2]
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        spec = client.V1SubjectAccessReviewSpec(user=user.name, groups=list(user.groups))
        if attrs.is_resource:
            spec.resource_attributes = client.V1ResourceAttributes(
                namespace=attrs.namespace,
                verb=attrs.verb,
                group=attrs.group,
                version=attrs.version,
                resource=attrs.resource,
                name=attrs.name,
                subresource=attrs.subresource,
            )
        else:
            spec.non_resource_attributes = client.V1NonResourceAttributes(
                path=attrs.path, verb=attrs.verb
            )
        body = client.V1SubjectAccessReview(
            api_version="authorization.k8s.io/v1", kind="SubjectAccessReview", spec=spec
        )
        self.calls += 1
        try:
            resp = client.AuthorizationV1Api(self.api_client).create_subject_access_review(
                body, _request_timeout=self.timeout
            )
        except (ApiException, OSError, ValueError) as exc:
            log.warning("subjectaccessreview failed", extra={"kv": {"error": str(exc)[:200]}})
            return False, f"authorization check (SubjectAccessReview) failed: {str(exc)[:200]}"
        except Exception as exc:  # noqa: BLE001 - urllib3 errors are not OSError subclasses
            log.warning("subjectaccessreview failed", extra={"kv": {"error": str(exc)[:200]}})
            return False, f"authorization check (SubjectAccessReview) failed: {str(exc)[:200]}"
        status = resp.status
        allowed = bool(status and status.allowed and not status.denied)
        reason = (status.reason if status else "") or ("allowed" if allowed else "denied")
        ttl = self.allow_ttl if allowed else self.deny_ttl
        with self._lock:
            if len(self._cache) >= self.max_entries:
                self._cache.clear()
            self._cache[key] = (now + ttl, allowed, reason)
        return allowed, reason


def forbidden(user: UserInfo, attrs: Attributes, reason: str) -> Forbidden:
    """The 403 kube-apiserver would write (its message shape)."""
    if attrs.is_resource:
        what = (
            f'cannot {attrs.verb} resource "{attrs.resource}" in API group "{attrs.group}"'
            f' in the namespace "{attrs.namespace}"'
        )
    else:
        what = f'cannot {attrs.verb} path "{attrs.path}"'
    return Forbidden(
        f'{attrs.resource or attrs.path} is forbidden: User "{user.name}" {what}: {reason}'
    )
