"""One model instance's continuous-batching scheduler with a paged KV cache (vLLM V1 style).

Each engine step first grows the KV of every running sequence by one token (taking new
16-token blocks as needed); when the pool is exhausted it preempts the most recently
admitted running request (RECOMPUTE: its blocks are freed and it goes back to the front
of the waiting queue, to be prefilled again with the tokens it had generated). Only when
no preemption happened it admits waiting requests first-come-first-served, while blocks
for their whole prompt and a sequence slot (max_num_seqs) are free. Prompts are
prefilled in chunks of `chunk_tokens` minus the step's decode tokens; a request's images
are encoded, one after the other, in the step where its prefill starts.

With `cost.kv_alloc: step` blocks are taken as vLLM V1 takes them: each step, for the
tokens it schedules (a running prompt's next chunk grows its blocks like a decode token
does, and a shortage preempts the newest the same way), and admission needs room for the
first chunk only, within the step's token budget; a prompt's blocks are cached as each
chunk computes.

A request whose context can never fit in the pool fails with status "oom-kv" (the only
OOM a paged engine has: vLLM's "exceeds the capacity of block_manager").

Caches (config.CacheSpec): with prefix caching, admission looks the request's content
blocks up (simulator.serving.prefixcache): its prefill starts after the leading blocks the
engine still holds, which it shares with the requests that hold them; its own blocks are
cached once computed (the prompt's when its prefill ends, a conversation's answer when it
finishes) and stay cached after it leaves until the pool needs room. The pool counts each
shared block once: blocks in use = the private blocks of running requests + the cache's
blocks in use. An image inside the cached prefix needs no encoding; another one whose id
the encoder cache still holds (simulator.serving.encodercache) is not encoded again.

Speed: runs of pure decode steps are simulated as one *segment*: K steps whose times
grow linearly with the live KV (the decode cost is affine in it), ending at the first
completion or block shortage. A segment can be cut short at any time (`truncate`) when a
request arrives or the GPU's sharing changes, so the result equals step-by-step
simulation up to the step in progress.
"""

from __future__ import annotations

import math
from collections import deque

from simulator.serving.config import CacheSpec, CostModel, GpuSpec, ModelSpec
from simulator.serving.costmodel import blocks_for, encode_s, kv_bandwidth, mixed_step_s
from simulator.serving.encodercache import EncoderCache
from simulator.serving.prefixcache import PrefixCache, block_sizes
from simulator.serving.workload import Request

__all__ = ["Engine"]


class Engine:
    """The scheduler and KV-cache state of one instance. Not thread-safe.

    The caller (the event loop) owns time: `plan(now, factor)` starts the next segment
    and returns when it ends; `finish(now)` applies it and returns the requests that left
    (finished or failed); `truncate(now)` shortens a decode segment in flight.
    """

    def __init__(
        self,
        cost: CostModel,
        gpu: GpuSpec,
        model: ModelSpec,
        pool_tokens: int,
        speedup: float = 1.0,
        cache: CacheSpec | None = None,
    ) -> None:
        self.cost = cost
        caches = cache if cache is not None else CacheSpec()
        self.prefix = PrefixCache() if caches.prefix_caching else None
        self.encoder = (
            EncoderCache(caches.encoder_cache_tokens or cost.chunk_tokens)
            if caches.encoder_caching
            else None
        )
        # a tensor-parallel engine's steps are its one-GPU times / speedup (costmodel.tp_speedup)
        self.speed = speedup
        self.gpu = gpu
        self.model = model
        self.block = cost.block_tokens
        self.pool_blocks = pool_tokens // cost.block_tokens
        self.used_blocks = 0
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.preemptions = 0
        self.steps = 0
        self.busy_s = 0.0
        self.slowed_s = 0.0  # busy time x sharing factor
        self.seg_factor = 1.0
        # the segment in flight
        self.in_flight = False
        self.seg_start = 0.0
        self.seg_end = 0.0
        self.seg_mixed = False
        self.seg_k = 0
        self.seg_a = 0.0
        self.seg_b = 0.0
        self.seg_chunks: list[tuple[Request, int]] = []
        self.seg_decode: list[Request] = []
        self.seg_failed: list[Request] = []
        bw = cost.eta * gpu.bandwidth_tb_s * 1e12
        self._step_fixed = (cost.decode_d0_ms / 1000.0 + model.weights_gb * 1e9 / bw) / speedup
        self._per_token = model.kv_bytes_per_token / kv_bandwidth(cost, gpu) / speedup
        self._per_seq = cost.step_seq_us * 1e-6 / speedup
        self._attn_chunk = cost.prefill_attn_context == "chunk"
        self._per_step = cost.kv_alloc == "step"

    # ---- state the router, the metrics and the signals read ----
    @property
    def active(self) -> bool:
        """Has work (running or waiting requests)."""
        return bool(self.running) or bool(self.waiting)

    @property
    def load(self) -> int:
        """Requests in flight: what least-loaded routing compares."""
        return len(self.running) + len(self.waiting)

    @property
    def kv_usage(self) -> float:
        return self.used_blocks / self.pool_blocks if self.pool_blocks else 0.0

    def enqueue(self, req: Request) -> None:
        self.waiting.append(req)

    # ---- scheduling ----
    def _free(self, req: Request) -> None:
        """Give back a request's blocks: its private ones, and its references on cached
        ones (those nobody else holds stay cached, free, until evicted)."""
        freed = req.blocks - req.shared
        if req.held and self.prefix is not None:
            freed += self.prefix.release(req.held)
        self.used_blocks -= freed
        req.blocks = 0
        req.shared = 0
        req.held = ()

    def _trim(self) -> None:
        """Cached free blocks may use only the pool's free room: evict the rest (LRU)."""
        if self.prefix is not None and self.prefix.free:
            self.prefix.evict_to(self.pool_blocks - self.used_blocks)

    def _cache_blocks(self, req: Request, upto: int) -> None:
        """The request has computed its first `upto` tokens: cache its content blocks that
        end inside them (a conversation's answer counts once `upto` covers it)."""
        if self.prefix is None or not req.block_hashes:
            return
        hashes, ends = req.block_hashes, req.block_ends
        reply_end = req.prompt + req.out - 1  # the last token's KV is never computed
        if req.reply_hash and upto >= reply_end:
            hashes = (*hashes, req.reply_hash)
            ends = (*ends, reply_end)
        held = set(req.held)
        add: list[int] = []
        for h, end, size in zip(hashes, ends, block_sizes(ends, self.block), strict=True):
            if end > upto:
                break
            if h in held or size == 0:
                continue
            if self.prefix.register(h, size):
                add.append(h)
                req.shared += size
        if add:
            req.held = (*req.held, *add)

    def _take(self, r: Request, blocks: int) -> None:
        """The request now holds `blocks` engine blocks (its new ones come from the pool)."""
        if blocks > r.blocks:
            self.used_blocks += blocks - r.blocks
            r.kv_blocks_new += blocks - r.blocks
            r.blocks = blocks

    def _chunks(self, prefill: list[Request], budget: int) -> list[tuple[Request, int]]:
        """The step's prefill chunks: FCFS over the running prompts within `budget` tokens."""
        out: list[tuple[Request, int]] = []
        for r in prefill:
            if budget <= 0:
                break
            take = min(r.need_prefill - r.done_prefill, budget)
            out.append((r, take))
            budget -= take
        return out

    def _preempt(self, victim: Request) -> None:
        self.running.remove(victim)
        self._free(victim)
        victim.admitted = False
        victim.need_prefill = victim.prompt + victim.gen
        victim.done_prefill = 0
        victim.ctx = 0
        victim.encoded = False
        victim.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(victim)

    def _fail(self, req: Request, failed: list[Request]) -> None:
        req.status = "oom-kv"
        failed.append(req)

    def _grow_running(self, failed: list[Request]) -> tuple[bool, int, int]:
        """Make room for one more token of every decoding sequence; preempt the newest on
        shortage.

        Returns (preempted, blocks the decoding sequences need this step, the step's token
        budget left for new prompts); after a preemption nothing is admitted this step. With
        per-step allocation the running prompts' next chunks are grown (and counted) too,
        and the budget is what their chunks and the decodes leave (else 0, unused).
        """
        preempted = False
        while True:
            need = 0
            decode = 0
            budget = 0
            for r in self.running:
                if r.done_prefill >= r.need_prefill:
                    need += blocks_for(r.ctx + 1, self.block) - r.blocks
                    decode += 1
            if self._per_step:
                prefill = [r for r in self.running if r.done_prefill < r.need_prefill]
                budget = self.cost.chunk_tokens - decode
                for r, take in self._chunks(prefill, budget):
                    need += max(0, blocks_for(r.done_prefill + take, self.block) - r.blocks)
                    budget -= take
            if self.used_blocks + need <= self.pool_blocks:
                break
            victim = self.running[-1]
            if len(self.running) == 1:
                # alone and still too big: it can never finish here
                self.running.pop()
                self._free(victim)
                self._fail(victim, failed)
                continue
            self._preempt(victim)
            preempted = True
        return preempted, need, budget

    def _admit(self, failed: list[Request], reserved: int, budget: int) -> None:
        """Admit FCFS while blocks (beyond the `reserved` decode growth) and slots last
        (per-step allocation: and the step's token `budget` left by the running requests,
        vLLM V1's `token_budget > 0`)."""
        first = 0
        while self.waiting and len(self.running) < self.cost.max_num_seqs:
            if self._per_step and budget <= 0:
                return
            head = self.waiting[0]
            if head.need_prefill == 0:
                head.need_prefill = head.prompt + head.gen
            need = blocks_for(head.need_prefill, self.block)
            if need > self.pool_blocks:
                self.waiting.popleft()
                self._fail(head, failed)
                continue
            hit = revive = k = 0
            if self.prefix is not None:
                if head.block_hashes:
                    # vLLM computes at least the last token (its logits): num_tokens - 1
                    limit = (head.need_prefill - 1) // self.block
                    sizes = block_sizes(head.block_ends, self.block)
                    k, hit, revive = self.prefix.match(head.block_hashes, sizes, limit)
            if self._per_step:  # blocks for the cached prefix and the first chunk only
                first = min(head.need_prefill - hit * self.block, budget)
                need = blocks_for(hit * self.block + first, self.block)
            take = need - hit + revive  # private blocks + cached ones taken back into use
            if self.used_blocks + reserved + take > self.pool_blocks:
                return
            if self._per_step:
                budget -= first
            self.waiting.popleft()
            if k:
                assert self.prefix is not None
                held = head.block_hashes[:k]
                self.prefix.acquire(held)
                head.held = held
                head.shared = hit
            if head.block_hashes:
                head.prefix_query_tokens += head.need_prefill
                head.prefix_hit_tokens += hit * self.block
                if head.preemptions:
                    head.prefix_rehit_tokens += hit * self.block
            head.done_prefill = hit * self.block
            head.blocks = need
            head.kv_blocks_new += need - hit
            head.admitted = True
            self.used_blocks += take
            self.running.append(head)
            self._trim()

    def plan(self, now: float, factor: float) -> float | None:
        """Start the next segment at `now` with sharing slow-down `factor`.

        Returns its end time, or None when there is nothing to run (idle). Requests that
        failed while planning are kept for `finish` (they leave at `now`: the caller
        should call `finish(now)` if plan returns `now`).
        """
        failed: list[Request] = []
        preempted, growth, budget = self._grow_running(failed)
        if not preempted:
            self._admit(failed, growth, budget)
        self.seg_failed = failed
        self.seg_start = now
        self.seg_factor = factor
        decode = [r for r in self.running if r.done_prefill >= r.need_prefill]
        prefill = [r for r in self.running if r.done_prefill < r.need_prefill]
        if not decode and not prefill:
            self.in_flight = bool(failed)
            self.seg_end = now
            self.seg_k = 0
            self.seg_mixed = True
            self.seg_chunks = []
            self.seg_decode = []
            return now if failed else None
        self.in_flight = True
        self.seg_decode = decode
        live = sum(r.ctx + 1 for r in decode)
        if prefill:
            chunks = self._chunks(prefill, self.cost.chunk_tokens - len(decode))
            encode = 0.0
            tokens = 0
            attn = 0.0  # sum of T (s + T/2) over the chunks (costmodel.mixed_step_s)
            for r, take in chunks:
                if not r.encoded:
                    r.encoded = True
                    encode += self._encode_s(r)
                before = r.done_prefill if self._attn_chunk else r.need_prefill
                attn += take * (before + take / 2.0)
                tokens += take
                if self._per_step:  # the chunk's blocks (room checked by _grow_running)
                    self._take(r, blocks_for(r.done_prefill + take, self.block))
            # decode sequences reserve their next block now
            for r in decode:
                self._take(r, blocks_for(r.ctx + 1, self.block))
            self._trim()
            step = mixed_step_s(
                self.cost, self.gpu, self.model, tokens, len(decode), live, len(chunks), attn
            )
            dt = factor * (step + encode) / self.speed
            self.seg_mixed = True
            self.seg_chunks = chunks
            self.seg_k = 1
            self.seg_end = now + dt
            return self.seg_end
        # pure decode: K steps until the first completion or block shortage
        k = min(r.out - r.gen for r in decode)
        k = max(1, k)
        k = self._fit_steps(decode, k)
        self.seg_mixed = False
        self.seg_chunks = []
        self.seg_k = k
        self.seg_a = factor * (
            self._step_fixed + live * self._per_token + len(decode) * self._per_seq
        )
        self.seg_b = factor * len(decode) * self._per_token
        self.seg_end = now + self._seg_time(k)
        return self.seg_end

    def _encode_s(self, r: Request) -> float:
        """Encoder time of the request's images that need encoding (module docstring)."""
        if not r.image_ids:
            r.images_encoded += len(r.images)
            return sum(encode_s(self.cost, t) for t in r.images)
        total = 0.0
        end = 0
        for tokens, image in zip(r.images, r.image_ids, strict=True):
            end += tokens
            if end <= r.done_prefill:  # inside the cached prefix (images come first)
                r.images_prefix += 1
            elif self.encoder is not None and self.encoder.lookup(image):
                r.images_encoder_hits += 1
            else:
                r.images_encoded += 1
                total += encode_s(self.cost, tokens)
                if self.encoder is not None:
                    self.encoder.insert(image, tokens)
        return total

    def _fit_steps(self, decode: list[Request], k: int) -> int:
        """Largest j <= k such that growing every sequence by j tokens fits the pool."""
        free = self.pool_blocks - self.used_blocks
        blk = self.block

        def need(j: int) -> int:
            return sum(blocks_for(r.ctx + j, blk) - r.blocks for r in decode)

        if need(k) <= free:
            return k
        lo, hi = 1, k  # need(1) <= free is guaranteed by _grow_running
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if need(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _seg_time(self, k: int) -> float:
        return k * self.seg_a + self.seg_b * k * (k - 1) / 2.0

    def truncate(self, now: float) -> float | None:
        """Cut a decode segment after the step in progress at `now`.

        Returns the new end time when it moved (the caller reschedules), else None.
        """
        if not self.in_flight or self.seg_mixed or self.seg_k <= 1:
            return None
        elapsed = now - self.seg_start
        a, b = self.seg_a, self.seg_b
        if b > 0:
            p = a - b / 2.0
            done = int((-p + math.sqrt(p * p + 2.0 * b * max(0.0, elapsed))) / b)
        else:
            done = int(max(0.0, elapsed) / a)
        while done > 0 and self._seg_time(done) > elapsed:
            done -= 1
        while done < self.seg_k and self._seg_time(done + 1) <= elapsed:
            done += 1
        k = min(self.seg_k, done + 1)
        if k >= self.seg_k:
            return None
        self.seg_k = k
        self.seg_end = self.seg_start + self._seg_time(k)
        return self.seg_end

    def finish(self, now: float) -> list[Request]:
        """Apply the segment that ends at `now`; returns requests that finished or failed."""
        left = list(self.seg_failed)
        self.seg_failed = []
        self.in_flight = False
        self.busy_s += now - self.seg_start
        self.slowed_s += (now - self.seg_start) * self.seg_factor
        k = self.seg_k
        if k == 0:
            return left
        self.steps += k
        blk = self.block
        for r in self.seg_decode:
            r.ctx += k
            r.gen += k
            self._take(r, blocks_for(r.ctx, blk))  # decode segments take blocks at their end
        for r, take in self.seg_chunks:
            r.done_prefill += take
            if self._per_step and r.done_prefill < r.need_prefill:
                self._cache_blocks(r, r.done_prefill)  # vLLM V1 caches full blocks per chunk
            if r.done_prefill >= r.need_prefill:
                r.ctx = r.need_prefill
                if r.gen == 0:
                    r.first_token = now
                r.gen += 1
                self._cache_blocks(r, r.ctx)
        done = [r for r in self.running if r.gen >= r.out]
        if done:
            for r in done:
                self.running.remove(r)
                if r.reply_hash:
                    self._cache_blocks(r, r.ctx)
                self._free(r)
                r.status = "ok"
                r.finish = now
            left.extend(done)
        self._trim()
        self.seg_decode = []
        self.seg_chunks = []
        return left

    def drain_all(self) -> list[Request]:
        """Remove every request (the pod is killed); frees the whole pool."""
        out = list(self.running) + list(self.waiting)
        self.running.clear()
        self.waiting.clear()
        self.used_blocks = 0
        for r in out:
            r.blocks = 0
            r.shared = 0
            r.held = ()
        if self.prefix is not None:
            self.prefix.clear()
        if self.encoder is not None:
            self.encoder.clear()
        self.in_flight = False
        return out
