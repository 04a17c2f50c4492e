"""The request batcher: the server's runner for a static-batching engine (chapter 5).

Chapter 1's `OfflineRunner` takes one waiting request, serves it to the end, then takes the next.
`BatchingRunner` changes its two hooks and nothing else (the server, its validation and the queue
bound are the same):

* `_take_batch`: once a request is waiting, wait up to `max_wait_ms` for more to arrive, and take
  at most `max_batch` of them. Waiting costs the first request latency; not waiting gives batches
  of one under light load. That trade is the batcher's one knob.
* `_serve`: run the batch through the engine's `stream_batch` and put each row's events into its
  own client's stream. A row whose client went away is cancelled (its cancel event is set by the
  server) and stops producing output; the other rows run on. The batch is static: nobody joins it
  once it has started, and a request that arrives meanwhile waits for the whole batch to finish
  (the head-of-line cost that chapter 9's continuous batching removes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from shared.contracts import SamplingParams, TokenEvent
from shared.runner import OfflineRunner, RequestStream


class BatchStreamingEngine(Protocol):
    """What the batcher needs from an engine, besides what every served engine has."""

    def stream_batch(
        self,
        prompts: Sequence[list[int]],
        params: Sequence[SamplingParams],
        cancels: Sequence[threading.Event | None] | None = None,
    ) -> Iterator[list[TokenEvent | None]]: ...


class BatchingRunner(OfflineRunner):
    """Serves a static-batching engine: up to `max_batch` requests at once, gathered for at most
    `max_wait_ms` after the first one arrives. `max_queue` bounds the requests waiting, as in
    `OfflineRunner`. `stats()` adds two counters to `OfflineRunner`'s: `batches` (served so far)
    and `batch_size_max`; requests served over batches is the mean batch size."""

    def __init__(
        self,
        engine: Any,
        *,
        max_batch: int = 8,
        max_wait_ms: float = 20.0,
        max_queue: int = 64,
        model_name: str | None = None,
    ) -> None:
        super().__init__(engine, max_queue=max_queue, model_name=model_name)
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an integer >= 1, got {max_batch!r}")
        if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, (int, float)) or not (
            0 <= max_wait_ms < float("inf")
        ):
            raise ValueError(f"max_wait_ms must be a finite number >= 0, got {max_wait_ms!r}")
        if not callable(getattr(engine, "stream_batch", None)):
            raise ValueError(
                f"{type(engine).__name__} has no stream_batch(); serve it with OfflineRunner"
            )
        self.max_batch = max_batch
        self.max_wait_ms = float(max_wait_ms)
        self._counts.update(batches=0, batch_size_max=0)

    def _take_batch(self) -> list[RequestStream]:
        # Called with the lock held; wait() releases it, so submit() can add requests meanwhile.
        deadline = time.monotonic() + self.max_wait_ms / 1000
        while len(self._waiting) < self.max_batch and not self._closing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._cond.wait(remaining)
        # Requests cancelled while we waited have left the queue; aclose() may have emptied it.
        batch = [self._waiting.popleft() for _ in range(min(self.max_batch, len(self._waiting)))]
        if batch:
            self._counts["batches"] += 1
            self._counts["batch_size_max"] = max(self._counts["batch_size_max"], len(batch))
        return batch

    def _serve(self, batch: list[RequestStream]) -> None:
        if not batch:
            return
        done = [False] * len(batch)
        try:
            events = self.engine.stream_batch(
                [s.prompt_ids for s in batch], [s.params for s in batch], [s.cancel for s in batch]
            )
            for step in events:
                for row, (stream, event) in enumerate(zip(batch, step)):
                    if event is None:
                        continue
                    self._record(event)
                    stream.put(event)
                    done[row] = event.finish_reason is not None
        except Exception as exc:  # every unfinished row's consumer re-raises it; the worker lives on
            for stream, finished in zip(batch, done):
                if not finished:
                    stream.fail(exc)
