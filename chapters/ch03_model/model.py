"""A Llama-architecture transformer written by hand in plain PyTorch (chapter 3).

This is the model every later chapter runs. It stays as chapter 3 wrote it: later chapters change
what they pass to it or replace one of its submodules, never this file.

The call
--------
    model = Llama(ModelConfig.from_hf(hf_config), device=..., dtype=...)
    load_weights(model, state_dict)                  # by Hugging Face name, clear error if wrong
    logits = model(input_ids, positions, attn)       # [B, T] long, [B, T] long -> [B, T, V]
    logits = model(input_ids, positions, attn, last_only=True)   # -> [B, 1, V], for generation

`positions` holds each token's position in its own sequence, row by row, so rows of one batch may
be at different places (chapter 5). A negative position marks a padding slot: no query ever sees
its key and value (and a cache must not store them); its own output is junk for the caller to drop.

The attention backend (`attn`)
------------------------------
The model computes queries, keys and values and rotates them; *which keys each query sees, and
where keys live between calls*, is the backend's business. A backend is any object with

    forward(layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor
        q: [B, n_heads, T, head_dim]; k, v: [B, n_kv_heads, T, head_dim] (RoPE already applied);
        positions: [B, T]; returns [B, n_heads, T, head_dim].

k and v arrive with the KV heads only (3, not 9): a cache stores them unrepeated, which is what
grouped-query attention saves. `NoCacheAttention` (here) attends over this call's keys only, so
every step must feed the whole sequence. Chapter 4's cache writes k, v at `positions` and attends
over everything stored; chapter 8 swaps the arithmetic for a flash kernel; chapter 10 stores k, v
in blocks. `attend()` is the arithmetic written out (scores, mask, softmax, weighted sum), for any
backend to reuse.

Swap points (replace the submodule by assignment; its call signature is the contract)
-------------------------------------------------------------------------------------
    model.layers[i].input_layernorm, .post_attention_layernorm, model.norm   RMSNorm: x -> x
    model.layers[i].mlp                                                      SwiGLU:  x -> x
    model.rope                                   RotaryEmbedding: (q, k, positions) -> (q, k)
        (a kernel that fuses the rotation into its cache write replaces this with a pass-through)
    any nn.Linear: layers[i].self_attn.{q,k,v,o}_proj, layers[i].mlp.{gate,up,down}_proj, lm_head
        (chapter 12's quantised linears: anything that maps [..., in] -> [..., out])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool

    @classmethod
    def from_hf(cls, hf: Any) -> ModelConfig:
        """Read a transformers `LlamaConfig`, refusing the variants this file does not implement."""
        # transformers 5 keeps RoPE settings in `rope_parameters`; 4.x in rope_theta/rope_scaling.
        rope = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
        theta = rope.get("rope_theta", getattr(hf, "rope_theta", None))
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"only plain RoPE is implemented, the config asks for {rope}")
        if getattr(hf, "hidden_act", "silu") != "silu":
            raise ValueError(f"only the SiLU (SwiGLU) MLP is implemented, got {hf.hidden_act!r}")
        if getattr(hf, "attention_bias", False) or getattr(hf, "mlp_bias", False):
            raise ValueError("linear layers with a bias are not implemented")
        return cls(
            vocab_size=hf.vocab_size,
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            num_layers=hf.num_hidden_layers,
            num_heads=hf.num_attention_heads,
            num_kv_heads=hf.num_key_value_heads,
            head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads,
            rms_norm_eps=float(hf.rms_norm_eps),
            rope_theta=float(theta),
            max_position_embeddings=hf.max_position_embeddings,
            tie_word_embeddings=bool(hf.tie_word_embeddings),
        )


class AttentionBackend(Protocol):
    def forward(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor: ...


# ---- the arithmetic of attention, shared by every backend written in plain PyTorch -------------


def causal_visibility(q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """[B, T] and [B, S] positions -> [B, T, S] bool: may query t see key s?

    Causal by *position*, not by index, so left-padded rows and cached prefixes work unchanged;
    keys at negative positions (padding) are never visible."""
    k = k_positions[:, None, :]
    return (k <= q_positions[:, :, None]) & (k >= 0)


def attend(q: Tensor, k: Tensor, v: Tensor, visible: Tensor) -> Tensor:
    """Scaled dot-product attention written out, with grouped-query heads.

    q: [B, Hq, T, D]; k, v: [B, Hkv, S, D]; visible: [B, T, S] -> [B, Hq, T, D].
    Query head h uses KV head h // (Hq // Hkv). Instead of copying each KV head Hq/Hkv times, the
    query heads of one group are stacked along the time axis, so one matmul serves the group."""
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    group = Hq // Hkv
    q = q.reshape(B, Hkv, group * T, D)
    scores = (q @ k.transpose(-1, -2)) * D**-0.5  # [B, Hkv, group*T, S]
    scores = scores.view(B, Hkv, group, T, S)
    # The most negative finite number, not -inf: a padding query that sees nothing gets uniform
    # weights instead of 0/0 = NaN, and a NaN in a padding row could leak through 0 * NaN later.
    scores = scores.masked_fill(~visible[:, None, None], torch.finfo(scores.dtype).min)
    # Softmax in float32 even for bf16 inputs: exp() of bf16 scores loses too many digits.
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
    out = weights.view(B, Hkv, group * T, S) @ v  # [B, Hkv, group*T, D]
    return out.view(B, Hq, T, D)


class NoCacheAttention:
    """Chapter 3's backend: no memory between calls. Each query sees the keys of this call only,
    so a generation loop must re-run the whole sequence every step."""

    def forward(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        return attend(q, k, v, causal_visibility(positions, positions))


# ---- the layers ---------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, the statistics in float32 (as the reference does)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding: rotate each (i, i + D/2) pair of q and k by position * freq_i.

    The angle tables are computed once in float32 for every position the model allows; a step
    only looks up its rows. The rotation makes q·k depend on the *difference* of positions."""

    def __init__(self, head_dim: int, theta: float, max_positions: int) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)  # [max_positions, head_dim]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        # Padding slots (negative positions) get position 0's angles; their outputs are dropped.
        index = positions.clamp(min=0)
        cos = self.cos[index][:, None].to(q.dtype)  # [B, 1, T, D]: broadcast over heads
        sin = self.sin[index][:, None].to(q.dtype)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis: a 90-degree turn of every pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        if cfg.num_heads % cfg.num_kv_heads:
            raise ValueError(f"{cfg.num_heads} query heads cannot share {cfg.num_kv_heads} KV heads")
        self.layer = layer
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def forward(
        self, x: Tensor, positions: Tensor, rope: nn.Module, attn: AttentionBackend
    ) -> Tensor:
        B, T, _ = x.shape
        # [B, T, heads * D] -> [B, heads, T, D]: each head attends independently.
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = rope(q, k, positions)
        out = attn.forward(self.layer, q, k, v, positions)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)): the gate decides, per hidden unit, how much of `up` passes."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm residual block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = SelfAttention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(
        self, x: Tensor, positions: Tensor, rope: nn.Module, attn: AttentionBackend
    ) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), positions, rope, attn)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(
        self, cfg: ModelConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        self.config = cfg
        # Built on the meta device (no memory, no random init: the weights are loaded next), then
        # given real, uninitialised storage; only the RoPE tables are computed for real.
        with torch.device("meta"):
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
            self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.to_empty(device=device).to(dtype)
        if cfg.tie_word_embeddings:  # one matrix: token -> vector on the way in, scores on the way out
            self.lm_head.weight = self.embed_tokens.weight
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings).to(device)

    def forward(
        self, input_ids: Tensor, positions: Tensor, attn: AttentionBackend, last_only: bool = False
    ) -> Tensor:
        """[B, T] ids and positions -> logits [B, T, V], or [B, 1, V] with `last_only`."""
        if input_ids.dim() != 2 or positions.shape != input_ids.shape:
            raise ValueError(
                f"input_ids and positions must both be [batch, tokens]; got "
                f"{tuple(input_ids.shape)} and {tuple(positions.shape)}"
            )
        x = self.embed_tokens(input_ids)  # [B, T, hidden]
        for layer in self.layers:
            x = layer(x, positions, self.rope, attn)
        if last_only:  # picking the next token needs only the last position's scores; the output
            x = x[:, -1:]  # projection (hidden x vocab per position) is skipped for the rest
        return self.lm_head(self.norm(x))  # [B, T, vocab]


# ---- loading ------------------------------------------------------------------------------------


class WeightLoadError(ValueError):
    pass


def hf_name(name: str) -> str:
    """Our parameter name -> the Hugging Face checkpoint's (which nests all but lm_head in `model.`)."""
    return name if name.startswith("lm_head.") else f"model.{name}"


@torch.no_grad()
def load_weights(model: Llama, state_dict: Mapping[str, Tensor]) -> None:
    """Load every parameter from `state_dict` by name, converting to the model's dtype and device
    (tensors that already match are shared, not copied).

    Refuses, naming the tensor, a checkpoint that lacks one, has one of the wrong shape, or holds
    one this model has no place for (which would mean the architectures differ)."""
    expected = dict(model.named_parameters())  # a tied lm_head appears once, as embed_tokens
    for name, param in expected.items():
        key = hf_name(name)
        if key not in state_dict:
            raise WeightLoadError(f"the checkpoint has no tensor {key!r} (needed for {name})")
        tensor = state_dict[key]
        if tuple(tensor.shape) != tuple(param.shape):
            raise WeightLoadError(
                f"tensor {key!r} has shape {tuple(tensor.shape)}, the model expects "
                f"{tuple(param.shape)}: the checkpoint and the config disagree"
            )
        if (tensor.dtype, tensor.device) == (param.dtype, param.device) and not (
            torch.is_inference_mode_enabled() or tensor.is_inference()
        ):
            # Share the loaded storage instead of copying it: the process then holds one copy of
            # the weights, not two (the library's model and ours read the same memory).
            param.data = tensor.detach()
        else:
            param.copy_(tensor)
    known = {hf_name(n) for n in expected}
    if model.config.tie_word_embeddings and "lm_head.weight" in state_dict:
        # Some checkpoints store the tied matrix twice; it must really be the same matrix.
        if not torch.equal(state_dict["lm_head.weight"], state_dict["model.embed_tokens.weight"]):
            raise WeightLoadError(
                "the config ties lm_head to embed_tokens but the checkpoint's 'lm_head.weight' differs"
            )
        known.add("lm_head.weight")
    unexpected = sorted(set(state_dict) - known)
    if unexpected:
        raise WeightLoadError(f"the checkpoint has tensors this model does not use: {unexpected[:5]}")


def from_hf(hf_model: nn.Module) -> Llama:
    """Our model with the weights of a transformers Llama, on its device and in its dtype."""
    first = next(hf_model.parameters())
    # Built outside inference mode even when the caller is inside it, so that the model can share
    # the library's weights (tensors made in inference mode cannot be shared with ordinary code).
    with torch.inference_mode(False):
        model = Llama(ModelConfig.from_hf(hf_model.config), device=first.device, dtype=first.dtype)
        load_weights(model, hf_model.state_dict())
    return model.eval()


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied matrices count once
