"""Approximate prefix-cache scoring: where was this prompt's start sent recently, so the
engine there likely still holds its KV blocks (vLLM's automatic prefix caching reuses the
blocks of a prompt's longest cached prefix). No engine change, no tokenizer.

The prompt (router/request.py `prompt_parts`: messages in order, system first, images as
digest markers) is cut into blocks of `block_tokens` x `chars_per_token` characters and
hashed as a chain: block i's hash covers block i and block i-1's hash, seeded by the model
name, as the Gateway API Inference Extension's prefix-cache plugin does (its
`hashPrompt`, pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go: 64-character
blocks, 4 characters a token, at most 256 blocks matched; here 64-token blocks by
default, see `CacheConfig.block_tokens`). A short last block is not
hashed (an engine caches only full blocks). Hashes are Python's own `hash`: the index lives
in this process only, so they need not be stable across processes.

Per endpoint, the index is an LRU of the block hashes sent there, sized like the engine's
KV cache: its `cache_config_info` num_gpu_blocks x block_size tokens / `block_tokens`
(`capacity_blocks` when configured, `default_capacity_blocks` before the first scrape).
All endpoints together hold at most `memory_mib` MiB (`ENTRY_BYTES` an entry, measured
by bench/router_prefix_bench.py); past that, and past an endpoint's own capacity, the
least recently sent blocks go first and are counted in `evictions`.

A request's match on an endpoint is the run of its leading blocks held there; the term is
the share of the prompt that run covers, and `saved_tokens` what it saves the engine.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from kvspread.settings import bounded, ports
from router.request import RequestInfo

__all__ = ["CacheConfig", "PrefixIndex", "PrefixMatch", "ENTRY_BYTES", "MIN_BLOCK_TOKENS"]

ENTRY_BYTES = 320
"""Bytes one (endpoint, block) entry costs: its slot in the endpoint's LRU, the hash int and
its place among the block's holders. bench/router_prefix_bench.py measures it with
tracemalloc on CPython 3.12: 253 B when each block has one holder, 311 B when blocks are
shared by several endpoints (their holder sets); the bound counts the larger."""

MIN_BLOCK_TOKENS = 16
"""Smallest hash block: vLLM's default KV block (16 tokens); a smaller block only costs
index memory, as the engine caches no less than one of its blocks."""


@dataclass(frozen=True)
class CacheConfig:
    """The cache-aware terms' indexes (YAML `cache:`): prefix blocks and images."""

    prefix: bool = True
    """Keep the approximate prefix index and score with it."""
    block_tokens: int = 64
    """Tokens one hash block stands for (at least 16, vLLM's default KV block). 64 (256
    characters) keeps 100 endpoints' index of 134k tokens each within 64 MiB; 16 is the
    inference extension's 64-character block, 4x the memory per token remembered."""
    chars_per_token: float = 4.0
    """Characters counted as one token (no tokenizer here; the usual English ratio)."""
    max_blocks: int = 256
    """Blocks of a prompt hashed and matched at most (longer prompts' tails are ignored)."""
    capacity_blocks: int = 0
    """Blocks remembered per endpoint; 0: from the engine's KV capacity (num_gpu_blocks x
    block_size tokens / `block_tokens`), `default_capacity_blocks` until it is known."""
    default_capacity_blocks: int = 7_812
    """Per-endpoint blocks before the engine's capacity is known: 500k tokens, the inference
    extension's lruCapacityPerServer (31250 blocks of 16 tokens)."""
    memory_mib: float = 64.0
    """Memory of the whole prefix index, MiB, all endpoints together."""
    images: bool = True
    """Keep the image index (router/images.py) and score with it."""
    max_images: int = 100_000
    """Image digests remembered (each with up to 4 endpoints)."""
    kv_events_port: int = 0
    """Port of the engines' KV-event publisher (vLLM `--kv-events-config` endpoint
    `tcp://*:5557`), on each endpoint's IP: precise mode (router/kvevents.py); 0: off."""
    kv_events_topic: str = ""
    """Topic the engines publish KV events on (vLLM's `topic`, empty by default)."""
    kv_events_max_blocks: int = 65_536
    """Engine blocks followed per endpoint in precise mode (the oldest are forgotten)."""

    def validate(self) -> None:
        bounded(self, "block_tokens", at_least=MIN_BLOCK_TOKENS, what="an integer")
        bounded(self, "max_blocks", "max_images", at_least=1, what="an integer")
        bounded(self, "kv_events_max_blocks", at_least=1, what="an integer")
        ports(self, "kv_events_port")
        bounded(self, "capacity_blocks", at_least=0, what="an integer")
        bounded(self, "default_capacity_blocks", at_least=1, what="an integer")
        bounded(self, "chars_per_token", "memory_mib", above=0, finite=True)

    @property
    def block_chars(self) -> int:
        return max(1, round(self.block_tokens * self.chars_per_token))

    @property
    def head_chars(self) -> int:
        """Characters of a prompt hashed at most: `max_blocks` blocks (the rest is ignored,
        so a request need keep no more, router/request.py `head_chars`)."""
        return self.block_chars * self.max_blocks

    @property
    def max_entries(self) -> int:
        return max(1, int(self.memory_mib * (1 << 20)) // ENTRY_BYTES)


@dataclass(frozen=True)
class PrefixMatch:
    """One endpoint's expected cache hit for one request."""

    blocks: int  # leading blocks held there
    share: float  # of the prompt, 0..1
    saved_tokens: int


def _head(parts: tuple[str, ...], limit: int) -> str:
    """The first `limit` characters of the parts joined: a long prompt costs no more to
    hash than `max_blocks` blocks."""
    taken: list[str] = []
    size = 0
    for p in parts:
        if size + len(p) >= limit:
            taken.append(p[: limit - size])
            break
        taken.append(p)
        size += len(p)
    return "".join(taken)


class PrefixIndex:
    """endpoint -> LRU of block hashes sent there; block -> endpoints holding it."""

    def __init__(self, cfg: CacheConfig | None = None) -> None:
        self.cfg = cfg or CacheConfig()
        self._eps: dict[str, OrderedDict[int, None]] = {}
        # block -> the endpoint holding it, or a set when several do (most blocks have one
        # holder: a set each would cost 216 bytes more an entry)
        self._holders: dict[int, str | set[str]] = {}
        self._entries = 0
        self._lock = threading.Lock()
        self.evictions = 0

    # --- hashing ----------------------------------------------------------------------
    def hashes(self, req: RequestInfo) -> list[int]:
        """The chain of block hashes of the request's prompt (empty when shorter than a
        block)."""
        bc = self.cfg.block_chars
        text = _head(req.prompt_parts, self.cfg.head_chars)
        n = len(text) // bc
        prev = hash(req.model)
        out = []
        for i in range(n):
            prev = hash((prev, text[i * bc : (i + 1) * bc]))
            out.append(prev)
        return out

    # --- reading ----------------------------------------------------------------------
    def match(self, hashes: list[int], req: RequestInfo) -> dict[str, PrefixMatch]:
        """Endpoints that hold a leading run of `hashes`, with what it saves."""
        if not hashes:
            return {}
        runs: dict[str, int] = {}
        holders = self._holders
        with self._lock:
            first = holders.get(hashes[0])
            if first is None:
                return {}
            alive = {first} if isinstance(first, str) else set(first)
            for i, h in enumerate(hashes):
                if i:
                    held = holders.get(h)
                    if held is None:
                        break
                    alive = alive & ({held} if isinstance(held, str) else held)
                if not alive:
                    break
                for a in alive:
                    runs[a] = i + 1
        chars = max(1, req.prompt_chars or sum(len(p) for p in req.prompt_parts))
        bc, bt = self.cfg.block_chars, self.cfg.block_tokens
        prompt = req.prompt_tokens
        return {
            a: PrefixMatch(k, min(1.0, k * bc / chars), min(prompt, k * bt))
            for a, k in runs.items()
        }

    # --- writing ----------------------------------------------------------------------
    def capacity(self, kv_capacity_tokens: int | None) -> int:
        """Blocks one endpoint may hold in the index."""
        if self.cfg.capacity_blocks:
            return self.cfg.capacity_blocks
        if kv_capacity_tokens:
            return max(1, kv_capacity_tokens // self.cfg.block_tokens)
        return self.cfg.default_capacity_blocks

    def record(
        self, address: str, hashes: list[int], kv_capacity_tokens: int | None
    ) -> tuple[int, ...]:
        """`address` was sent a prompt with these blocks: it will hold them. Returns the
        blocks it did not hold before (at most `max_blocks`), what `discard` takes back
        when another endpoint served the prompt."""
        if not hashes:
            return ()
        cap = self.capacity(kv_capacity_tokens)
        added: list[int] = []
        with self._lock:
            lru = self._eps.get(address)
            if lru is None:
                lru = self._eps[address] = OrderedDict()
            for h in hashes:
                if h in lru:
                    lru.move_to_end(h)
                    continue
                lru[h] = None
                added.append(h)
                held = self._holders.get(h)
                if held is None:
                    self._holders[h] = address
                elif isinstance(held, str):
                    self._holders[h] = {held, address}
                else:
                    held.add(address)
                self._entries += 1
            limit = min(cap, self.cfg.max_entries)
            while len(lru) > limit or (self._entries > self.cfg.max_entries and lru):
                self._evict_oldest(address, lru)
        return tuple(added)

    def discard(self, address: str, hashes: tuple[int, ...]) -> None:
        """Take these blocks off `address` (a pick recorded them there, then another
        endpoint served the prompt); blocks it no longer holds are skipped."""
        with self._lock:
            lru = self._eps.get(address)
            if lru is None:
                return
            for h in hashes:
                if h in lru:
                    del lru[h]
                    self._drop(address, h)
            if not lru:
                del self._eps[address]

    def _evict_oldest(self, address: str, lru: OrderedDict[int, None]) -> None:
        h, _ = lru.popitem(last=False)
        self._drop(address, h)
        self.evictions += 1

    def _drop(self, address: str, h: int) -> None:
        """Take `address` off block `h`'s holders (its LRU entry is already gone)."""
        held = self._holders.get(h)
        if held == address:
            del self._holders[h]
        elif isinstance(held, set):
            held.discard(address)
            if len(held) == 1:
                self._holders[h] = next(iter(held))
        self._entries -= 1

    def shrink(self, address: str, blocks: int) -> None:
        """Keep at most `blocks` of `address`'s most recent blocks (its engine says it
        holds no more: router/kvevents.py)."""
        with self._lock:
            lru = self._eps.get(address)
            while lru and len(lru) > max(0, blocks):
                self._evict_oldest(address, lru)

    def forget(self, address: str) -> None:
        """Drop everything about `address` (it left, or its engine cleared its cache)."""
        with self._lock:
            lru = self._eps.pop(address, None)
            for h in lru or ():
                self._drop(address, h)

    def keep_only(self, addresses: set[str]) -> None:
        """Forget endpoints that are no longer in the set."""
        with self._lock:
            gone = [a for a in self._eps if a not in addresses]
        for a in gone:
            self.forget(a)

    # --- sizes ------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return self._entries

    def blocks_of(self, address: str) -> int:
        with self._lock:
            return len(self._eps.get(address, ()))

    def memory_bytes(self) -> int:
        """The index's memory estimate (`ENTRY_BYTES` per entry)."""
        return self._entries * ENTRY_BYTES
