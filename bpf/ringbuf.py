"""Read a BPF ring buffer (BPF_MAP_TYPE_RINGBUF) straight from its memory map, in batches.

bcc's `ring_buffer_consume` calls back into Python through ctypes once per record; at
thousands of requests per second that trampoline and the per-event call chain are a good
share of the collector's CPU. The ring's layout is a stable kernel ABI
(kernel/bpf/ringbuf.c, the same one libbpf's `ring_buffer__consume` reads): one read-write
page holding the consumer position, one read-only page holding the producer position, then
the data area (a power of two bytes, mapped twice in a row so a record that wraps is
contiguous). Each record is an 8-byte header (`u32 len` with a busy and a discard bit,
`u32 page offset`) and its bytes, padded to 8. `RingReader.drain` copies every committed
record out in one pass and then moves the consumer position once.

Pure over any buffers with that layout, so it is tested on bytearrays without a kernel.
"""

from __future__ import annotations

import mmap
import struct

__all__ = [
    "RingReader",
    "open_ring",
    "BUSY_BIT",
    "DISCARD_BIT",
    "HEADER_SIZE",
    "DIRECT_READ_MACHINES",
]

DIRECT_READ_MACHINES = frozenset(("x86_64", "AMD64"))
"""Where plain loads are enough: x86-64 never reorders a load with an earlier load (TSO),
so reading a record after its header sees what the kernel wrote before it released the
header. Weaker models (arm64) need an acquire load, which Python cannot issue; the loader
reads those rings through bcc's callbacks instead."""

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
HEADER_SIZE = 8
_POS = struct.Struct("<Q")
_LEN = struct.Struct("<I")


class RingReader:
    """Consumer side of one ring buffer.

    `consumer` holds the consumer position (u64 at offset 0, written here); `producer`
    holds the producer position at offset 0 and the data area from `data_offset` on,
    `size` bytes mapped twice. `max_records` bounds one drain (the rest waits for the next).
    """

    def __init__(
        self,
        consumer: bytearray | mmap.mmap,
        producer: bytes | bytearray | mmap.mmap,
        data_offset: int,
        size: int,
        max_records: int = 65536,
    ) -> None:
        if size <= 0 or size & (size - 1):
            raise ValueError(f"ring size must be a power of two, got {size}")
        self._cons = consumer
        self._prod = producer
        self._off = data_offset
        self._mask = size - 1
        self._max = max_records

    def drain(self) -> list[bytes]:
        """Every committed record since the last drain (discarded ones skipped), oldest
        first; stops at a record still being written (busy).

        The unread stretch is copied out in one slice and walked in that copy (a Python
        loop over a memory map pays the buffer protocol per header and per record, half
        the drain's time). One copy is not enough on its own: a large copy (`rep movsb`)
        may load a record's bytes before its header, so a record committed during the
        copy could show a committed header over stale bytes. The committed stretch is
        therefore copied a second time, after every header in it was seen committed, and
        the records are taken from the first copy only when the two are equal (they
        differ only for such a race; the second copy is walked then)."""
        cons = _POS.unpack_from(self._cons, 0)[0]
        prod = _POS.unpack_from(self._prod, 0)[0]
        if cons >= prod:
            return []
        at = self._off + (cons & self._mask)
        avail = min(prod - cons, self._mask + 1)
        buf = self._prod
        blob = bytes(buf[at : at + avail])
        out, used = _walk(blob, avail, self._max)
        if used:
            settled = bytes(buf[at : at + used])
            if settled != blob[:used]:
                out, used = _walk(settled, used, self._max)
        _POS.pack_into(self._cons, 0, cons + used)
        return out


def _walk(blob: bytes, avail: int, limit: int) -> tuple[list[bytes], int]:
    """The records at the start of `blob` up to the first busy one (at most `limit`),
    and the bytes they take."""
    out: list[bytes] = []
    append = out.append
    unpack = _LEN.unpack_from
    flags = BUSY_BIT | DISCARD_BIT
    p = 0
    while p < avail and limit:
        n = unpack(blob, p)[0]
        if n & flags:
            if n & BUSY_BIT:
                break
            p += ((n & ~flags) + HEADER_SIZE + 7) & ~7
            continue
        start = p + HEADER_SIZE
        p = (start + n + 7) & ~7
        append(blob[start : start + n])
        limit -= 1
    return out, p


def open_ring(map_fd: int, size: int) -> tuple[RingReader, tuple[mmap.mmap, mmap.mmap]]:
    """Map a ring buffer map the way libbpf does; returns the reader and the two maps
    (close them when done)."""
    page = mmap.PAGESIZE
    cons = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
    try:
        prod = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
    except OSError:
        cons.close()
        raise
    return RingReader(cons, prod, page, size), (cons, prod)
