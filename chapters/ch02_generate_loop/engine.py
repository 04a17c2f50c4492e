"""Chapter 2's engine: our own generation loop around the Hugging Face model's forward pass.

Chapter 1 called `model.generate()`. Here the loop is written out: run the model, select a token,
append it, repeat. It uses the model's forward pass and nothing else from Hugging Face's
generation code, and it keeps no KV cache: every step runs the whole sequence so far through the
model again. That waste is deliberate; it is what chapter 4 removes.

The loop is split into hooks so later chapters replace one part each:

* `forward(input_ids)`: the model. Chapter 3 swaps in its hand-written transformer.
* `next_logits(seq)`: what a step feeds the model. Here, every token so far; chapter 4 feeds only
  the newest token and reads the rest from a cache it keeps in its `Sequence`.
* `new_sequence(prompt_ids, params, metrics)`: the per-request state that `next_logits` works on
  (chapter 4 allocates the request's KV cache here and records its size in the metrics).
* `select(logits, params, seed, step)`: the sampler. Chapter 5 batches it with
  `TorchSampler.sample_batch`.

Stop conditions, stop strings and UTF-8-safe text are the base class's (`shared/engine.py`,
`shared/text.py`): this engine only yields token ids.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch02_generate_loop.sampling import (
    ReferenceSampler,
    TorchSampler,
    derive_seed,
    fresh_seed,
)
from shared.contracts import RequestMetrics, SamplingParams
from shared.model import LoadedModel


@dataclass
class Sequence:
    """One request as the loop sees it (vLLM's word): the prompt and every token selected since."""

    token_ids: list[int]
    num_prompt_tokens: int


class GenerateLoopEngine(BaselineEngine):
    name = "ch02_generate_loop"
    implementation = "transformers.forward"

    def __init__(
        self,
        model: str | LoadedModel | None = None,
        device: str | None = None,
        sampler: ReferenceSampler | TorchSampler | None = None,
    ) -> None:
        super().__init__(model, device)
        self.token_sampler = sampler or TorchSampler()
        self.sampler = f"ch02.{self.token_sampler.name}"  # recorded in provenance()

    # ---- the hooks later chapters override ----------------------------------------------------

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token ids [B, T] -> logits [B, V] of each row's last position.

        `use_cache=False`: Hugging Face would otherwise build a KV cache we then throw away.
        `logits_to_keep=1`: only the last position's logits pick the next token, so the output
        projection (576 x 49,152 per position) runs once, not T times."""
        return self.loaded.model(input_ids, use_cache=False, logits_to_keep=1).logits[:, -1]

    def new_sequence(
        self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics
    ) -> Sequence:
        return Sequence(list(prompt_ids), len(prompt_ids))

    def next_logits(self, seq: Sequence) -> tuple[torch.Tensor, int]:
        """The logits [V] for the position after `seq.token_ids`, and how many positions the model
        ran to get them. Without a cache that is all of them, every step."""
        input_ids = torch.tensor([seq.token_ids], device=self.device)
        return self.forward(input_ids)[0], len(seq.token_ids)

    def select(
        self, logits: torch.Tensor, params: SamplingParams, seed: int | None, step: int
    ) -> int:
        """Pick the token for output position `step` from its logits [V]."""
        if step < params.min_tokens and not params.ignore_eos:
            # min_tokens: EOS may not be chosen yet (with ignore_eos it is an ordinary token).
            logits = logits.clone()
            logits[self.eos_token_id] = float("-inf")
        step_seed = 0 if seed is None else derive_seed(seed, step)  # greedy draws nothing
        return self.token_sampler.sample(logits, params, step_seed)

    # ---- the loop -----------------------------------------------------------------------------

    def _generate_tokens(
        self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics
    ) -> Iterator[int]:
        seed = self._request_seed(params, metrics)
        seq = self.new_sequence(prompt_ids, params, metrics)
        # TTFT counts from here, when the engine starts the request (stream() starts its clock for
        # total_ms microseconds earlier); a server adds its queueing time on top.
        start = time.perf_counter()
        first_token_at = 0.0
        for step in range(params.max_tokens):
            # inference_mode per step, not around the loop: a `with` held across `yield` would
            # leak into the caller's code between tokens.
            with torch.inference_mode():
                t0 = time.perf_counter()
                logits, positions = self.next_logits(seq)
                self._synchronize()
                t1 = time.perf_counter()
                token = self.select(logits, params, seed, step)
                t2 = time.perf_counter()
            metrics.forward_ms += (t1 - t0) * 1000
            metrics.selection_ms += (t2 - t1) * 1000
            metrics.positions_processed += positions
            # Step 0 is the prefill (the whole prompt); every later step is a decode step.
            if step == 0:
                first_token_at = t2
                metrics.ttft_ms = (t2 - start) * 1000
            else:
                metrics.tpot_ms = (t2 - first_token_at) * 1000 / step
            seq.token_ids.append(token)
            yield token

    def _finish_metrics(self, metrics: RequestMetrics, start: float) -> None:
        super()._finish_metrics(metrics, start)
        # Everything that was neither the model nor the sampler: the Python loop, building input
        # tensors, detokenising, stop-string checks. A remainder, so the three parts sum to total.
        metrics.other_ms = metrics.total_ms - metrics.forward_ms - metrics.selection_ms

    def _synchronize(self) -> None:
        """Wait for the GPU to finish the forward pass, so its time is charged to forward_ms and not
        to the sampler's first device-to-host copy. (The sampler waits for it anyway, so this
        costs nothing extra.) A no-op on a CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @staticmethod
    def _request_seed(params: SamplingParams, metrics: RequestMetrics) -> int | None:
        """The request's seed, or a fresh one recorded in the metrics so the run can be repeated.
        Greedy requests draw no random numbers and get none."""
        if params.is_greedy:
            return None
        seed = params.seed if params.seed is not None else fresh_seed()
        metrics.extra["seed"] = seed
        return seed
