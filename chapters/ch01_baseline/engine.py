"""Chapter 1's engine: Hugging Face `generate()` behind the shared contracts.

`generate()` is a black box that returns when it is done, but a server must stream tokens as they
are made and stop when the client goes away. So generation runs in a worker thread; a streamer
hands each new token to us through a queue, and a stopping criterion checks whether we stopped
listening.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from shared.contracts import RequestMetrics, SamplingParams
from shared.engine import BaseOfflineEngine

_DONE = object()


class _QueueStreamer(BaseStreamer):
    """Receives the prompt first, then one tensor per new token."""

    def __init__(self) -> None:
        self.queue: queue.Queue[object] = queue.Queue()
        self._seen_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        for token in value.reshape(-1).tolist():
            self.queue.put(int(token))

    def end(self) -> None:
        self.queue.put(_DONE)


class _StopWhenSet(StoppingCriteria):
    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class BaselineEngine(BaseOfflineEngine):
    name = "ch01_baseline"
    implementation = "transformers.generate"
    sampler = "transformers"

    # `generate()` draws from torch's global random generator; one request at a time may seed it.
    _seed_lock = threading.Lock()

    def generation_kwargs(self, params: SamplingParams) -> dict[str, object]:
        kwargs: dict[str, object] = {
            "max_new_tokens": params.max_tokens,
            "min_new_tokens": params.min_tokens,
            "do_sample": not params.is_greedy,
            "pad_token_id": self.eos_token_id,
            # HF's own defaults (e.g. top_k=50 from a generation config) must not leak in.
            "top_k": None,
            "top_p": None,
            "temperature": None,
        }
        if not params.is_greedy:
            kwargs.update(
                temperature=params.temperature,
                top_k=params.top_k if params.top_k > 0 else None,
                top_p=params.top_p,
            )
        if params.ignore_eos:
            kwargs["eos_token_id"] = []
        return kwargs

    def _generate_tokens(
        self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics
    ) -> Iterator[int]:
        input_ids = torch.tensor([prompt_ids], device=self.device)
        streamer = _QueueStreamer()
        stop = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                with torch.inference_mode():
                    self.loaded.model.generate(
                        input_ids,
                        attention_mask=torch.ones_like(input_ids),
                        streamer=streamer,
                        stopping_criteria=StoppingCriteriaList([_StopWhenSet(stop)]),
                        **self.generation_kwargs(params),
                    )
            except BaseException as exc:  # re-raised in the consuming thread
                errors.append(exc)
                streamer.end()

        with self._seed_lock:
            if params.seed is not None:
                torch.manual_seed(params.seed % 2**64)
            worker = threading.Thread(target=run, name="hf-generate", daemon=True)
            worker.start()
            try:
                while (item := streamer.queue.get()) is not _DONE:
                    yield item  # type: ignore[misc]
                if errors:
                    raise errors[0]
            finally:
                stop.set()
                worker.join()
