"""Reading an ExtenderArgs body without building it in Python: the full-NodeList fast path.

A full NodeList of 5,000 nodes is ~12 MB of JSON, and turning it into Python dicts and lists
(json/orjson `loads`) costs more than everything else the extender does with it: of each
Node it needs only the name, two labels, one annotation and the allocatable GPUs. msgspec
scans the body once in C with typed structs: the pod and the names become Python objects,
each NodeList item stays a `msgspec.Raw` slice of the body. Each slice is then read into a
`NodeInfo` only when its exact bytes were not seen recently (the scheduler sends the same
unchanged nodes call after call; a changed node has a new resourceVersion and new bytes, so
the memo key is the bytes themselves, exact where UID + resourceVersion would trust the
sender). The slices also serve /filter's answer: the passed nodes are written back as the
scheduler sent them, never re-encoded.

`fast_args()` returns None whenever the body is not the canonical form kube-scheduler
sends (keys in another letter case, odd types, invalid JSON); wire.py then takes its
general path, which accepts what Go's encoding/json accepts and words the 400 messages.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import msgspec

from extender.objects import NodeInfo, node_info

__all__ = ["FastArgs", "fast_args", "NodeMemo", "MEMO"]


class _Meta(msgspec.Struct, frozen=True):
    name: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class _Status(msgspec.Struct, frozen=True):
    allocatable: dict[str, Any] | None = None


_NO_META = _Meta()
_NO_STATUS = _Status()


class _Node(msgspec.Struct, frozen=True):
    metadata: _Meta = _NO_META
    status: _Status = _NO_STATUS


class _NodeList(msgspec.Struct, frozen=True):
    metadata: Any = None
    items: list[msgspec.Raw] | None = None


_NULL = msgspec.Raw(b"null")


class _Args(
    msgspec.Struct, frozen=True, rename={"pod": "Pod", "nodes": "Nodes", "names": "NodeNames"}
):
    pod: dict[str, Any] | None = None
    nodes: _NodeList | None = None
    names: msgspec.Raw = _NULL
    """NodeNames as sent: read by `_names` (the same list as last time is not read again)."""


_ARGS = msgspec.json.Decoder(_Args)
_NODE = msgspec.json.Decoder(_Node)
_NAMES = msgspec.json.Decoder(list[str] | None)

_last_names: tuple[bytes, list[str] | None] | None = None
"""The NodeNames bytes of the last request and the list they hold: kube-scheduler sends
the same names call after call, and comparing 9 kB of bytes costs a fraction of reading
500 strings."""


def _names(raw: msgspec.Raw) -> list[str] | None:
    """NodeNames as a new list of str (None for null or absent); raises
    msgspec.ValidationError when they are not a list of strings."""
    global _last_names
    text = bytes(raw)
    last = _last_names
    if last is not None and last[0] == text:
        names = last[1]
    else:
        names = _NAMES.decode(text)
        _last_names = (text, names)
    return None if names is None else list(names)


class NodeMemo:
    """Parsed nodes by their exact JSON bytes, in two generations: a hit moves the entry
    to the young one; when the young one holds `capacity` entries it becomes the old one
    and the previous old one is dropped. So memory stays under two generations (at least
    `capacity`, and twice the largest NodeList seen, entries) however often nodes change,
    and the nodes of the current NodeList stay parsed."""

    def __init__(self, capacity: int = 4096) -> None:
        self._min = capacity
        self._cap = capacity
        self._young: dict[bytes, NodeInfo] = {}
        self._old: dict[bytes, NodeInfo] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def infos(self, raws: list[bytes]) -> list[NodeInfo] | None:
        """One NodeInfo per item, or None when an item is not a canonical Node."""
        out: list[NodeInfo] = []
        with self._lock:
            self._cap = max(self._cap, 2 * len(raws))
            young, old = self._young, self._old
            for raw in raws:
                info = young.get(raw)
                if info is None:
                    info = old.pop(raw, None)
                    if info is None:
                        info = _parse(raw)
                        if info is None:
                            return None
                    if len(young) >= self._cap:  # a new generation; the old one goes
                        self._old = old = young
                        self._young = young = {}
                    young[raw] = info
                out.append(info)
        return out

    def clear(self) -> None:
        with self._lock:
            self._young, self._old, self._cap = {}, {}, self._min


def _parse(raw: bytes) -> NodeInfo | None:
    try:
        node = _NODE.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    meta = node.metadata
    if not meta.name:
        return None
    return node_info(meta.name, meta.labels or {}, meta.annotations or {}, node.status.allocatable)


MEMO = NodeMemo()
"""The process's memo (shared by every request; bounded, see NodeMemo)."""


@dataclass(frozen=True)
class FastArgs:
    """What `fast_args` read. `raws` are the NodeList items' bytes as sent (None names-only)."""

    pod: dict[str, Any]
    infos: list[NodeInfo] | None
    raws: list[bytes] | None
    node_list_meta: Any
    node_names: list[str] | None


def fast_args(body: bytes | str, memo: NodeMemo = MEMO) -> FastArgs | None:
    """The body read by the fast path, or None to take the general path (see the module
    docstring)."""
    try:
        doc = _ARGS.decode(body)
        node_names = _names(doc.names)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if doc.pod is None or (doc.nodes is None and node_names is None):
        return None  # another letter case, or a request the general path words an error for
    infos: list[NodeInfo] | None = None
    raws: list[bytes] | None = None
    meta: Any = None
    if doc.nodes is not None:
        raws = [bytes(r) for r in doc.nodes.items or ()]
        infos = memo.infos(raws)
        if infos is None:
            return None
        meta = doc.nodes.metadata
    return FastArgs(doc.pod, infos, raws, meta, node_names)
