"""A session model for traces that carry no content ids (ServeGen, Azure, synthetic).

Used only where asked for (`--multi-turn [MEAN_TURNS]`, config `sessions.mean_turns`), so
results without it stay comparable. The trace keeps its arrival times and sizes; the model
decides which requests are later turns of one conversation and what their prompts share:

- A conversation has a geometric number of turns with mean `mean_turns` (LMSYS-Chat-1M,
  Zheng et al., ICLR 2024: 2.0 turns per conversation on average, table 1).
- After a turn arrives its conversation waits a think time (exponential, mean `think_s`:
  an assumption of this model; no published distribution was found) before its next turn
  may take an arrival. Each arrival continues the conversation that has been ready
  longest, or, when none is ready, starts a new one: the trace's load stays as it is, about
  1 / mean_turns of the arrivals start conversations.
- A later turn re-sends the whole history, as a client of the OpenAI chat API does (the
  API is stateless): its prompt is the previous prompt, the previous answer and the new
  message (the arrival's own text tokens), so it grows by the previous answer. The first
  turn's images are sent again in every later turn, at the start of the prompt; the
  arrival's own images are dropped (a follow-up message is text). A turn that would not fit
  the model's context (`max_model_len`) starts a new conversation instead.

Content ids: every segment (an image, a message, an answer) is one content block of the
prompt's hash chain (simulator.serving.prefixcache); equal chains mean an equal history.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from simulator.serving.prefixcache import chain
from simulator.serving.workload import Request

__all__ = ["Conversation", "apply_sessions"]


@dataclass
class Conversation:
    """What the next turn re-sends: the history's chain, ends, images, and its size."""

    turns_left: int
    hashes: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    images: tuple[int, ...] = ()
    image_ids: tuple[int, ...] = ()
    context: int = 0  # history tokens (previous prompt + answer)


def _first_turn(r: Request, conv: Conversation, next_id: int) -> int:
    """Give a conversation's first request its ids; returns the next free content id."""
    ids: list[int] = []
    ends: list[int] = []
    at = 0
    image_ids = []
    for tokens in r.images:
        image_ids.append(next_id)
        ids.append(next_id)
        next_id += 1
        at += tokens
        ends.append(at)
    ids.append(next_id)
    next_id += 1
    ends.append(r.prompt)
    r.block_hashes = chain(ids)
    r.block_ends = tuple(ends)
    r.image_ids = tuple(image_ids)
    conv.images, conv.image_ids = r.images, r.image_ids
    return next_id


def _close_turn(r: Request, conv: Conversation, next_id: int) -> int:
    """Record the turn's answer as the history the next turn re-sends."""
    r.reply_hash = hash((r.block_hashes[-1], next_id))
    conv.hashes = (*r.block_hashes, r.reply_hash)
    conv.ends = (*r.block_ends, r.prompt + r.out - 1)
    conv.context = r.prompt + r.out
    conv.turns_left -= 1
    return next_id + 1


def apply_sessions(
    requests: list[Request],
    rng: np.random.Generator,
    mean_turns: float,
    think_s: float,
    max_model_len: int,
) -> int:
    """Turn one service's requests (any order; processed by arrival) into conversations
    in place (module docstring). Returns the number of conversations."""
    ready: list[tuple[float, int]] = []  # (ready time, conversation index)
    convs: list[Conversation] = []
    next_id = 1
    p = 1.0 / max(1.0, mean_turns)
    for r in sorted(requests, key=lambda r: r.arrival):
        conv: Conversation | None = None
        if ready and ready[0][0] <= r.arrival:
            _, ci = heapq.heappop(ready)
            conv = convs[ci]
            text = max(1, r.prompt - r.image_tokens)
            prompt = conv.context + text
            if prompt + r.out > max_model_len:
                conv = None  # too long for the model: the user starts over
            else:
                r.prompt = prompt
                r.images, r.image_ids = conv.images, conv.image_ids
                r.block_hashes = chain((next_id,), conv.hashes[-1])
                r.block_hashes = (*conv.hashes, *r.block_hashes)
                r.block_ends = (*conv.ends, prompt)
                next_id += 1
        if conv is None:
            conv = Conversation(turns_left=int(rng.geometric(p)))
            convs.append(conv)
            ci = len(convs) - 1
            next_id = _first_turn(r, conv, next_id)
        next_id = _close_turn(r, conv, next_id)
        if conv.turns_left > 0:
            gap = float(rng.exponential(think_s)) if think_s > 0 else 0.0
            heapq.heappush(ready, (r.arrival + gap, ci))
    return len(convs)
