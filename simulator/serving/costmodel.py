"""The engine cost model: how long encode, prefill and decode steps take, and how big a KV
pool is. Pure functions of `CostModel`, `ModelSpec` and `GpuSpec`; times in seconds.

These formulas are what the calibration tests check against the published TTFT and
per-step figures (tests/simulator/serving/test_serving_costmodel.py).
"""

from __future__ import annotations

from simulator.serving.config import CostModel, GpuSpec, ModelSpec

__all__ = [
    "GIB",
    "encode_s",
    "prefill_s",
    "kv_bandwidth",
    "decode_step_s",
    "mixed_step_s",
    "kv_pool_tokens",
    "blocks_for",
    "sharing_factor",
    "tp_speedup",
]

GIB = float(1 << 30)


def encode_s(cost: CostModel, image_tokens: int) -> float:
    """Vision-encoder time for one image: e0 + ke*tok + qe*tok^2 (ms -> s).

    Quadratic because ViT self-attention over the patch sequence is; 0 tokens costs 0.
    """
    if image_tokens <= 0:
        return 0.0
    t = float(image_tokens)
    return (cost.encode_e0_ms + cost.encode_ke_ms * t + cost.encode_qe_ms * t * t) / 1000.0


def prefill_s(cost: CostModel, tokens: int, compute_scale: float = 1.0) -> float:
    """One compute-bound prefill pass over `tokens` tokens: p0 + scale x tokens / R_pf
    (`compute_scale`: the model's FLOPs per token relative to the fitted 7-8B model)."""
    if tokens <= 0:
        return 0.0
    return cost.prefill_p0_ms / 1000.0 + compute_scale * tokens / cost.prefill_tok_s


def kv_bandwidth(cost: CostModel, gpu: GpuSpec) -> float:
    """Bytes per second a step reads the live KV cache at: kv_eta (or eta) x BW."""
    return (cost.kv_eta or cost.eta) * gpu.bandwidth_tb_s * 1e12


def decode_step_s(
    cost: CostModel, gpu: GpuSpec, model: ModelSpec, live_tokens: int, seqs: int = 0
) -> float:
    """One memory-bound decode step: d0 + weights / (eta BW) + live KV bytes / (kv_eta BW)
    + seqs x step_seq.

    `live_tokens` is the context held by every sequence in the batch (each step reads
    every live KV byte once); `seqs` the sequences in it (their per-request step cost).
    """
    weights = model.weights_gb * 1e9 / (cost.eta * gpu.bandwidth_tb_s * 1e12)
    kv = live_tokens * model.kv_bytes_per_token / kv_bandwidth(cost, gpu)
    return cost.decode_d0_ms / 1000.0 + weights + kv + seqs * cost.step_seq_us * 1e-6


def mixed_step_s(
    cost: CostModel,
    gpu: GpuSpec,
    model: ModelSpec,
    prefill_tokens: int,
    decode_seqs: int,
    decode_live_tokens: int,
    prefill_seqs: int = 0,
    attn_pairs: float = 0.0,
) -> float:
    """A chunked-prefill step that also decodes `decode_seqs` sequences.

    Compute-bound part: prefill(prefill_tokens + decode_seqs) (each decode token is one more
    token of compute, unless mixed_decode_compute is off, and the weights are read once
    for the pass) plus the chunks'
    attention (`attn_pairs`: the sum over chunks of T (s + T/2), T tokens after s cached,
    times prefill_attn_ns); plus reading the decoding sequences' KV at KV bandwidth and the
    per-sequence cost of all `prefill_seqs` + `decode_seqs` sequences. Without prefill
    tokens it is a decode step.
    """
    if prefill_tokens <= 0:
        return decode_step_s(cost, gpu, model, decode_live_tokens, decode_seqs)
    kv = decode_live_tokens * model.kv_bytes_per_token / kv_bandwidth(cost, gpu)
    kv_read = kv if decode_seqs else 0.0
    per_seq = (prefill_seqs + decode_seqs) * cost.step_seq_us * 1e-6
    attn = model.compute_scale * cost.prefill_attn_ns * 1e-9 * attn_pairs
    rows = prefill_tokens + (decode_seqs if cost.mixed_decode_compute else 0)
    compute = prefill_s(cost, rows, model.compute_scale) + attn
    return compute + kv_read + per_seq


def kv_pool_tokens(cost: CostModel, model: ModelSpec, footprint_gib: float, gpus: int = 1) -> int:
    """KV-cache capacity in tokens (whole blocks) of an instance holding `footprint_gib`
    in all (over its `gpus` tensor-parallel GPUs).

    pool bytes = footprint - weights - activation reserve per GPU (vLLM: util x HBM -
    weights - activations, on each worker; TP shards weights and KV heads evenly);
    negative means the weights do not even fit. Rounded down to whole blocks of
    `block_tokens`.
    """
    reserve = cost.act_reserve_gb * 1e9 * max(1, gpus)
    pool_bytes = footprint_gib * GIB - model.weights_gb * 1e9 - reserve
    if pool_bytes <= 0:
        return 0
    blocks = int(pool_bytes // (model.kv_bytes_per_token * cost.block_tokens))
    return blocks * cost.block_tokens


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Paged-KV blocks a sequence of `tokens` tokens occupies (last block partly filled)."""
    return -(-tokens // block_tokens) if tokens > 0 else 0


def sharing_factor(cost: CostModel, busy_occupants: int) -> float:
    """Slow-down of a step on a GPU that `busy_occupants` busy processes time-slice."""
    return 1.0 + cost.sharing_slowdown * max(0, busy_occupants - 1)


def tp_speedup(cost: CostModel, gpus: int, one_island: bool) -> float:
    """How much faster a tensor-parallel engine on `gpus` GPUs steps than the same model
    would on one: k / (1 + c (k - 1)), c the all-reduce overhead per extra GPU
    (`tp_overhead_nvlink` inside one NVLink island, else `tp_overhead_pcie`; the
    sources are in config.CostModel). Weights, KV reads and FLOPs are split k ways."""
    if gpus <= 1:
        return 1.0
    c = cost.tp_overhead_nvlink if one_island else cost.tp_overhead_pcie
    return gpus / (1.0 + c * (gpus - 1))
