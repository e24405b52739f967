"""Automatic prefix caching of one engine's KV pool, as vLLM V1 does it (pure logic).

vLLM keys every full KV block by a hash chain (the block's tokens plus its parent's hash),
so equal hashes mean an equal prefix; a new request reuses the leading blocks whose hashes
the engine still holds and prefills only the rest. Blocks are reference-counted: a block
that no running request holds any more stays cached in a free queue and is evicted, least
recently used first, only when the pool needs room (vLLM `BlockPool`, `KVCacheManager`;
docs/design/prefix_caching.md). Freed blocks enter the queue tail-first, so a request's
deepest blocks are evicted before its shared head.

Here the unit of hashing is a *content block*: a run of prompt tokens that the workload
identifies (a Mooncake `hash_ids` entry covers 512 tokens; a conversation turn's message or
answer one segment). A content block ending at prompt offset `end` owns the engine blocks
`[floor(prev_end / B), floor(end / B))` of block size B: exactly the full vLLM blocks that
lie inside the prefix it closes, so a hit counts what vLLM would find, and the last,
partly filled block of a prefix is never shared (vLLM caches full blocks only).

The cache holds no request objects: the engine tells it which hashes a request acquires,
registers and releases, and keeps its own pool count (blocks in use = private blocks of
running requests + `in_use`); `free` cached blocks are spare room it may evict.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixCache", "block_sizes", "chain"]


def chain(ids: Sequence[int], seed: int = 0) -> tuple[int, ...]:
    """Hash chain over content ids: entry i identifies the whole prefix ids[:i+1] (so two
    requests share entry i only if they share every id before it, as in vLLM)."""
    out: list[int] = []
    h = seed
    for x in ids:
        h = hash((h, x))
        out.append(h)
    return tuple(out)


def block_sizes(ends: Sequence[int], block_tokens: int) -> list[int]:
    """Engine blocks each content block owns: full blocks between the previous end and its
    own (module docstring)."""
    sizes = []
    prev = 0
    for e in ends:
        full = e // block_tokens
        sizes.append(max(0, full - prev))
        prev = max(prev, full)
    return sizes


class PrefixCache:
    """Cached content blocks of one engine: reference counts, LRU free queue, counters.

    Bounded by the engine's pool: the engine calls `evict_to(room)` whenever its blocks in
    use grow, so cached-but-free blocks never exceed the pool's free room.
    """

    def __init__(self) -> None:
        self._size: dict[int, int] = {}  # hash -> engine blocks it owns (cached blocks)
        self._refs: dict[int, int] = {}  # hash -> running requests holding it (> 0)
        self._free: OrderedDict[int, None] = OrderedDict()  # ref 0, eviction order first
        self.in_use = 0
        """Engine blocks of cached content that running requests hold."""
        self.free = 0
        """Engine blocks of cached content nobody holds (evictable)."""
        self.evicted = 0
        """Engine blocks evicted so far."""

    def __len__(self) -> int:
        return len(self._size)

    def __contains__(self, h: int) -> bool:
        return h in self._size

    def match(
        self, hashes: Sequence[int], sizes: Sequence[int], max_blocks: int
    ) -> tuple[int, int, int]:
        """Longest cached prefix of `hashes` (whose own engine-block `sizes` the request
        gives) within `max_blocks` engine blocks.

        Returns (content blocks hit, engine blocks hit, of those the ones now free that a
        hit would take back into use). `max_blocks` is vLLM's limit of num_tokens - 1
        (the last token is always computed, to get its logits) in whole blocks. A block
        cached shorter than the request's own (an earlier prompt ended inside it) is the
        last one hit: what follows it was never computed contiguously.
        """
        k = blocks = revive = 0
        for h, own in zip(hashes, sizes, strict=True):
            size = self._size.get(h)
            if size is None or size > own or blocks + size > max_blocks:
                break
            k += 1
            blocks += size
            if h not in self._refs:
                revive += size
            if size < own:
                break
        return k, blocks, revive

    def acquire(self, hashes: Sequence[int]) -> None:
        """A request holds these cached hashes (a `match` result): free ones leave the
        free queue."""
        for h in hashes:
            n = self._refs.get(h, 0)
            if n == 0:
                del self._free[h]
                size = self._size[h]
                self.free -= size
                self.in_use += size
            self._refs[h] = n + 1

    def register(self, h: int, size: int) -> bool:
        """A request has computed this content block and holds it: cache it. False when
        the hash is cached already (the request's copy stays private, as a duplicate
        block does in vLLM)."""
        if h in self._size:
            return False
        self._size[h] = size
        self._refs[h] = 1
        self.in_use += size
        return True

    def release(self, hashes: Sequence[int]) -> int:
        """A request lets go of its hashes; those nobody holds join the free queue,
        deepest first (evicted first). Returns the engine blocks that left use."""
        left = 0
        for h in reversed(hashes):
            n = self._refs[h] - 1
            if n:
                self._refs[h] = n
                continue
            del self._refs[h]
            self._free[h] = None
            size = self._size[h]
            self.in_use -= size
            self.free += size
            left += size
        return left

    def evict_to(self, room: int) -> int:
        """Evict least recently freed blocks until the free ones fit in `room` engine
        blocks; returns the blocks evicted."""
        gone = 0
        while self.free > max(0, room) and self._free:
            h, _ = self._free.popitem(last=False)
            size = self._size.pop(h)
            self.free -= size
            gone += size
        self.evicted += gone
        return gone

    def clear(self) -> None:
        """The engine is gone: nothing stays cached."""
        self._size.clear()
        self._refs.clear()
        self._free.clear()
        self.in_use = self.free = 0
