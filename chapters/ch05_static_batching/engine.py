"""Chapter 5's engine: several requests in one static batch.

Chapter 4 made each decode step cheap, but a step still multiplies every weight matrix by a single
vector: the machine reads 135 M weights to do 135 M multiply-adds, and memory bandwidth, not
arithmetic, sets the pace. Put B requests side by side and the same weights serve B vectors per
read. This engine does that, the simplest way (vLLM's ancestors called it static batching):

* **Padding.** Prompts have different lengths; a batch is a rectangle. Each prompt is padded *on
  the left* (chapter 3's `left_pad`), so every row's newest token sits in the last column and each decode step
  appends one column to all rows at once.
* **Positions and mask.** Each row counts its own positions from 0, and padding slots get position
  -1: attention (chapter 3's `causal_visibility`) never lets a query see a key at a negative
  position, and the cache (`BatchKVCache`) stores a row's keys by position, so padding changes
  nothing a row computes. That is the proof obligation: every row equals its solo run.
* **Per-row everything else.** Each row has its own SamplingParams and seed (chapter 2's batched
  sampler with `derive_seed`), its own stop conditions (the base class's `RequestState`), and
  stops producing output when it finishes. The batch itself runs until its last row finishes:
  a finished (or cancelled) row rides along as padding, computed and thrown away. That waste, and
  the padding's, is what `BatchStats` counts and what chapter 9 removes.

`stream_batch` is the interface (the server's `BatchingRunner` uses it); `generate_batch`
collects it. Single requests (`stream`, `generate`) run chapter 4's code unchanged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from chapters.ch02_generate_loop.sampling import derive_seed
from chapters.ch03_model.oracle import left_pad
from chapters.ch04_kv_cache.engine import KVCacheEngine
from chapters.ch05_static_batching.batch_cache import BatchKVCache
from shared.contracts import GenerateResult, SamplingParams, TokenEvent
from shared.engine import per_row_params


@dataclass
class BatchStats:
    """What one batch computed, against what its requests needed. A "position" is one token of
    one row through the whole model."""

    rows: int = 0
    prefill_width: int = 0  # the longest prompt: every row is padded to it
    forward_passes: int = 0  # the prefill and every decode step
    positions_computed: int = 0  # rows x positions, every forward pass
    positions_needed: int = 0  # the prompts' tokens and one per decode step of each live row

    @property
    def positions_wasted(self) -> int:
        """Left padding in the prefill, and finished rows carried through decode steps."""
        return self.positions_computed - self.positions_needed


class StaticBatchEngine(KVCacheEngine):
    name = "ch05_static_batching"
    implementation = "ch03 hand-written Llama (PyTorch), contiguous KV cache, static batches"

    def stream_batch(
        self,
        prompts: Sequence[list[int]],
        params: Sequence[SamplingParams],
        cancels: Sequence[threading.Event | None] | None = None,
        stats: BatchStats | None = None,
    ) -> Iterator[list[TokenEvent | None]]:
        """Run the requests as one batch. Yields, per forward pass, one entry per row: the row's
        event (the last one carries finish_reason and metrics), or None for a row that finished
        earlier. Ends when every row has finished. A row whose cancel event is set finishes with
        "abort" at the next step; the others are not disturbed. `stats`, if given, is filled in."""
        if len(params) != len(prompts) or (cancels is not None and len(cancels) != len(prompts)):
            raise ValueError(
                f"{len(prompts)} prompts need as many SamplingParams (got {len(params)}) and "
                f"cancel events (got {'none' if cancels is None else len(cancels)})"
            )
        if not prompts:
            return
        cancels = cancels or [None] * len(prompts)
        states = [self.new_request(p, sp, c) for p, sp, c in zip(prompts, params, cancels)]
        seeds = [self._request_seed(sp, st.metrics) for sp, st in zip(params, states)]
        stats = stats if stats is not None else BatchStats()
        ids, positions = left_pad(prompts, self.eos_token_id, self.device)
        stats.rows, stats.prefill_width = ids.shape
        # Slot = position: the cache must reach the furthest position any row may ask for.
        limit = max(len(p) + sp.max_tokens for p, sp in zip(prompts, params))
        cache = BatchKVCache.for_model(self.model, len(prompts), ids.shape[1], limit)
        first_token_at = 0.0
        for step in range(max(sp.max_tokens for sp in params)):
            events: list[TokenEvent | None] = [None] * len(states)
            for row, state in enumerate(states):  # a cancelled row stops before the next pass
                if not state.finished and state.cancel is not None and state.cancel.is_set():
                    state.end("abort")
                    events[row] = self.final_event(state)
            live = [row for row, state in enumerate(states) if not state.finished]
            if live:
                with torch.inference_mode():  # per step: a `with` held across `yield` would leak
                    t0 = time.perf_counter()
                    logits = self.model(ids, positions, cache, last_only=True)[:, -1]
                    t1 = time.perf_counter()
                    tokens = self.select_batch(logits, params, seeds, step)
                    t2 = time.perf_counter()
                stats.forward_passes += 1
                stats.positions_computed += ids.numel()
                stats.positions_needed += sum(len(prompts[r]) for r in live) if step == 0 else len(live)
                if step == 0:
                    first_token_at = t2
                for row in live:
                    state = states[row]
                    m = state.metrics
                    # Each row waited for the whole batch's forward pass and selection.
                    m.forward_ms += (t1 - t0) * 1000
                    m.selection_ms += (t2 - t1) * 1000
                    m.positions_processed += ids.shape[1]
                    if step == 0:
                        m.ttft_ms = (t2 - state.start) * 1000
                        m.extra.update(batch_size=len(states),
                                       padding_positions=ids.shape[1] - len(prompts[row]))
                    else:
                        m.tpot_ms = (t2 - first_token_at) * 1000 / step
                    events[row] = state.add(tokens[row])
                    if state.finished:
                        m.kv_cache_bytes = cache.bytes_per_row
                        events[row] = self.final_event(state)
            if any(e is not None for e in events):
                yield events
            if all(state.finished for state in states):
                return
            # The next step feeds each live row its new token at its next position; a finished
            # row becomes padding (position -1): computed, never stored, never seen.
            next_pos = positions[:, -1:] + 1
            live_mask = torch.tensor([not s.finished for s in states], device=self.device)[:, None]
            ids = torch.tensor(tokens, device=self.device)[:, None]
            positions = torch.where(live_mask, next_pos, torch.full_like(next_pos, -1))
        # Every row stops at its max_tokens, so the loop cannot end with a row still running.
        raise AssertionError("a row outlived its max_tokens")

    def select_batch(
        self,
        logits: torch.Tensor,
        params: Sequence[SamplingParams],
        seeds: Sequence[int | None],
        step: int,
    ) -> list[int]:
        """Chapter 2's `select` for every row at once: EOS masked below min_tokens, then the
        vectorised sampler with each row's own params and `derive_seed(seed, step)`."""
        banned = [r for r, sp in enumerate(params) if step < sp.min_tokens and not sp.ignore_eos]
        if banned:
            logits = logits.clone()
            logits[banned, self.eos_token_id] = float("-inf")
        step_seeds = [0 if s is None else derive_seed(s, step) for s in seeds]
        sample_batch = getattr(self.token_sampler, "sample_batch", None)
        if sample_batch is None:  # the pure-Python reference sampler: one row at a time
            return [self.token_sampler.sample(logits[r], sp, ss)
                    for r, (sp, ss) in enumerate(zip(params, step_seeds))]
        return sample_batch(logits, params, step_seeds)

    def generate_batch(
        self, prompts: Sequence[str | list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[GenerateResult]:
        """All prompts in one padded batch; each result as `generate()` would return it."""
        per_row = per_row_params(prompts, params)
        ids = [self.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        rows: list[list[TokenEvent]] = [[] for _ in prompts]
        for events in self.stream_batch(ids, per_row):
            for row, event in zip(rows, events):
                if event is not None:
                    row.append(event)
        return [self.collect(row) for row in rows]
