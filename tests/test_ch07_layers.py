"""Chapter 7's kernels and chapter 8's flash backend inside chapter 3's model (tiny random-weight
Llama, float32, interpreter on a CPU): logits within tolerance of the PyTorch model, same greedy token."""

from __future__ import annotations

import copy

import pytest
import torch

from chapters.ch07_triton.interpret import KERNEL_DEVICE
from chapters.ch03_model.model import NoCacheAttention, from_hf
from chapters.ch07_triton.check import rel_err
from chapters.ch07_triton.layers import TritonDecoderLayer, use_triton_kernels
from chapters.ch08_flash_attention.backend import FlashNoCacheAttention
from shared.model import tiny_model


@pytest.fixture(scope="module")
def model_and_inputs():
    model = from_hf(tiny_model(seed=0).model).to(KERNEL_DEVICE)
    ids = torch.tensor([[1, 17, 400, 9000, 42, 7], [5, 6, 7, 8, 9, 10]], device=KERNEL_DEVICE)
    positions = torch.arange(ids.shape[1], device=KERNEL_DEVICE).expand_as(ids)
    with torch.no_grad():
        ref = model(ids, positions, NoCacheAttention(), last_only=True)
    return model, ids, positions, ref


@torch.no_grad()
@pytest.mark.parametrize("fuse_residuals", [True, False], ids=["residuals-in-epilogues", "separate-adds"])
def test_triton_layers_match_pytorch_model(model_and_inputs, fuse_residuals: bool) -> None:
    model, ids, positions, ref = model_and_inputs
    # lm_head=False: the 49,152-wide LM head takes ~2 minutes in the interpreter (3,072 programs);
    # it is the same GEMM kernel that test_ch07_kernels checks, and the GPU benchmark times.
    fast = use_triton_kernels(copy.deepcopy(model), lm_head=False, fuse_residuals=fuse_residuals)
    assert all(isinstance(layer, TritonDecoderLayer) == fuse_residuals for layer in fast.layers)
    out = fast(ids, positions, NoCacheAttention(), last_only=True)
    assert rel_err(out, ref) < 1e-4  # float32 throughout; on a GPU TF32 dots would need ~1e-2
    assert torch.equal(out.argmax(-1), ref.argmax(-1))


@torch.no_grad()
def test_fused_layer_shares_the_weights_and_adds_each_residual_once(model_and_inputs) -> None:
    model, ids, positions, _ = model_and_inputs
    original = model.layers[0]
    source = copy.deepcopy(original)  # the swap edits the layer it is given (its attention's o_proj)
    w_o, w_down = source.self_attn.o_proj.weight, source.mlp.down_proj.weight
    layer = TritonDecoderLayer(source)
    assert layer.o_proj.weight is w_o and layer.mlp.down_proj.weight is w_down  # no weight copied
    x = torch.randn(2, 6, model.config.hidden_size, device=KERNEL_DEVICE)
    # One layer alone against chapter 3's: a residual added twice (or not at all) would be off by x.
    want = original(x, positions, model.rope, NoCacheAttention())
    got = layer(x, positions, model.rope, NoCacheAttention())
    assert rel_err(got, want) < 1e-5


@torch.no_grad()
def test_flash_backend_matches_pytorch_attention(model_and_inputs) -> None:
    model, ids, positions, ref = model_and_inputs
    out = model(ids, positions, FlashNoCacheAttention(), last_only=True)
    assert rel_err(out, ref) < 1e-4
    assert torch.equal(out.argmax(-1), ref.argmax(-1))


def test_flash_backend_refuses_padding(model_and_inputs) -> None:
    model, ids, positions, _ = model_and_inputs
    padded = positions.clone()
    padded[0, 0] = -1
    with pytest.raises(ValueError, match="positions 0..T-1"):
        model(ids, padded, FlashNoCacheAttention())
