"""Chapter 7's kernels as drop-in modules for chapter 3's model, through its swap points.

    use_triton_kernels(model)   # every decoder layer, the final RMSNorm and the LM head replaced in place

- each decoder layer -> TritonDecoderLayer: its RMSNorms -> the fused RMSNorm kernel; q/k/v -> the
  tiled GEMM (weight passed as W.t()); gate and up projections and the activation in one GEMM (the
  SwiGLU epilogue); and the two residual adds moved into the epilogues of the o and down
  projections, so `x + o_proj(attention)` and `x + down(swiglu)` are one kernel each;
- the final RMSNorm -> TritonRMSNorm, the LM head -> TritonLinear.

The residual adds are written in chapter 3's `DecoderLayer.forward`, which a module swapped *inside*
the layer cannot reach (an o_proj returning `x + o(h)` would never see x). So the swap point used for
them is the layer itself: `model.layers[i]`, with chapter 3's attention module kept (its o_proj
set to the identity; the layer applies the projection, residual included). `fuse_residuals=False`
keeps chapter 3's layer and its two separate adds, for comparison.

The weights are the model's own Parameters (no copies; the tied LM head stays tied).
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import check_tensors  # noqa: F401  (sets TRITON_INTERPRET first)

from torch import Tensor, nn

from chapters.ch03_model.model import AttentionBackend, DecoderLayer, Llama, RMSNorm, SwiGLU
from chapters.ch07_triton.matmul import linear
from chapters.ch07_triton.rmsnorm import rmsnorm
from chapters.ch07_triton.swiglu import matmul_swiglu


class TritonRMSNorm(nn.Module):
    def __init__(self, norm: RMSNorm) -> None:
        super().__init__()
        self.weight, self.eps = norm.weight, norm.eps

    def forward(self, x: Tensor) -> Tensor:
        return rmsnorm(x.contiguous(), self.weight, self.eps)


class TritonLinear(nn.Module):
    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        if layer.bias is not None:
            raise ValueError("TritonLinear: linear layers with a bias are not supported")
        self.weight = layer.weight  # [out, in], shared with the model (tying survives)

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        return linear(x, self.weight, residual=residual)


class TritonSwiGLU(nn.Module):
    def __init__(self, mlp: SwiGLU) -> None:
        super().__init__()
        self.w_gate, self.w_up = mlp.gate_proj.weight, mlp.up_proj.weight
        self.down_proj = TritonLinear(mlp.down_proj)

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        """down(silu(gate(x)) * up(x)), plus `residual` in the down projection's epilogue if given."""
        x2 = x.reshape(-1, x.shape[-1])
        h = matmul_swiglu(x2, self.w_gate.t(), self.w_up.t())  # [tokens, intermediate], one kernel
        return self.down_proj(h, residual=residual).view(*x.shape[:-1], -1)


class TritonDecoderLayer(nn.Module):
    """Chapter 3's pre-norm block, x + attention(norm(x)) then x + mlp(norm(x)), with each residual
    add done by the GEMM before it, while its output tile is still in registers."""

    def __init__(self, layer: DecoderLayer) -> None:
        super().__init__()
        self.input_layernorm = TritonRMSNorm(layer.input_layernorm)
        self.post_attention_layernorm = TritonRMSNorm(layer.post_attention_layernorm)
        attn = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(attn, name, TritonLinear(getattr(attn, name)))
        self.o_proj = TritonLinear(attn.o_proj)
        attn.o_proj = nn.Identity()  # attention returns the heads, concatenated; o_proj is ours
        self.self_attn = attn
        self.mlp = TritonSwiGLU(layer.mlp)

    def forward(self, x: Tensor, positions: Tensor, rope: nn.Module, attn: AttentionBackend) -> Tensor:
        heads = self.self_attn(self.input_layernorm(x), positions, rope, attn)  # [B, T, heads * D]
        x = self.o_proj(heads, residual=x)
        return self.mlp(self.post_attention_layernorm(x), residual=x)


def use_triton_kernels(model: Llama, lm_head: bool = True, fuse_residuals: bool = True) -> Llama:
    """Swap the model's layers (or, without `fuse_residuals`, only their norms, linears and MLPs),
    its final norm and its LM head for the Triton ones, in place; returns the model."""
    for i, layer in enumerate(model.layers):
        if fuse_residuals:
            model.layers[i] = TritonDecoderLayer(layer)
            continue
        layer.input_layernorm = TritonRMSNorm(layer.input_layernorm)
        layer.post_attention_layernorm = TritonRMSNorm(layer.post_attention_layernorm)
        attn = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(attn, name, TritonLinear(getattr(attn, name)))
        layer.mlp = TritonSwiGLU(layer.mlp)
    model.norm = TritonRMSNorm(model.norm)
    if lm_head:
        model.lm_head = TritonLinear(model.lm_head)
    return model
