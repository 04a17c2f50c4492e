"""Chapter 7's kernels as drop-in modules for chapter 3's model, through its swap points.

    use_triton_kernels(model)   # every RMSNorm, every linear layer and every MLP replaced in place

- each RMSNorm (input, post-attention, final) -> TritonRMSNorm (the fused kernel);
- each MLP -> TritonSwiGLU: gate and up projections and the activation in one GEMM (the SwiGLU
  epilogue), then the down projection;
- q/k/v/o projections and the LM head -> TritonLinear (the tiled GEMM, weight passed as W.t()).

The weights are the model's own Parameters (no copies; the tied LM head stays tied). What this does
not do yet: fuse the residual adds into the norm or the GEMM epilogue. Both kernels support it
(`rmsnorm(..., residual=)`, `matmul(..., residual=)`), but the residual add lives in chapter 3's
DecoderLayer.forward, which is not a swap point; an engine that wants it replaces the layers.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import check_tensors  # noqa: F401  (sets TRITON_INTERPRET first)

from torch import Tensor, nn

from chapters.ch03_model.model import Llama, RMSNorm, SwiGLU
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

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight)


class TritonSwiGLU(nn.Module):
    def __init__(self, mlp: SwiGLU) -> None:
        super().__init__()
        self.w_gate, self.w_up = mlp.gate_proj.weight, mlp.up_proj.weight
        self.down_proj = TritonLinear(mlp.down_proj)

    def forward(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        h = matmul_swiglu(x2, self.w_gate.t(), self.w_up.t())  # [tokens, intermediate], one kernel
        return self.down_proj(h).view(*x.shape[:-1], -1)


def use_triton_kernels(model: Llama, lm_head: bool = True) -> Llama:
    """Swap the model's norms, linears and MLPs for the Triton ones, in place; returns the model."""
    for layer in model.layers:
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
