"""FakeKvEventPublisher: a stand-in for one vLLM engine's KV-event publisher, for the router
tests only (no GPU here). It sends exactly the wire of vLLM's `ZmqEventPublisher`
(vllm/distributed/kv_events.py): a ZMQ PUB socket, three frames per message (topic, the
8-byte big-endian sequence number, the msgspec msgpack payload of a `KVEventBatch`), with
the event structs declared as vLLM declares them, in either encoding vLLM has used:
`array_like=True` (up to 0.10) or maps (later; `array_like=False`)."""

from __future__ import annotations

from typing import Any

import msgspec
import zmq

__all__ = ["FakeKvEventPublisher", "structs"]


def structs(array_like: bool) -> dict[str, Any]:
    """vLLM's event classes (the fields this router reads, and the ones it skips)."""

    class EventBatch(msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False):  # type: ignore[call-arg]
        ts: float
        events: list[Any]
        data_parallel_rank: int | None = None

    class KVCacheEvent(
        msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False, tag=True
    ):  # type: ignore[call-arg]
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[int | bytes]
        parent_block_hash: int | bytes | None
        token_ids: list[int]
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[int | bytes]
        medium: str | None

    class AllBlocksCleared(KVCacheEvent):
        pass

    return {
        "EventBatch": EventBatch,
        "BlockStored": BlockStored,
        "BlockRemoved": BlockRemoved,
        "AllBlocksCleared": AllBlocksCleared,
    }


class FakeKvEventPublisher:
    def __init__(
        self, host: str = "127.0.0.1", *, array_like: bool = True, topic: str = ""
    ) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUB)
        self.port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.s = structs(array_like)
        self.topic = topic.encode()
        self.seq = 0
        self._enc = msgspec.msgpack.Encoder()

    def send(self, *events: Any, skip_seq: int = 0) -> None:
        self.seq += skip_seq
        payload = self._enc.encode(self.s["EventBatch"](ts=1.0, events=list(events)))
        self.sock.send_multipart((self.topic, self.seq.to_bytes(8, "big"), payload))
        self.seq += 1

    def send_raw(self, *frames: bytes) -> None:
        self.sock.send_multipart(frames)

    def stored(
        self, hashes: list[int], parent: int | None, tokens: list[int], size: int = 16
    ) -> Any:
        return self.s["BlockStored"](hashes, parent, tokens, size, None, "GPU")

    def removed(self, hashes: list[int]) -> Any:
        return self.s["BlockRemoved"](hashes, "GPU")

    def cleared(self) -> Any:
        return self.s["AllBlocksCleared"]()

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()
