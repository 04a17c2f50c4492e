"""The OpenAI-compatible server every chapter serves its engine through: `make_app(engine)`.

    POST /v1/chat/completions   the model's chat template over all messages
    POST /v1/completions        a prompt string (or a list of token ids)
    GET  /v1/models, /health    what is served (with provenance), and the runner's counters

`stream: true` answers with Server-Sent Events (`chat.completion.chunk` / `text_completion`
objects, then `data: [DONE]`); `stream_options.include_usage` adds a last chunk with `usage` (and
our `metrics`). Non-streamed responses carry the non-standard `metrics` object
(`RequestMetrics.as_dict()`); `system_fingerprint` names the engine and the model manifest.

Strict on purpose, because a benchmark that silently ignores a field measures the wrong thing:
unknown or misspelt fields, wrong types ("5", 5.0 or true as a token count), NaN/inf, values
`SamplingParams` rejects, empty messages and prompts that do not fit the context are all answered
with a 400 in OpenAI's error shape, naming the bad parameter. A few OpenAI fields that common
clients send (vLLM's benchmark sends `repetition_penalty: 1.0` and `logprobs: null`) are accepted
only at their neutral values.

Defaults where the request says nothing: `max_tokens` is 16 for /v1/completions (OpenAI's legacy
default) and the rest of the context window for /v1/chat/completions (as OpenAI and vLLM do; chat
models usually stop at EOS long before). Sampling defaults are `SamplingParams`' (temperature 1).

The server never calls the engine itself: it submits to an `EngineRunner` (shared/runner.py), so
chapter 5's batching runner and chapter 9's continuous-batching engine plug in unchanged.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.contracts import FinishReason, RequestMetrics, SamplingParams, TokenEvent
from shared.runner import EngineRunner, OfflineRunner, QueueFullError, RequestStream

log = logging.getLogger(__name__)

COMPLETIONS_DEFAULT_MAX_TOKENS = 16


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type, self.headers = type, headers

    def response(self) -> JSONResponse:
        body = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status, headers=self.headers)


# ---- request schemas: strict types, no unknown fields, no NaN/inf ------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class StreamOptions(_Strict):
    include_usage: bool | None = None


class _SamplingRequest(_Strict):
    # `null` means "not given" for every optional field, as in OpenAI's API.
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    # vLLM's extensions
    top_k: int | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    # Accepted only at their neutral values (see `_refuse_unsupported`).
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    logprobs: bool | int | None = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "user", "assistant"]
    content: str | list[TextPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content)


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None


class CompletionRequest(_SamplingRequest):
    prompt: str | list[int]


_NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
_FIELD_NAMES = sorted(
    set(ChatCompletionRequest.model_fields)
    | set(CompletionRequest.model_fields)
    | set(ChatMessage.model_fields)
    | set(TextPart.model_fields)
    | set(StreamOptions.model_fields)
)
_SAMPLING_FIELDS = {
    "temperature", "top_k", "top_p", "max_tokens", "min_tokens", "ignore_eos", "stop", "seed"
}


def _param_path(loc: tuple[Any, ...]) -> str:
    """("messages", 0, "content", "list[TextPart]", 1, "text") -> "messages[0].content[1].text".
    Pydantic puts the union member it tried into the location; that is not a parameter."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part in {"str", "int", "float", "bool"} or part[:1].isupper():
            continue
        else:
            out += f".{part}" if out else part
    return out


def _validation_error(errors: list[dict[str, Any]]) -> ApiError:
    first = errors[0]
    param = _param_path(first["loc"])
    if first["type"] == "extra_forbidden":
        name = str(first["loc"][-1])
        guess = difflib.get_close_matches(name, _FIELD_NAMES, n=1)
        hint = f"; did you mean '{guess[0]}'?" if guess else ""
        return ApiError(400, f"unknown field '{param}'{hint}", param=param)
    if first["type"] == "missing":
        return ApiError(400, f"missing required field '{param}'", param=param)
    # A union (e.g. prompt: a string or token ids) reports one error per member: name the deepest
    # (stop: [1] -> "stop[0]"), and if several are equally deep, give all their reasons.
    group = [e for e in errors if e["loc"][:1] == first["loc"][:1]]
    depth = max(len(e["loc"]) for e in group)
    deepest = [e for e in group if len(e["loc"]) == depth]
    first, param = deepest[0], _param_path(deepest[0]["loc"])
    reasons = "; or ".join(dict.fromkeys(e["msg"] for e in deepest))
    got = repr(first.get("input"))
    got = got if len(got) <= 60 else got[:57] + "..."
    return ApiError(400, f"invalid '{param}': {reasons} (got {got})", param=param)


# ---- turning a request into (prompt ids, SamplingParams) ----------------------------------------


async def _parse(request: Request, schema: type[_Strict]) -> Any:
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise ApiError(
            400,
            f"Content-Type must be application/json, got {content_type or 'none'!r}",
            code="invalid_content_type",
        )
    body = await request.body()
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        message = f"the request body is not valid JSON: {exc}"
        raise ApiError(400, message, code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc.errors(include_url=False)) from None


def _refuse_unsupported(req: _SamplingRequest, runner: EngineRunner) -> None:
    if req.model is not None and req.model != runner.model_name:
        raise ApiError(
            404,
            f"the model '{req.model}' does not exist; this server serves '{runner.model_name}'",
            param="model",
            code="model_not_found",
        )
    if req.stream_options is not None and not req.stream:
        raise ApiError(
            400, "stream_options is only allowed with stream: true", param="stream_options"
        )
    if req.n not in (None, 1):
        raise ApiError(400, f"only n=1 is supported, got n={req.n!r}", param="n")
    for name, neutral in _NEUTRAL.items():
        value = getattr(req, name)
        if value is not None and value != neutral:
            message = f"{name} is not supported (only {neutral} is accepted), got {value!r}"
            raise ApiError(400, message, param=name)
    if req.logprobs:
        raise ApiError(400, "logprobs are not supported", param="logprobs")


def _sampling_params(
    req: _SamplingRequest, max_tokens: int, max_tokens_param: str
) -> SamplingParams:
    given = {
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "min_tokens": req.min_tokens,
        "ignore_eos": req.ignore_eos,
        "stop": req.stop,
        "seed": req.seed,
    }
    try:
        return SamplingParams(
            max_tokens=max_tokens, **{k: v for k, v in given.items() if v is not None}
        )
    except ValueError as exc:
        # SamplingParams' messages start with the field's name.
        field = str(exc).split()[0]
        param = field if field in _SAMPLING_FIELDS else None
        raise ApiError(
            400, str(exc), param=max_tokens_param if field == "max_tokens" else param
        ) from None


def _check_fits(
    runner: EngineRunner, prompt_len: int, max_tokens: int, prompt_param: str, max_tokens_param: str
) -> None:
    try:
        runner.check_fits(prompt_len, max_tokens)
    except ValueError as exc:
        # Blame the prompt when it alone is empty or fills the context, else max_tokens.
        prompt_at_fault = prompt_len < 1 or prompt_len >= runner.max_context
        raise ApiError(
            400,
            str(exc),
            param=prompt_param if prompt_at_fault else max_tokens_param,
            code="context_length_exceeded" if prompt_len >= 1 else None,
        ) from None


# ---- responses -----------------------------------------------------------------------------------


def _usage(prompt_len: int, metrics: RequestMetrics | None) -> dict[str, int]:
    completion = metrics.output_tokens if metrics is not None else 0
    total = prompt_len + completion
    return {"prompt_tokens": prompt_len, "completion_tokens": completion, "total_tokens": total}


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def _aborted() -> ApiError:
    # Only seen by a client still listening when the server stops, e.g. on shutdown.
    return ApiError(
        503, "the request was stopped before it finished",
        type="server_error", code="request_aborted",
    )


@asynccontextmanager
async def _cancel_on_disconnect(request: Request, stream: RequestStream) -> AsyncIterator[None]:
    """Close `stream` (which cancels its generation) as soon as the client disconnects, and in any
    case on the way out. Watching `receive()` notices a disconnect even while no token is being
    sent, e.g. while the request still waits in the queue."""

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        await stream.aclose()

    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        watcher.cancel()
        await stream.aclose()


class _Completion:
    """What differs between the two endpoints: the object names and where the text goes."""

    def __init__(self, chat: bool, model: str, fingerprint: str, include_usage: bool) -> None:
        self.chat = chat
        self.include_usage = include_usage
        self.head = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "",  # set per object; here so keys come in OpenAI's order
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": fingerprint,
        }

    def _with(self, obj: str, **body: Any) -> dict[str, Any]:
        return {**self.head, "object": obj, **body}

    def _choice(self, text: str, finish: FinishReason | None, delta: dict | None) -> dict[str, Any]:
        if not self.chat:
            body: dict[str, Any] = {"text": text}
        elif delta is None:
            body = {"message": {"role": "assistant", "content": text}}
        else:
            body = {"delta": delta}
        return {"index": 0, **body, "logprobs": None, "finish_reason": finish}

    def response(
        self, text: str, finish: FinishReason, prompt_len: int, metrics: RequestMetrics
    ) -> dict[str, Any]:
        return self._with(
            "chat.completion" if self.chat else "text_completion",
            choices=[self._choice(text, finish, delta=None)],
            usage=_usage(prompt_len, metrics),
            metrics=metrics.as_dict(),
        )

    def chunk(self, event: TokenEvent, first: bool) -> dict[str, Any]:
        # Chat: the first delta names the role; a last token that adds no text sends {}.
        delta = {"role": "assistant"} if first else {}
        if event.text or first:
            delta["content"] = event.text
        out = self._with(
            "chat.completion.chunk" if self.chat else "text_completion",
            choices=[self._choice(event.text, event.finish_reason, delta)],
        )
        if self.include_usage:
            out["usage"] = None  # as OpenAI: every chunk but the last has usage null
        return out

    def usage_chunk(self, prompt_len: int, metrics: RequestMetrics | None) -> dict[str, Any]:
        return self._with(
            "chat.completion.chunk" if self.chat else "text_completion",
            choices=[],
            usage=_usage(prompt_len, metrics),
            metrics=metrics.as_dict() if metrics is not None else {},
        )


async def _collect(request: Request, stream: RequestStream) -> tuple[str, TokenEvent]:
    parts: list[str] = []
    async with _cancel_on_disconnect(request, stream):
        async for event in stream:
            parts.append(event.text)
            if event.finish_reason is not None:
                return "".join(parts), event
    raise _aborted()


async def _event_source(
    request: Request, stream: RequestStream, form: _Completion, prompt_len: int
) -> AsyncIterator[str]:
    """One SSE chunk per token that completes text, plus the first (its time is the time to first
    token) and the last (it carries the finish reason)."""
    async with _cancel_on_disconnect(request, stream):
        try:
            first = True
            async for event in stream:
                if event.finish_reason == "abort":
                    raise _aborted()
                if event.text or first or event.finish_reason is not None:
                    yield _sse(form.chunk(event, first))
                    first = False
                if event.finish_reason is not None:
                    if form.include_usage:
                        yield _sse(form.usage_chunk(prompt_len, event.metrics))
                    break
            else:
                raise _aborted()
        except ApiError as exc:
            yield _sse(json.loads(exc.response().body))
        except Exception as exc:  # the status line is sent already: report it in the stream
            log.exception("request %s failed while streaming", stream.request_id)
            yield _sse(_internal_error(exc))
        yield "data: [DONE]\n\n"


def _internal_error(exc: BaseException) -> dict[str, Any]:
    return {
        "error": {
            "message": f"internal server error ({type(exc).__name__})",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }


# ---- the app -------------------------------------------------------------------------------------


def make_app(
    engine_or_runner: Any, *, max_queue: int = 64, model_name: str | None = None
) -> FastAPI:
    """Serve an engine (a `BaseOfflineEngine`, adapted by an `OfflineRunner` that serves one request
    at a time with at most `max_queue` waiting) or any `EngineRunner`."""
    if isinstance(engine_or_runner, EngineRunner):
        runner = engine_or_runner
        if model_name is not None:
            runner.model_name = model_name
    else:
        runner = OfflineRunner(engine_or_runner, max_queue=max_queue, model_name=model_name)
    provenance = runner.provenance()
    fingerprint = f"{provenance.get('engine')}-{str(provenance.get('manifest_sha256', ''))[:12]}"
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await runner.aclose()

    app = FastAPI(title=f"Inference From Scratch: {provenance.get('engine')}", lifespan=lifespan)
    app.state.runner = runner

    # ---- every error in OpenAI's shape; never a framework detail list or a traceback ------------

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Only reached if a route declares FastAPI parameters; ours parse the body themselves.
        errors = [{**e, "loc": tuple(e["loc"][1:]) or e["loc"]} for e in exc.errors()]
        return _validation_error(errors).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return ApiError(exc.status_code, message, headers=exc.headers).response()

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in %s %s", request.method, request.url.path)
        return JSONResponse(_internal_error(exc), status_code=500)

    # ---- routes -------------------------------------------------------------------------------

    def model_card() -> dict[str, Any]:
        return {
            "id": runner.model_name,
            "object": "model",
            "created": started,
            "owned_by": "inference-from-scratch",
            "max_model_len": runner.max_context,
            "provenance": provenance,
        }

    @app.get("/health")
    async def health() -> dict[str, Any]:
        engine = provenance.get("engine")
        return {"status": "ok", "model": runner.model_name, "engine": engine, **runner.stats()}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model:path}")
    async def model(model: str) -> dict[str, Any]:
        if model != runner.model_name:
            message = f"the model '{model}' does not exist"
            raise ApiError(404, message, param="model", code="model_not_found")
        return model_card()

    async def serve(
        request: Request,
        req: _SamplingRequest,
        prompt_ids: list[int],
        max_tokens: int | None,
        prompt_param: str,
        max_tokens_param: str,
        chat: bool,
    ) -> Any:
        if max_tokens is None and chat:
            max_tokens = max(1, runner.max_context - len(prompt_ids))
        elif max_tokens is None:
            max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
        params = _sampling_params(req, max_tokens, max_tokens_param)
        _check_fits(runner, len(prompt_ids), params.max_tokens, prompt_param, max_tokens_param)
        try:
            stream = runner.submit(prompt_ids, params)
        except QueueFullError as exc:
            raise ApiError(
                503, str(exc), type="server_error", code="queue_full",
                headers={"Retry-After": str(exc.retry_after_s)},
            ) from None
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        form = _Completion(chat, runner.model_name, fingerprint, include_usage)
        if req.stream:
            return StreamingResponse(
                _event_source(request, stream, form, len(prompt_ids)),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        text, last = await _collect(request, stream)
        if last.finish_reason == "abort" or last.metrics is None:
            raise _aborted()
        return form.response(text, last.finish_reason, len(prompt_ids), last.metrics)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        req: ChatCompletionRequest = await _parse(request, ChatCompletionRequest)
        _refuse_unsupported(req, runner)
        if req.max_tokens is not None and req.max_completion_tokens is not None:
            message = "give max_completion_tokens or max_tokens, not both"
            raise ApiError(400, message, param="max_tokens")
        if req.max_tokens is not None:
            max_tokens, max_param = req.max_tokens, "max_tokens"
        else:
            max_tokens, max_param = req.max_completion_tokens, "max_completion_tokens"
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        prompt_ids = runner.apply_chat_template(messages)
        return await serve(request, req, prompt_ids, max_tokens, "messages", max_param, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        req: CompletionRequest = await _parse(request, CompletionRequest)
        _refuse_unsupported(req, runner)
        if isinstance(req.prompt, str):
            prompt_ids = runner.encode(req.prompt)
        else:
            bad = [t for t in req.prompt if not 0 <= t < runner.vocab_size]
            if bad:
                message = f"prompt token ids must be in [0, {runner.vocab_size}), got {bad[0]}"
                raise ApiError(400, message, param="prompt")
            prompt_ids = list(req.prompt)
        return await serve(
            request, req, prompt_ids, req.max_tokens, "prompt", "max_tokens", chat=False
        )

    return app

