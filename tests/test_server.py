"""The shared server in-process: awkward requests, happy paths, streaming, the queue bound and
concurrent requests, on the tiny random-weight model behind chapter 1's engine."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from chapters.ch01_baseline.engine import BaselineEngine
from shared.contracts import RequestMetrics, SamplingParams
from shared.engine import BaseOfflineEngine
from shared.model import LoadedModel, tiny_model
from shared.runner import OfflineRunner, QueueFullError
from shared.server import make_app

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return tiny_model()


@pytest.fixture(scope="module")
def engine(tiny: LoadedModel) -> BaselineEngine:
    return BaselineEngine(tiny)


@pytest.fixture(scope="module")
def client(engine: BaselineEngine) -> Iterator[TestClient]:
    with TestClient(make_app(engine), raise_server_exceptions=False) as c:
        yield c


class SlowEngine(BaseOfflineEngine):
    """Makes up tokens at a known pace, so queueing and cancellation can be watched."""

    name = "slow-test"

    def __init__(self, loaded: LoadedModel, delay_s: float, fail: bool = False) -> None:
        super().__init__(loaded)
        self.delay_s = delay_s
        self.fail = fail

    def _generate_tokens(self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics) -> Iterator[int]:
        for i in range(params.max_tokens):
            if self.fail:
                raise RuntimeError("the engine broke")
            time.sleep(self.delay_s)
            yield 1000 + i % 50


def greedy(max_tokens: int, **kw: object) -> dict[str, object]:
    return {"temperature": 0, "max_tokens": max_tokens, **kw}


def assert_openai_error(r: httpx.Response, status: int, param: str | None = None) -> dict[str, object]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"] and "Traceback" not in err["message"]
    if param is not None:
        assert err["param"] == param, err
    return err


def sse_events(text: str) -> list[object]:
    """Parse an SSE body: every event is one `data:` line; the last is [DONE]."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") for b in blocks), blocks
    payloads = [b.removeprefix("data: ") for b in blocks]
    assert payloads[-1] == "[DONE]" and payloads.count("[DONE]") == 1
    return [json.loads(p) for p in payloads[:-1]]


# ---- awkward requests: the right status, OpenAI's error shape, never a 500 ---------------------

JSON = {"content-type": "application/json"}

BAD_BODIES = [
    # (id, path, body, expected status, expected param)
    ("empty messages", CHAT, {"messages": []}, 400, "messages"),
    ("no messages", CHAT, {"max_tokens": 4}, 400, "messages"),
    ("no prompt", COMPLETIONS, {"max_tokens": 4}, 400, "prompt"),
    ("unknown field", CHAT, {"messages": HI, "foo": 1}, 400, "foo"),
    ("misspelt field", COMPLETIONS, {"prompt": "x", "max_token": 4}, 400, "max_token"),
    ("unknown field in a message", CHAT, {"messages": [{"role": "user", "content": "x", "nam": "a"}]}, 400, "messages[0].nam"),
    ('"5" as max_tokens', COMPLETIONS, {"prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
    ("5.0 as max_tokens", COMPLETIONS, {"prompt": "x", "max_tokens": 5.0}, 400, "max_tokens"),
    ("true as max_tokens", COMPLETIONS, {"prompt": "x", "max_tokens": True}, 400, "max_tokens"),
    ("true as max_completion_tokens", CHAT, {"messages": HI, "max_completion_tokens": True}, 400, "max_completion_tokens"),
    ("both token limits", CHAT, {"messages": HI, "max_tokens": 4, "max_completion_tokens": 4}, 400, "max_tokens"),
    ("max_tokens 0", COMPLETIONS, {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("max_completion_tokens -1", CHAT, {"messages": HI, "max_completion_tokens": -1}, 400, "max_completion_tokens"),
    ("temperature 3", CHAT, {"messages": HI, "temperature": 3}, 400, "temperature"),
    ("temperature -0.5", CHAT, {"messages": HI, "temperature": -0.5}, 400, "temperature"),
    ('"0.5" as temperature', CHAT, {"messages": HI, "temperature": "0.5"}, 400, "temperature"),
    ("top_p 0", COMPLETIONS, {"prompt": "x", "top_p": 0}, 400, "top_p"),
    ("top_p 1.5", COMPLETIONS, {"prompt": "x", "top_p": 1.5}, 400, "top_p"),
    ("top_k 0", COMPLETIONS, {"prompt": "x", "top_k": 0}, 400, "top_k"),
    ("min_tokens > max_tokens", COMPLETIONS, {"prompt": "x", "max_tokens": 2, "min_tokens": 3}, 400, "min_tokens"),
    ("empty stop string", COMPLETIONS, {"prompt": "x", "stop": ""}, 400, "stop"),
    ("stop not strings", COMPLETIONS, {"prompt": "x", "stop": [1]}, 400, "stop[0]"),
    ("seed as a string", COMPLETIONS, {"prompt": "x", "seed": "1"}, 400, "seed"),
    ("seed beyond 64 bits", COMPLETIONS, {"prompt": "x", "seed": 2**70}, 400, "seed"),
    ("n=2", CHAT, {"messages": HI, "n": 2}, 400, "n"),
    ('"true" as stream', CHAT, {"messages": HI, "stream": "true"}, 400, "stream"),
    ("stream_options without stream", CHAT, {"messages": HI, "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ("unknown stream option", CHAT, {"messages": HI, "stream": True, "stream_options": {"usage": True}}, 400, "stream_options.usage"),
    ("content not a string", CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ("image content part", CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]}, 400, None),
    ("unknown role", CHAT, {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
    ("message without role", CHAT, {"messages": [{"content": "x"}]}, 400, "messages[0].role"),
    ("prompt a number", COMPLETIONS, {"prompt": 5}, 400, "prompt"),
    ("prompt token id out of range", COMPLETIONS, {"prompt": [1, 10**9]}, 400, "prompt"),
    ("prompt token id negative", COMPLETIONS, {"prompt": [-1]}, 400, "prompt"),
    ("empty prompt", COMPLETIONS, {"prompt": ""}, 400, "prompt"),
    ("prompt beyond the context", COMPLETIONS, {"prompt": "bee " * 600}, 400, "prompt"),
    ("chat beyond the context", CHAT, {"messages": [{"role": "user", "content": "bee " * 600}]}, 400, "messages"),
    ("max_tokens beyond the context", COMPLETIONS, {"prompt": "x", "max_tokens": 600}, 400, "max_tokens"),
    ("frequency_penalty", CHAT, {"messages": HI, "frequency_penalty": 0.5}, 400, "frequency_penalty"),
    ("logprobs", COMPLETIONS, {"prompt": "x", "logprobs": 2}, 400, "logprobs"),
    ("unknown model", CHAT, {"messages": HI, "model": "gpt-4o"}, 404, "model"),
]


@pytest.mark.parametrize(("path", "body", "status", "param"), [c[1:] for c in BAD_BODIES], ids=[c[0] for c in BAD_BODIES])
def test_bad_request_gets_openai_error(client: TestClient, path: str, body: dict, status: int, param: str | None) -> None:
    err = assert_openai_error(client.post(path, json=body), status, param)
    if status == 404:
        assert err["code"] == "model_not_found"


def test_misspelt_field_suggests_the_right_one(client: TestClient) -> None:
    err = assert_openai_error(client.post(COMPLETIONS, json={"prompt": "x", "max_token": 4}), 400)
    assert "max_tokens" in err["message"]


def test_context_errors_say_so(client: TestClient) -> None:
    err = assert_openai_error(client.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 600}), 400)
    assert err["code"] == "context_length_exceeded" and "512" in err["message"]


BAD_RAW = [
    ("not JSON", b'{"prompt": "x"', JSON, None),
    ("JSON but not an object", b'["x"]', JSON, None),
    ("NaN temperature", b'{"prompt": "x", "temperature": NaN}', JSON, "temperature"),
    ("Infinity top_p", b'{"prompt": "x", "top_p": Infinity}', JSON, "top_p"),
    ("-Infinity temperature", b'{"prompt": "x", "temperature": -Infinity}', JSON, "temperature"),
    ("not UTF-8", b'{"prompt": "\xff"}', JSON, None),
    ("form content type", b"prompt=x", {"content-type": "application/x-www-form-urlencoded"}, None),
    ("text/plain content type", b'{"prompt": "x"}', {"content-type": "text/plain"}, None),
    ("no content type", b'{"prompt": "x"}', {}, None),
    ("empty body", b"", JSON, None),
]


@pytest.mark.parametrize(("body", "headers", "param"), [c[1:] for c in BAD_RAW], ids=[c[0] for c in BAD_RAW])
def test_bad_raw_body_gets_openai_error(client: TestClient, body: bytes, headers: dict, param: str | None) -> None:
    assert_openai_error(client.post(COMPLETIONS, content=body, headers=headers), 400, param)


def test_unknown_route_and_method_get_openai_errors(client: TestClient) -> None:
    assert_openai_error(client.post("/v1/embeddings", json={}), 404)
    assert_openai_error(client.get(COMPLETIONS), 405)
    assert_openai_error(client.get("/v1/models/gpt-4o"), 404, "model")


def test_neutral_values_of_unsupported_fields_are_accepted(client: TestClient) -> None:
    # What vLLM's benchmark sends to /v1/completions, and its list-of-parts chat content.
    r = client.post(COMPLETIONS, json={"prompt": "x", "repetition_penalty": 1.0, "logprobs": None, "max_tokens": 2})
    assert r.status_code == 200, r.text
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    r = client.post(CHAT, json={"messages": parts, "max_completion_tokens": 2, "temperature": None})
    assert r.status_code == 200, r.text


# ---- happy paths ---------------------------------------------------------------------------------


def test_health_and_models(client: TestClient, engine: BaselineEngine) -> None:
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["running"] == 0 and health["waiting"] == 0
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and len(models["data"]) == 1
    card = models["data"][0]
    assert card["id"] == engine.loaded.manifest["model"] == health["model"]
    assert card["max_model_len"] == engine.max_context
    assert card["provenance"]["manifest_sha256"] == engine.loaded.manifest_sha256
    assert client.get(f"/v1/models/{card['id']}").json()["id"] == card["id"]


def test_completion_equals_engine_generate(client: TestClient, engine: BaselineEngine) -> None:
    body = client.post(COMPLETIONS, json={"prompt": "The bee", **greedy(6, ignore_eos=True)}).json()
    expected = engine.generate("The bee", SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    choice = body["choices"][0]
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert choice["text"] == expected.text and choice["finish_reason"] == "length"
    n_prompt = len(engine.encode("The bee"))
    assert body["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": 6, "total_tokens": n_prompt + 6}
    assert body["metrics"]["output_tokens"] == 6 and body["metrics"]["total_ms"] > 0
    assert body["system_fingerprint"].startswith("BaselineEngine-")


def test_token_id_prompt_equals_text_prompt(client: TestClient, engine: BaselineEngine) -> None:
    ids = engine.encode("The bee")
    by_text = client.post(COMPLETIONS, json={"prompt": "The bee", **greedy(4)}).json()
    by_ids = client.post(COMPLETIONS, json={"prompt": ids, **greedy(4)}).json()
    assert by_ids["choices"][0]["text"] == by_text["choices"][0]["text"]


def test_default_max_tokens_for_completions_is_16(client: TestClient) -> None:
    body = client.post(COMPLETIONS, json={"prompt": "x", "temperature": 0, "ignore_eos": True}).json()
    assert body["usage"]["completion_tokens"] == 16


def test_chat_applies_the_template_over_all_messages(client: TestClient, engine: BaselineEngine) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Why do bees fly?"},
    ]
    body = client.post(CHAT, json={"messages": messages, **greedy(5, ignore_eos=True)}).json()
    prompt_ids = engine.apply_chat_template(messages)
    expected = engine.generate(prompt_ids, SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"][0]["message"] == {"role": "assistant", "content": expected.text}
    assert body["usage"]["prompt_tokens"] == len(prompt_ids)


def test_stop_string_ends_the_completion(client: TestClient) -> None:
    full = client.post(COMPLETIONS, json={"prompt": "The bee", **greedy(8, ignore_eos=True)}).json()["choices"][0]["text"]
    stop = full[len(full) // 2 :][:2]
    assert stop.strip(), f"no usable stop string in {full!r}"
    body = client.post(COMPLETIONS, json={"prompt": "The bee", "stop": [stop], **greedy(8, ignore_eos=True)}).json()
    assert body["choices"][0] == {"index": 0, "text": full[: full.index(stop)], "logprobs": None, "finish_reason": "stop"}


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_streaming_matches_the_plain_response(client: TestClient, path: str) -> None:
    request = {"messages": HI} if path == CHAT else {"prompt": "The bee"}
    request.update(greedy(6, ignore_eos=True))
    plain = client.post(path, json=request).json()
    r = client.post(path, json={**request, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    *chunks, usage = events
    kind = "chat.completion.chunk" if path == CHAT else "text_completion"
    assert all(c["object"] == kind and c["usage"] is None for c in chunks)
    assert len({c["id"] for c in events}) == 1
    choices = [c["choices"][0] for c in chunks]
    if path == CHAT:
        assert choices[0]["delta"]["role"] == "assistant"
        text = "".join(c["delta"].get("content", "") for c in choices)
        assert text == plain["choices"][0]["message"]["content"]
    else:
        text = "".join(c["text"] for c in choices)
        assert text == plain["choices"][0]["text"]
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["length"]
    assert usage["choices"] == [] and usage["usage"] == plain["usage"]
    assert usage["metrics"]["output_tokens"] == 6


def test_streaming_without_include_usage_has_no_usage(client: TestClient) -> None:
    r = client.post(CHAT, json={"messages": HI, "stream": True, **greedy(3)})
    events = sse_events(r.text)
    assert events and all("usage" not in e and e["choices"] for e in events)


# ---- several requests at once, and the queue bound ---------------------------------------------


async def _post_all(app: object, bodies: list[tuple[str, dict]], gate: object = None) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
        return list(await asyncio.gather(*(c.post(path, json=body) for path, body in bodies)))


def test_concurrent_requests_each_get_their_own_answer(engine: BaselineEngine) -> None:
    app = make_app(engine)
    prompts = ["The bee", "According to all known laws", "Hello", "Once upon a time"]
    bodies = [(COMPLETIONS, {"prompt": p, **greedy(4, ignore_eos=True)}) for p in prompts]
    bodies.append((CHAT, {"messages": HI, **greedy(4, ignore_eos=True)}))
    responses = asyncio.run(_post_all(app, bodies))
    assert [r.status_code for r in responses] == [200] * len(bodies)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    for prompt, r in zip(prompts, responses):
        assert r.json()["choices"][0]["text"] == engine.generate(prompt, params).text
    expected_chat = engine.generate(engine.apply_chat_template(HI), params).text
    assert responses[-1].json()["choices"][0]["message"]["content"] == expected_chat


def test_full_queue_answers_503_with_retry_after(tiny: LoadedModel) -> None:
    app = make_app(SlowEngine(tiny, delay_s=0.02), max_queue=1)
    runner = app.state.runner

    async def scenario() -> tuple[httpx.Response, list[httpx.Response]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            first = asyncio.create_task(c.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 25}))
            while runner.stats()["running"] == 0:  # the first request is being served
                await asyncio.sleep(0.005)
            rest = await asyncio.gather(*(c.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 2}) for _ in range(3)))
            return await first, list(rest)

    first, rest = asyncio.run(scenario())
    assert first.status_code == 200
    statuses = sorted(r.status_code for r in rest)
    assert statuses == [200, 503, 503], [r.text for r in rest]  # one waits, two are refused
    for r in rest:
        if r.status_code == 503:
            err = assert_openai_error(r, 503)
            assert err["code"] == "queue_full" and int(r.headers["retry-after"]) >= 1
    assert runner.stats()["requests_rejected"] == 2


def test_engine_failure_is_an_openai_500_not_a_traceback(tiny: LoadedModel) -> None:
    with TestClient(make_app(SlowEngine(tiny, 0.0, fail=True)), raise_server_exceptions=False) as c:
        err = assert_openai_error(c.post(COMPLETIONS, json={"prompt": "x"}), 500)
        assert err["type"] == "server_error"
        events = sse_events(c.post(COMPLETIONS, json={"prompt": "x", "stream": True}).text)
        assert events[-1]["error"]["code"] == "internal_error"
        assert c.get("/health").json()["running"] == 0  # the worker survived


# ---- the runner on its own: closing a stream cancels its request --------------------------------


def test_closing_a_stream_stops_generation(tiny: LoadedModel) -> None:
    runner = OfflineRunner(SlowEngine(tiny, delay_s=0.01), max_queue=1)

    async def scenario() -> None:
        params = SamplingParams(max_tokens=400)
        running = runner.submit([1, 2], params)
        while runner.stats()["running"] == 0:
            await asyncio.sleep(0.005)
        waiting = runner.submit([1, 2], params)
        with pytest.raises(QueueFullError):
            runner.submit([1, 2], params)
        await waiting.aclose()  # a waiting request leaves the queue at once ...
        assert runner.stats()["waiting"] == 0
        got = [await running.__anext__() for _ in range(3)]
        assert all(e.finish_reason is None for e in got)
        await running.aclose()  # ... and a running one stops within a token
        deadline = time.monotonic() + 5
        while runner.stats()["running"] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        stats = runner.stats()
        assert stats["running"] == 0 and stats["requests_aborted"] == 2
        assert stats["tokens_generated"] < 50  # of the 400 asked for
        await runner.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("max_queue", [-1, 1.5, True, "4"])
def test_bad_max_queue_is_refused(max_queue) -> None:
    with pytest.raises(ValueError, match="max_queue"):
        OfflineRunner(object(), max_queue=max_queue)
    with pytest.raises(ValueError, match="max_queue"):
        make_app(object(), max_queue=max_queue)
