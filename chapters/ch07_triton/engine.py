"""Chapter 7's engine: chapter 6's graph-captured decode step, made of fewer, larger kernels.

Chapter 6 removed the host from the decode step but not the step's ~1,500 tiny kernels (its
gpu_benchmark.py counts them). This engine keeps chapter 6's loop, buckets, static cache and CUDA
graph, and changes what the graph records, entirely through chapter 3's swap points:

* every RMSNorm -> the fused RMSNorm kernel (one launch instead of eight);
* every MLP -> one GEMM with the SwiGLU epilogue (gate, up, silu, product) + the down projection;
* q/k/v/o projections and the LM head -> the tiled Triton GEMM (cuBLAS's place);
* `model.rope` -> a pass-through, and the attention backend -> `RopeCacheAttention`, which rotates
  q and k and writes k, v into chapter 6's `StaticKVCache` in one kernel, then attends over the
  cache up to the token's position in one more (chapter 6 attended over every slot, masked).

* the two residual adds of each layer -> the epilogues of the o and down projections. They are
  written in chapter 3's `DecoderLayer.forward`, which no module inside the layer can reach, so
  here the swapped module is the layer itself (`TritonDecoderLayer`, layers.py): 60 fewer kernels
  per step. `fuse_residuals=False` keeps chapter 3's layer and its separate adds, to measure it.

The prefill is not changed: it runs chapter 6's PyTorch model (cuBLAS, its own attention). Our
GEMM's autotuner keys on M, which for a prefill is the prompt length, so every new length would
re-tune (seconds on a GPU); the decode step always has M = 1, tuned once before capture. Both
models share the same weight tensors; only the modules around them differ.

On a CPU the kernels would run through Triton's interpreter, far too slowly for the real model, so
by default the engine is chapter 6's there (its `implementation` says so). `kernels=True` turns
them on anyway: the tests do that on the tiny model, with the LM head left to PyTorch (a
49,152-wide GEMM in the interpreter takes minutes).
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET  # sets TRITON_INTERPRET before triton loads

import copy
import itertools

import torch
from torch import Tensor, nn

from chapters.ch02_generate_loop.sampling import ReferenceSampler, TorchSampler
from chapters.ch03_model.model import Llama
from chapters.ch06_profiling.engine import CudaGraphEngine
from chapters.ch06_profiling.graph import DecodeStep, StaticKVCache
from chapters.ch07_triton.decode_attention import decode_attention
from chapters.ch07_triton.layers import use_triton_kernels
from chapters.ch07_triton.rope_cache import rope_cache_write
from shared.model import LoadedModel


class PassThroughRope(nn.Module):
    """`model.rope` for a backend that rotates q and k itself, inside its cache-write kernel."""

    def forward(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return q, k


class RopeCacheAttention:
    """Chapter 3's backend interface over chapter 6's `StaticKVCache`, taking *unrotated* q and k:
    two kernels per layer (RoPE + cache write, then attention up to each token's position)."""

    def __init__(self, cache: StaticKVCache, cos: Tensor, sin: Tensor) -> None:
        self.cache, self.cos, self.sin = cache, cos, sin

    def forward(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        if q.shape[0] != 1:
            raise ValueError(f"RopeCacheAttention holds one sequence; got a batch of {q.shape[0]}")
        keys, values = self.cache.keys[layer, 0], self.cache.values[layer, 0]  # [Hkv, max_len, D]
        q_rot = rope_cache_write(q[0], k[0], v[0], positions[0], self.cos, self.sin, keys, values)
        out = decode_attention(q_rot, keys, values, positions[0])  # [T, Hq, D]
        # [B, Hq, T, D] as a view of [B, T, Hq, D] memory: the model's transpose + reshape before
        # o_proj then costs no copy.
        return out[None].transpose(1, 2)


def shared_weights_copy(model: Llama) -> Llama:
    """New modules around the same parameter and buffer tensors (no weight is copied), so one tree
    can be swapped to Triton kernels while the other stays chapter 3's."""
    memo = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    return copy.deepcopy(model, memo)


class TritonDecodeStep(DecodeStep):
    """Chapter 6's static step; the replayed forward runs the Triton model over `RopeCacheAttention`,
    the eager prefill stays chapter 6's (`self.model`, `self.cache`: the same cache tensors)."""

    def __init__(self, model: Llama, fast_model: Llama, cache: StaticKVCache) -> None:
        super().__init__(model, cache)
        self.fast_model = fast_model
        self.fused = RopeCacheAttention(cache, model.rope.cos, model.rope.sin)

    def _forward(self) -> Tensor:
        return self.fast_model(self.ids, self.positions, self.fused)[:, -1]

    @torch.inference_mode()
    def capture(self, warmup: int = 2) -> None:
        # The autotuner times candidate tile sizes the first time it sees a shape, synchronising the
        # device: that must happen before recording starts, so run the step once here, eagerly.
        self._forward()
        torch.cuda.synchronize()
        super().capture(warmup)


class TritonEngine(CudaGraphEngine):
    name = "ch07_triton"
    step_class: type[TritonDecodeStep] = TritonDecodeStep  # chapter 8 swaps the prefill here
    prefill_kind = "chapter 6's PyTorch"

    def __init__(
        self,
        model: str | LoadedModel | None = None,
        device: str | None = None,
        sampler: ReferenceSampler | TorchSampler | None = None,
        min_cache_len: int = 256,
        kernels: bool | None = None,
        fuse_residuals: bool = True,
    ) -> None:
        super().__init__(model, device, sampler, min_cache_len)
        self.fuse_residuals = fuse_residuals
        on_gpu = self.device.type == "cuda"
        self.kernels = on_gpu if kernels is None else kernels
        if self.kernels and not on_gpu and not INTERPRET:
            raise ValueError("TritonEngine(kernels=True) needs a CUDA device, or TRITON_INTERPRET=1 on a CPU")
        if self.kernels:
            # lm_head: the interpreter would spend minutes per step on the 49,152-wide GEMM.
            self.fast_model = use_triton_kernels(shared_weights_copy(self.model), lm_head=not INTERPRET,
                                                 fuse_residuals=fuse_residuals)
            self.fast_model.rope = PassThroughRope()
        self.implementation = self.describe()

    def describe(self) -> str:
        if not self.kernels:
            return ("Triton kernels off (CPU: the interpreter is too slow for this model); "
                    "decode step = chapter 6's, run eagerly")
        head = "PyTorch LM head (interpreter)" if INTERPRET else "Triton LM head"
        where = ("Triton interpreter on the CPU, step run eagerly" if INTERPRET
                 else "decode step replayed from a CUDA graph" if self.use_graphs else "run eagerly")
        residuals = "residual adds in GEMM epilogues" if self.fuse_residuals else "separate residual adds"
        return (f"ch03 Llama, static KV cache; decode step of Triton kernels (fused RMSNorm, "
                f"SwiGLU-epilogue GEMM, tiled GEMMs, RoPE+cache write, decode attention, {residuals}; "
                f"{head}), {where}; prefill = {self.prefill_kind}")

    def new_step(self, size: int, capture: bool | None = None) -> DecodeStep:
        """Chapter 6's step_for asks for a step per bucket; ours is a TritonDecodeStep. Captured as
        a graph on a GPU unless `capture=False` (the GPU script times prefills on uncaptured steps)."""
        if not self.kernels:
            return super().new_step(size, capture)
        step = self.step_class(self.model, self.fast_model, StaticKVCache.for_model(self.model, size))
        if self.use_graphs if capture is None else capture:
            step.capture()
        return step
