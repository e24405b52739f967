"""The Mooncake trace format: requests that say which prompt blocks they share.

Mooncake's FAST'25 traces (github.com/kvcache-ai/Mooncake, `FAST25-release/traces/`) are
JSON Lines, one request per line: `timestamp` (arrival, ms from the start),
`input_length` and `output_length` (tokens) and `hash_ids`, the prompt's blocks of 512
tokens (the last one may be partial) remapped to integers: equal ids mean a reusable prefix
block. This module reads such a file (plain, or xz-compressed as the bundled copy is) and
turns it into simulator requests whose `block_hashes` chain the ids (entry i stands for
the prefix up to block i) and whose `block_ends` say where each block ends.

Arrivals are replayed as given. `rate_scale` below 1 keeps each request with that
probability (Bernoulli thinning); above 1 the trace is superposed with copies of itself
shifted by random offsets. A copy, and every lap when a run is longer than the trace,
chains its ids from its own seed: another tenant's prompts, sharing nothing with the
original (else the copies would invent reuse the trace does not have).
"""

from __future__ import annotations

import json
import lzma
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.serving.prefixcache import chain
from simulator.serving.workload import Request

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "MooncakeWorkload",
    "is_mooncake",
    "load_mooncake",
    "mooncake_request",
    "reuse_bound",
    "block_ends",
]

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per `hash_ids` block (Mooncake FAST'25 trace README)."""
MAX_LINES = 1_000_000
"""Most requests read from one trace (a bound on memory: the bundled one has 12,031)."""
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
MAX_TOKENS = 10_000_000
"""Most tokens one request's input or output may have (ten times the longest context any
engine offers today); a larger value is a malformed line, not a request."""
MAX_TIMESTAMP_MS = 366 * 86_400_000
"""Latest arrival, ms from the trace's start: a year (the bundled trace spans an hour)."""


class MooncakeError(ValueError):
    """A Mooncake trace that cannot be read; the message names the line."""


@dataclass(frozen=True)
class MooncakeWorkload:
    path: Path
    t_s: np.ndarray  # seconds after the first request
    input_len: np.ndarray
    output_len: np.ndarray
    hash_ids: tuple[tuple[int, ...], ...]

    @property
    def span_s(self) -> float:
        return float(self.t_s[-1]) + 1.0 if len(self.t_s) else 0.0

    def mean_rate(self, start_s: float, end_s: float) -> float:
        return len(self.t_s) / self.span_s


def is_mooncake(path: Path) -> bool:
    """A `.jsonl` or `.jsonl.xz` file (the format is checked when it is read)."""
    name = path.name.lower()
    return name.endswith(".jsonl") or name.endswith(".jsonl.xz")


def _lines(path: Path) -> list[str]:
    if path.name.lower().endswith(".xz"):
        try:
            with lzma.open(path, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
        except lzma.LZMAError as exc:
            raise MooncakeError(f"{path}: not an xz file ({exc})") from None
    return path.read_text(encoding="utf-8").splitlines()


def _int(row: dict[str, object], key: str, where: str, most: int) -> int:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise MooncakeError(f"{where}: {key} must be a number, got {v!r}")
    if not 0 <= v <= most:
        raise MooncakeError(f"{where}: {key} must be in 0..{most:,}, got {v!r}")
    return int(v)


def load_mooncake(path: Path) -> MooncakeWorkload:
    """Parse a Mooncake JSONL trace; a bad line is one MooncakeError naming it."""
    ts: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    ids: list[tuple[int, ...]] = []
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        if len(ts) >= MAX_LINES:
            raise MooncakeError(f"{path}: more than {MAX_LINES:,} requests")
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MooncakeError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not all(k in row for k in FIELDS):
            raise MooncakeError(f"{where}: a Mooncake request needs {', '.join(FIELDS)}")
        blocks = row["hash_ids"]
        if not isinstance(blocks, list) or not all(
            isinstance(b, int) and not isinstance(b, bool) for b in blocks
        ):
            raise MooncakeError(f"{where}: hash_ids must be a list of integers")
        ts.append(_int(row, "timestamp", where, MAX_TIMESTAMP_MS) / 1000.0)
        inp.append(_int(row, "input_length", where, MAX_TOKENS))
        out.append(_int(row, "output_length", where, MAX_TOKENS))
        ids.append(tuple(blocks))
    if not ts:
        raise MooncakeError(f"{path}: no requests")
    t = np.asarray(ts)
    order = np.argsort(t, kind="stable")
    return MooncakeWorkload(
        path,
        t[order] - t[order][0],
        np.asarray(inp, dtype=np.int64)[order],
        np.asarray(out, dtype=np.int64)[order],
        tuple(ids[i] for i in order),
    )


def block_ends(n_blocks: int, prompt: int) -> tuple[int, ...]:
    """Where each 512-token block ends; the last at the prompt's end (partial)."""
    return tuple(min(prompt, MOONCAKE_BLOCK_TOKENS * (i + 1)) for i in range(n_blocks))


def reuse_bound(requests: Iterable[Request]) -> tuple[float, float]:
    """The reuse a stream offers: (share of content blocks, share of prompt tokens) in a
    leading run of blocks that an earlier request (in arrival order) already had, i.e.
    the hit rate of one infinite prefix cache that sees every request (about 37 % of the
    Mooncake conversation trace's blocks, its README says)."""
    seen: set[int] = set()
    blocks = hit_blocks = hit_tokens = tokens = 0
    for r in sorted(requests, key=lambda r: r.arrival):
        hashes = r.block_hashes
        run = 0
        while run < len(hashes) and hashes[run] in seen:
            run += 1
        blocks += len(hashes)
        hit_blocks += run
        hit_tokens += r.block_ends[run - 1] if run else 0
        tokens += r.prompt
        seen.update(hashes)
    return hit_blocks / max(blocks, 1), hit_tokens / max(tokens, 1)


def mooncake_request(
    wl: MooncakeWorkload, i: int, t: float, seed: int, service: str, kind: str
) -> Request:
    """Trace request `i` arriving at sim time `t`, its ids chained from `seed` (0 for the
    trace itself, another value for a copy or a later lap: module docstring)."""
    prompt = max(1, int(wl.input_len[i]))
    ids = wl.hash_ids[i]
    return Request(
        0,
        service,
        kind,
        t,
        prompt,
        (),
        max(1, int(wl.output_len[i])),
        block_hashes=chain(ids, seed),
        block_ends=block_ends(len(ids), prompt),
    )
