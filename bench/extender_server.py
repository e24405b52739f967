"""Benchmark helper: serve the real extender app under uvicorn with a node cache filled
with N synthetic GPU nodes (no Kubernetes API needed), for bench/extender_bench.py.

    python bench/extender_server.py --nodes 5000 --port 18900

The nodes are built by `bench.extender_nodes.synthetic_nodes` (the same the client
sends in full-NodeList mode) and fed to the cache the way a list would.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvicorn  # noqa: E402

from bench.extender_nodes import filled_extender  # noqa: E402
from kvspread.heap import keep_freed_memory  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--signals-ts", type=float, help="the nodes' signals timestamp (default: now)")
    args = ap.parse_args()
    keep_freed_memory()  # as `kvspread extender` does (extender/run.py: serve)
    running = filled_extender(args.nodes, ts=args.signals_ts)
    uvicorn.run(
        running.app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        log_config=None,
        # the client idles a connection while it samples the Go floor and the JSON floor
        # (seconds for 5,000-node NodeLists on a loaded machine); uvicorn's default 5 s
        # would close it under the next 12 MB request
        timeout_keep_alive=600,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
