"""FakeEngine: a stand-in for one vLLM server, for the router tests only (no GPU here).

It serves, over real HTTP on 127.0.0.1:
- GET /metrics: vLLM 0.11-format exposition (the gauge names and the cache_config_info
  line as in tests/fixtures/engine-metrics/vllm-0.11-metrics.txt) whose waiting/running
  requests and KV usage the test sets (`set(waiting=, running=, kv=)`), or a 500 when
  `metrics_broken` is set, or `metrics_text` verbatim when the test sets it (values the
  vLLM format cannot be written with from floats, such as `NaN` and `+Inf`);
- POST /v1/chat/completions and /v1/completions: an OpenAI-style SSE stream (`chunks`
  `data: {...}` events then `data: [DONE]`) naming the fake in every event, or one JSON
  object when the body does not ask for `stream`.

`requests` records (path, headers, body length) of every completion request it served.

With `cache_blocks` > 0 it also emulates an engine's prefix cache and encoder cache, so the
router's cache terms show end to end (the fake's own hashing, not the router's): the prompt
(messages in order) is cut into 64-character blocks (16 tokens of 4 characters), chain-
hashed with SHA-256, and the leading run of blocks found in its LRU of `cache_blocks`
blocks is cached; the images' URLs are kept in an LRU of `encoder_images`. The answer says
`usage.prompt_tokens_details.cached_tokens` (the OpenAI/vLLM field) and
`encoder_cache_hits`, and its time to first token is computed, not measured:
`ttft_base_s` + uncached tokens x `ttft_per_token_s` (+ `encode_s` per uncached image),
which the fake waits before it answers. While it serves, its /metrics report the requests
in flight as running (up to `max_batch`) and waiting (past it), as an engine does.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.http_fake import QuietHandler

__all__ = ["FakeEngine", "vllm_metrics", "MODEL", "prompt_text"]

BLOCK_CHARS = 64


def prompt_text(doc: dict[str, Any]) -> tuple[str, list[str]]:
    """(prompt text in message order, image URLs) of a chat or completions body."""
    text: list[str] = []
    images: list[str] = []
    for msg in doc.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        text.append(f"<{msg.get('role')}>")
        content = msg.get("content")
        if isinstance(content, str):
            text.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    text.append(part["text"])
                elif isinstance(part, dict) and isinstance(part.get("image_url"), dict):
                    url = str(part["image_url"].get("url", ""))
                    images.append(url)
                    text.append("<image:" + hashlib.sha256(url.encode()).hexdigest() + ">")
    if isinstance(doc.get("prompt"), str):
        text.append(doc["prompt"])
    return "".join(text), images


MODEL = "Qwen/Qwen2-VL-7B-Instruct"


def vllm_metrics(waiting: float, running: float, kv: float, blocks: int, block_size: int) -> str:
    labels = f'engine="0",model_name="{MODEL}"'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} {running}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{labels}}} {waiting}\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} {kv}\n"
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        f'vllm:cache_config_info{{block_size="{block_size}",engine="0",'
        f'num_gpu_blocks="{blocks}"}} 1.0\n'
    )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the stdlib's 5 refuses connections under a burst

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer is not the fake's concern


class FakeEngine:
    def __init__(self, name: str, chunks: int = 5, host: str = "127.0.0.1", port: int = 0) -> None:
        self.name = name
        self.chunks = chunks
        self.waiting = 0.0
        self.running = 0.0
        self.kv = 0.1
        self.blocks = 27434
        self.block_size = 16
        self.metrics_broken = False
        self.metrics_text: str | None = None
        self.requests: list[tuple[str, dict[str, str], int]] = []
        self.cache_blocks = 0
        self.encoder_images = 64
        self.max_batch = 64
        self.ttft_base_s = 0.002
        self.ttft_per_token_s = 2e-6
        self.encode_s = 0.005
        self.cached_tokens = 0  # over every request served
        self.prompt_tokens = 0
        self.encoder_hits = 0
        self.inflight = 0
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._encoded: OrderedDict[str, None] = OrderedDict()
        # when set: an SSE stream sends its first event, then waits for this before the rest
        self.gate: threading.Event | None = None
        self.streaming = threading.Event()  # set once an SSE stream has sent its first event
        self._lock = threading.Lock()
        self._server = _Server((host, port), self._handler())
        self.port = self._server.server_address[1]
        self.address = f"{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def set(
        self, *, waiting: float | None = None, running: float | None = None, kv: float | None = None
    ) -> None:
        with self._lock:
            if waiting is not None:
                self.waiting = waiting
            if running is not None:
                self.running = running
            if kv is not None:
                self.kv = kv

    def served(self) -> int:
        with self._lock:
            return len(self.requests)

    def start(self) -> FakeEngine:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _metrics_text(self) -> str:
        with self._lock:
            if self.metrics_text is not None:
                return self.metrics_text
            running = self.running + min(self.inflight, self.max_batch)
            waiting = self.waiting + max(0, self.inflight - self.max_batch)
            return vllm_metrics(waiting, running, self.kv, self.blocks, self.block_size)

    def _serve_prompt(self, doc: dict[str, Any]) -> dict[str, Any]:
        """The prefix- and encoder-cache emulation (module docstring): what this request
        found cached, and its time to first token."""
        text, images = prompt_text(doc)
        hashes, prev = [], b""
        for i in range(len(text) // BLOCK_CHARS):
            prev = hashlib.sha256(
                prev + text[i * BLOCK_CHARS : (i + 1) * BLOCK_CHARS].encode()
            ).digest()
            hashes.append(prev)
        with self._lock:
            hit = 0
            for h in hashes:
                if h not in self._blocks:
                    break
                hit += 1
            for h in hashes:
                self._blocks[h] = None
                self._blocks.move_to_end(h)
            while len(self._blocks) > self.cache_blocks:
                self._blocks.popitem(last=False)
            enc_hits = 0
            for url in images:
                key = hashlib.sha256(url.encode()).hexdigest()
                enc_hits += key in self._encoded
                self._encoded[key] = None
                self._encoded.move_to_end(key)
            while len(self._encoded) > self.encoder_images:
                self._encoded.popitem(last=False)
            prompt = max(1, len(text) // 4)
            cached = min(prompt, hit * BLOCK_CHARS // 4)
            self.cached_tokens += cached
            self.prompt_tokens += prompt
            self.encoder_hits += enc_hits
        ttft = (
            self.ttft_base_s
            + (prompt - cached) * self.ttft_per_token_s
            + (len(images) - enc_hits) * self.encode_s
        )
        return {
            "usage": {"prompt_tokens": prompt, "prompt_tokens_details": {"cached_tokens": cached}},
            "encoder_cache_hits": enc_hits,
            "ttft_s": ttft,
        }

    def _record(self, path: str, headers: dict[str, str], size: int) -> None:
        with self._lock:
            self.requests.append((path, headers, size))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                if fake.metrics_broken:
                    self.send_error(500, "metrics broken on purpose")
                    return
                body = fake._metrics_text().encode()
                self.send_body(200, "text/plain; version=0.0.4", body)

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", "0") or 0)
                raw = self.rfile.read(n) if n else self._read_chunked()
                fake._record(self.path, {k.lower(): v for k, v in self.headers.items()}, len(raw))
                try:
                    doc = json.loads(raw or b"{}")
                except ValueError:
                    doc = {}
                if not isinstance(doc, dict):
                    doc = {}
                extra: dict[str, Any] = {}
                if fake.cache_blocks:
                    with fake._lock:
                        fake.inflight += 1
                    try:
                        extra = fake._serve_prompt(doc)
                        time.sleep(extra["ttft_s"])
                    finally:
                        with fake._lock:
                            fake.inflight -= 1
                if not doc.get("stream"):
                    body = json.dumps(
                        {
                            "object": "chat.completion",
                            "served_by": fake.name,
                            "bytes": len(raw),
                            **extra,
                        }
                    ).encode()
                    self.send_body(200, "application/json", body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(fake.chunks):
                    event = {
                        "object": "chat.completion.chunk",
                        "served_by": fake.name,
                        "choices": [{"index": 0, "delta": {"content": f"tok{i} "}}],
                    }
                    self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                    if i == 0:
                        fake.streaming.set()
                        if fake.gate is not None:
                            fake.gate.wait(60)
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _read_chunked(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    return b""
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()

        return Handler
