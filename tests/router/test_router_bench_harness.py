"""The router bench's own parts (bench/router_fakes.py, the open-loop generator of
bench/router_bench.py): the fakes answer each request once, whole bodies only, chunked
included (Envoy re-sends an ext_proc-streamed body chunked), so keep-alive holds; the
generator counts every scheduled request and times it from its scheduled send time."""

from __future__ import annotations

import asyncio

from bench.router_bench import REQUEST, OpenLoop, pct
from bench.router_fakes import METRICS_REPLY, FakeEngine, request_end

CHUNKED = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"
)


def test_request_end_content_length_and_metrics() -> None:
    assert request_end(REQUEST) == (len(REQUEST), False)
    assert request_end(REQUEST[:-1]) is None
    get = b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n"
    assert request_end(get + REQUEST) == (len(get), True)


def test_request_end_chunked_waits_for_the_last_chunk() -> None:
    assert request_end(CHUNKED) == (len(CHUNKED), False)
    for cut in (40, len(CHUNKED) - 20, len(CHUNKED) - 5, len(CHUNKED) - 1):
        assert request_end(CHUNKED[:cut]) is None, cut


async def _exchange(payloads: list[bytes], expect: int) -> bytes:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FakeEngine("fake-0"), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for p in payloads:
        writer.write(p)
        await writer.drain()
        await asyncio.sleep(0.01)
    got = b""
    while got.count(b"HTTP/1.1 200 OK") < expect:
        got += await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    server.close()
    await server.wait_closed()
    return got


def test_fake_answers_once_per_request_on_one_connection() -> None:
    # a chunked request split across reads, then a metrics GET and a Content-Length POST
    parts = [CHUNKED[:50], CHUNKED[50:], b"GET /metrics HTTP/1.1\r\n\r\n" + REQUEST]
    got = asyncio.run(_exchange(parts, 3))
    assert got.count(b"HTTP/1.1 200 OK") == 3
    assert got.count(b'"served_by":"fake-0"') == 2
    assert METRICS_REPLY in got


def test_open_loop_counts_every_request_from_its_schedule() -> None:
    async def main() -> tuple[list[float | None], list[float], int]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: FakeEngine("fake-0"), "127.0.0.1", 0)
        load = OpenLoop(server.sockets[0].getsockname()[1], loop)
        lat, lags = await load.run(200, 0.25)
        conns = len(load.free)
        load.close()
        server.close()
        return lat, lags, conns

    lat, lags, conns = asyncio.run(main())
    assert len(lat) == 50 and None not in lat
    assert len(lags) == 50 and min(lags) >= 0
    # a latency runs from the schedule, so it is never shorter than the send lag
    assert all(x is not None and x > 0 for x in lat)
    assert pct(lat, 0.5) > 0 and conns >= 1


def test_the_router_bench_scripts_start() -> None:
    """Each script's imports resolve and `--help` answers (router_replay.py imported a helper
    router_bench.py no longer had, so it failed before parsing its flags)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for script in ("router_bench.py", "router_replay.py", "router_prefix_bench.py"):
        out = subprocess.run(
            [sys.executable, str(root / "bench" / script), "--help"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0 and out.stdout.startswith("usage:"), (script, out.stderr)


def test_the_prefix_bench_prints_its_figures() -> None:
    """bench/router_prefix_bench.py measures both pickers and the index and prints them."""
    from bench.router_prefix_bench import memory, pick_times

    t = pick_times(rate=1000.0, picks=12)
    assert len(t["on"]) == len(t["off"]) == 12 and min(t["on"]) > 0
    entries, measured, estimated, evictions = memory(0.05)
    assert 0 < entries and measured > 0 and evictions > 0
    assert estimated <= 0.05 * (1 << 20)
