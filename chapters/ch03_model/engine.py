"""Chapter 3's engine: chapter 2's generation loop over the hand-written transformer.

The loop, the samplers, the stop conditions and the metrics are chapter 2's, untouched; only the
forward pass changes. The weights are the same cached tensors the Hugging Face model loaded,
copied by name into `chapters/ch03_model/model.py`'s `Llama`. Still no KV cache: every step runs
the whole sequence, through `NoCacheAttention`. Chapter 4 passes a cache in its place.
"""

from __future__ import annotations

import torch

from chapters.ch02_generate_loop.engine import GenerateLoopEngine
from chapters.ch02_generate_loop.sampling import ReferenceSampler, TorchSampler
from chapters.ch03_model.model import Llama, NoCacheAttention, from_hf
from shared.model import LoadedModel


class ModelEngine(GenerateLoopEngine):
    name = "ch03_model"
    # Same tokens as chapter 2, different code computing them: the provenance must say so.
    implementation = "ch03 hand-written Llama (PyTorch)"

    def __init__(
        self,
        model: str | LoadedModel | None = None,
        device: str | None = None,
        sampler: ReferenceSampler | TorchSampler | None = None,
    ) -> None:
        super().__init__(model, device, sampler)
        self.model: Llama = from_hf(self.loaded.model)
        self.attn = NoCacheAttention()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token ids [B, T] -> logits [B, V] of each row's last position."""
        B, T = input_ids.shape
        positions = torch.arange(T, device=input_ids.device).expand(B, T)
        return self.model(input_ids, positions, self.attn, last_only=True)[:, -1]
