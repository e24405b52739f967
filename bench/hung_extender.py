"""What a hung scheduler extender costs kube-scheduler (issue 26, point 6): the shipped
KubeSchedulerConfiguration on a real kube-scheduler v1.26, its extender a server that
accepts connections and never answers, and `--pods` pods to schedule, once per
`httpTimeout` in `--timeouts`.

    KVSPREAD_K8S_BIN=/work/build/k8s python bench/hung_extender.py [--pods 8] [--timeouts 1,3]

Needs the binaries of tools/k8s (and etcd). The extender is `ignorable: true`, so each pod
waits out the filter call and the prioritize call and is then scheduled without the
extender: about two timeouts a pod, one pod at a time. Prints pods bound per minute per
timeout (issue 26 measured about 10 a minute at 3 s).
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.controlplane import ControlPlane, binaries  # noqa: E402
from tests.cluster.install import SERVICE_ACCOUNTS, install  # noqa: E402
from tests.cluster.test_cluster_scheduler import shipped_scheduler_config  # noqa: E402
from tests.fake_kube import make_node, make_pod  # noqa: E402

MAX_CONNECTIONS = 256
"""Accepted connections the hung server holds open (then it closes the oldest)."""


def hung_server() -> tuple[str, threading.Event]:
    """A loopback HTTP port that accepts and reads, never answers; set the event to stop."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            held.append(conn)
            if len(held) > MAX_CONNECTIONS:
                held.pop(0).close()
        for c in held:
            c.close()
        sock.close()

    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


def one_run(cp: ControlPlane, timeout_s: float, pods: int) -> float:
    """Pods bound per minute with the extender hung and this httpTimeout."""
    ns = f"hung-{int(timeout_s * 1000)}ms"
    cp.service_account(ns, "default")
    url, stop = hung_server()
    cfg = shipped_scheduler_config(url)
    cfg["extenders"][0]["httpTimeout"] = f"{timeout_s}s"
    sched_ns, sched_sa = SERVICE_ACCOUNTS["scheduler"]
    try:
        with cp.scheduler(cfg, cp.sa_kubeconfig(sched_ns, sched_sa)):
            time.sleep(3)  # leader election: the scheduler starts its loop after taking the Lease
            t0 = time.monotonic()
            for i in range(pods):
                pod = make_pod(f"p-{i}", ns, gpus=1, scheduler_name="kvspread-scheduler")
                for k in ("resourceVersion", "uid", "creationTimestamp"):
                    pod["metadata"].pop(k, None)
                pod["spec"]["automountServiceAccountToken"] = False
                cp.create(pod)
            deadline = t0 + pods * (2 * timeout_s + 5) + 60
            while True:
                items = cp.ok("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
                done = sum(1 for p in items if p["spec"].get("nodeName"))
                if done == pods:
                    return pods / (time.monotonic() - t0) * 60
                if time.monotonic() > deadline:
                    raise SystemExit(f"only {done}/{pods} pods bound at httpTimeout {timeout_s}s")
                time.sleep(0.2)
    finally:
        stop.set()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=8)
    p.add_argument("--timeouts", default="1,3", help="httpTimeout values, seconds, comma-separated")
    args = p.parse_args(argv)
    b = binaries()
    if b is None:
        print("no Kubernetes binaries: set KVSPREAD_K8S_BIN (tools/k8s/README.md)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cp = ControlPlane(b, Path(tmp)).start()
        try:
            install(cp)
            for i in range(4):
                node = make_node(f"gpu-{i}", allocatable={"nvidia.com/gpu": "8"})
                node["metadata"].pop("resourceVersion", None)
                cp.create(node)
                cp.ok("PATCH", f"/api/v1/nodes/gpu-{i}", {"spec": {"taints": None}},
                      content_type="application/merge-patch+json")  # fmt: skip
            print(f"kube-scheduler v1.26, shipped config, extender hung, {args.pods} pods")
            for t in (float(x) for x in args.timeouts.split(",")):
                rate = one_run(cp, t, args.pods)
                print(f"httpTimeout {t:g} s: {rate:.1f} pods/min ({60 / rate:.2f} s a pod)")
        finally:
            cp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
