"""Context affinity: which endpoint holds a context (`X-LLM-Context-ID`), so that the next
chunk of a long multimodal context is not prefilled again elsewhere.

A hint, not state that matters: bindings live in memory, expire after `ttl_s` without use,
the oldest go first past `max_entries`, and a restart loses them (the next chunk is then
scored like any request and binds again). `X-Chunk-Seq` is recorded per binding so the
explanation can show chunk order; a chunk never moves a context by itself. The binding is
a bonus in the score (router/scoring.py `context_bonus`), not a rule: the context moves when
its endpoint is saturated, or its extra queue outweighs the bonus, and the binding follows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["ContextAffinity", "Binding"]


@dataclass
class Binding:
    address: str
    last_used: float
    last_seq: int | None = None
    chunks: int = 0


class ContextAffinity:
    def __init__(self, ttl_s: float = 600.0, max_entries: int = 100_000) -> None:
        self._ttl_s = ttl_s
        self._max = max_entries
        self._items: OrderedDict[str, Binding] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, context_id: str, now: float) -> Binding | None:
        with self._lock:
            b = self._items.get(context_id)
            if b is None:
                return None
            if now - b.last_used > self._ttl_s:
                del self._items[context_id]
                return None
            return Binding(b.address, b.last_used, b.last_seq, b.chunks)

    def bind(self, context_id: str, address: str, now: float, seq: int | None = None) -> None:
        with self._lock:
            b = self._items.pop(context_id, None)
            if b is None or b.address != address:
                b = Binding(address, now, chunks=0)
            b.last_used = now
            b.chunks += 1
            if seq is not None:
                b.last_seq = seq if b.last_seq is None else max(b.last_seq, seq)
            self._items[context_id] = b
            while len(self._items) > self._max:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
