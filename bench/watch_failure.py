"""Black-box reproduction of issue 26, point 1: how many requests one extender process
makes against an API server that lists fine and refuses every watch.

    python bench/watch_failure.py --seconds 30 [--status 403] [--part extender|router]

Starts tests/fake_kube.py's FakeKubeApi with a node, a pod and a NodeSignals object, makes
every watch fail (HTTP `--status`, or `--status 200`: a watch that ends at once with no
event), runs `kvspread extender serve --kube-api-server URL` (or `kvspread router serve`
with a label selector) as a child process for `--seconds`, and prints the requests it
made, per resource and list/watch. Issue 26 measured 840 in 30 s before the shared
backoff; the bound is 12 per resource in 30 s (3 resources: 36). Exit status 1 when the
count is above `--max` (default 40).
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvspread import nodesignals  # noqa: E402
from tests.fake_kube import FakeKubeApi, make_node, make_pod  # noqa: E402
from tests.ports import free_port  # noqa: E402


def command(part: str, url: str) -> list[str]:
    """The part's serve command against the fake API server, on free ports."""
    exe = [sys.executable, "-m", "kvspread"]
    if part == "extender":
        return exe + ["extender", "serve", "--kube-api-server", url, "--port", str(free_port())]
    return exe + [
        "router", "serve", "--kube-api-server", url, "--endpoint-selector", "app=llm",
        "--target-port", "8000", "--grpc-port", str(free_port()),
        "--http-port", str(free_port()),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--status", type=int, default=403, help="HTTP status of every watch")
    p.add_argument("--part", choices=("extender", "router"), default="extender")
    p.add_argument("--max", type=int, default=40, help="exit 1 above this many requests")
    args = p.parse_args(argv)
    with FakeKubeApi() as api:
        api.put(make_node("n1"))
        api.put(make_pod("llm-0", "default", node_name="n1", labels={"app": "llm"}))
        uid = api.get("Node", "n1")["metadata"]["uid"]  # type: ignore[index]
        api.put(nodesignals.build_resource("n1", uid, '{"v":1}'))
        api.fail_next(args.status, watch=True, count=10**9)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        child = subprocess.Popen(command(args.part, api.url), env=env, cwd=ROOT)
        started = time.monotonic()
        try:
            while time.monotonic() - started < args.seconds and child.poll() is None:
                time.sleep(0.2)
        finally:
            child.send_signal(signal.SIGTERM)
            child.wait(10)
        took = time.monotonic() - started
        counts = collections.Counter(
            (path, "watch" if q.get("watch") else "list") for _, path, q in api.requests
        )
    total = sum(counts.values())
    print(f"{args.part} against a fake API server refusing every watch with {args.status}:")
    for (path, kind), n in sorted(counts.items()):
        print(f"  {n:5d}  {kind:5s}  {path}")
    print(f"  {total:5d}  requests in {took:.1f} s ({total / took * 60:.1f} per minute)")
    return 1 if total > args.max else 0


if __name__ == "__main__":
    raise SystemExit(main())
