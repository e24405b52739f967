"""Image affinity: which endpoints encoded an image recently, so that a request that sends
the same image again can go where the engine's encoder cache still holds it (vLLM keeps
the vision encoder's outputs of recent images by their content hash, so a repeat skips
the encoder; docs/router.md, "Cache-aware terms").

An image is known by `image_digest`: an 8-byte BLAKE2b digest of its base64 text (of the
URL itself for a remote image), hashed in slices of `DIGEST_SLICE_CHARS` so a large image
is neither decoded nor copied whole. The index is an LRU of digests, each with the
endpoints that were sent it (the most recent `max_endpoints_per_image`), bounded by
`max_images`; what it forgets is counted in `evictions`.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["image_digest", "ImageIndex", "DIGEST_SLICE_CHARS"]

DIGEST_SLICE_CHARS = 1 << 16
"""Characters of base64 text encoded and hashed at a time (64 KiB: bounded extra memory)."""


def image_digest(url: str) -> int:
    """An 8-byte digest of an image part's URL text (base64 data or a remote URL).

    Why the text and not the decoded bytes: the same image sent twice is the same base64
    text, and hashing the text never holds a decoded copy."""
    h = hashlib.blake2b(digest_size=8)
    for i in range(0, len(url), DIGEST_SLICE_CHARS):
        h.update(url[i : i + DIGEST_SLICE_CHARS].encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "little")


class ImageIndex:
    """digest -> endpoints recently sent that image, most recent last. Thread-safe."""

    def __init__(self, max_images: int = 100_000, max_endpoints_per_image: int = 4) -> None:
        self.max_images = max_images
        self.max_endpoints_per_image = max_endpoints_per_image
        self._items: OrderedDict[int, list[str]] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def hits(self, digests: Iterable[int]) -> dict[str, int]:
        """How many of the request's images each endpoint was sent recently."""
        out: dict[str, int] = {}
        with self._lock:
            for d in digests:
                for addr in self._items.get(d, ()):
                    out[addr] = out.get(addr, 0) + 1
        return out

    def record(self, address: str, digests: Iterable[int]) -> tuple[int, ...]:
        """`address` was sent these images: it now holds their encoder outputs. Returns
        the digests it was not already listed for, what `discard` takes back when another
        endpoint served the request."""
        added: list[int] = []
        with self._lock:
            for d in digests:
                eps = self._items.pop(d, None) or []
                if address in eps:
                    eps.remove(address)
                else:
                    added.append(d)
                eps.append(address)
                if len(eps) > self.max_endpoints_per_image:
                    del eps[0]
                self._items[d] = eps
            while len(self._items) > self.max_images:
                self._items.popitem(last=False)
                self.evictions += 1
        return tuple(added)

    def discard(self, address: str, digests: Iterable[int]) -> None:
        """Take `address` off these digests (recorded there by a pick another endpoint
        served); a digest left with no endpoint is dropped."""
        with self._lock:
            for d in digests:
                eps = self._items.get(d)
                if eps is not None and address in eps:
                    eps.remove(address)
                    if not eps:
                        del self._items[d]

    def forget(self, address: str) -> None:
        """Drop an endpoint (it left the set, or its engine restarted)."""
        with self._lock:
            for d in [d for d, eps in self._items.items() if address in eps]:
                eps = self._items[d]
                eps.remove(address)
                if not eps:
                    del self._items[d]

    def addresses(self) -> set[str]:
        """Endpoints the index names."""
        with self._lock:
            return {a for eps in self._items.values() for a in eps}

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
