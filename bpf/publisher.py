"""One node's publisher: decides when a signals document is written and writes it through
a channel (the NodeSignals resource or the Node annotation).

Two limits together keep a cluster within docs/design.md's bound of 1 write/s per 100 nodes
(docs/collector.md has the arithmetic):

- `should_publish` (bpf/publish.py): at most every `min_interval_s`, only when a value
  moved, and a heartbeat after `max_interval_s`;
- a token bucket per node: on average at most `writes_per_100s` writes per 100 s
  (heartbeats included), `write_burst` in a row; a write that fails still spends its
  token, so an API server that refuses writes is not hammered.

Heartbeats are spread in time, as kubelet spreads its Lease renewals: the first one after
a start comes at a random point between `min_interval_s` and `max_interval_s`, later ones
at `max_interval_s` less up to 10 %, so collectors started together (a DaemonSet rollout,
a cluster restart) do not heartbeat in waves of thousands of writes.

The clock is the signals' own `ts` (the agent's clock), so a test drives it with a fake.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from bpf.publish import PublishConfig, should_publish
from kvspread.signals import NodeSignals

__all__ = ["TokenBucket", "Publisher", "HEARTBEAT_JITTER"]

HEARTBEAT_JITTER = 0.1
"""A heartbeat comes up to this share of `max_interval_s` early (never late)."""


@dataclass
class TokenBucket:
    """`burst` tokens, refilled at `rate_per_s`; rate 0 means unlimited."""

    rate_per_s: float
    burst: float
    tokens: float = -1.0
    at: float | None = None

    def _fill(self, now: float) -> None:
        if self.at is None:
            self.tokens, self.at = self.burst, now
            return
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate_per_s)
        self.at = max(self.at, now)

    def available(self, now: float) -> bool:
        if self.rate_per_s <= 0:
            return True
        self._fill(now)
        return self.tokens >= 1.0

    def take(self, now: float) -> bool:
        """Spend one token if there is one."""
        if not self.available(now):
            return False
        if self.rate_per_s > 0:
            self.tokens -= 1.0
        return True


class Publisher:
    """`offer(sig)` writes `encode(sig)` with `write` when the limits allow it.

    `write(document)` raises on failure (the agent counts and logs it, and offers again
    next cycle); `last` is the last document written.
    """

    def __init__(
        self,
        config: PublishConfig,
        write: Callable[[str], None],
        encode: Callable[[NodeSignals], str],
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._write = write
        self._encode = encode
        self._rng = rng or random.Random()
        self._gate = config  # config with this cycle's (jittered) heartbeat
        self.bucket = TokenBucket(config.writes_per_100s / 100.0, float(config.write_burst))
        self.last: NodeSignals | None = None
        self.writes = 0
        self.held_by_budget = 0

    def offer(self, sig: NodeSignals) -> tuple[bool, str]:
        """(written, why); raises what `write` raises."""
        ok, why = should_publish(self.last, sig, sig.ts, self._gate)
        if not ok:
            return False, why
        if not self.bucket.take(sig.ts):
            self.held_by_budget += 1
            return False, f"write budget spent ({why})"
        text = self._encode(sig)
        self.writes += 1
        self._write(text)
        c = self.config
        if self.last is None:
            heartbeat = self._rng.uniform(min(c.min_interval_s, c.max_interval_s), c.max_interval_s)
        else:
            heartbeat = c.max_interval_s * (1.0 - HEARTBEAT_JITTER * self._rng.random())
        self._gate = replace(c, max_interval_s=heartbeat)
        self.last = replace(sig)
        return True, why
