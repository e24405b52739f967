"""The request streams of the BLIS side-by-side check, and BLIS's TraceV2 format for them.

Both simulators must replay exactly the same requests, so the stream is drawn once here
and written twice: as the serving simulation's `Request`s and as a TraceV2 file pair (a
YAML header and a CSV, the format `blis replay --trace-header H --trace-data D` reads;
BLIS, github.com/inference-sim/inference-sim, sim/workload/tracev2.go). In TraceV2 a
request's prompt is `prefix_length` tokens shared by every request of its `prefix_group`
followed by `input_tokens` of its own, so `input_tokens` here is the prompt minus the
prefix.

TraceV2 knows one flat prefix per request, not a tree. A Mooncake request (its `hash_ids`
are the prompt's 512-token blocks, equal ids = equal content) therefore maps to its
deepest leading run of blocks that at least one other request of the trace starts with
too: that run is its prefix group, its length the prefix length. Two requests sharing only
their first block, where one of them shares more with a third, end up in different groups:
that reuse is lost in the mapping (`reuse_bounds` measures both).
"""

from __future__ import annotations

import dataclasses
import json
import lzma
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "TRACEV2_COLUMNS",
    "StreamRequest",
    "MooncakeRecord",
    "read_mooncake",
    "map_mooncake",
    "reuse_bounds",
    "tracev2_rows",
    "write_tracev2",
    "block_hashes",
    "spread_ties",
]

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per `hash_ids` block of the Mooncake traces (their README, FAST'25 release)."""

TRACEV2_COLUMNS = (
    "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,"
    "prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,"
    "audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,"
    "arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,"
    "status,error_message,finish_reason"
).split(",")
"""The CSV columns BLIS's TraceV2 reader expects, in its order (trace_version 3)."""

MAX_REQUESTS = 200_000
"""Most requests one stream may hold (bounds memory; the Mooncake trace has 12,031)."""


@dataclass(frozen=True)
class StreamRequest:
    """One request of a stream: arrival (s), prompt and output tokens, shared prefix."""

    rid: int
    arrival_s: float
    prompt: int
    out: int
    prefix_group: str = ""
    prefix_length: int = 0
    hash_ids: tuple[int, ...] = ()
    """The Mooncake trace's own 512-token block ids (empty for other streams)."""


@dataclass(frozen=True)
class MooncakeRecord:
    """One line of a Mooncake trace (timestamp in ms)."""

    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def read_mooncake(path: Path, limit: int = MAX_REQUESTS) -> list[MooncakeRecord]:
    """The first `limit` records of a Mooncake JSONL trace (`.jsonl`, or `.jsonl.xz` as
    the bundled one is stored); a bad line is a ValueError naming the line."""
    out: list[MooncakeRecord] = []
    try:
        _read_records(path, limit, out)
    except (lzma.LZMAError, EOFError) as e:
        raise ValueError(f"{path}: not an xz file ({e})") from None
    return out


def _read_records(path: Path, limit: int, out: list[MooncakeRecord]) -> None:
    xz = path.name.lower().endswith(".xz")
    with lzma.open(path, "rt", encoding="utf-8") if xz else path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                rec = MooncakeRecord(
                    float(d["timestamp"]),
                    int(d["input_length"]),
                    int(d["output_length"]),
                    tuple(int(h) for h in d["hash_ids"]),
                )
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a Mooncake record ({e})") from None
            if rec.input_length < 1 or rec.output_length < 1:
                raise ValueError(f"{path}:{n}: input_length and output_length must be >= 1")
            out.append(rec)


class _Trie:
    """Leading runs of blocks as trie nodes: node id of (parent node, block id). One
    entry per distinct run (at most the trace's block count), unlike tuples of runs."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, int], int] = {}

    def path(self, hash_ids: Sequence[int]) -> list[int]:
        """Node ids of every leading run of `hash_ids`, shortest first."""
        node, out = -1, []
        for h in hash_ids:
            node = self.ids.setdefault((node, h), len(self.ids))
            out.append(node)
        return out


def map_mooncake(records: Sequence[MooncakeRecord], time_scale: float = 1.0) -> list[StreamRequest]:
    """Mooncake records as a stream: arrival = timestamp / 1000 / time_scale (time_scale 2
    replays the trace twice as fast), each request's prefix = its deepest leading run of
    blocks shared with another request (module docstring), capped one token short of
    the prompt so every TraceV2 row keeps an own token."""
    if time_scale <= 0:
        raise ValueError("time_scale must be > 0")
    trie = _Trie()
    paths = [trie.path(r.hash_ids) for r in records]
    counts: Counter[int] = Counter(n for p in paths for n in p)
    groups: dict[int, str] = {}
    out: list[StreamRequest] = []
    t0 = min((r.timestamp_ms for r in records), default=0.0)
    for i, (r, path) in enumerate(zip(records, paths, strict=True)):
        depth = 0
        while depth < len(path) and counts[path[depth]] >= 2:
            depth += 1
        group, length = "", 0
        if depth:
            length = min(depth * MOONCAKE_BLOCK_TOKENS, r.input_length - 1)
            if length > 0:
                group = groups.setdefault(path[depth - 1], f"mc{len(groups)}")
            else:
                length = 0
        arrival = (r.timestamp_ms - t0) / 1000.0 / time_scale
        out.append(
            StreamRequest(i, arrival, r.input_length, r.output_length, group, length, r.hash_ids)
        )
    return out


def reuse_bounds(
    records: Sequence[MooncakeRecord], stream: Sequence[StreamRequest]
) -> tuple[float, float]:
    """(share of the trace's blocks that repeat an earlier block with the same leading
    run, share of the mapped stream's prompt tokens an infinite cache could reuse):
    the tree's bound and the flat mapping's. A block repeats when an earlier request had
    the same leading run up to and including it; a mapped request reuses its prefix when
    an earlier request of its group exists."""
    trie = _Trie()
    seen: set[int] = set()
    total = repeat = 0
    for r in records:
        for node in trie.path(r.hash_ids):
            total += 1
            if node in seen:
                repeat += 1
            else:
                seen.add(node)
    first: set[str] = set()
    tokens = reused = 0
    for s in stream:
        tokens += s.prompt
        if s.prefix_group:
            if s.prefix_group in first:
                reused += s.prefix_length
            else:
                first.add(s.prefix_group)
    return (repeat / total if total else 0.0, reused / tokens if tokens else 0.0)


def block_hashes(req: StreamRequest, block_tokens: int, tree: bool = False) -> tuple[int, ...]:
    """Content ids of a request's full `block_tokens` blocks as a hash chain: equal for
    the blocks of a shared prefix (same group, same position), unique after it. What a
    prefix-caching engine keys its blocks by; the chain makes a block's id depend on
    every block before it, as vLLM's block hashes do.

    `tree`: from the Mooncake trace's own block ids instead (a block of `block_tokens`
    inside 512-token block k is keyed by that block's id and its place in it), so every
    shared leading run is reusable, not only the flat TraceV2 group."""
    if block_tokens <= 0:
        raise ValueError("block_tokens must be > 0")
    out: list[int] = []
    h = 0
    shared = req.prefix_length // block_tokens if req.prefix_group else 0
    for i in range(req.prompt // block_tokens):
        key: object
        k, start = divmod(i * block_tokens, MOONCAKE_BLOCK_TOKENS)
        if tree and k < len(req.hash_ids):
            key = ("mc", req.hash_ids[k], start)
        elif not tree and i < shared:
            key = (req.prefix_group, i)
        else:
            key = ("own", req.rid, i)
        h = hash((h, key))
        out.append(h)
    return tuple(out)


def spread_ties(stream: Sequence[StreamRequest], window_s: float) -> list[StreamRequest]:
    """The stream with requests that share an arrival time spread evenly over the
    `window_s` after it (the k-th of n at t + k window / n); 0 leaves it as it is. The
    Mooncake trace's timestamps are whole milliseconds and most requests share one."""
    if window_s < 0:
        raise ValueError("window_s must be >= 0")
    if window_s == 0:
        return list(stream)
    ties: dict[float, int] = {}
    for s in stream:
        ties[s.arrival_s] = ties.get(s.arrival_s, 0) + 1
    seen: dict[float, int] = {}
    out: list[StreamRequest] = []
    for s in stream:
        k = seen.get(s.arrival_s, 0)
        seen[s.arrival_s] = k + 1
        t = s.arrival_s + k * window_s / ties[s.arrival_s]
        out.append(dataclasses.replace(s, arrival_s=t))
    out.sort(key=lambda r: (r.arrival_s, r.rid))
    return out


def tracev2_rows(stream: Iterable[StreamRequest], model: str = "") -> list[list[str]]:
    """The TraceV2 CSV rows of a stream (header row first): arrival and send time in µs,
    the prompt split into prefix_length + input_tokens."""
    rows = [list(TRACEV2_COLUMNS)]
    for s in stream:
        if s.prefix_length >= s.prompt:
            raise ValueError(f"request {s.rid}: prefix_length must be < prompt")
        t_us = str(int(round(s.arrival_s * 1e6)))
        own = s.prompt - s.prefix_length
        rows.append(
            # fmt: off
            [
                str(s.rid),
                "c0",
                "t0",
                "standard",
                "",
                "0",
                s.prefix_group,
                str(s.prefix_length),
                "true",
                str(own),
                str(s.out),
                "0",
                "0",
                "0",
                "0",
                "0",
                model,
                "0",
                "0",
                t_us,
                t_us,
                "0",
                "0",
                "0",
                "ok",
                "",
                "",
            ]
            # fmt: on
        )
    return rows


def write_tracev2(stream: Sequence[StreamRequest], prefix: Path) -> tuple[Path, Path]:
    """Write PREFIX.yaml (header) and PREFIX.csv (rows); returns both paths."""
    if len(stream) > MAX_REQUESTS:
        raise ValueError(f"stream has {len(stream)} requests (at most {MAX_REQUESTS})")
    header = prefix.with_suffix(".yaml")
    data = prefix.with_suffix(".csv")
    header.write_text(
        "trace_version: 3\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\n",
        encoding="utf-8",
    )
    # no field holds a comma, quote or newline (ids, numbers, fixed words)
    data.write_text("".join(",".join(r) + "\n" for r in tracev2_rows(stream)), encoding="utf-8")
    return header, data
