"""A decode step with static shapes, so that a CUDA graph can capture it once and replay it.

A CUDA graph records the kernels one call launched, with their exact arguments (pointers, sizes),
and replays them all with a single launch. The host's work per step (Python, the dispatcher,
hundreds of kernel launches) drops to one call. The price is that nothing recorded may change
between replays: no new allocations, no new shapes, no Python-side decisions. So:

* the input token and its position live in device tensors allocated once (`ids`, `positions`);
  a step writes the new values *into* them;
* the KV cache is allocated once, at a fixed length (`max_len`), and attention always runs over
  all `max_len` slots; a mask hides the slots after the current position, which is what lets the
  same recorded kernels serve step 1 and step 500 alike;
* the logits come out in a buffer owned by the graph (`logits`), overwritten by every replay.

Attending over empty slots wastes work, so the engine sizes the cache in buckets (256, 512, 1024,
… tokens): one graph per bucket, each reading at most twice the keys it needs. For this model
the keys and values are a small part of a step's bytes (23 kB per token against 269 MB of bf16
weights), so the waste is small until contexts reach thousands of tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from chapters.ch03_model.model import Llama, attend, causal_visibility


class StaticKVCache:
    """Chapter 3's attention-backend interface over a cache allocated once at `max_len` slots.

    Slot s holds the key and value of position s. Every call writes this call's keys at their
    positions and attends over all slots, masking those past each query's position: unwritten
    slots, and slots left over from an earlier request, are never seen."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, max_len: int,
                 device: str | torch.device, dtype: torch.dtype) -> None:
        for name, size in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                           ("max_len", max_len)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"StaticKVCache: {name} must be an integer >= 1, got {size!r}")
        shape = (layers, 1, kv_heads, max_len, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.slot_positions = torch.arange(max_len, device=device)[None]  # [1, max_len]
        self.max_len = max_len
        self.visible = torch.zeros(1, 1, max_len, dtype=torch.bool, device=device)

    @classmethod
    def for_model(cls, model: Llama, max_len: int) -> StaticKVCache:
        cfg = model.config
        weight = model.embed_tokens.weight
        return cls(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, max_len, weight.device,
                   weight.dtype)

    @property
    def nbytes(self) -> int:
        return 2 * self.keys.numel() * self.keys.element_size()

    def forward(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        if q.shape[0] != 1:
            raise ValueError(f"StaticKVCache holds one sequence; got a batch of {q.shape[0]}")
        # index_copy_ with a device tensor of positions: no host value decides where to write,
        # so the recorded kernel writes wherever `positions` says at replay time.
        self.keys[layer].index_copy_(2, positions[0], k)
        self.values[layer].index_copy_(2, positions[0], v)
        if layer == 0:  # every layer sees the same slots: build the mask once per forward pass
            self.visible = causal_visibility(positions, self.slot_positions)
        return attend(q, self.keys[layer], self.values[layer], self.visible)


# torch.compile modes a step may use. Not "reduce-overhead" or "max-autotune": those capture CUDA
# graphs of their own, which cannot be recorded inside ours.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


def check_compile_mode(mode: str | None) -> None:
    if mode is not None and mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode must be None or one of {COMPILE_MODES}, got {mode!r}")


class DecodeStep:
    """One token in, the next token's logits out, through a static cache; captured as a CUDA graph
    on a GPU (`capture()`), run eagerly elsewhere."""

    def __init__(self, model: Llama, cache: StaticKVCache, compile_mode: str | None = None) -> None:
        check_compile_mode(compile_mode)
        self.model, self.cache = model, cache
        # Optional: fuse the step's small ops with torch.compile (inductor; `compile_mode` is its
        # mode, e.g. "default") before capturing it. Fewer, bigger kernels, rounded differently
        # from the eager ops: the tokens may differ. `forward` is what warm-up, capture and eager
        # calls run, so the graph records the compiled kernels.
        self.forward: Callable[[], Tensor] = (
            torch.compile(self._forward, mode=compile_mode, dynamic=False) if compile_mode
            else self._forward)
        device = model.embed_tokens.weight.device
        self.ids = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.logits: Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.owner: object | None = None  # the request whose keys the cache holds now

    def _forward(self) -> Tensor:
        return self.model(self.ids, self.positions, self.cache)[:, -1]

    @torch.inference_mode()
    def capture(self, warmup: int = 2) -> None:
        """Record the step. Warm-up runs on a side stream first, as PyTorch requires, so lazy
        initialisation (cuBLAS handles, workspace) happens outside the recording. Warm-up writes
        into the cache at position 0; the request's prefill overwrites it."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                self.forward()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self.forward()

    def prefill(self, prompt_ids: list[int]) -> Tensor:
        """Run the prompt eagerly (its length varies, so it is not captured), writing its keys and
        values into the same cache the graph reads. Returns the last position's logits [V]."""
        device = self.ids.device
        ids = torch.tensor([prompt_ids], device=device)
        positions = torch.arange(len(prompt_ids), device=device)[None]
        return self.model(ids, positions, self.cache, last_only=True)[0, -1]

    def __call__(self, token: int, position: int) -> Tensor:
        """Logits [V] for the token after `token`, which sits at `position`. The returned tensor is
        the graph's output buffer: read it before the next call overwrites it."""
        if position >= self.cache.max_len:
            raise ValueError(f"position {position} is past the cache's {self.cache.max_len} slots")
        self.ids.fill_(token)
        self.positions.fill_(position)
        if self.graph is None:
            return self.forward()[0]
        self.graph.replay()
        assert self.logits is not None
        return self.logits[0]


def bucket(tokens: int, smallest: int = 256) -> int:
    """The cache length for a request needing `tokens` slots: the next power of two >= smallest."""
    # smallest=0 would loop forever, and a non-power of two would skip past the model's context.
    if isinstance(smallest, bool) or not isinstance(smallest, int) or smallest < 1 or smallest & (smallest - 1):
        raise ValueError(f"bucket: smallest must be a power of two >= 1, got {smallest!r}")
    size = smallest
    while size < tokens:
        size *= 2
    return size
