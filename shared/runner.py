"""The one interface the server talks to: submit a request, receive an async stream of token events.

`make_app` never calls an engine directly. It calls an `EngineRunner`, which

* admits a request or refuses it at once (`QueueFullError`, which the server turns into a 503), and
* hands back a `RequestStream`: an async iterator of `TokenEvent`s that ends after the event that
  carries the finish reason. Closing the stream early (`aclose()`, which the server does when the
  client disconnects) sets the request's cancel event, so the engine stops and frees what it held.

Engines differ in how they schedule work, not in what the server sees:

* `OfflineRunner` (chapter 1 onwards) adapts a `BaseOfflineEngine`, which serves one request at a
  time in the calling thread: one worker thread takes requests from a bounded waiting queue, one at
  a time, and bridges each request's events from the worker thread into asyncio.
* Chapter 5's batching runner subclasses `OfflineRunner` and overrides its two hooks,
  `_take_batch` (which requests to serve together) and `_serve` (serve them).
* Chapter 9's engine batches across requests by itself; it implements `EngineRunner` directly,
  putting each request's events into its `RequestStream`.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from shared.contracts import SamplingParams, TokenEvent


class QueueFullError(RuntimeError):
    """The runner's waiting queue is full; the client should retry later."""

    def __init__(self, max_queue: int, retry_after_s: int = 1) -> None:
        super().__init__(f"the server is busy: {max_queue} requests are already waiting")
        self.retry_after_s = retry_after_s


class RunnerClosedError(RuntimeError):
    """The runner shut down before this request finished."""


_CLOSED = object()  # wakes a consumer blocked on a stream that it closed


class ServedEngine(Protocol):
    """What a runner needs from an engine besides generation (every chapter's engine has it)."""

    name: str
    max_context: int
    tokenizer: Any

    def encode(self, prompt: str) -> list[int]: ...
    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> list[int]: ...
    def check_fits(self, prompt_len: int, max_tokens: int) -> None: ...
    def provenance(self) -> dict[str, Any]: ...


_request_ids = itertools.count(1)


class RequestStream:
    """One request's token events. The producer (any thread) calls `put` and `fail`; the consumer
    (the server, in its event loop) iterates with `async for` and may `aclose()` early."""

    def __init__(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_close: Callable[[RequestStream], None] | None = None,
    ) -> None:
        self.request_id = next(_request_ids)
        self.prompt_ids = list(prompt_ids)
        self.params = params
        #: set when the consumer goes away; the engine checks it between tokens
        self.cancel = threading.Event()
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[Any] = asyncio.Queue()
        self._finished = False  # the final event (or an error) has been consumed
        self._closed = False
        self._on_close = on_close

    # ---- producer side: safe from any thread ---------------------------------------------------

    def put(self, event: TokenEvent) -> None:
        self._send(event)

    def fail(self, error: BaseException) -> None:
        self._send(error)

    def _send(self, item: TokenEvent | BaseException) -> None:
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, item)
        except RuntimeError:  # the consumer's event loop is gone: nobody is listening
            self.cancel.set()

    # ---- consumer side: in the event loop -------------------------------------------------------

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._finished or self._closed:
            raise StopAsyncIteration
        item = await self._events.get()
        if item is _CLOSED:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        if item.finish_reason is not None:
            self._finished = True
        return item

    async def aclose(self) -> None:
        """Stop listening. Before the final event this cancels the request (a request still
        waiting never starts) and ends an `async for` blocked on this stream."""
        if self._closed:
            return
        self._closed = True
        if not self._finished:
            self.cancel.set()
            self._events.put_nowait(_CLOSED)
        if self._on_close is not None:
            self._on_close(self)


class EngineRunner(ABC):
    """What `make_app` serves. Subclasses implement `submit`, `stats` and, if they hold threads or
    tasks, `aclose`; the model's metadata is delegated to the engine."""

    def __init__(self, engine: ServedEngine, *, model_name: str | None = None) -> None:
        self.engine = engine
        manifest = getattr(getattr(engine, "loaded", None), "manifest", {})
        self.model_name = model_name or manifest.get("model") or type(engine).__name__

    # ---- what the server needs to validate and tokenize a request ----------------------------

    @property
    def max_context(self) -> int:
        return self.engine.max_context

    @property
    def vocab_size(self) -> int:
        return len(self.engine.tokenizer)

    def encode(self, prompt: str) -> list[int]:
        return self.engine.encode(prompt)

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.engine.apply_chat_template(messages)

    def check_fits(self, prompt_len: int, max_tokens: int) -> None:
        self.engine.check_fits(prompt_len, max_tokens)

    def provenance(self) -> dict[str, Any]:
        return self.engine.provenance()

    # ---- the interface ------------------------------------------------------------------------

    @abstractmethod
    def submit(self, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        """Admit a request (called in the server's event loop) or raise `QueueFullError` at once.
        The prompt has already been checked against the context (`check_fits`)."""

    @abstractmethod
    def stats(self) -> dict[str, int]:
        """Counters for /health: at least `running` and `waiting` (requests now), and
        `requests_finished`, `requests_aborted`, `requests_rejected` and `tokens_generated`
        (totals since start; tokens are those the engine handed back to the runner)."""

    async def aclose(self) -> None:
        """Stop serving: cancel what runs, fail what waits."""


class OfflineRunner(EngineRunner):
    """Serves a `BaseOfflineEngine` one request at a time from one worker thread.

    `max_queue` bounds the requests waiting for the engine (not counting the one being served);
    one more is refused with `QueueFullError`.
    """

    def __init__(
        self, engine: Any, *, max_queue: int = 64, model_name: str | None = None
    ) -> None:
        super().__init__(engine, model_name=model_name)
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 0:
            raise ValueError(f"max_queue must be an integer >= 0, got {max_queue!r}")
        self.max_queue = max_queue
        self._cond = threading.Condition()
        self._waiting: deque[RequestStream] = deque()
        self._running: list[RequestStream] = []
        self._worker: threading.Thread | None = None
        self._closing = False
        self._counts = {
            "requests_finished": 0,
            "requests_aborted": 0,
            "requests_rejected": 0,
            "tokens_generated": 0,
        }

    def submit(self, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        with self._cond:
            if len(self._waiting) >= self.max_queue:
                self._counts["requests_rejected"] += 1
                raise QueueFullError(self.max_queue)
            stream = RequestStream(prompt_ids, params, on_close=self._forget)
            self._waiting.append(stream)
            self._start_worker()
            self._cond.notify()
        return stream

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {
                "running": len(self._running),
                "waiting": len(self._waiting),
                "max_queue": self.max_queue,
                **self._counts,
            }

    async def aclose(self) -> None:
        with self._cond:
            self._closing = True
            for stream in self._running:
                stream.cancel.set()
            while self._waiting:
                self._waiting.popleft().fail(RunnerClosedError("the server is shutting down"))
            self._cond.notify_all()
            worker = self._worker
        if worker is not None:
            await asyncio.to_thread(worker.join)

    # ---- hooks for a batching runner (chapter 5) --------------------------------------------

    def _take_batch(self) -> list[RequestStream]:
        """Called with the lock held and at least one request waiting: which to serve next.
        A batching runner may wait here for more arrivals with `self._cond.wait(timeout)`, which
        releases the lock while it waits."""
        return [self._waiting.popleft()]

    def _serve(self, batch: list[RequestStream]) -> None:
        """Serve the requests `_take_batch` chose, in the worker thread."""
        (stream,) = batch
        try:
            for event in self.engine.stream(stream.prompt_ids, stream.params, stream.cancel):
                self._record(event)
                stream.put(event)
        except Exception as exc:  # the consumer re-raises it; the worker lives on
            stream.fail(exc)

    def _record(self, event: TokenEvent) -> None:
        with self._cond:
            if event.token_id is not None:
                self._counts["tokens_generated"] += 1
            if event.finish_reason == "abort":
                self._counts["requests_aborted"] += 1
            elif event.finish_reason is not None:
                self._counts["requests_finished"] += 1

    # ---- the worker ---------------------------------------------------------------------------

    def _start_worker(self) -> None:
        # Started lazily (and restarted after `aclose`), so one runner survives several app
        # lifespans, as in tests.
        if self._worker is None or not self._worker.is_alive():
            self._closing = False
            self._worker = threading.Thread(
                target=self._work, name=f"{self.model_name}-runner", daemon=True
            )
            self._worker.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                batch = self._take_batch()
                self._running.extend(batch)
            try:
                self._serve(batch)
            finally:
                with self._cond:
                    for stream in batch:
                        self._running.remove(stream)

    def _forget(self, stream: RequestStream) -> None:
        """A consumer closed its stream: a request still waiting leaves the queue at once."""
        with self._cond:
            if stream in self._waiting:
                self._waiting.remove(stream)
                self._counts["requests_aborted"] += 1
