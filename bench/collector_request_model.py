"""How often the collector reads gen_ai.request.model from a real client's requests.

    sudo python3 bench/collector_request_model.py --client-python /path/to/venv/bin/python \
        [--streams 40] [--capture 512 1024] [--prompt 2 2000]

Loads the collector's BPF programs on a free port (one load per capture size), serves
tests/bpf/collector_app.py under uvicorn there, and has openai-python (installed in the
venv of `--client-python`; kvspread does not depend on it) send streaming chat requests
over one keep-alive client, as an application would. Each token stream the kernel reports
is read as the agent reads it (bpf.model.request_model) and the outcomes are printed per
capture size and prompt length. Needs root, bcc and tracefs, like the bpf tests.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bpf import loader  # noqa: E402
from bpf.events import decode_http_event  # noqa: E402
from bpf.model import request_model  # noqa: E402
from bpf.tracker import ConnTracker, RequestRecord  # noqa: E402
from tests.ports import free_port  # noqa: E402

CLIENT = """
import sys, openai
port, n, prompt = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cl = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-" + "x" * 48,
                   max_retries=0)
for _ in range(n):
    for _ in cl.chat.completions.create(
        model="meta-llama/Llama-3.1-8B-Instruct", stream=True,
        messages=[{"role": "user", "content": "w" * prompt}],
        extra_body={"chunks": 3, "chunk_ms": 1},  # collector_app.py: stream 3 events
    ):
        pass
print(openai.__version__)
"""


def measure(client: str, capture: int, prompt: int, streams: int, work: Path) -> str:
    """One run: the outcome counts of `streams` requests with a `prompt`-byte message."""
    port = free_port()
    session = loader.load(
        loader.ProbeConfig(ports=(port,), capture_bytes=capture, header_cache=work / "btf")
    )
    tracker = ConnTracker()
    records: list[RequestRecord] = []
    lock = threading.Lock()

    def on_http(raws: list[bytes]) -> None:
        with lock:
            for raw in raws:
                records.extend(tracker.on_http(decode_http_event(raw)))

    session.open_batches(on_http, lambda raw: None)
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            session.poll(50)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "collector_app:app", "--app-dir",
         str(ROOT / "tests" / "bpf"), "--host", "127.0.0.1", "--port", str(port),
         "--loop", "asyncio", "--http", "h11", "--log-level", "warning"]
    )  # fmt: skip
    try:
        time.sleep(2.5)  # uvicorn's start
        script = work / "client.py"
        script.write_text(CLIENT)
        out = subprocess.run(
            [client, str(script), str(port), str(streams), str(prompt)],
            capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
        time.sleep(1.0)  # the last records
    finally:
        server.terminate()
        server.wait(10)
        stop.set()
        poller.join(5)
        session.close()
    with lock:
        seen = [r for r in records if r.ttft_s is not None]
    counts = collections.Counter(
        m if isinstance(m := request_model(r.route, r.request), str) else m.value for r in seen
    )
    got = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return (
        f"| {capture} | {prompt} | {len(seen)} of {streams} | {got} | openai {out.stdout.strip()} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client-python", required=True, help="a Python with openai installed")
    ap.add_argument("--streams", type=int, default=40)
    ap.add_argument("--capture", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--prompt", type=int, nargs="+", default=[2, 2000])
    a = ap.parse_args()
    print("| capture_bytes | prompt bytes | streams seen | gen_ai.request.model | client |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for capture in a.capture:
            for prompt in a.prompt:
                print(measure(a.client_python, capture, prompt, a.streams, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
