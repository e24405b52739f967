"""Fuzz: 10,000 generated bodies per endpoint through the real ASGI app (in process, a
minimal ASGI HTTP driver: a tenth of httpx.ASGITransport's overhead per request); no
answer may be >= 500, and every 200 must have the right shape.

Bodies come from a seeded generator (deterministic): mutations of the captured
kube-scheduler bodies (keys dropped, renamed in other letter cases, values swapped for
other JSON types), ExtenderArgs with random pods (odd GPU limits, annotations, labels)
and random nodes (odd signals documents), arbitrary JSON, and broken bytes."""

from __future__ import annotations

import asyncio
import copy
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from extender.config import ExtenderConfig
from extender.run import build
from kvspread.clock import FakeClock
from kvspread.signals import GpuSignal, NodeSignals, encode_signals
from tests.fake_kube import make_node, make_pod

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-wire"
PER_ENDPOINT = 10_000
CLOCK = FakeClock()

SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**31,
    2**63 - 1,
    -(2**63),
    1.5,
    -0.0,
    1e308,
    "",
    "x",
    "24Gi",
    "lots",
    "-1",
    "1e400",
    "\u0000",
    "\ud7ff",
    "ü" * 50,
    [],
    {},
    [None],
    {"": None},
]
KEYS = ["Pod", "Nodes", "NodeNames", "metadata", "items", "name", "spec", "annotations"]


def rand_value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.5:
        return rng.choice(SCALARS)
    if r < 0.75:
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {
        rng.choice(KEYS + ["k" + str(rng.randint(0, 9))]): rand_value(rng, depth + 1)
        for _ in range(rng.randint(0, 4))
    }


def recase(rng: random.Random, key: str) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in key)


def mutate(rng: random.Random, doc: Any, rate: float) -> Any:
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            r = rng.random()
            if r < rate * 0.3:
                continue  # drop the key
            if r < rate * 0.5:
                k = recase(rng, k)
            if rng.random() < rate * 0.3:
                v = rand_value(rng)
            else:
                v = mutate(rng, v, rate)
            out[k] = v
        if rng.random() < rate * 0.2:
            out["Unknown" + str(rng.randint(0, 9))] = rand_value(rng)
        return out
    if isinstance(doc, list):
        out_l = [mutate(rng, v, rate) for v in doc if rng.random() > rate * 0.2]
        if rng.random() < rate * 0.2:
            out_l.append(rand_value(rng))
        return out_l
    return doc


def rand_signals(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        gpus = []
        for i in range(rng.randint(0, 8)):
            total = rng.choice([16384.0, 81920.0, 0.0])
            gpus.append(GpuSignal(index=i, mem_total_mib=total, mem_used_mib=rng.uniform(0, total)))
        return encode_signals(
            NodeSignals(
                ts=CLOCK.now() - rng.choice([0, 30, 90]),
                gpus=tuple(gpus) if gpus or rng.random() < 0.5 else None,
                streams=rng.choice([None, 0, 5, 10_000]),
                image_token_share=rng.choice([None, 0.0, 1.0]),
                p95_s=rng.choice([None, 0.0, 0.05, 9.0]),
            )
        )
    if r < 0.8:
        doc = {"v": 1, "ts": CLOCK.now(), "gpus": rand_value(rng), "streams": rand_value(rng)}
        return json.dumps(mutate(rng, doc, 0.5))
    return rng.choice(["", "{", "null", "[]", '{"v":1}', "x" * 5000])


def rand_pod(rng: random.Random) -> Any:
    pod = make_pod(
        rng.choice(["p", "llm-0", "", "ü"]),
        rng.choice(["default", "serving", ""]),
        gpus=rng.choice([0, 1, 2, 8]),
        labels={
            "kvspread.io/model": rng.choice(["llama", "qwen", ""]),
            "kvspread.io/modality": rng.choice(["text", "image", "multi-image", "audio", "video"]),
            "kvspread.io/qos": rng.choice(["realtime", "batch", "best-effort", "gold"]),
        },
        annotations={
            "kvspread.io/gpu-memory": rng.choice(
                ["24Gi", "16000Mi", "lots", "0", "-5Gi", "1e3", "", "1Ei", "9" * 70]
            )
        },
    )
    if rng.random() < 0.3:
        pod["spec"]["containers"][0]["resources"]["limits"] = {
            "nvidia.com/gpu": rng.choice(["1.5", "-1", "x", 3, None, [], "1e3"])
        }
    return mutate(rng, pod, 0.1) if rng.random() < 0.5 else pod


def rand_nodes(rng: random.Random, n: int) -> list[Any]:
    out = []
    for i in range(n):
        node = make_node(
            f"node-{rng.randint(0, 40)}" if rng.random() < 0.9 else f"odd-{i}-ü",
            labels={
                "kvspread.io/pool": rng.choice(["language", "mixed", "vision", "x"]),
                "kvspread.io/nvlink": rng.choice(["true", "false", "1"]),
            },
            annotations={"kvspread.io/signals": rand_signals(rng)} if rng.random() < 0.8 else {},
        )
        out.append(mutate(rng, node, 0.05) if rng.random() < 0.2 else node)
    return out


def body(rng: random.Random, captured: list[dict[str, Any]]) -> bytes:
    r = rng.random()
    if r < 0.2:
        return json.dumps(mutate(rng, copy.deepcopy(rng.choice(captured)), 0.3)).encode()
    if r < 0.55:
        doc: dict[str, Any] = {recase(rng, "Pod") if rng.random() < 0.2 else "Pod": rand_pod(rng)}
        if rng.random() < 0.5:
            doc["Nodes"] = {"metadata": {}, "items": rand_nodes(rng, rng.randint(0, 12))}
            doc["NodeNames"] = None
        else:
            doc["Nodes"] = None
            doc["NodeNames"] = [
                rng.choice([f"node-{rng.randint(0, 40)}", "unknown", ""])
                for _ in range(rng.randint(0, 30))
            ]
        return json.dumps(doc).encode()
    if r < 0.75:
        return json.dumps(rand_value(rng)).encode()
    if r < 0.9:
        good = json.dumps(rng.choice(captured)).encode()
        cut = rng.randint(0, len(good))
        return good[:cut]
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))


def check_shape(verb: str, doc: Any) -> None:
    if verb == "filter":
        assert list(doc) == [
            "Nodes",
            "NodeNames",
            "FailedNodes",
            "FailedAndUnresolvableNodes",
            "Error",
        ]
        assert isinstance(doc["FailedNodes"], dict)
    else:
        assert isinstance(doc, list)
        for h in doc:
            assert (
                list(h) == ["Host", "Score"] and type(h["Score"]) is int and 0 <= h["Score"] <= 10
            )


async def asgi_post(app: Any, path: str, data: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 POST through the ASGI interface, as uvicorn would deliver it."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"fuzz"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8888),
    }
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": data, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


def test_fuzz_no_5xx() -> None:
    captured = [
        json.loads((WIRE / f"{v}-request.nodeCacheCapable-{m}.json").read_text())
        for v in ("filter", "prioritize")
        for m in ("false", "true")
    ]
    cfg = ExtenderConfig.from_mapping({"kubernetes": {"api_server": "http://127.0.0.1:9"}})
    running = build(cfg, CLOCK)  # the cache is fed directly; reflectors never start
    rng = random.Random(20261130)
    running.state.replace_nodes(rand_nodes(rng, 40))
    running.state.replace_pods(
        [
            make_pod(f"b{i}", node_name=f"node-{i}", gpus=1, labels={"kvspread.io/model": "llama"})
            for i in range(10)
        ]
    )
    codes: Counter[tuple[str, int]] = Counter()

    async def drive() -> None:
        for verb in ("filter", "prioritize"):
            for _ in range(PER_ENDPOINT):
                data = body(rng, captured)
                status, out = await asgi_post(running.app, "/" + verb, data)
                codes[(verb, status)] += 1
                assert status < 500, (verb, data[:300], out[:300])
                if status == 200:
                    check_shape(verb, json.loads(out))
                else:
                    assert status == 400 and json.loads(out)["error"]

    asyncio.run(drive())
    for verb in ("filter", "prioritize"):
        assert sum(c for (v, _), c in codes.items() if v == verb) == PER_ENDPOINT
        # the generator reaches both the decision path and the 400 path
        assert codes[(verb, 200)] > 2000 and codes[(verb, 400)] > 2000
    internal = running.extender.metrics.requests
    assert internal.labels("filter", "internal")._value.get() == 0
    assert internal.labels("prioritize", "internal")._value.get() == 0
