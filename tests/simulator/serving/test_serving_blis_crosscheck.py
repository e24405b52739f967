"""The BLIS side-by-side check without BLIS: its TraceV2 writer, the Mooncake prefix
mapping, the figures and tolerance, the serving side of a run and the script's command
line. With a BLIS binary (tools/blis/build.sh; KVSPREAD_BLIS or build/blis/blis) one more
test has real BLIS replay a trace written here."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bench.blis_trace as bt
from bench.blis_compare import (
    Done,
    Figures,
    Row,
    figures,
    rel_diff,
    table,
    tolerance,
    within,
)
from bench.blis_crosscheck import COSTS, Setup, run_ours
from bench.blis_trace import MooncakeRecord, StreamRequest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "bench" / "blis_crosscheck.py"

# A [0,1,2] and B [0,1,3] share two blocks, C [0,4] only the first, D [5] nothing.
RECORDS = [
    MooncakeRecord(0.0, 1400, 10, (0, 1, 2)),
    MooncakeRecord(1000.0, 1500, 20, (0, 1, 3)),
    MooncakeRecord(1000.0, 700, 30, (0, 4)),
    MooncakeRecord(3000.0, 300, 40, (5,)),
]


def test_tracev2_columns_are_blis_order() -> None:
    # BLIS sim/workload/tracev2.go traceV2Columns (trace_version 3), without optional ones
    assert bt.TRACEV2_COLUMNS[:3] == ["request_id", "client_id", "tenant_id"]
    assert bt.TRACEV2_COLUMNS.index("prefix_group") == 6
    assert bt.TRACEV2_COLUMNS.index("input_tokens") == 9
    assert bt.TRACEV2_COLUMNS[-1] == "finish_reason"
    assert len(bt.TRACEV2_COLUMNS) == 27


def test_tracev2_rows_split_the_prefix(tmp_path: Path) -> None:
    stream = [StreamRequest(0, 0.5, 1400, 10, "mc0", 1024), StreamRequest(1, 1.25, 300, 40)]
    header, data = bt.write_tracev2(stream, tmp_path / "t")
    assert "trace_version: 3" in header.read_text()
    assert "time_unit: microseconds" in header.read_text()
    rows = list(csv.DictReader(data.open()))
    assert [r["request_id"] for r in rows] == ["0", "1"]
    # BLIS prepends prefix_length shared tokens to input_tokens of the row's own
    assert (rows[0]["prefix_group"], rows[0]["prefix_length"]) == ("mc0", "1024")
    assert rows[0]["input_tokens"] == "376"
    assert rows[1]["input_tokens"] == "300" and rows[1]["prefix_length"] == "0"
    assert rows[0]["arrival_time_us"] == rows[0]["send_time_us"] == "500000"
    assert rows[1]["arrival_time_us"] == "1250000"
    assert rows[1]["output_tokens"] == "40"
    assert all(len(r) == len(bt.TRACEV2_COLUMNS) for r in bt.tracev2_rows(stream))


def test_tracev2_refuses_a_prefix_as_long_as_the_prompt() -> None:
    with pytest.raises(ValueError, match="prefix_length"):
        bt.tracev2_rows([StreamRequest(3, 0.0, 512, 1, "g", 512)])


def test_tracev2_stream_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bt, "MAX_REQUESTS", 2)
    stream = [StreamRequest(i, 0.0, 10, 1) for i in range(3)]
    with pytest.raises(ValueError, match="at most 2"):
        bt.write_tracev2(stream, tmp_path / "t")


def test_mooncake_maps_to_the_deepest_shared_run() -> None:
    stream = bt.map_mooncake(RECORDS)
    a, b, c, d = stream
    assert a.prefix_group == b.prefix_group != ""
    assert a.prefix_length == b.prefix_length == 2 * bt.MOONCAKE_BLOCK_TOKENS
    # C shares only block 0 (with A and B, whose deeper group it cannot join)
    assert c.prefix_group not in ("", a.prefix_group)
    assert c.prefix_length == bt.MOONCAKE_BLOCK_TOKENS
    assert (d.prefix_group, d.prefix_length) == ("", 0)
    assert [s.arrival_s for s in stream] == [0.0, 1.0, 1.0, 3.0]
    assert [s.prompt for s in stream] == [1400, 1500, 700, 300]
    assert [s.out for s in stream] == [10, 20, 30, 40]


def test_mooncake_prefix_keeps_an_own_token_and_time_scale() -> None:
    recs = [MooncakeRecord(0.0, 512, 1, (7,)), MooncakeRecord(2000.0, 512, 1, (7,))]
    stream = bt.map_mooncake(recs, time_scale=2.0)
    assert [s.prefix_length for s in stream] == [511, 511]
    assert stream[1].arrival_s == pytest.approx(1.0)
    with pytest.raises(ValueError):
        bt.map_mooncake(recs, time_scale=0.0)


def test_reuse_bounds_tree_and_flat() -> None:
    stream = bt.map_mooncake(RECORDS)
    tree, flat = bt.reuse_bounds(RECORDS, stream)
    # 9 blocks; B repeats [0] and [0,1], C repeats [0]
    assert tree == pytest.approx(3 / 9)
    # flat: only B reuses (its group's first member A came before); C is first of its group
    assert flat == pytest.approx(1024 / (1400 + 1500 + 700 + 300))
    assert flat < tree


def test_read_mooncake_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = {"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
    path.write_text(json.dumps(good) + "\n\n" + '{"timestamp": 1}\n')
    with pytest.raises(ValueError, match=r"t.jsonl:3: not a Mooncake record"):
        bt.read_mooncake(path)
    assert bt.read_mooncake(path, limit=1) == [MooncakeRecord(5.0, 600, 3, (1, 2))]


def test_read_mooncake_reads_xz(tmp_path: Path) -> None:
    """The bundled trace is stored xz-compressed."""
    import lzma

    path = tmp_path / "t.jsonl.xz"
    row = {"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
    path.write_bytes(lzma.compress((json.dumps(row) + "\n").encode()))
    assert bt.read_mooncake(path) == [MooncakeRecord(5.0, 600, 3, (1, 2))]
    bad = tmp_path / "bad.jsonl.xz"
    bad.write_bytes(b"not xz")
    with pytest.raises(ValueError, match="not an xz file"):
        bt.read_mooncake(bad)


def test_our_side_hits_a_shared_prefix() -> None:
    """B arrives after A is done and shares its 2,048-token group: B's 128 prefix blocks
    are found cached, counted BLIS's way (cached blocks over every block allocated,
    prompt and output), and B's prefill is shorter than without the cache."""
    stream = [StreamRequest(0, 0.0, 3000, 4, "g", 2048), StreamRequest(1, 1.0, 3000, 4, "g", 2048)]
    on, left = run_ours(Setup(1, "blis", True, 1), stream, "round-robin")
    off, _ = run_ours(Setup(1, "blis", False, 1), stream, "round-robin")
    assert left == 0
    assert on.prefix_hit_rate == pytest.approx(128 / (2 * math.ceil(3004 / 16)))
    assert off.prefix_hit_rate == 0.0
    assert on.ttft_mean_ms < off.ttft_mean_ms


def test_block_hashes_share_the_prefix_only() -> None:
    a = StreamRequest(0, 0.0, 100, 1, "g", 64)
    b = StreamRequest(1, 0.0, 80, 1, "g", 64)
    c = StreamRequest(2, 0.0, 100, 1)
    ha, hb, hc = (bt.block_hashes(r, 16) for r in (a, b, c))
    assert len(ha) == 6 and len(hb) == 5  # full blocks only
    assert ha[:4] == hb[:4] and ha[4] != hb[4]
    assert not set(hc) & set(ha)
    with pytest.raises(ValueError):
        bt.block_hashes(a, 0)


def test_spread_ties() -> None:
    stream = [StreamRequest(i, t, 10, 1) for i, t in enumerate((0.0, 0.0, 0.0, 0.0, 2.0))]
    out = bt.spread_ties(stream, 0.4)
    assert [s.arrival_s for s in out] == pytest.approx([0.0, 0.1, 0.2, 0.3, 2.0])
    assert bt.spread_ties(stream, 0.0) == stream


def test_figures_by_hand() -> None:
    done = [Done(0.0, 0.1, 1.1, 11), Done(1.0, 0.3, 2.3, 21), Done(2.0, 0.2, 0.2, 1)]
    f = figures(done, 0.25)
    assert f.ttft_mean_ms == pytest.approx(200.0)
    assert f.e2e_mean_ms == pytest.approx(1200.0)
    assert f.tpot_mean_ms == pytest.approx(100.0)  # (1.0/10 + 2.0/20) / 2; out=1 left out
    assert f.throughput_tok_s == pytest.approx(33 / 3.3)  # last finish 1.0 + 2.3
    assert f.prefix_hit_rate == 0.25 and f.completed == 3
    assert math.isnan(figures([], 0.0).ttft_mean_ms)


def _figs(x: float, hit: float = 0.0) -> Figures:
    return Figures(x, x, x, x, x, x, hit, 1)


def test_tolerance_and_relative_difference() -> None:
    assert [tolerance(i, 3) for i in range(3)] == [0.15, 0.15, 0.25]
    with pytest.raises(ValueError):
        tolerance(3, 3)
    assert rel_diff(115.0, 100.0) == pytest.approx(0.15)
    assert rel_diff(0.0, 0.0) == 0.0 and rel_diff(1.0, 0.0) == math.inf
    assert within(Row("s", "light", "rr", 0.15, _figs(114.0), _figs(100.0))) == []
    bad = within(Row("s", "light", "rr", 0.15, _figs(116.0), _figs(100.0)))
    assert "ttft_mean_ms" in bad and "prefix_hit_rate" not in bad
    # near saturation 25 %
    assert within(Row("s", "high", "rr", 0.25, _figs(124.0), _figs(100.0))) == []
    # hit rates below 2 % compare absolutely; above, relatively
    assert within(Row("s", "l", "rr", 0.15, _figs(1.0, 0.0), _figs(1.0, 0.006))) == []
    assert within(Row("s", "l", "rr", 0.15, _figs(1.0, 0.0), _figs(1.0, 0.2))) == [
        "prefix_hit_rate"
    ]


def test_table_names_what_is_outside() -> None:
    rows = [
        Row("servegen", "light", "round-robin", 0.15, _figs(100.0), _figs(100.0)),
        Row("mooncake", "light", "least-loaded", 0.15, _figs(130.0), _figs(100.0)),
    ]
    text = table(rows).splitlines()
    assert text[0].startswith("| stream | load | routing | tol | mean TTFT ms")
    assert len(text) == 4
    assert text[2].endswith("| - |")
    assert "0.000 / 0.000 (+0.0 pp)" in text[2]  # hit rates differ in percentage points
    assert "(+30.0 %)" in text[3] and "ttft_mean_ms" in text[3]


def test_our_side_single_request_is_blis_step_cost() -> None:
    """One 4,096-token request on the `blis` costs: TTFT = alpha0 + 2 chunks (each
    p0 + 2048 tokens / R + attention against the whole prompt + one sequence) + alpha2,
    as BLIS's formula gives (its replay of this request: 39.76 ms)."""
    setup = Setup(1, "blis", False, 1)
    f, left = run_ours(setup, [StreamRequest(0, 0.0, 4096, 2)], "round-robin")
    assert left == 0
    c = COSTS["blis"]
    chunk = (
        float(c["prefill_p0_ms"]) * 1e-3
        + 2048 / float(c["prefill_tok_s"])
        + float(c["prefill_attn_ns"]) * 1e-9 * 2048 * (4096 + 1024)
        + float(c["step_seq_us"]) * 1e-6
    )
    expect_ms = (15563.199579e-6 + 2 * chunk + 45.907545e-6) * 1e3
    assert f.ttft_mean_ms == pytest.approx(expect_ms, rel=1e-6)
    assert f.ttft_mean_ms == pytest.approx(39.76, rel=0.02)


def test_our_side_without_api_overheads() -> None:
    with_alpha = run_ours(
        Setup(2, "blis", False, 1), [StreamRequest(0, 0.0, 100, 5)], "round-robin"
    )
    bare = run_ours(
        Setup(2, "blis", False, 1, False), [StreamRequest(0, 0.0, 100, 5)], "round-robin"
    )
    diff = with_alpha[0].ttft_mean_ms - bare[0].ttft_mean_ms
    assert diff == pytest.approx((15563.199579 + 45.907545) * 1e-3, rel=1e-6)


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_script_help() -> None:
    out = _script("--help")
    assert out.returncode == 0
    for flag in ("--blis", "--quick", "--mooncake", "--costs", "--no-prefix-cache", "--spread-ms"):
        assert flag in out.stdout


def test_least_loaded_counts_as_blis_by_default() -> None:
    # Both simulators must route alike for the check to compare engines, not routers.
    assert Setup(1, "blis", True, 1).ll_load == "blis"
    assert "--ll-load {blis,ours}" in _script("--help").stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--blis", "/nonexistent/blis"], "no such file"),
        (["--blis", str(SCRIPT), "--replicas", "0"], "--replicas must be 1..16"),
        (["--blis", str(SCRIPT), "--routing", "random"], "unknown 'random'"),
        (["--blis", str(SCRIPT), "--spread-ms", "-1"], "--spread-ms must be 0..1000"),
        (
            ["--blis", str(SCRIPT), "--streams", "mooncake", "--mooncake", str(SCRIPT)],
            "not a Mooncake record",
        ),
    ],
)
def test_script_bad_arguments_are_one_line(args: list[str], message: str) -> None:
    out = _script(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


BLIS = Path(os.environ.get("KVSPREAD_BLIS") or ROOT / "build" / "blis" / "blis")
"""The BLIS binary: KVSPREAD_BLIS, else where tools/blis/build.sh puts it."""


@pytest.mark.skipif(
    not os.access(BLIS, os.X_OK),
    reason="BLIS is not built: run tools/blis/sources.sh GITDIRS SRC and tools/blis/build.sh "
    "SRC (tools/blis/README.md) or set KVSPREAD_BLIS",
)
def test_real_blis_replays_our_trace(tmp_path: Path) -> None:
    """BLIS reads the TraceV2 written here: every request back, prefix included in its
    input length, and a shared prefix hit in its cache."""
    blis = BLIS
    stream = [
        StreamRequest(0, 0.0, 3000, 4, "g", 2048),
        StreamRequest(1, 1.0, 2500, 4, "g", 2048),
        StreamRequest(2, 2.0, 700, 4),
    ]
    header, data = bt.write_tracev2(stream, tmp_path / "t")
    results = tmp_path / "r.json"
    cmd = [
        str(blis.resolve()), "replay", "--trace-header", str(header), "--trace-data", str(data),
        "--model", "meta-llama/llama-3.1-8b-instruct", "--hardware", "H100", "--tp", "1",
        "--results-path", str(results), "--log", "error",
    ]  # fmt: skip
    out = subprocess.run(
        cmd, cwd=blis.resolve().parent, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-500:]
    got = {r["request_id"]: r for r in json.loads(results.read_text())}
    assert sorted(got) == [0, 1, 2]
    assert [got[i]["input_tokens"] for i in range(3)] == [3000, 2500, 700]
    assert "Cache Hit Rate" in out.stdout


def test_tree_block_hashes_keep_every_shared_run() -> None:
    """C shares only block 0 with A: flat hashes share nothing (other groups), the
    tree's share block 0's 32 sub-blocks of 16 tokens."""
    a, _, c, _ = bt.map_mooncake(RECORDS)
    flat_a, flat_c = bt.block_hashes(a, 16), bt.block_hashes(c, 16)
    assert not set(flat_a) & set(flat_c)
    tree_a, tree_c = bt.block_hashes(a, 16, tree=True), bt.block_hashes(c, 16, tree=True)
    assert tree_a[:32] == tree_c[:32] and tree_a[32] != tree_c[32]
    assert len(tree_c) == 700 // 16
