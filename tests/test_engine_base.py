"""The engine base class and chapter 1's BaselineEngine.

Part 1 drives `BaseOfflineEngine` with a scripted engine that yields chosen token ids, to test the
logic every chapter inherits precisely: stop strings split across tokens, multi-byte characters
split across tokens (never a U+FFFD in the stream), EOS, ignore_eos, max_tokens, cancellation,
check_fits, and that the token generator is closed when a request ends early.

Part 2 runs BaselineEngine on tiny_model (fast) and on the real model (a few short generations):
greedy is deterministic and equals HF `generate()` itself, seeds reproduce and differ, min_tokens
and ignore_eos are honoured, stop strings, cancellation frees the worker thread, and
generate_batch equals one generate per prompt.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

from chapters.ch01_baseline.engine import BaselineEngine
from shared.contracts import RequestMetrics, SamplingParams, TokenEvent
from shared.engine import BaseOfflineEngine, PromptTooLongError
from shared.model import LoadedModel, load_model, tiny_model

REPLACEMENT = "\ufffd"
EOS = 2


# ---- part 1: the base class, driven by a scripted engine -----------------------------------------


class ScriptedEngine(BaseOfflineEngine):
    """Yields a fixed list of token ids (at most max_tokens of them), whatever the prompt."""

    name = "scripted"

    def __init__(self, loaded: LoadedModel, script: list[int]) -> None:
        super().__init__(loaded)
        self.script = script
        self.closed = False
        self.yielded = 0

    def _generate_tokens(
        self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics
    ) -> Iterator[int]:
        try:
            for token in self.script[: params.max_tokens]:
                self.yielded += 1
                yield token
        finally:
            self.closed = True


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return tiny_model(seed=0)


def scripted(tiny: LoadedModel, text_or_ids: str | list[int]) -> ScriptedEngine:
    ids = text_or_ids if isinstance(text_or_ids, list) else tiny.tokenizer.encode(text_or_ids, add_special_tokens=False)
    return ScriptedEngine(tiny, ids)


def run(engine: BaseOfflineEngine, params: SamplingParams, cancel: threading.Event | None = None) -> list[TokenEvent]:
    events = list(engine.stream([1, 2, 3], params, cancel))
    assert [e.finish_reason is not None for e in events] == [False] * (len(events) - 1) + [True]
    return events


def test_stop_string_split_across_tokens_is_never_emitted(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "Hello <END> world")  # 'Hello' ' <' 'END' '>' ' world'
    events = run(engine, SamplingParams(stop=["<END>"], max_tokens=10))
    texts = [e.text for e in events]
    assert "".join(texts) == "Hello "
    assert not any("<" in t for t in texts)  # ' <' was held back, then dropped with the stop string
    assert events[-1].finish_reason == "stop"
    assert engine.closed and engine.yielded == 4  # consumption stopped at '>', the generator closed
    result = engine.generate("x", SamplingParams(stop=["<END>"], max_tokens=10))
    assert (result.text, result.finish_reason) == ("Hello ", "stop")
    assert len(result.output_ids) == 4  # the tokens made, including those of the stop string


def test_held_back_text_is_released_when_the_stop_string_does_not_complete(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "a <ENDx b")
    events = run(engine, SamplingParams(stop=["<END>"], max_tokens=10))
    texts = [e.text for e in events]
    assert texts[1] == " " and texts[2] == ""  # ' <' and 'END' could start '<END>': held back
    assert "".join(texts) == "a <ENDx b"
    assert events[-1].finish_reason == "length"  # the script ran out


def test_earliest_of_several_stop_strings_wins(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "one two three four")
    result = engine.generate("x", SamplingParams(stop=["four", " two"], max_tokens=10))
    assert (result.text, result.finish_reason) == ("one", "stop")


def test_multibyte_characters_split_across_tokens_never_emit_replacement(tiny: LoadedModel) -> None:
    text = "café 🐝 日本語!"  # the bee and the CJK characters are split into byte tokens
    engine = scripted(tiny, text)
    assert any(REPLACEMENT in tiny.tokenizer.decode([t]) for t in engine.script)  # really split
    events = run(engine, SamplingParams(max_tokens=50))
    assert not any(REPLACEMENT in e.text for e in events)
    assert "".join(e.text for e in events) == text
    assert "" in [e.text for e in events]  # a partial character was held back, not emitted


def test_stop_string_right_after_a_split_character(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "x🐝STOP more")
    result = engine.generate("x", SamplingParams(stop="STOP", max_tokens=50))
    assert (result.text, result.finish_reason) == ("x🐝", "stop")


def test_eos_ends_the_request_and_is_not_output(tiny: LoadedModel) -> None:
    ids = tiny.tokenizer.encode("Hi there", add_special_tokens=False)
    engine = scripted(tiny, [*ids, EOS, *ids])
    result = engine.generate("x", SamplingParams(max_tokens=10))
    assert (result.text, result.output_ids, result.finish_reason) == ("Hi there", ids, "stop")
    assert result.metrics.output_tokens == len(ids)
    assert engine.closed


def test_ignore_eos_keeps_going_to_max_tokens(tiny: LoadedModel) -> None:
    ids = tiny.tokenizer.encode("Hi there", add_special_tokens=False)
    engine = scripted(tiny, [*ids, EOS, *ids])
    result = engine.generate("x", SamplingParams(max_tokens=len(ids) + 2, ignore_eos=True))
    assert result.output_ids == [*ids, EOS, ids[0]]
    assert result.finish_reason == "length"
    assert result.text == "Hi there" + tiny.tokenizer.decode([ids[0]])  # EOS is a special token


def test_max_tokens_gives_length_and_the_last_event_carries_the_last_token(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "one two three four five")
    events = run(engine, SamplingParams(max_tokens=3))
    assert events[-1].finish_reason == "length"
    assert events[-1].token_id == engine.script[2] and events[-1].text == " three"
    assert events[-1].metrics is not None and events[-1].metrics.output_tokens == 3
    assert events[-1].metrics.input_tokens == 3 and events[-1].metrics.total_ms > 0


def test_max_tokens_flushes_text_held_back_for_a_stop_string(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "Hello <END> world")
    result = engine.generate("x", SamplingParams(stop=["<END>"], max_tokens=2))
    assert (result.text, result.finish_reason) == ("Hello <", "length")


def test_cancel_aborts_and_closes_the_generator(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "one two three four five")
    cancel = threading.Event()
    events = []
    for event in engine.stream([1], SamplingParams(max_tokens=10), cancel):
        events.append(event)
        cancel.set()
    assert [e.text for e in events] == ["one", ""]
    assert events[-1].finish_reason == "abort" and events[-1].token_id is None
    assert events[-1].metrics.output_tokens == 1
    assert engine.closed


def test_a_consumer_that_stops_listening_closes_the_generator(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "one two three four five")
    stream = engine.stream([1], SamplingParams(max_tokens=10))
    next(stream)
    stream.close()  # what a server does when its client disconnects
    assert engine.closed and engine.yielded == 1


def test_check_fits_rejects_prompt_plus_max_tokens_beyond_the_context(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "x")
    assert engine.max_context == 512
    engine.check_fits(500, 12)  # exactly fits
    with pytest.raises(PromptTooLongError, match=r"500 tokens.*max_tokens \(13\).*512") as info:
        engine.check_fits(500, 13)
    assert isinstance(info.value, ValueError)
    with pytest.raises(PromptTooLongError, match="empty"):
        engine.check_fits(0, 1)
    with pytest.raises(PromptTooLongError):  # stream() checks before anything runs
        next(engine.stream([1] * 512, SamplingParams(max_tokens=1)))
    assert engine.yielded == 0


def test_generate_batch_checks_its_arguments(tiny: LoadedModel) -> None:
    engine = scripted(tiny, "one two")
    results = engine.generate_batch(["a", [5, 6]], SamplingParams(max_tokens=5))
    assert [r.text for r in results] == ["one two", "one two"]
    with pytest.raises(ValueError, match="2 prompts but 1 SamplingParams"):
        engine.generate_batch(["a", "b"], [SamplingParams()])


def test_provenance_names_the_engine_and_the_model(tiny: LoadedModel) -> None:
    prov = scripted(tiny, "x").provenance()
    assert prov["engine"] == "ScriptedEngine"
    assert prov["model_manifest"] == tiny.manifest
    assert prov["manifest_sha256"] == tiny.manifest_sha256
    assert (prov["device"], prov["dtype"]) == ("cpu", "float32")


# ---- part 2: BaselineEngine on the tiny model ------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_engine(tiny: LoadedModel) -> BaselineEngine:
    return BaselineEngine(tiny)


GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


def hf_greedy(loaded: LoadedModel, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """HF generate() called directly: the reference the engine must reproduce."""
    input_ids = torch.tensor([prompt_ids], device=loaded.model.device)
    with torch.inference_mode():
        out = loaded.model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_tokens,
            do_sample=False, top_k=None, top_p=None, temperature=None, pad_token_id=EOS,
        )
    return out[0, len(prompt_ids):].tolist()


def test_tiny_greedy_is_deterministic_and_equals_hf_generate(tiny_engine: BaselineEngine, tiny: LoadedModel) -> None:
    prompt = tiny_engine.encode("The quick brown fox")
    a, b = tiny_engine.generate(prompt, GREEDY), tiny_engine.generate(prompt, GREEDY)
    assert a.output_ids == b.output_ids == hf_greedy(tiny, prompt, 8)
    assert a.finish_reason == "length" and a.metrics.output_tokens == 8
    assert a.text == tiny.tokenizer.decode(a.output_ids, skip_special_tokens=True)


def test_tiny_seeded_sampling_reproduces_and_seeds_differ(tiny_engine: BaselineEngine) -> None:
    prompt = "The quick brown fox"
    sample = [tiny_engine.generate(prompt, SamplingParams(temperature=1.0, seed=s, max_tokens=8)).output_ids for s in (1, 1, 2)]
    assert sample[0] == sample[1]
    assert sample[0] != sample[2]


def test_tiny_stop_string_found_in_the_greedy_text(tiny_engine: BaselineEngine) -> None:
    prompt = "Once upon a time"
    full = tiny_engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=12)).text
    stop = full[len(full) // 2 : len(full) // 2 + 3]  # three characters from the middle
    assert stop.strip(), full
    result = tiny_engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=12, stop=stop))
    assert result.finish_reason == "stop"
    assert result.text == full[: full.index(stop)]


def test_tiny_generate_batch_equals_individual_generate(tiny_engine: BaselineEngine) -> None:
    prompts = ["The quick brown fox", "Hello", "1, 2, 3,"]
    batch = tiny_engine.generate_batch(prompts, GREEDY)
    assert [r.output_ids for r in batch] == [tiny_engine.generate(p, GREEDY).output_ids for p in prompts]
    assert len({tuple(r.output_ids) for r in batch}) == 3  # the prompts really differ


def test_cancel_stops_hf_generate_and_its_thread(tiny_engine: BaselineEngine) -> None:
    cancel = threading.Event()
    events = []
    for event in tiny_engine.stream(tiny_engine.encode("Hello"), SamplingParams(temperature=0.0, max_tokens=200), cancel):
        events.append(event)
        if len(events) == 2:
            cancel.set()
    assert events[-1].finish_reason == "abort"
    assert events[-1].metrics.output_tokens == 2
    assert not any(t.name == "hf-generate" and t.is_alive() for t in threading.enumerate())


def test_closing_the_stream_stops_hf_generate(tiny_engine: BaselineEngine) -> None:
    stream = tiny_engine.stream(tiny_engine.encode("Hello"), SamplingParams(temperature=0.0, max_tokens=200))
    next(stream)
    stream.close()
    assert not any(t.name == "hf-generate" and t.is_alive() for t in threading.enumerate())


@pytest.fixture(scope="module")
def eos_engine() -> BaselineEngine:
    """A tiny model that always prefers EOS: its output head scores EOS 10 and everything else 0."""
    loaded = tiny_model(seed=0)
    head = torch.nn.Linear(loaded.model.config.hidden_size, loaded.model.config.vocab_size, bias=True)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    head.bias.data[EOS] = 10.0
    loaded.model.lm_head = head
    return BaselineEngine(loaded)


def test_eos_model_stops_at_once(eos_engine: BaselineEngine) -> None:
    result = eos_engine.generate("Hello", SamplingParams(temperature=0.0, max_tokens=5))
    assert (result.output_ids, result.text, result.finish_reason) == ([], "", "stop")


def test_min_tokens_suppresses_eos(eos_engine: BaselineEngine) -> None:
    result = eos_engine.generate("Hello", SamplingParams(temperature=0.0, max_tokens=8, min_tokens=3))
    assert len(result.output_ids) == 3 and EOS not in result.output_ids
    assert result.finish_reason == "stop"


def test_ignore_eos_runs_to_max_tokens(eos_engine: BaselineEngine) -> None:
    result = eos_engine.generate("Hello", SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    assert result.output_ids == [EOS] * 4
    assert result.finish_reason == "length"


# ---- part 2: BaselineEngine on the real model (a few short generations) ------------------------------


@pytest.fixture(scope="module")
def real_engine() -> BaselineEngine:
    return BaselineEngine(load_model())


PROMPT = "According to all known laws of aviation, there is no way a bee should be able to fly"


def test_real_greedy_is_deterministic_and_equals_hf_generate(real_engine: BaselineEngine) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=5)
    prompt = real_engine.encode(PROMPT)
    a, b = real_engine.generate(prompt, params), real_engine.generate(prompt, params)
    assert a.output_ids == b.output_ids == hf_greedy(real_engine.loaded, prompt, 5)
    assert a.finish_reason == "length"
    assert a.provenance["model_manifest"]["model"] == "SmolLM2-135M-Instruct"
    assert a.provenance["engine"] == "BaselineEngine"


def test_real_stop_string_made_of_two_tokens(real_engine: BaselineEngine) -> None:
    # Greedy continues the prompt with '.', '\n', '\n': the stop string "\n\n" spans two tokens.
    result = real_engine.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=8, stop="\n\n"))
    assert (result.text, result.finish_reason) == (".", "stop")
    assert len(result.output_ids) == 3


def test_real_seeded_sampling_reproduces_and_seeds_differ(real_engine: BaselineEngine) -> None:
    # Temperature 2 spreads the first step over thousands of tokens (02_sampling.py), so two seeds
    # picking the same 4 tokens would be a coincidence, not a fluke of this platform's generator.
    runs = [
        real_engine.generate(PROMPT, SamplingParams(temperature=2.0, seed=s, max_tokens=4)).output_ids
        for s in (0, 0, 1)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_real_generate_batch_equals_individual_generate(real_engine: BaselineEngine) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=4)
    prompts = [PROMPT, "The capital of France is"]
    batch = real_engine.generate_batch(prompts, params)
    assert [r.output_ids for r in batch] == [real_engine.generate(p, params).output_ids for p in prompts]


def test_real_check_fits_rejects_before_generating(real_engine: BaselineEngine) -> None:
    assert real_engine.max_context == 8192
    real_engine.check_fits(8000, 192)
    with pytest.raises(PromptTooLongError, match="8192"):
        real_engine.generate([1] * 8000, SamplingParams(max_tokens=193))
