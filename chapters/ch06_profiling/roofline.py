"""Op accounting: the FLOPs and bytes of every operation in a decode step and a prefill, the time the
roofline predicts for each, and the time each takes when measured alone at its real shapes.

The roofline model: an op that does F FLOPs and moves B bytes cannot finish faster than
F / (peak FLOP/s) nor faster than B / (peak bytes/s); it predicts the larger of the two. An op whose
arithmetic intensity F/B is below the machine's ridge point is memory-bound.

Counting conventions (stated, because every count is a convention):
* a multiply-add is 2 FLOPs; a matmul of (n×k)·(k×m) is 2nkm FLOPs;
* bytes are the minimum a perfect kernel moves: each weight and input read once, each output
  written once, in the engine's dtype;
* attention counts its two matmuls (scores QKᵀ and the weighted sum PV) over the full key length,
  4·heads·queries·keys·head_dim FLOPs, as the library's kernels compute it; softmax's few FLOPs per
  score are left out (about 1/25 of the matmuls at head_dim 64). A causal prefill kernel that skips
  masked blocks does about half the count;
* elementwise ops count one FLOP per arithmetic operation (RMSNorm 4 per element, RoPE 3, SiLU·up 5,
  residual add 1);
* the LM head runs on the last position of each sequence only: an engine needs just that logit row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from chapters.ch06_profiling.ceilings import time_op


@dataclass(frozen=True)
class ModelShape:
    """The sizes that decide every op's cost. Defaults: SmolLM2-135M."""

    layers: int = 30
    hidden: int = 576
    heads: int = 9
    kv_heads: int = 3
    head_dim: int = 64
    intermediate: int = 1536
    vocab: int = 49152

    @classmethod
    def from_config(cls, cfg: Any) -> ModelShape:
        return cls(
            layers=cfg.num_hidden_layers, hidden=cfg.hidden_size, heads=cfg.num_attention_heads,
            kv_heads=cfg.num_key_value_heads,
            head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
            intermediate=cfg.intermediate_size, vocab=cfg.vocab_size,
        )


@dataclass(frozen=True)
class Op:
    """One kind of operation in a forward pass, with its cost per call and calls per pass."""

    name: str
    flops: int
    bytes: int
    weight_bytes: int  # the part of `bytes` that is weights (or the KV cache, for attention)
    count: int  # calls per forward pass (per layer ops: once per layer)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def count_ops(shape: ModelShape, batch: int, new_tokens: int, context: int,
              elem_bytes: int) -> list[Op]:
    """The ops of one forward pass over `new_tokens` positions per sequence, each attending to
    `context` keys (decode: new_tokens=1, context=L; prefill: new_tokens=context=T)."""
    s, e = shape, elem_bytes
    n = batch * new_tokens  # rows that flow through every matmul
    q_dim, kv_dim = s.heads * s.head_dim, s.kv_heads * s.head_dim

    def linear(name: str, k: int, m: int, rows: int = n, count: int = s.layers) -> Op:
        return Op(name, 2 * rows * k * m, (k * m + rows * k + rows * m) * e, k * m * e, count)

    def elementwise(name: str, elements: int, flops_per: int, reads: int, extra_bytes: int,
                    count: int) -> Op:
        return Op(name, flops_per * elements, (reads + 1) * elements * e + extra_bytes,
                  extra_bytes, count)

    kv_cache_bytes = 2 * batch * context * kv_dim * e  # keys and values this layer reads
    return [
        Op("embedding", 0, 2 * n * s.hidden * e, 0, 1),  # gather n rows, write them
        elementwise("rms_norm", n * s.hidden, 4, 1, s.hidden * e, 2 * s.layers + 1),
        linear("q_proj", s.hidden, q_dim),
        linear("k_proj", s.hidden, kv_dim),
        linear("v_proj", s.hidden, kv_dim),
        # rotate q and k: x·cos + rotate_half(x)·sin; cos and sin are read once per position.
        Op("rope", 3 * n * (q_dim + kv_dim), (2 * n * (q_dim + kv_dim) + 2 * n * s.head_dim) * e,
           0, s.layers),
        Op("attention", 4 * batch * s.heads * new_tokens * context * s.head_dim,
           kv_cache_bytes + 2 * n * q_dim * e, kv_cache_bytes, s.layers),
        linear("o_proj", q_dim, s.hidden),
        elementwise("residual_add", n * s.hidden, 1, 2, 0, 2 * s.layers),
        linear("mlp_gate", s.hidden, s.intermediate),
        linear("mlp_up", s.hidden, s.intermediate),
        elementwise("silu_mul", n * s.intermediate, 5, 2, 0, s.layers),
        linear("mlp_down", s.intermediate, s.hidden),
        linear("lm_head", s.hidden, s.vocab, rows=batch, count=1),
    ]


def decode_ops(shape: ModelShape, batch: int, context: int, elem_bytes: int) -> list[Op]:
    return count_ops(shape, batch, 1, context, elem_bytes)


def prefill_ops(shape: ModelShape, tokens: int, elem_bytes: int, batch: int = 1) -> list[Op]:
    return count_ops(shape, batch, tokens, tokens, elem_bytes)


def totals(ops: list[Op]) -> dict[str, int]:
    return {"flops": sum(o.flops * o.count for o in ops),
            "bytes": sum(o.bytes * o.count for o in ops),
            "weight_bytes": sum(o.weight_bytes * o.count for o in ops),
            "ops_per_pass": sum(o.count for o in ops)}


def predict(op: Op, ceilings: dict[str, Any]) -> tuple[float, str]:
    """Seconds per call by the roofline, and which roof binds."""
    compute = op.flops / ceilings["matmul"]["flop_per_s"]
    memory = op.bytes / ceilings["memory_bandwidth"]["bytes_per_s"]
    return max(compute, memory), "compute" if compute > memory else "memory"


# ---- measuring each op alone, at its real shapes --------------------------------------------------

class _Rotation:
    """Cycles through copies of an op's weights (or KV cache) so that, as in a real pass where the
    other 29 layers' weights flush the caches in between, each call reads cold memory. Repeating
    one small weight matrix would time the cache, not the memory."""

    def __init__(self, make: Callable[[], tuple[torch.Tensor, ...]], copy_bytes: int,
                 cold_bytes: int) -> None:
        copies = max(1, min(256, math.ceil(cold_bytes / max(copy_bytes, 1))))
        self.items = [make() for _ in range(copies)]
        self.i = 0

    def next(self) -> tuple[torch.Tensor, ...]:
        self.i = (self.i + 1) % len(self.items)
        return self.items[self.i]


def op_callables(shape: ModelShape, batch: int, new_tokens: int, context: int, device: str,
                 dtype: torch.dtype, cold_bytes: int) -> dict[str, Callable[[], object]]:
    """One zero-argument callable per op, doing that op with torch at the model's shapes on random
    data. `cold_bytes`: how much distinct weight memory to rotate through (a few times the last-level
    cache)."""
    s, n = shape, batch * new_tokens
    q_dim, kv_dim = s.heads * s.head_dim, s.kv_heads * s.head_dim
    e = torch.finfo(dtype).bits // 8

    def rand(*size: int) -> torch.Tensor:
        return torch.randn(*size, device=device, dtype=dtype)

    x = rand(n, s.hidden)
    table = rand(s.vocab, s.hidden)
    ids = torch.randint(0, s.vocab, (n,), device=device)

    def linear(k: int, m: int, rows: int = n) -> Callable[[], object]:
        inp = rand(rows, k)
        weights = _Rotation(lambda: (rand(m, k),), k * m * e, cold_bytes)
        return lambda: F.linear(inp, weights.next()[0])

    norm_w = rand(s.hidden)

    def rms_norm() -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm_w

    q = rand(batch, s.heads, new_tokens, s.head_dim)
    k = rand(batch, s.kv_heads, new_tokens, s.head_dim)
    cos, sin = rand(new_tokens, s.head_dim), rand(new_tokens, s.head_dim)

    def rotate_half(t: torch.Tensor) -> torch.Tensor:
        half = t.shape[-1] // 2
        return torch.cat((-t[..., half:], t[..., :half]), dim=-1)

    def rope() -> tuple[torch.Tensor, torch.Tensor]:
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    kv_bytes = 2 * batch * context * kv_dim * e
    cache = _Rotation(lambda: (rand(batch, s.kv_heads, context, s.head_dim),
                               rand(batch, s.kv_heads, context, s.head_dim)), kv_bytes, cold_bytes)
    causal = new_tokens > 1

    def attention() -> torch.Tensor:
        keys, values = cache.next()
        return F.scaled_dot_product_attention(q, keys, values, is_causal=causal, enable_gqa=True)

    gate, up = rand(n, s.intermediate), rand(n, s.intermediate)
    return {
        "embedding": lambda: F.embedding(ids, table),
        "rms_norm": rms_norm,
        "q_proj": linear(s.hidden, q_dim),
        "k_proj": linear(s.hidden, kv_dim),
        "v_proj": linear(s.hidden, kv_dim),
        "rope": rope,
        "attention": attention,
        "o_proj": linear(q_dim, s.hidden),
        "residual_add": lambda: x + x,
        "mlp_gate": linear(s.hidden, s.intermediate),
        "mlp_up": linear(s.hidden, s.intermediate),
        "silu_mul": lambda: F.silu(gate) * up,
        "mlp_down": linear(s.intermediate, s.hidden),
        "lm_head": linear(s.hidden, s.vocab, rows=batch),
    }


def measure_calls(fn: Callable[[], object], device: str, budget_s: float = 0.05,
                  repeats: int = 5) -> float:
    """Median seconds per call. Calls run back to back (`inner` of them per sample, sized to the
    budget), as they do inside a forward pass; on a GPU that means a small op's time is whichever is
    longer, its kernel or the host's time to launch it."""
    probe = min(time_op(fn, device, repeats=2, inner=1, warmup=1))
    inner = max(1, min(200, int(budget_s / max(probe, 1e-7))))
    samples = time_op(fn, device, repeats=repeats, inner=inner, warmup=1)
    return sorted(samples)[len(samples) // 2]


def op_table(shape: ModelShape, ceilings: dict[str, Any], batch: int, new_tokens: int,
             context: int, device: str, dtype: torch.dtype, cold_bytes: int,
             budget_s: float = 0.05) -> list[dict[str, Any]]:
    """Predicted vs measured seconds per call for every op of one forward pass."""
    e = torch.finfo(dtype).bits // 8
    fns = op_callables(shape, batch, new_tokens, context, device, dtype, cold_bytes)
    rows = []
    with torch.inference_mode():
        for op in count_ops(shape, batch, new_tokens, context, e):
            predicted, bound = predict(op, ceilings)
            measured = measure_calls(fns[op.name], device, budget_s)
            rows.append({**asdict(op), "intensity": op.intensity, "bound": bound,
                         "predicted_s": predicted, "measured_s": measured,
                         "measured_over_predicted": measured / predicted if predicted else None})
    del fns
    return rows


def table_totals(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {"predicted_s": sum(r["predicted_s"] * r["count"] for r in rows),
            "measured_s": sum(r["measured_s"] * r["count"] for r in rows),
            "ops_per_pass": sum(r["count"] for r in rows)}


def format_table(title: str, rows: list[dict[str, Any]]) -> str:
    lines = [title, f"  {'op':<13}{'calls':>6}{'MFLOP':>10}{'MB':>9}{'FLOP/B':>8}{'bound':>9}"
                    f"{'pred us':>10}{'meas us':>10}{'meas/pred':>10}"]
    for r in rows:
        ratio = r["measured_over_predicted"]
        lines.append(
            f"  {r['name']:<13}{r['count']:>6}{r['flops'] / 1e6:>10.2f}{r['bytes'] / 1e6:>9.3f}"
            f"{r['intensity']:>8.1f}{r['bound']:>9}{r['predicted_s'] * 1e6:>10.1f}"
            f"{r['measured_s'] * 1e6:>10.1f}{ratio:>10.1f}")
    t = table_totals(rows)
    lines.append(f"  {'whole pass':<13}{t['ops_per_pass']:>6}{'':>44}"
                 f"{t['predicted_s'] * 1e6:>10.0f}{t['measured_s'] * 1e6:>10.0f}"
                 f"{t['measured_s'] / t['predicted_s']:>10.1f}")
    return "\n".join(lines)


# ---- a whole forward pass of the real model -------------------------------------------------------

def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers renamed `past_key_values` to `cache` in late 5.x; the GPU box has an earlier 5.x."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def hf_prefill_time(model: torch.nn.Module, tokens: int, device: str, repeats: int = 3) -> float:
    """The library model's real prefill of `tokens` random tokens (logits for the last one only)."""
    from transformers import DynamicCache

    ids = torch.randint(0, model.config.vocab_size, (1, tokens),
                        generator=torch.Generator().manual_seed(0)).to(device)
    key = _cache_kwarg(model)
    with torch.inference_mode():
        times = time_op(lambda: model(ids, use_cache=True, logits_to_keep=1, **{key: DynamicCache()}),
                        device, repeats=repeats, warmup=1)
    return sorted(times)[len(times) // 2]


def hf_decode_step_time(model: torch.nn.Module, batch: int, context: int, device: str,
                        steps: int = 5) -> float:
    """The library model's real one-token decode step for `batch` rows over a cache of `context`
    random keys and values (filled directly: a prefill would only slow the sweep down); median of
    `steps` consecutive steps, each appending to the cache as generation does."""
    from transformers import DynamicCache

    cfg = model.config
    shape = ModelShape.from_config(cfg)
    dtype = next(model.parameters()).dtype
    cache = DynamicCache()
    for layer in range(shape.layers):
        kv = torch.randn(2, batch, shape.kv_heads, context, shape.head_dim, device=device, dtype=dtype)
        cache.update(kv[0], kv[1], layer)
    nxt = torch.randint(0, cfg.vocab_size, (batch, 1), device=device)
    key = _cache_kwarg(model)
    with torch.inference_mode():
        times = time_op(lambda: model(nxt, use_cache=True, **{key: cache}), device,
                        repeats=steps, warmup=1)
    return sorted(times)[len(times) // 2]


# ---- the whole experiment, shared by 01_roofline.py (CPU) and gpu_benchmark.py (H200) -------------

def settings(device: str, quick: bool = False) -> dict[str, Any]:
    """Shapes per machine: the GPU sweeps further because its knees are further out."""
    if quick:
        return {"context": 32, "prefill": 32, "lengths": [8, 32], "batches": [1, 4],
                "batch_context": 16, "cold_bytes": 4 << 20, "budget_s": 0.005}
    if str(device).startswith("cuda"):
        return {"context": 256, "prefill": 1024, "lengths": [16, 64, 256, 1024, 4096],
                "batches": [1, 4, 16, 64, 128, 256, 512], "batch_context": 256,
                "cold_bytes": 256 << 20, "budget_s": 0.02}  # 5x the H200's 50 MB L2
    return {"context": 256, "prefill": 256, "lengths": [16, 64, 256, 1024],
            "batches": [1, 2, 4, 8, 16, 32], "batch_context": 128,
            "cold_bytes": 128 << 20, "budget_s": 0.05}  # 4x this CPU's 32 MB L3


def pass_prediction(shape: ModelShape, ceilings: dict[str, Any], batch: int, new_tokens: int,
                    context: int, elem_bytes: int) -> dict[str, float]:
    """Whole-pass time by the roofline, and by the roofline with a floor of one tiny-op cost per op
    (the cheapest a real op can be, whatever its FLOPs and bytes)."""
    floor = ceilings["op_overhead"]["per_op_s"]
    ops = count_ops(shape, batch, new_tokens, context, elem_bytes)
    return {"roofline_s": sum(predict(o, ceilings)[0] * o.count for o in ops),
            "with_op_floor_s": sum(max(predict(o, ceilings)[0], floor) * o.count for o in ops)}


def experiment(model: torch.nn.Module, ceilings: dict[str, Any], device: str,
               quick: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    cfg = settings(device, quick)
    shape = ModelShape.from_config(model.config)
    dtype = next(model.parameters()).dtype
    e = torch.finfo(dtype).bits // 8
    decode = op_table(shape, ceilings, 1, 1, cfg["context"], device, dtype, cfg["cold_bytes"],
                      cfg["budget_s"])
    log(format_table(f"decode step, batch 1, context {cfg['context']} ({device})", decode))
    prefill = op_table(shape, ceilings, 1, cfg["prefill"], cfg["prefill"], device, dtype,
                       cfg["cold_bytes"], cfg["budget_s"])
    log(format_table(f"prefill of {cfg['prefill']} tokens ({device})", prefill))

    by_length = []
    for t in cfg["lengths"]:
        row = {"tokens": t,
               "prefill_predicted": pass_prediction(shape, ceilings, 1, t, t, e),
               "decode_predicted": pass_prediction(shape, ceilings, 1, 1, t, e),
               "prefill_measured_s": hf_prefill_time(model, t, device),
               "decode_step_measured_s": hf_decode_step_time(model, 1, t, device)}
        by_length.append(row)
        log(f"  length {t:>5}: prefill {row['prefill_measured_s'] * 1e3:8.2f} ms, "
            f"decode step {row['decode_step_measured_s'] * 1e3:8.2f} ms")
    by_batch = []
    for b in cfg["batches"]:
        row = {"batch": b,
               "predicted": pass_prediction(shape, ceilings, b, 1, cfg["batch_context"], e),
               "measured_s": hf_decode_step_time(model, b, cfg["batch_context"], device)}
        by_batch.append(row)
        log(f"  batch {b:>4}: decode step {row['measured_s'] * 1e3:8.2f} ms "
            f"(roofline {row['predicted']['roofline_s'] * 1e3:.2f} ms)")
    return {
        "device": device, "dtype": str(dtype).removeprefix("torch."), "shape": asdict(shape),
        "settings": cfg, "ceilings": {k: ceilings[k] for k in
                                      ("memory_bandwidth", "matmul", "ridge_flop_per_byte",
                                       "op_overhead")},
        "decode_ops": decode, "decode_totals": table_totals(decode),
        "prefill_ops": prefill, "prefill_totals": table_totals(prefill),
        "decode_weight_bytes": totals(decode_ops(shape, 1, cfg["context"], e))["weight_bytes"],
        "by_length": by_length, "by_batch": by_batch,
        "whole_pass_model": "the library's (transformers) forward with its dynamic cache",
    }
