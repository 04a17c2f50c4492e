"""Chapter 6's engine: chapter 4's, with the batch-1 decode step captured in a CUDA graph.

The profile (02_profile_step.py, 03_host_overhead.py) shows that on a GPU a decode step of this
small model is mostly host work: thousands of PyTorch ops, each a Python call and a kernel launch
taking longer than the kernel itself, with the GPU idle in between. A CUDA graph records the step's
kernels once and replays them with one launch per step (graph.py says what that demands: static
buffers, a cache allocated once, positions in a device tensor, attention over the whole cache with
a mask).

What changes against chapter 4: the cache (a `StaticKVCache` per size bucket, shared by the
requests this engine serves one after another, instead of one cache per request) and the decode
step (a replay instead of a forward pass). The prefill still runs eagerly: its length varies with
every prompt. The loop, the samplers, the stop conditions and the metrics are untouched.

On a CPU there is nothing to capture: the same static step runs eagerly, so the CPU checks that the
arithmetic the graph records gives chapter 4's tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from chapters.ch02_generate_loop.engine import Sequence
from chapters.ch02_generate_loop.sampling import ReferenceSampler, TorchSampler
from chapters.ch04_kv_cache.engine import KVCacheEngine
from chapters.ch06_profiling.graph import DecodeStep, StaticKVCache, bucket, check_compile_mode
from shared.contracts import RequestMetrics, SamplingParams
from shared.model import LoadedModel


@dataclass
class GraphSequence(Sequence):
    """A request plus the static step (and cache) it runs on, and its metrics (for the cache's
    size, which changes when the sequence moves to a bigger bucket)."""

    step: DecodeStep | None = None
    metrics: RequestMetrics | None = None


class CudaGraphEngine(KVCacheEngine):
    name = "ch06_cuda_graph"

    def __init__(
        self,
        model: str | LoadedModel | None = None,
        device: str | None = None,
        sampler: ReferenceSampler | TorchSampler | None = None,
        min_cache_len: int = 256,
        compile_mode: str | None = None,
    ) -> None:
        if (isinstance(min_cache_len, bool) or not isinstance(min_cache_len, int) or min_cache_len < 1
                or min_cache_len & (min_cache_len - 1)):
            raise ValueError(f"min_cache_len must be a power of two >= 1, got {min_cache_len!r}")
        check_compile_mode(compile_mode)  # here, not at the first request, which builds the step
        super().__init__(model, device, sampler)
        if min_cache_len > self.max_context:
            raise ValueError(f"min_cache_len={min_cache_len} exceeds the model's context of {self.max_context}")
        self.min_cache_len = min_cache_len  # the smallest bucket; tests use a small one
        self.use_graphs = self.device.type == "cuda"
        # Off by default: fusing changes rounding, so tokens may leave chapter 4's. gpu_benchmark.py
        # measures it ("default") as a preview of what fusing kernels (chapter 7) buys.
        self.compile_mode = compile_mode
        self.implementation = (
            "ch03 Llama, static KV cache, decode step "
            + (f"torch.compile(mode={compile_mode!r})'d, " if compile_mode else "")
            + ("replayed from a CUDA graph" if self.use_graphs else "run eagerly (CPU: no graphs)")
        )
        self._steps: dict[int, DecodeStep] = {}  # cache length -> its step (and graph)

    def step_for(self, tokens: int) -> DecodeStep:
        """The static step whose cache holds `tokens` positions, built (and captured) on first use.
        Capturing costs a few warm-up passes, once per bucket for the engine's lifetime."""
        size = bucket(tokens, self.min_cache_len)
        if size > self.max_context:
            raise ValueError(f"{tokens} positions do not fit the model's context of {self.max_context}")
        if size not in self._steps:
            self._steps[size] = self.new_step(size)
        return self._steps[size]

    def new_step(self, size: int, capture: bool | None = None) -> DecodeStep:
        """A static step over a new cache of `size` slots, captured as a graph on a GPU unless
        `capture=False`. Later chapters override this to build their own step; `step_for` keeps
        the buckets."""
        step = DecodeStep(self.model, StaticKVCache.for_model(self.model, size), self.compile_mode)
        if self.use_graphs if capture is None else capture:
            step.capture()
        return step

    def new_sequence(
        self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics
    ) -> GraphSequence:
        # No cache yet: the first next_logits() picks the bucket the prompt fits, and the sequence
        # moves up a bucket only if it grows that long (a cache sized for max_tokens up front
        # would make every step attend over slots most requests never fill).
        return GraphSequence(list(prompt_ids), len(prompt_ids), metrics=metrics)

    def next_logits(self, seq: GraphSequence) -> tuple[torch.Tensor, int]:
        """Prefill on the first call (eager: the prompt's length varies), then one replayed step
        per token. When the sequence outgrows its bucket it moves to the next one, cache copied."""
        if seq.step is None:
            seq.step = self.step_for(len(seq.token_ids) + 1)
            seq.step.owner = seq
            self._record_cache(seq)
            return seq.step.prefill(seq.token_ids), len(seq.token_ids)
        position = len(seq.token_ids) - 1  # the newest token's position: its K, V go there
        if seq.step.owner is not seq:
            raise RuntimeError(
                "another request used this engine's static cache in the middle of this one; "
                "CudaGraphEngine serves one request at a time")
        if position >= seq.step.cache.max_len:
            seq.step = self._grow(seq.step, position + 1, seq)
            self._record_cache(seq)
        return seq.step(seq.token_ids[-1], position), 1

    @staticmethod
    def _record_cache(seq: GraphSequence) -> None:
        if seq.metrics is not None and seq.step is not None:
            seq.metrics.kv_cache_bytes = seq.step.cache.nbytes

    def _grow(self, old: DecodeStep, tokens: int, seq: GraphSequence) -> DecodeStep:
        new = self.step_for(tokens)
        n = old.cache.max_len
        new.cache.keys[:, :, :, :n].copy_(old.cache.keys)
        new.cache.values[:, :, :, :n].copy_(old.cache.values)
        new.owner = seq
        return new
