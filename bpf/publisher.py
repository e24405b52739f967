"""One node's publisher: decides when a signals document is written and writes it through
a channel (the NodeSignals resource or the Node annotation).

Two limits together keep a cluster within DESIGN.md's bound of 1 write/s per 100 nodes
(docs/collector.md has the arithmetic):

- `should_publish` (bpf/publish.py): at most every `min_interval_s`, only when a value
  moved, and a heartbeat after `max_interval_s`;
- a token bucket per node: on average at most `writes_per_100s` writes per 100 s
  (heartbeats included), `write_burst` in a row; a write that fails still spends its
  token, so an API server that refuses writes is not hammered.

The clock is the signals' own `ts` (the agent's clock), so a test drives it with a fake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from bpf.publish import PublishConfig, should_publish
from kvspread.signals import NodeSignals

__all__ = ["TokenBucket", "Publisher"]


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
    ) -> None:
        self.config = config
        self._write = write
        self._encode = encode
        self.bucket = TokenBucket(config.writes_per_100s / 100.0, float(config.write_burst))
        self.last: NodeSignals | None = None
        self.writes = 0
        self.held_by_budget = 0

    def offer(self, sig: NodeSignals) -> tuple[bool, str]:
        """(written, why); raises what `write` raises."""
        ok, why = should_publish(self.last, sig, sig.ts, self.config)
        if not ok:
            return False, why
        if not self.bucket.take(sig.ts):
            self.held_by_budget += 1
            return False, f"write budget spent ({why})"
        text = self._encode(sig)
        self.writes += 1
        self._write(text)
        self.last = replace(sig)
        return True, why
