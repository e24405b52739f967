"""The image-encoder cache of one engine (vLLM V1 `EncoderCacheManager`; pure logic).

vLLM keeps each image's encoder output (its embeddings, one per image token) keyed by the
image's content hash (`mm_hash`). Entries that no running request needs any more stay
cached and are evicted, oldest first, only when a new output needs room, so an image sent
again to the same engine is not encoded again while it is still there. The budget is in
encoder tokens: vLLM's `encoder_cache_size` defaults to the scheduler's token budget
(`max_num_batched_tokens`) and is raised to at least the largest single item
(`compute_mm_encoder_budget`, vllm/v1/core/encoder_cache_manager.py).

An image whose tokens already lie inside the request's cached prefix needs no encoder
output at all (vLLM schedules no encoder input for positions already computed); the
engine checks that first and asks this cache only about the others.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["EncoderCache"]


class EncoderCache:
    """Image id -> encoder tokens, LRU, at most `capacity_tokens` in all (a single image
    larger than that is kept alone, as vLLM sizes its cache to hold the largest item)."""

    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens < 1:
            raise ValueError(f"encoder cache capacity must be >= 1 token, got {capacity_tokens}")
        self.capacity = capacity_tokens
        self._items: OrderedDict[int, int] = OrderedDict()
        self.tokens = 0
        """Encoder tokens held now."""
        self.evicted = 0
        """Images evicted so far."""

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, image_id: int) -> bool:
        return image_id in self._items

    def lookup(self, image_id: int) -> bool:
        """Is this image's output cached? A hit makes it the most recently used."""
        if image_id in self._items:
            self._items.move_to_end(image_id)
            return True
        return False

    def insert(self, image_id: int, tokens: int) -> None:
        """Keep a freshly encoded image, evicting the least recently used to fit it."""
        if image_id in self._items:
            self._items.move_to_end(image_id)
            return
        room = max(self.capacity, tokens)
        while self._items and self.tokens + tokens > room:
            _, size = self._items.popitem(last=False)
            self.tokens -= size
            self.evicted += 1
        self._items[image_id] = tokens
        self.tokens += tokens

    def clear(self) -> None:
        self._items.clear()
        self.tokens = 0
