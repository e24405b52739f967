"""bpf.ringbuf on bytearrays laid out like the kernel's ring buffer map (no kernel needed);
test_bpf_probes.py reads the real one through the agent."""

from __future__ import annotations

import struct

import pytest

from bpf.ringbuf import BUSY_BIT, DISCARD_BIT, HEADER_SIZE, RingReader

SIZE = 64
OFF = 8  # data area after the producer position


def ring(records: list[tuple[bytes, int]], start: int = 0) -> tuple[bytearray, bytearray]:
    """Consumer and producer(+data) buffers holding `records` (payload, flag bits) from
    position `start`, the data area mapped twice as the kernel does."""
    data = bytearray(2 * SIZE)
    pos = start
    for payload, bits in records:
        at = pos % SIZE
        rec = struct.pack("<II", len(payload) | bits, 0) + payload
        rec += b"\0" * (-len(rec) % 8)
        for i, b in enumerate(rec):
            data[(at + i) % SIZE] = b
        pos += len(rec)
    data[SIZE:] = data[:SIZE]
    cons = bytearray(struct.pack("<Q", start))
    prod = bytearray(struct.pack("<Q", pos)) + data
    return cons, prod


def test_drain_returns_records_in_order_and_moves_the_consumer() -> None:
    cons, prod = ring([(b"abc", 0), (b"12345678", 0), (b"x" * 13, 0)])
    r = RingReader(cons, prod, OFF, SIZE)
    assert r.drain() == [b"abc", b"12345678", b"x" * 13]
    assert struct.unpack("<Q", cons)[0] == struct.unpack_from("<Q", prod)[0]
    assert r.drain() == []


def test_discarded_records_are_skipped_and_busy_ones_wait() -> None:
    cons, prod = ring([(b"keep", 0), (b"gone", DISCARD_BIT), (b"later", BUSY_BIT)])
    r = RingReader(cons, prod, OFF, SIZE)
    assert r.drain() == [b"keep"]
    # the consumer stops before the busy record: 2 records of 8 + 8 bytes read
    assert struct.unpack("<Q", cons)[0] == 2 * (HEADER_SIZE + 8)


def test_a_record_wrapping_the_end_is_read_whole() -> None:
    cons, prod = ring([(b"w" * 20, 0), (b"tail", 0)], start=SIZE - 16)
    assert RingReader(cons, prod, OFF, SIZE).drain() == [b"w" * 20, b"tail"]


def test_positions_past_the_size_are_masked() -> None:
    cons, prod = ring([(b"late", 0)], start=5 * SIZE + 8)
    assert RingReader(cons, prod, OFF, SIZE).drain() == [b"late"]


def test_max_records_bounds_one_drain() -> None:
    cons, prod = ring([(b"a", 0), (b"b", 0), (b"c", 0)])
    r = RingReader(cons, prod, OFF, SIZE, max_records=2)
    assert r.drain() == [b"a", b"b"]
    assert r.drain() == [b"c"]


def test_size_must_be_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="power of two"):
        RingReader(bytearray(8), bytearray(8), OFF, 48)


class _StaleFirstCopy(bytearray):
    """A producer buffer whose first slice shows every record's bytes still zero (the
    header already committed): what a copy that loaded the bytes before the header would
    hold if the kernel committed the record mid-copy."""

    copies = 0

    def __getitem__(self, key):  # type: ignore[no-untyped-def, override]
        got = super().__getitem__(key)
        if isinstance(key, slice):
            self.copies += 1
            if self.copies == 1:
                stale = bytearray(got)
                p = 0
                while p + HEADER_SIZE <= len(stale):
                    n = struct.unpack_from("<I", stale, p)[0] & ~(BUSY_BIT | DISCARD_BIT)
                    stale[p + HEADER_SIZE : p + HEADER_SIZE + n] = bytes(n)
                    p += (n + HEADER_SIZE + 7) & ~7
                return stale
        return got


def test_records_come_from_the_second_copy_when_the_first_raced_a_commit() -> None:
    cons, prod = ring([(b"abc", 0), (b"12345678", 0)])
    stale = _StaleFirstCopy(prod)
    assert RingReader(cons, stale, OFF, SIZE).drain() == [b"abc", b"12345678"]
    assert stale.copies == 2
    assert struct.unpack("<Q", cons)[0] == struct.unpack_from("<Q", prod)[0]
