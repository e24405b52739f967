"""Precise mode: follow what each engine's KV cache holds from vLLM's KV-cache events,
where the engine publishes them (`vllm serve --kv-events-config
'{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557"}'`).

The wire, as vLLM's publisher writes it (vllm/distributed/kv_events.py,
`ZmqEventPublisher`): a ZMQ PUB socket sends three-frame messages (topic, an 8-byte
big-endian sequence number, a msgpack payload). The payload is an `EventBatch` (ts,
events, data_parallel_rank) whose events are tagged msgspec structs: `BlockStored`
(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, ...),
`BlockRemoved` (block_hashes, medium, ...) and `AllBlocksCleared`. vLLM up to 0.10 encodes
them `array_like` (a batch is `[ts, events, ...]`, an event `["BlockStored", hashes, ...]`);
later versions as maps (`{"type": "BlockStored", "block_hashes": ...}`). Both are read. A
block hash is an int or bytes, as the engine's hash function gives it.

What the router does with them, per endpoint (`EngineBlocks`):
- it keeps the engine's blocks (bounded by `max_blocks`), each with the router's own chain
  hash of its token ids (parent's chain hash, token ids), so a request whose prompt is token
  ids (completions) is matched exactly (`match`), as the engine would;
- `AllBlocksCleared` empties that endpoint's approximate prefix index too
  (router/prefix.py `forget`), and after removals the approximate index keeps no more
  blocks than the engine holds (`shrink`): the text prompts it cannot tokenize are still
  estimated, but never as cached where the engine said it dropped everything.

A sequence gap (messages the PUB socket dropped) is counted; a message that is not this
schema is counted and skipped, never fatal.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import zmq

from router.prefix import PrefixIndex

__all__ = ["EngineBlocks", "KvEventSubscriber", "decode_batch", "Event", "chain_hashes"]

log = logging.getLogger("kvspread.router.kvevents")

ROOT = 0
"""Chain hash of the parent of a prompt's first block."""

POLL_MS = 100
"""How long the subscriber thread waits for a message before it looks at the set again."""


@dataclass(frozen=True)
class Event:
    """One KV-cache event, whichever encoding it came in."""

    kind: str  # BlockStored | BlockRemoved | AllBlocksCleared
    block_hashes: tuple[Any, ...] = ()
    parent: Any = None
    token_ids: tuple[int, ...] = ()
    block_size: int = 0


_FIELDS = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size"),
    "BlockRemoved": ("block_hashes",),
    "AllBlocksCleared": (),
}


class SchemaError(ValueError):
    """A payload that is not a vLLM KV event batch."""


def _event(raw: Any) -> Event | None:
    if isinstance(raw, list | tuple) and raw and isinstance(raw[0], str):
        kind, values = raw[0], dict(zip(_FIELDS.get(raw[0], ()), raw[1:], strict=False))
    elif isinstance(raw, dict) and isinstance(raw.get("type"), str):
        kind, values = raw["type"], raw
    else:
        raise SchemaError(f"an event must be a tagged array or map, got {type(raw).__name__}")
    if kind not in _FIELDS:
        return None  # a kind this router does not use (newer vLLM): skipped
    hashes = values.get("block_hashes") or ()
    tokens = values.get("token_ids") or ()
    size = values.get("block_size") or 0
    if not isinstance(hashes, list | tuple) or not isinstance(tokens, list | tuple):
        raise SchemaError(f"{kind}: block_hashes and token_ids must be lists")
    if not isinstance(size, int) or size < 0:
        raise SchemaError(f"{kind}: block_size must be a non-negative integer")
    return Event(kind, tuple(hashes), values.get("parent_block_hash"), tuple(tokens), size)


def decode_batch(payload: bytes) -> list[Event]:
    """The events of one payload; SchemaError when it is not an event batch."""
    try:
        doc = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise SchemaError(f"not msgpack: {exc}") from exc
    if isinstance(doc, list | tuple) and len(doc) >= 2:
        events = doc[1]
    elif isinstance(doc, dict) and "events" in doc:
        events = doc["events"]
    else:
        raise SchemaError("a batch must be [ts, events, ...] or {ts, events}")
    if not isinstance(events, list):
        raise SchemaError("a batch's events must be a list")
    return [e for e in (_event(r) for r in events) if e is not None]


def chain_hashes(token_ids: Iterable[int], block_size: int, parent: int = ROOT) -> list[int]:
    """The router's chain hash of each full block of `token_ids`."""
    ids = tuple(token_ids)
    out = []
    for i in range(len(ids) // block_size):
        parent = hash((parent, ids[i * block_size : (i + 1) * block_size]))
        out.append(parent)
    return out


@dataclass
class EngineBlocks:
    """What one engine holds: its block hash -> (chain hash, tokens), oldest first."""

    max_blocks: int = 65_536
    blocks: OrderedDict[Any, tuple[int, int]] = field(default_factory=OrderedDict)
    chains: dict[int, int] = field(default_factory=dict)  # chain hash -> blocks holding it
    tokens: int = 0
    block_size: int = 0
    dropped: int = 0  # blocks forgotten past max_blocks

    def apply(self, ev: Event) -> None:
        if ev.kind == "AllBlocksCleared":
            self.blocks.clear()
            self.chains.clear()
            self.tokens = 0
        elif ev.kind == "BlockRemoved":
            for h in ev.block_hashes:
                self._remove(h)
        elif ev.kind == "BlockStored" and ev.block_size > 0:
            self.block_size = ev.block_size
            known = self.blocks.get(ev.parent) if ev.parent is not None else None
            parent: int | None = ROOT if ev.parent is None else (known[0] if known else None)
            for i, h in enumerate(ev.block_hashes):
                ids = ev.token_ids[i * ev.block_size : (i + 1) * ev.block_size]
                chain = hash((parent, ids)) if parent is not None else hash((h, "unchained"))
                self._store(h, chain, len(ids) or ev.block_size)
                parent = chain if parent is not None else None

    def _store(self, h: Any, chain: int, tokens: int) -> None:
        if h in self.blocks:
            self._remove(h)
        self.blocks[h] = (chain, tokens)
        self.chains[chain] = self.chains.get(chain, 0) + 1
        self.tokens += tokens
        while len(self.blocks) > self.max_blocks:
            self._remove(next(iter(self.blocks)))
            self.dropped += 1

    def _remove(self, h: Any) -> None:
        got = self.blocks.pop(h, None)
        if got is None:
            return
        chain, tokens = got
        n = self.chains.get(chain, 0) - 1
        if n > 0:
            self.chains[chain] = n
        else:
            self.chains.pop(chain, None)
        self.tokens -= tokens

    def match(self, token_ids: tuple[int, ...]) -> int:
        """Tokens of the leading blocks of `token_ids` this engine holds."""
        if not self.block_size or not token_ids:
            return 0
        n = 0
        for c in chain_hashes(token_ids, self.block_size):
            if c not in self.chains:
                break
            n += 1
        return n * self.block_size


class KvEventSubscriber:
    """One thread, one SUB socket per endpoint (tcp://<endpoint ip>:`port`), applying
    each engine's events to its `EngineBlocks` and to the approximate prefix index."""

    def __init__(
        self,
        prefix: PrefixIndex,
        addresses: Callable[[], list[str]],
        *,
        port: int,
        topic: str = "",
        max_blocks: int = 65_536,
    ) -> None:
        self.prefix = prefix
        self._addresses = addresses
        self.port = port
        self.topic = topic.encode()
        self.max_blocks = max_blocks
        self.engines: dict[str, EngineBlocks] = {}
        self.messages = 0
        self.bad = 0
        self.gaps = 0
        self._seq: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ctx = zmq.Context()
        self._thread: threading.Thread | None = None

    def url(self, address: str) -> str:
        host = address.rpartition(":")[0]
        return f"tcp://{host}:{self.port}"

    # --- reading (the picker's thread) --------------------------------------------------
    def match(self, token_ids: tuple[int, ...]) -> dict[str, int]:
        """Tokens of the prompt each engine holds (token-id prompts only)."""
        with self._lock:
            return {a: n for a, e in self.engines.items() if (n := e.match(token_ids))}

    def last_seq(self, address: str) -> int | None:
        """Sequence number of the last message applied from `address`'s publisher."""
        return self._seq.get(address)

    # --- applying ------------------------------------------------------------------------
    def handle(self, address: str, frames: list[bytes]) -> None:
        """One message from `address`'s publisher."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.bad += 1
            return
        seq = int.from_bytes(frames[1], "big", signed=True)
        try:
            events = decode_batch(frames[2])
        except SchemaError as exc:
            self.bad += 1
            if self.bad == 1:
                log.warning(
                    "KV event skipped", extra={"kv": {"endpoint": address, "why": str(exc)}}
                )
            return
        self.messages += 1
        last = self._seq.get(address)
        if last is not None and seq > last + 1:
            self.gaps += 1
        self._seq[address] = seq
        cleared = shrunk = False
        with self._lock:
            eng = self.engines.get(address)
            if eng is None:
                eng = self.engines[address] = EngineBlocks(self.max_blocks)
            for ev in events:
                before = eng.tokens
                eng.apply(ev)
                cleared = cleared or ev.kind == "AllBlocksCleared"
                shrunk = shrunk or eng.tokens < before
            held = eng.tokens
        if cleared:
            self.prefix.forget(address)
        elif shrunk:
            self.prefix.shrink(address, held // self.prefix.cfg.block_tokens)

    # --- the thread -----------------------------------------------------------------------
    def start(self) -> KvEventSubscriber:
        self._thread = threading.Thread(target=self._loop, name="router-kvevents", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _loop(self) -> None:
        socks: dict[str, zmq.Socket[bytes]] = {}
        poller = zmq.Poller()
        try:
            while not self._stop.is_set():
                want = set(self._addresses())
                for a in [a for a in socks if a not in want]:
                    poller.unregister(socks[a])
                    socks.pop(a).close(linger=0)
                    with self._lock:
                        self.engines.pop(a, None)
                for a in want - socks.keys():
                    s: zmq.Socket[bytes] = self._ctx.socket(zmq.SUB)
                    s.setsockopt(zmq.IPV6, 1)
                    s.setsockopt(zmq.SUBSCRIBE, self.topic)
                    s.connect(self.url(a))
                    socks[a] = s
                    poller.register(s, zmq.POLLIN)
                by_sock = {s: a for a, s in socks.items()}
                for s, _ in poller.poll(POLL_MS):
                    a = by_sock[s]
                    while True:
                        try:
                            frames = s.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self.handle(a, frames)
        finally:
            for s in socks.values():
                s.close(linger=0)
            self._ctx.term()
