"""Chapter 5's request batcher behind the shared server: concurrent requests are served as one
batch (the runner's counters show it) and each client gets its own answer, a disconnected client's
row stops without disturbing the others, and the server's validation is unchanged."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch05_static_batching.batcher import BatchingRunner
from chapters.ch05_static_batching.engine import StaticBatchEngine
from shared.contracts import SamplingParams
from shared.model import tiny_model
from shared.runner import RunnerClosedError
from shared.server import make_app

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def engine() -> StaticBatchEngine:
    return StaticBatchEngine(tiny_model(seed=0))


async def post_all(app: object, bodies: list[tuple[str, dict]]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
        return list(await asyncio.gather(*(c.post(path, json=body) for path, body in bodies)))


def test_bad_runner_arguments_are_refused(engine: StaticBatchEngine) -> None:
    for kwargs, name in [({"max_batch": 0}, "max_batch"), ({"max_batch": True}, "max_batch"),
                         ({"max_wait_ms": -1}, "max_wait_ms"), ({"max_wait_ms": float("nan")}, "max_wait_ms"),
                         ({"max_queue": -1}, "max_queue")]:
        with pytest.raises(ValueError, match=name):
            BatchingRunner(engine, **kwargs)
    with pytest.raises(ValueError, match="stream_batch"):
        BatchingRunner(BaselineEngine(engine.loaded))


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(engine: StaticBatchEngine) -> None:
    # A generous wait: the batch closes as soon as it is full, so the test does not wait for it.
    runner = BatchingRunner(engine, max_batch=4, max_wait_ms=5000)
    app = make_app(runner)
    prompts = ["The bee", "According to all known laws of aviation", "Hi"]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (3, 6, 5)]
    bodies = [(COMPLETIONS, {"prompt": p, "temperature": 0, "max_tokens": sp.max_tokens, "ignore_eos": True})
              for p, sp in zip(prompts, params)]
    chat = [{"role": "user", "content": "What is a bee?"}]
    bodies.append((CHAT, {"messages": chat, "temperature": 0.9, "seed": 4, "max_tokens": 4}))
    responses = asyncio.run(post_all(app, bodies))
    assert [r.status_code for r in responses] == [200] * 4, [r.text for r in responses]
    for prompt, sp, r in zip(prompts, params, responses):
        assert r.json()["choices"][0]["text"] == engine.generate(prompt, sp).text
    chat_solo = engine.generate(engine.apply_chat_template(chat), SamplingParams(temperature=0.9, seed=4, max_tokens=4))
    assert responses[3].json()["choices"][0]["message"]["content"] == chat_solo.text
    assert responses[0].json()["metrics"]["batch_size"] == 4
    stats = runner.stats()
    assert (stats["batches"], stats["batch_size_max"], stats["requests_finished"]) == (1, 4, 4)


def test_streaming_through_the_batcher(engine: StaticBatchEngine) -> None:
    app = make_app(BatchingRunner(engine, max_batch=2, max_wait_ms=5000))
    body = {"prompt": "Once upon a time", "temperature": 0, "max_tokens": 6, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    responses = asyncio.run(post_all(app, [(COMPLETIONS, body), (COMPLETIONS, {**body, "prompt": "Hi"})]))
    for prompt, r in zip(["Once upon a time", "Hi"], responses):
        chunks = [line.removeprefix("data: ") for line in r.text.split("\n\n") if line.strip()]
        assert chunks[-1] == "[DONE]"
        text = "".join(c["choices"][0]["text"] for c in map(json.loads, chunks[:-1]) if c["choices"])
        assert text == engine.generate(prompt, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)).text


@pytest.mark.parametrize("body,param", [
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "x", "temperature": 3}, "temperature"),
    ({"prompt": "x", "max_token": 4}, "max_token"),
    ({"prompt": "x" * 3000, "max_tokens": 4}, None),
    ({"prompt": []}, "prompt"),
])
def test_bad_input_is_still_rejected(engine: StaticBatchEngine, body: dict, param: str | None) -> None:
    (r,) = asyncio.run(post_all(make_app(BatchingRunner(engine)), [(COMPLETIONS, body)]))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param


def test_a_disconnected_row_stops_and_the_others_finish(engine: StaticBatchEngine) -> None:
    runner = BatchingRunner(engine, max_batch=3, max_wait_ms=5000)
    keep = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    prompts = [[464, 6355, 314], [4118, 100], [7, 8, 9, 10]]

    async def scenario() -> list[list[int]]:
        streams = [runner.submit(prompts[0], keep),
                   runner.submit(prompts[1], SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)),
                   runner.submit(prompts[2], keep)]
        for _ in range(3):
            await streams[1].__anext__()
        await streams[1].aclose()  # the client of row 1 goes away
        kept = [[e.token_id async for e in s if e.token_id is not None] for s in (streams[0], streams[2])]
        deadline = time.monotonic() + 10
        while runner.stats()["running"] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await runner.aclose()
        return kept

    kept = asyncio.run(scenario())
    assert kept == [engine.generate(prompts[0], keep).output_ids, engine.generate(prompts[2], keep).output_ids]
    stats = runner.stats()
    assert stats["requests_aborted"] == 1 and stats["requests_finished"] == 2 and stats["batches"] == 1
    assert stats["tokens_generated"] < 2 * 20 + 25  # row 1 stopped long before its 400


def test_a_request_cancelled_while_waiting_leaves_the_batch(engine: StaticBatchEngine) -> None:
    runner = BatchingRunner(engine, max_batch=4, max_wait_ms=300)
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)

    async def scenario() -> list[int]:
        first = runner.submit([1, 2, 3], params)
        gone = runner.submit([4, 5], params)
        await gone.aclose()
        ids = [e.token_id async for e in first if e.token_id is not None]
        await runner.aclose()
        return ids

    assert asyncio.run(scenario()) == engine.generate([1, 2, 3], params).output_ids
    stats = runner.stats()
    assert (stats["batches"], stats["batch_size_max"], stats["requests_aborted"]) == (1, 1, 1)


def test_closing_the_runner_while_it_gathers_a_batch_fails_the_waiting(engine: StaticBatchEngine) -> None:
    runner = BatchingRunner(engine, max_batch=4, max_wait_ms=10_000)

    async def scenario() -> None:
        stream = runner.submit([1, 2], SamplingParams(max_tokens=2))
        await asyncio.sleep(0.05)  # the worker is now waiting for more arrivals
        started = time.monotonic()
        await runner.aclose()
        assert time.monotonic() - started < 5  # it did not sit out the 10 s wait
        with pytest.raises(RunnerClosedError):
            await stream.__anext__()

    asyncio.run(scenario())
    assert runner.stats()["batches"] == 0
