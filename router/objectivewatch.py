"""InferenceObjective resources -> the priority of each objective name requests send
(router/objectives.py), watched in pool mode for the pool this picker serves.

The resource (`spec.priority`, `spec.poolRef`) lives in one of two API groups, both
version v1alpha2, kind InferenceObjective, plural `inferenceobjectives`:
- `llm-d.ai`: its home since GIE removed it (gateway-api-inference-extension #2973);
  llm-d-router's CRD `inferenceobjectives.llm-d.ai`;
- `inference.networking.x-k8s.io`: GIE v1.0 to v1.5's CRD, which llm-d's picker still
  reads when the new group is not served.

`objectives.resources: auto` (the default) does as llm-d's picker does: the new group
when the API server serves it, else the old one. Unlike llm-d, which looks once at start,
each list (the first one and every re-list after a failure) asks again, so a CRD
installed later is picked up at the next retry. Neither served: a 404 the list/watch
loop (kvspread/kube.py's `Reflector`) backs off from, one warning, and requests get
`objectives.classes`. A group name watches that group only; `off` none.

An object counts when its `spec.poolRef` names this pool: `name` equal to the pool's,
`group` (default `inference.networking.k8s.io`) and `kind` (default `InferencePool`)
those of an InferencePool. Its `metadata.name` is the objective's name (what the
`x-llm-d-inference-objective` header carries) and `spec.priority` its priority, 0 when
unset (GIE: "implementations ... treat an unset value as 0"). A priority that is not an
int32 or a poolRef without a name: a warning naming the object and the field, that object
skipped, the others kept. At most `objectives.max_resources` objects are kept, the oldest
by creation time (GIE's rule for a conflict: the oldest stays valid); past that, one
warning and the newer ones are ignored.

Which wins: a name a watched resource defines takes the resource's priority; a name no
resource defines takes `objectives.classes`, then `default_priority`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from kvspread.kube import Reflector, http_status, lookup, lookup_str, path_list_call
from kvspread.kubehttp import ApiError
from router.objectives import RESOURCE_CHOICES

__all__ = [
    "GROUPS",
    "LEGACY_GROUP",
    "NEW_GROUP",
    "VERSION",
    "ObjectiveWatch",
    "objective_priority",
]

log = logging.getLogger("kvspread.router.objectivewatch")

NEW_GROUP: Final = "llm-d.ai"
LEGACY_GROUP: Final = "inference.networking.x-k8s.io"
GROUPS: Final = (NEW_GROUP, LEGACY_GROUP)
"""Tried in this order by `auto`."""
VERSION: Final = "v1alpha2"
POOL_REF_GROUP: Final = "inference.networking.k8s.io"
POOL_REF_KIND: Final = "InferencePool"
_INT32 = (-(2**31), 2**31 - 1)


class _Malformed(ValueError):
    """An object the picker cannot read: the message names its field."""


def objective_priority(obj: dict[str, Any], pool: str) -> tuple[str, int] | None:
    """(objective name, priority) of an InferenceObjective for `pool`, None when it names
    another pool; `_Malformed` naming the field when it cannot be read (pure)."""
    ref = lookup(obj, "spec", "poolRef")
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not ref["name"]:
        raise _Malformed("spec.poolRef.name: expected the name of an InferencePool")
    group = ref.get("group")
    kind = ref.get("kind")
    if ref["name"] != pool or (group or POOL_REF_GROUP) != POOL_REF_GROUP:
        return None
    if (kind or POOL_REF_KIND) != POOL_REF_KIND:
        return None
    name = lookup_str(obj, "metadata", "name")
    if not name:
        raise _Malformed("metadata.name: expected the objective's name")
    priority = lookup(obj, "spec", "priority")
    if priority is None:
        return name, 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise _Malformed(f"spec.priority: expected an integer, got {priority!r:.40}")
    if not _INT32[0] <= priority <= _INT32[1]:
        raise _Malformed(f"spec.priority: expected an int32, got {priority}")
    return name, priority


def _where(obj: dict[str, Any]) -> str:
    return f"{lookup_str(obj, 'metadata', 'namespace')}/{lookup_str(obj, 'metadata', 'name')}"


def _age_key(obj: dict[str, Any]) -> tuple[str, str]:
    """Oldest first: RFC 3339 UTC timestamps sort as text; the name breaks ties."""
    return lookup_str(obj, "metadata", "creationTimestamp"), lookup_str(obj, "metadata", "name")


class ObjectiveWatch:
    """List+watch InferenceObjectives of one namespace; `publish(priorities)` gets a new
    name -> priority mapping after every change (never mutated afterwards, so readers
    need no lock)."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        pool: str,
        publish: Callable[[Mapping[str, int]], None],
        *,
        resources: str = "auto",
        max_resources: int = 1000,
        watch_timeout_s: int = 300,
    ) -> None:
        if resources not in RESOURCE_CHOICES or resources == "off":
            raise ValueError(f"resources: expected one of {RESOURCE_CHOICES[:-1]}")
        self.namespace, self.pool = namespace, pool
        self.max_resources = max_resources
        self._groups = GROUPS if resources == "auto" else (resources,)
        self._api = api
        self._publish = publish
        self._lock = threading.Lock()
        self._priorities: dict[str, int] = {}  # by metadata.name, this pool's only
        self.group: str | None = None
        """The group the last successful list used (None before one)."""
        self.ignored = 0
        """Objects past `max_resources` not kept (since the last list)."""
        self.reflector = Reflector(
            "inferenceobjectives",
            self._call,
            self._replace,
            self._event,
            watch_timeout_s=watch_timeout_s,
        )

    def _path(self, group: str) -> str:
        return f"/apis/{group}/{VERSION}/namespaces/{self.namespace}/inferenceobjectives"

    def _call(self, **kw: Any) -> Any:
        """A list tries each group in turn (404: not served, next); a watch uses the group
        of the list it follows."""
        if kw.get("watch") and self.group is not None:
            return path_list_call(self._api, self._path(self.group))(**kw)
        for group in self._groups:
            try:
                resp = path_list_call(self._api, self._path(group))(**kw)
            except Exception as exc:  # either client's HTTP error carries `status`
                if http_status(exc) == 404:
                    continue
                raise
            if group != self.group:
                log.info(
                    "InferenceObjective resources found",
                    extra={"kv": {"api_version": f"{group}/{VERSION}", "pool": self.pool}},
                )
            self.group = group
            return resp
        served = " nor ".join(f"{g}/{VERSION}" for g in self._groups)
        raise ApiError(
            404,
            f"InferenceObjective is not served ({served}: CRD not installed); "
            "objectives.classes gives the priorities",
        )

    def _read(self, obj: dict[str, Any]) -> tuple[str, int] | None:
        try:
            return objective_priority(obj, self.pool)
        except _Malformed as exc:
            log.warning(
                "InferenceObjective skipped",
                extra={"kv": {"object": _where(obj), "why": str(exc)}},
            )
            return None

    def _replace(self, items: list[dict[str, Any]]) -> None:
        kept: dict[str, int] = {}
        ignored = 0
        for obj in sorted(items, key=_age_key):
            read = self._read(obj)
            if read is None:
                continue
            if len(kept) >= self.max_resources:
                ignored += 1
                continue
            kept[read[0]] = read[1]
        with self._lock:
            self._priorities, self.ignored = kept, ignored
        if ignored:
            self._warn_full()
        self._publish(kept)

    def _event(self, etype: str, obj: dict[str, Any]) -> None:
        name = lookup_str(obj, "metadata", "name")
        read = None if etype == "DELETED" else self._read(obj)
        full = False
        with self._lock:
            new = dict(self._priorities)  # copy on write: a published mapping never changes
            if read is None:  # deleted, malformed now, or moved to another pool
                if new.pop(name, None) is None:
                    return
            elif read[0] not in new and len(new) >= self.max_resources:
                self.ignored += 1
                full = True
            else:
                new[read[0]] = read[1]
            if not full:
                self._priorities = new
        if full:
            self._warn_full()
        else:
            self._publish(new)

    def _warn_full(self) -> None:
        log.warning(
            "InferenceObjective resources past the bound ignored",
            extra={"kv": {"max_resources": self.max_resources, "ignored": self.ignored}},
        )

    def snapshot(self) -> Mapping[str, int]:
        """The priorities as of now (the published mapping, not to be changed)."""
        with self._lock:
            return self._priorities
