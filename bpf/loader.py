"""Compile, load and read the BPF programs: the only module that imports bcc.

Which programs load is decided by feature detection (the tracepoints that exist under
tracefs), never by kernel version. Constants reach the C code as `-D` cflags. On a
kernel without a header tree, bcc is pointed at the BTF-generated tree of
`bpf/headers.py` (header-less mode). Anything that stops the programs from loading
(no tracefs, no bcc, no privileges, a verifier error) raises `BpfUnavailable` with the
reason; the agent then runs on without BPF.

Thread-safety: a `ProbeSession` is polled by one thread; `read_tcp_stats` may be called
from another (map reads are syscalls, safe to interleave).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bpf import headers, ringbuf
from bpf.events import (
    RTT_SLOTS,
    ConnState,
    TcpStats,
    decode_sock_key,
    decode_tcp_stats,
)

if TYPE_CHECKING:
    from bpf.config import CollectorConfig

__all__ = [
    "BpfUnavailable",
    "ProbeConfig",
    "probe_config",
    "Features",
    "PROGRAMS",
    "DEFAULT_TRACEFS",
    "detect_features",
    "ensure_tracefs",
    "build_source",
    "build_cflags",
    "render",
    "ProbeSession",
    "load",
]

DEFAULT_TRACEFS = Path("/sys/kernel/tracing")
PROGRAM_DIR = Path(__file__).parent / "programs"
BCC_DIST_PACKAGES = "/usr/lib/python3/dist-packages"

# Program file -> tracepoints (category/name) it attaches to; all are required.
PROGRAMS: dict[str, tuple[str, ...]] = {
    "conn_track.c": (
        "syscalls/sys_enter_accept4",
        "syscalls/sys_exit_accept4",
        "syscalls/sys_enter_close",
        "sock/inet_sock_set_state",
    ),
    "http_latency.c": tuple(
        f"syscalls/sys_{d}_{s}"
        for s in ("read", "recvfrom", "readv", "write", "sendto", "writev")
        for d in ("enter", "exit")
    ),
    "tcp_rtt.c": ("tcp/tcp_probe", "tcp/tcp_retransmit_skb"),
}

# Tracepoints used when present, each enabling its -DHAVE_SYS_<NAME> block.
OPTIONAL_TRACEPOINTS: tuple[str, ...] = tuple(
    f"syscalls/sys_{d}_{s}"
    for s in ("accept", "recvmsg", "sendmsg", "sendfile64")
    for d in ("enter", "exit")
)


class BpfUnavailable(RuntimeError):
    """BPF cannot run here; the message says why (for logs and /readyz)."""


@dataclass(frozen=True)
class ProbeConfig:
    """What to trace and how much to keep.

    `ports` None traces every listening port; otherwise only accept() on these ports
    creates tracked connections. Sizes are upper bounds of kernel tables (LRU).
    """

    ports: tuple[int, ...] | None = None
    capture_bytes: int = 512
    max_conns: int = 65536
    self_tgid: int = field(default_factory=os.getpid)
    tracefs: Path = DEFAULT_TRACEFS
    header_cache: Path = Path("/var/cache/kvspread/headers")
    modules_root: Path = Path("/lib/modules")
    btf: Path = Path("/sys/kernel/btf/vmlinux")
    max_requests_per_s: int = 0  # 0: every request reaches user space


def probe_config(c: CollectorConfig) -> ProbeConfig:
    """The ProbeConfig the agent loads for a collector configuration (and `--print-bpf`
    prints, so the printed flags are the ones really compiled)."""
    return ProbeConfig(
        ports=c.http_ports,
        capture_bytes=c.bpf.capture_bytes,
        max_conns=c.bpf.max_conns,
        tracefs=c.bpf.tracefs,
        header_cache=c.bpf.header_cache,
        max_requests_per_s=c.bpf.max_requests_per_s,
    )


@dataclass(frozen=True)
class Features:
    """Tracepoints present, and the programs that can run."""

    tracepoints: frozenset[str]
    programs: tuple[str, ...]
    missing: dict[str, tuple[str, ...]]
    optional: tuple[str, ...] = ()  # syscalls of OPTIONAL_TRACEPOINTS present (enter and exit)


def ensure_tracefs(path: Path) -> str | None:
    """Make tracefs usable at `path`; return None when ready, else why not.

    bcc attaches tracepoints through `/sys/kernel/tracing`, which it does not mount. The
    collector mounts it there when it can (needs CAP_SYS_ADMIN); any other path is
    only checked (tests point at an empty folder to simulate a node without tracefs).
    """
    if (path / "events").is_dir():
        return None
    if path == DEFAULT_TRACEFS and os.geteuid() == 0:
        try:
            subprocess.run(
                ["mount", "-t", "tracefs", "tracefs", str(path)],
                check=True,
                capture_output=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"tracefs is not mounted at {path} and mounting it failed: {exc}"
        if (path / "events").is_dir():
            return None
    return f"tracefs is not mounted at {path} (no {path}/events)"


def detect_features(tracefs: Path) -> Features:
    """Read which tracepoints exist and pick the programs whose needs are all met."""
    wanted = {tp for tps in PROGRAMS.values() for tp in tps}
    wanted |= set(OPTIONAL_TRACEPOINTS)
    present = frozenset(tp for tp in wanted if (tracefs / "events" / tp).is_dir())
    programs: list[str] = []
    missing: dict[str, tuple[str, ...]] = {}
    for prog, tps in PROGRAMS.items():
        lack = tuple(tp for tp in tps if tp not in present)
        if lack:
            missing[prog] = lack
        else:
            programs.append(prog)
    if "conn_track.c" not in programs:  # every other program reads its maps
        programs = []
    return Features(
        tracepoints=present,
        programs=tuple(programs),
        missing=missing,
        optional=tuple(
            name
            for name in dict.fromkeys(tp.split("_", 2)[2] for tp in OPTIONAL_TRACEPOINTS)
            if {f"syscalls/sys_enter_{name}", f"syscalls/sys_exit_{name}"} <= present
        ),
    )


def build_source(programs: Iterable[str], program_dir: Path = PROGRAM_DIR) -> str:
    """One C text: events.h inlined, then each program (they share maps)."""
    parts = [(program_dir / "events.h").read_text()]
    for prog in programs:
        text = (program_dir / prog).read_text().replace('#include "events.h"\n', "")
        parts.append(f"/* ---- {prog} ---- */\n{text}")
    return "\n".join(parts)


def args_at_exit_possible() -> bool:
    """Whether the exit programs may read the syscall arguments from the saved registers
    (`-DARGS_AT_EXIT`, x86-64 register names; needs bpf_task_pt_regs, 5.15+: the loader
    falls back to enter/exit pairs when it does not load)."""
    return platform.machine() == "x86_64"


def build_cflags(
    config: ProbeConfig,
    features: Features,
    *,
    perf_buffer: bool = False,
    args_at_exit: bool | None = None,
) -> list[str]:
    """`-D` constants for the C code (`args_at_exit` None: where the machine allows)."""
    cap = config.capture_bytes
    if cap < 64 or cap > 4096 or cap & (cap - 1):
        raise ValueError(f"capture_bytes must be a power of two in 64..4096, got {cap}")
    flags = [
        f"-DCAPTURE_BYTES={cap}",
        f"-DMAX_CONNS={int(config.max_conns)}",
        f"-DSELF_TGID={int(config.self_tgid)}",
        f"-DTRACE_ALL_PORTS={1 if config.ports is None else 0}",
        f"-DRTT_SLOTS={RTT_SLOTS}",
        f"-DMAX_REQUESTS_PER_S={int(config.max_requests_per_s)}",
    ]
    flags += [f"-DHAVE_SYS_{name.upper()}" for name in features.optional]
    if args_at_exit is None:
        args_at_exit = args_at_exit_possible()
    if args_at_exit:
        flags.append("-DARGS_AT_EXIT")
    if perf_buffer:
        flags.append("-DUSE_PERF_BUFFER")
    return flags


def render(config: ProbeConfig, features: Features) -> str:
    """The final C and its cflags, as `--print-bpf` shows them."""
    flags = build_cflags(config, features)
    head = "/* cflags: " + " ".join(flags) + " */\n"
    if config.ports is not None:
        head += "/* traced_ports map: " + ", ".join(map(str, config.ports)) + " */\n"
    return head + build_source(features.programs)


def _import_bcc() -> Any:
    if BCC_DIST_PACKAGES not in sys.path:
        sys.path.append(BCC_DIST_PACKAGES)
    try:
        import bcc  # type: ignore[import-not-found]
    except ImportError as exc:
        raise BpfUnavailable(f"bcc is not installed (python3-bpfcc): {exc}") from exc
    return bcc


def _header_tree(config: ProbeConfig, bcc: Any) -> Path | None:
    """Header-less mode when the kernel ships no build tree; None when it does."""
    release = os.uname().release
    if not headers.needs_header_tree(release, config.modules_root):
        return None
    libbcc = None
    name = getattr(getattr(bcc, "libbcc", None), "lib", None)
    if name is not None and os.path.isabs(getattr(name, "_name", "")):
        libbcc = Path(name._name)
    try:
        return headers.ensure_tree(
            config.header_cache, headers.TreeSources(btf=config.btf, libbcc=libbcc)
        )
    except headers.HeaderTreeError as exc:
        raise BpfUnavailable(f"no kernel headers and no BTF header tree: {exc}") from exc


AcceptCallback = Callable[[bytes], None]
HttpBatchCallback = Callable[[list[bytes]], None]
HTTP_RING_PAGES = 1024  # BPF_RINGBUF_OUTPUT(http_events, 1024) in conn_track.c


class ProbeSession:
    """Loaded programs: poll events into callbacks, read aggregated maps."""

    def __init__(self, bpf: Any, programs: tuple[str, ...], perf_buffer: bool) -> None:
        self._bpf = bpf
        self.programs = programs
        self.perf_buffer = perf_buffer
        self.lost = 0
        self._batch: tuple[HttpBatchCallback, list[bytes]] | None = None
        self._keep: tuple[Any, ...] = ()  # bcc keeps only weak references to callbacks
        self._ring: ringbuf.RingReader | None = None
        self._ring_maps: tuple[mmap.mmap, mmap.mmap] | None = None

    def open_batches(self, on_http: HttpBatchCallback, on_accept: AcceptCallback) -> None:
        """Start reading events: HTTP events reach `on_http` as one list per `poll`,
        accept events `on_accept` one by one (a few per connection).

        With the ring buffer on x86-64 the list is read straight from the ring's memory
        map (`bpf.ringbuf`): no ctypes call per event, one consumer update per batch.
        Elsewhere (weaker memory ordering: the record header needs an acquire load, which
        Python cannot issue) and with the perf buffer, bcc's per-event callbacks only
        append to the list.
        """
        pending: list[bytes] = []

        def accept_cb(*a: Any) -> None:
            on_accept(ctypes.string_at(a[1], a[2]))

        def lost_cb(count: int) -> None:
            self.lost += int(count)

        self._batch = (on_http, pending)
        if self.perf_buffer:

            def http_cb(*a: Any) -> None:
                pending.append(ctypes.string_at(a[1], a[2]))

            self._bpf[b"accept_events"].open_perf_buffer(
                accept_cb, page_cnt=64, lost_cb=lost_cb, wakeup_events=16
            )
            self._bpf[b"http_events"].open_perf_buffer(
                http_cb, page_cnt=1024, lost_cb=lost_cb, wakeup_events=64
            )
            self._keep = (http_cb, accept_cb, lost_cb)
            return
        self._bpf[b"accept_events"].open_ring_buffer(accept_cb)
        table = self._bpf[b"http_events"]
        if platform.machine() not in ringbuf.DIRECT_READ_MACHINES:

            def ring_cb(*a: Any) -> int:
                pending.append(ctypes.string_at(a[1], a[2]))
                return 0

            table.open_ring_buffer(ring_cb)
            self._keep = (ring_cb, accept_cb, lost_cb)
            return
        size = int(getattr(table, "max_entries", 0) or HTTP_RING_PAGES * mmap.PAGESIZE)
        self._ring, self._ring_maps = ringbuf.open_ring(int(table.map_fd), size)
        self._keep = (accept_cb, lost_cb)

    def _drain_batch(self) -> None:
        if self._batch is None:
            return
        on_http, pending = self._batch
        if self._ring is not None:
            pending.extend(self._ring.drain())
        if pending:
            batch = pending[:]
            pending.clear()
            on_http(batch)

    def poll(self, timeout_ms: int = 100) -> None:
        """Wait `timeout_ms`, then drain every buffered event into the callbacks.

        The programs do not wake user space per event (BPF_RB_NO_WAKEUP / perf
        wakeup_events), so events are read in batches: fewer context switches on the
        traced server's CPU, at most `timeout_ms` of extra reporting delay.
        """
        time.sleep(timeout_ms / 1000.0)
        if self.perf_buffer:
            self._bpf.perf_buffer_consume()
        else:
            self._bpf.ring_buffer_consume()
        # HTTP events after accept events: a request completed in the same batch as its
        # accept() needs the connection's peer
        self._drain_batch()

    def set_ports(self, ports: Iterable[int]) -> None:
        table = self._bpf[b"traced_ports"]
        for p in ports:
            table[ctypes.c_uint16(int(p))] = ctypes.c_uint8(1)

    def read_tcp_stats(self) -> dict[tuple[int, int], TcpStats]:
        """(tgid, port) -> RTT histogram and retransmits, as aggregated in the kernel."""
        if "tcp_rtt.c" not in self.programs:
            return {}
        out: dict[tuple[int, int], TcpStats] = {}
        for k, v in self._bpf[b"tcp_stats"].items():
            out[decode_sock_key(bytes(k))] = decode_tcp_stats(bytes(v))
        return out

    def read_unsampled(self) -> dict[tuple[int, int], TcpStats]:
        """(tgid, port) -> durations of the requests over the budget, aggregated in the
        kernel (TcpStats layout: rtt_count / rtt_sum_us / rtt_slots are count, sum and log2
        slots in microseconds)."""
        if "http_latency.c" not in self.programs:
            return {}
        return {
            decode_sock_key(bytes(k)): decode_tcp_stats(bytes(v))
            for k, v in self._bpf[b"unsampled_hist"].items()
        }

    def lost_events(self) -> dict[str, int]:
        """Events not delivered (cumulative): http / accept events the buffers had no room for,
        and requests over the `max_requests_per_s` budget."""
        table = self._bpf[b"lost_events"]
        out = {}
        for idx, name in ((0, "http"), (1, "accept"), (2, "budget"), (3, "held")):
            out[name] = int(sum(table[ctypes.c_int(idx)]))
        return out

    def conn_last_write_ns(self, tgid: int, fd: int) -> int | None:
        """Last response write of a tracked connection (for streams still in flight)."""
        table = self._bpf[b"conns"]
        try:
            v = table[table.Key((tgid << 32) | fd)]
        except KeyError:
            return None
        return int(v.last_write_ns)

    def conn_held(self, tgid: int, fd: int, conn_id: int) -> int | None:
        """A request the kernel holds on this connection (its COMPLETE record not sent
        yet): 0 while no response byte went out, else the response's last write (ns);
        None when it holds none."""
        table = self._bpf[b"conns"]
        try:
            v = table[table.Key((tgid << 32) | fd)]
        except KeyError:
            return None
        if not v.deferred or v.id != conn_id:
            return None
        return int(v.last_write_ns) if v.state == ConnState.RESPONDING else 0

    def table_sizes(self) -> dict[str, int]:
        return {name: len(self._bpf[name.encode()].items()) for name in ("conns", "sk_owner")}

    def close(self) -> None:
        if self._ring_maps is not None:
            self._ring = None
            for m in self._ring_maps:
                m.close()
            self._ring_maps = None
        try:
            self._bpf.cleanup()
        except Exception:  # noqa: BLE001 - best effort on shutdown
            pass


# http_latency.c's tail-called programs, by their index in its `tail_progs` array.
TAIL_CALLS: tuple[tuple[int, str], ...] = ((0, "sse_scan"), (1, "response_head"))


def _load_tail_calls(bcc: Any, bpf: Any, programs: tuple[str, ...]) -> None:
    """Load the tail-called programs (bcc attaches only TRACEPOINT_PROBEs) into their array."""
    if "http_latency.c" not in programs:
        return
    table = bpf[b"tail_progs"]
    for idx, name in TAIL_CALLS:
        fn = bpf.load_func(name.encode(), bcc.BPF.TRACEPOINT)
        table[ctypes.c_int(idx)] = ctypes.c_int(fn.fd)


def load(config: ProbeConfig) -> ProbeSession:
    """Compile and attach every program the kernel supports; BpfUnavailable if none."""
    why = ensure_tracefs(config.tracefs)
    if why:
        raise BpfUnavailable(why)
    features = detect_features(config.tracefs)
    if not features.programs:
        raise BpfUnavailable(
            "required tracepoints missing: "
            + "; ".join(f"{p}: {', '.join(t)}" for p, t in features.missing.items())
        )
    bcc = _import_bcc()
    tree = _header_tree(config, bcc)
    if tree is not None:
        os.environ["BCC_KERNEL_SOURCE"] = str(tree)
    text = build_source(features.programs)
    errors: list[str] = []
    # first the cheapest variant: ring buffer, arguments read at exit; then fallbacks
    variants = [(False, True), (True, True)] if args_at_exit_possible() else []
    variants += [(False, False), (True, False)]
    for perf, at_exit in variants:
        try:
            bpf = bcc.BPF(
                text=text.encode(),
                cflags=build_cflags(config, features, perf_buffer=perf, args_at_exit=at_exit),
            )
        except Exception as exc:  # noqa: BLE001 - bcc raises bare Exception
            errors.append(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
            continue
        try:
            _load_tail_calls(bcc, bpf, features.programs)
        except Exception as exc:  # noqa: BLE001 - bcc raises bare Exception
            bpf.cleanup()
            errors.append(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
            continue
        session = ProbeSession(bpf, features.programs, perf)
        if config.ports is not None:
            session.set_ports(config.ports)
        return session
    raise BpfUnavailable("BPF programs failed to load: " + " | ".join(errors))
