"""What each endpoint is expected to hold of one request, from the three cache indexes
(router/prefix.py, router/images.py, and router/kvevents.py in precise mode): the
`CacheHit`s router/scoring.py turns into a bonus, and the record of a pick in those
indexes. One object, so the picker (router/picker.py) and the serving simulation's
kvspread policy run the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from router.images import ImageIndex
from router.prefix import CacheConfig, PrefixIndex
from router.request import RequestInfo
from router.scoring import NO_HIT, CacheHit

if TYPE_CHECKING:  # precise mode only (cache.kv_events_port): router/run.py imports it then,
    from router.kvevents import KvEventSubscriber  # and with it zmq and msgspec

__all__ = ["CacheTerms", "Lookup", "NOTHING", "Recorded", "NOTHING_RECORDED"]


@dataclass(frozen=True)
class Lookup:
    """One request's keys into the indexes, computed once per pick."""

    hashes: list[int]  # prefix block hashes
    digests: list[int]  # image digests
    hits: dict[str, CacheHit]  # endpoint -> what it is expected to hold


NOTHING = Lookup([], [], {})


@dataclass(frozen=True)
class Recorded:
    """What one pick added to the indexes at its endpoint (blocks and digests it did not
    hold before), so that a pick another endpoint served takes back only those: what the
    picked endpoint already held it still holds."""

    hashes: tuple[int, ...] = ()
    digests: tuple[int, ...] = ()


NOTHING_RECORDED = Recorded()


class CacheTerms:
    def __init__(self, cfg: CacheConfig) -> None:
        self.cfg = cfg
        self.prefix = PrefixIndex(cfg)
        self.images = ImageIndex(cfg.max_images)
        self.kv_events: KvEventSubscriber | None = None  # precise mode, set by router/run.py

    def lookup(self, req: RequestInfo) -> Lookup:
        """The request's keys and each endpoint's expected hit."""
        hashes = self.prefix.hashes(req) if self.cfg.prefix and req.prompt_parts else []
        digests = [i.digest for i in req.images] if self.cfg.images else []
        ev = self.kv_events
        if not hashes and not digests and not (ev and req.token_ids):
            return NOTHING
        prefix = self.prefix.match(hashes, req) if hashes else {}
        images = self.images.hits(digests) if digests else {}
        exact = ev.match(req.token_ids) if ev and req.token_ids else {}
        hits: dict[str, CacheHit] = {}
        for a in prefix.keys() | images.keys() | exact.keys():
            m = prefix.get(a)
            share = m.share if m else NO_HIT.prefix_share
            saved = m.saved_tokens if m else NO_HIT.saved_tokens
            if exact.get(a, 0) > saved:  # what the engine said it holds beats the estimate
                saved = exact[a]
                share = min(1.0, saved / max(1, req.token_count or len(req.token_ids)))
            hits[a] = CacheHit(share, saved, images.get(a, 0))
        return Lookup(hashes, digests, hits)

    def kv_tokens(self, req: RequestInfo, found: Lookup, address: str) -> int:
        """The KV tokens the request will take on `address`: what its cache lacks."""
        hit = found.hits.get(address)
        return req.total_tokens - (hit.saved_tokens if hit is not None else 0)

    def record(self, address: str, found: Lookup, kv_capacity_tokens: int | None) -> Recorded:
        """`address` was sent the request: it will hold its blocks and images."""
        hashes = (
            self.prefix.record(address, found.hashes, kv_capacity_tokens) if found.hashes else ()
        )
        digests = self.images.record(address, found.digests) if found.digests else ()
        return Recorded(hashes, digests) if hashes or digests else NOTHING_RECORDED

    def move(
        self,
        src: str,
        dst: str,
        found: Lookup,
        recorded: Recorded,
        dst_kv_capacity_tokens: int | None,
    ) -> None:
        """The request recorded at `src` was served by `dst` (router/served.py): the engine
        that computed its blocks and encoded its images is `dst`'s. `src` loses what the
        pick added there and `dst` records all of it. Approximate: a request picked for
        `src` in between on the strength of those entries loses them too."""
        if recorded.hashes:
            self.prefix.discard(src, recorded.hashes)
        if recorded.digests:
            self.images.discard(src, recorded.digests)
        self.record(dst, found, dst_kv_capacity_tokens)

    def keep_only(self, addresses: set[str]) -> None:
        """Forget what the indexes hold of endpoints that left the set."""
        self.prefix.keep_only(addresses)
        for a in self.images.addresses() - addresses:
            self.images.forget(a)
