"""The engine base class every chapter subclasses.

A chapter's engine overrides one method, `_generate_tokens`: given the prompt's token ids and the
sampling parameters, yield new token ids one at a time (and record what it measured in the
`RequestMetrics` it is handed). Everything around it is here, written once, so every engine stops,
streams and reports identically:

* `stream()` turns token ids into `TokenEvent`s: incremental text, the stop conditions (EOS unless
  `ignore_eos`, stop strings, max_tokens), cancellation, and the final metrics.
* `generate()` and `generate_batch()` collect a stream into a `GenerateResult`.
* `RequestState` is one request's share of that work (stop conditions, text, metrics), so an
  engine that runs several requests in one batch (chapter 5) stops each of them identically.

Closing the token generator is how generation stops early: a `finally` in the engine frees what the
request held.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from shared import config
from shared.contracts import FinishReason, GenerateResult, RequestMetrics, SamplingParams, TokenEvent
from shared.model import LoadedModel, load_model
from shared.text import IncrementalDetokenizer


class PromptTooLongError(ValueError):
    pass


class RequestState:
    """One request's stop conditions, text and metrics while its tokens arrive, one at a time.

    `add(token)` returns the event to send, or None once the request has finished: EOS (unless
    `ignore_eos`), a stop string, `max_tokens`, or its cancel event set. The finishing token, if
    it is output, travels in the final event (`BaseOfflineEngine.final_event`)."""

    def __init__(
        self,
        prompt_len: int,
        params: SamplingParams,
        tokenizer: Any,
        eos_token_id: int,
        cancel: threading.Event | None = None,
    ) -> None:
        self.params = params
        self.cancel = cancel
        self.eos_token_id = eos_token_id
        self.metrics = RequestMetrics(input_tokens=prompt_len)
        self.detok = IncrementalDetokenizer(tokenizer, params.stop)
        self.start = time.perf_counter()
        self.finish_reason: FinishReason | None = None
        self._last_token: int | None = None  # the token that ended the request, if it is output
        self._last_text = ""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def add(self, token: int) -> TokenEvent | None:
        if self.cancel is not None and self.cancel.is_set():
            self.end("abort")
            return None
        if token == self.eos_token_id and not self.params.ignore_eos:
            self.finish_reason = "stop"
            return None
        self.metrics.output_tokens += 1
        check = self.detok.add(token)
        if check.stopped or self.metrics.output_tokens >= self.params.max_tokens:
            self.finish_reason = "stop" if check.stopped else "length"
            self._last_token = token
            self._last_text = check.text + ("" if check.stopped else self.detok.flush())
            return None
        return TokenEvent(token, check.text)

    def end(self, reason: FinishReason) -> None:
        """Finish without a token: the engine ran out of tokens ("length"; text held back for a
        possible stop string is released) or the request was cancelled ("abort")."""
        self.finish_reason = reason
        self._last_text = self.detok.flush() if reason == "length" else ""

    def final_event(self) -> TokenEvent:
        if self.finish_reason is None:
            raise RuntimeError("the request has not finished")
        return TokenEvent(self._last_token, self._last_text, self.finish_reason, self.metrics)


class BaseOfflineEngine(ABC):
    """An engine that serves one request at a time, in the calling thread."""

    name: str = "base"
    #: what computes the forward pass; two runtimes with identical outputs keep distinct records
    implementation: str = "transformers"
    sampler: str = "none"

    def __init__(self, model: str | LoadedModel | None = None, device: str | None = None) -> None:
        self.loaded = model if isinstance(model, LoadedModel) else load_model(model, device=device)
        self.tokenizer = self.loaded.tokenizer
        self.device = torch.device(self.loaded.manifest["device"])
        self.dtype = next(self.loaded.model.parameters()).dtype
        self.eos_token_id = self.loaded.eos_token_id
        self.max_context = self.loaded.max_context

    # ---- what a chapter overrides -------------------------------------------------------------

    @abstractmethod
    def _generate_tokens(
        self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics
    ) -> Iterator[int]:
        """Yield new token ids, at most `params.max_tokens`, never EOS before `params.min_tokens`.
        The caller stops consuming at EOS or a stop string and then closes the generator."""

    # ---- shared behaviour -----------------------------------------------------------------------

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt, add_special_tokens=False)

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return list(ids)

    def check_fits(self, prompt_len: int, max_tokens: int) -> None:
        """Reject a request whose prompt plus output cannot fit in the context window."""
        if prompt_len < 1:
            raise PromptTooLongError("the prompt is empty: it must contain at least one token")
        if prompt_len + max_tokens > self.max_context:
            raise PromptTooLongError(
                f"the prompt ({prompt_len} tokens) plus max_tokens ({max_tokens}) exceeds the "
                f"model's context of {self.max_context} tokens"
            )

    def provenance(self) -> dict[str, Any]:
        return {
            "engine": type(self).__name__,
            "implementation": self.implementation,
            "sampler": self.sampler,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "model_manifest": self.loaded.manifest,
            "manifest_sha256": self.loaded.manifest_sha256,
        }

    def stream(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        cancel: threading.Event | None = None,
    ) -> Iterator[TokenEvent]:
        """Yield one event per token made; the last event carries finish_reason and metrics."""
        state = self.new_request(prompt_ids, params, cancel)
        tokens = self._generate_tokens(list(prompt_ids), params, state.metrics)
        try:
            for token in tokens:
                event = state.add(token)
                if event is None:
                    break
                yield event
            else:
                state.end("length")
        finally:
            tokens.close()  # the engine's `finally` frees what the request held
        yield self.final_event(state)

    def new_request(
        self, prompt_ids: list[int], params: SamplingParams, cancel: threading.Event | None = None
    ) -> RequestState:
        """Check that the request fits and start tracking it. `stream()` drives one; an engine that
        serves several requests in one batch (chapter 5) drives one per row."""
        self.check_fits(len(prompt_ids), params.max_tokens)
        return RequestState(len(prompt_ids), params, self.tokenizer, self.eos_token_id, cancel)

    def final_event(self, state: RequestState) -> TokenEvent:
        """The finished request's last event, with its metrics completed."""
        self._finish_metrics(state.metrics, state.start)
        return state.final_event()

    def _finish_metrics(self, metrics: RequestMetrics, start: float) -> None:
        metrics.total_ms = (time.perf_counter() - start) * 1000
        if metrics.total_ms > 0:
            metrics.tokens_per_second = metrics.output_tokens / (metrics.total_ms / 1000)

    def generate(self, prompt: str | list[int], params: SamplingParams | None = None) -> GenerateResult:
        params = params or SamplingParams(max_tokens=config.BENCHMARK_TOKENS)
        prompt_ids = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        return self.collect(self.stream(prompt_ids, params))

    def collect(self, events: Iterable[TokenEvent]) -> GenerateResult:
        """One request's events, up to the final one, as a `GenerateResult`."""
        ids: list[int] = []
        text: list[str] = []
        for event in events:
            if event.token_id is not None:  # the final event's token, if any, is output too
                ids.append(event.token_id)
            text.append(event.text)
            if event.finish_reason is not None:
                return GenerateResult(
                    "".join(text), ids, event.finish_reason, event.metrics, self.provenance()
                )
        raise AssertionError("stream ended without a final event")

    def generate_batch(
        self, prompts: Sequence[str | list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[GenerateResult]:
        """One after another; chapter 5 overrides this with a real padded batch."""
        per_row = per_row_params(prompts, params)
        return [self.generate(p, sp) for p, sp in zip(prompts, per_row)]


def per_row_params(
    prompts: Sequence[object], params: SamplingParams | Sequence[SamplingParams]
) -> list[SamplingParams]:
    """One SamplingParams per prompt: the same for all, or one each (counted)."""
    per_row = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
    if len(per_row) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(per_row)} SamplingParams")
    return per_row
